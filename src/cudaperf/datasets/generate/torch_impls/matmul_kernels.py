"""Batched matmul kernels shared by `matmul_epilogue` and `attention`: C[z] = fin(A[z] · B[z]^T)
(layout "nt": B is n x k, a Linear weight or keys) or C[z] = fin(A[z] · B[z]) (layout "nn": B is
k x n, values), where `fin` is a device function the family defines (its epilogue). Strategies:
naive (one thread per output), smem_tiled (16x16 tiles), register_tiled (64x64 block tile, 4x4
outputs per thread), tensor_core (WMMA TF32 with the 3xTF32 split, `tensor_core.py`; layout "nt").

Not covered: the families' epilogues and launches (matmul_epilogue.py, attention.py).
"""

from __future__ import annotations

from cudaperf.datasets.generate.tensor_core import TILE, wmma_tf32_kernel

MM_PARAMS = ("const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, "
             "const float* __restrict__ e0, const float* __restrict__ e1, int m, int n, int k, "
             "long long sa, long long sb, long long sc, float alpha")
FIN_PARAMS = ("float acc, int z, int i, int j, int m, int n, int k, const float* __restrict__ e0, "
              "const float* __restrict__ e1, float alpha")
FIN_ARGS = "z, i, j, m, n, k, e0, e1, alpha"


def _mm_naive(name: str, layout: str, fin: str) -> str:
    b_at = "b[(long long)j * k + p]" if layout == "nt" else "b[(long long)p * n + j]"
    return f"""
extern "C" __global__ void {name}({MM_PARAMS}) {{
    int j = blockIdx.x * 16 + threadIdx.x, i = blockIdx.y * 16 + threadIdx.y, z = blockIdx.z;
    if (i >= m || j >= n) return;
    a += z * sa; b += z * sb; c += z * sc;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) acc += a[(long long)i * k + p] * {b_at};
    c[(long long)i * n + j] = {fin}(acc, {FIN_ARGS});
}}
"""


def mm_tiled(name: str, layout: str, fin: str) -> str:
    # B tiles are loaded along B's contiguous dimension (coalesced) and stored as ws[p][col]
    nt = ("{ int jj = blockIdx.x * 16 + ty, pp = p0 + tx;\n"
          "          ws[tx][ty] = (jj < n && pp < k) ? b[(long long)jj * k + pp] : 0.0f; }")
    nn = ("{ int pp = p0 + ty;\n"
          "          ws[ty][tx] = (j < n && pp < k) ? b[(long long)pp * n + j] : 0.0f; }")
    load_b = nt if layout == "nt" else nn
    return f"""
extern "C" __global__ void {name}({MM_PARAMS}) {{
    __shared__ float xs[16][17], ws[16][17];  // xs[row][p], ws[p][col]; +1 column against bank conflicts
    int tx = threadIdx.x, ty = threadIdx.y, z = blockIdx.z;
    int i = blockIdx.y * 16 + ty, j = blockIdx.x * 16 + tx;
    a += z * sa; b += z * sb; c += z * sc;
    float acc = 0.0f;
    for (int p0 = 0; p0 < k; p0 += 16) {{
        xs[ty][tx] = (i < m && p0 + tx < k) ? a[(long long)i * k + p0 + tx] : 0.0f;
        {load_b}
        __syncthreads();
#pragma unroll
        for (int p = 0; p < 16; ++p) acc += xs[ty][p] * ws[p][tx];
        __syncthreads();
    }}
    if (i < m && j < n) c[(long long)i * n + j] = {fin}(acc, {FIN_ARGS});
}}
"""


def _mm_register(name: str, layout: str, fin: str) -> str:
    load_b = ("ws[p][r] = (col0 + r < n && p0 + p < k) ? b[(long long)(col0 + r) * k + p0 + p] : 0.0f;"
              if layout == "nt" else
              "{ int pp = e / 64, jj = e % 64;\n"
              "              ws[pp][jj] = (col0 + jj < n && p0 + pp < k) ? b[(long long)(p0 + pp) * "
              "n + col0 + jj]"
              " : 0.0f; }")
    return f"""
extern "C" __global__ void {name}({MM_PARAMS}) {{
    // 64x64 block tile, 16-deep k slices, 256 threads; thread (tx, ty) owns rows ty + 16r, cols tx + 16q
    __shared__ float xs[16][68], ws[16][68];  // [p][row], [p][col]
    int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx, z = blockIdx.z;
    int row0 = blockIdx.y * 64, col0 = blockIdx.x * 64;
    a += z * sa; b += z * sb; c += z * sc;
    float acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[r][q] = 0.0f;
    for (int p0 = 0; p0 < k; p0 += 16) {{
#pragma unroll
        for (int l = 0; l < 4; ++l) {{
            int e = tid + 256 * l, r = e / 16, p = e % 16;
            xs[p][r] = (row0 + r < m && p0 + p < k) ? a[(long long)(row0 + r) * k + p0 + p] : 0.0f;
            {load_b}
        }}
        __syncthreads();
#pragma unroll
        for (int p = 0; p < 16; ++p) {{
            float ra[4], rb[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) ra[r] = xs[p][ty + 16 * r];
#pragma unroll
            for (int q = 0; q < 4; ++q) rb[q] = ws[p][tx + 16 * q];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[r][q] += ra[r] * rb[q];
        }}
        __syncthreads();
    }}
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int q = 0; q < 4; ++q) {{
            int i = row0 + ty + 16 * r, j = col0 + tx + 16 * q;
            if (i < m && j < n) c[(long long)i * n + j] = {fin}(acc[r][q], {FIN_ARGS});
        }}
}}
"""


MM_KERNELS = {"naive": (_mm_naive, 16), "smem_tiled": (mm_tiled, 16), "register_tiled": (_mm_register, 64)}

def _mm_tensor_core(name: str, layout: str, fin: str) -> str:
    """WMMA TF32 tiles with the 3xTF32 split (`tensor_core.py`); B as n x k (layout "nt") only."""
    if layout != "nt":
        raise ValueError("the tensor-core matmul reads B as n x k (layout 'nt')")
    return wmma_tf32_kernel(name, MM_PARAMS,
                            "int z = blockIdx.z;\n    a += z * sa; b += z * sb; c += z * sc;",
                            "a[(long long)row * k + p]", "b[(long long)col * k + p]",
                            f"c[(long long)i * n + j] = {fin}(v, {FIN_ARGS});")


MM_WITH_TENSOR_CORES = {**MM_KERNELS, "tensor_core": (_mm_tensor_core, TILE)}  # where B is n x k


def mm_launch(kernel: str, tile: int, m: str, n: str, z: str, args: str) -> str:
    """A Python launch line of one matmul kernel (block 16x16, one block per tile x tile outputs)."""
    return (f"mod.{kernel}((({n} + {tile - 1}) // {tile}, ({m} + {tile - 1}) // {tile}, {z}), "
            f"(16, 16), {args})")


def raw_fin() -> str:
    return f"__device__ __forceinline__ float raw({FIN_PARAMS}) {{ return acc; }}\n"
