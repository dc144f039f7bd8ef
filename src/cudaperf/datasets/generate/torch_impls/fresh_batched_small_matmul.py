"""Implementations of the fresh `batched_small_matmul` family: out = act(A_b @ B_b (+ bias)) (* scale) for
many small matrices A_b (m x k) and B_b (k x n, or n x k when the task transposes B).

The kernels take the sizes at run time and size their shared memory for the largest configuration of
the task (`MM`, `MK`, `MN`: the variant's m, k + 3, n, see `odd_dims`); every loop guards its tails.

Strategies:
  naive           one thread per output element reads its A row and B column from global memory
  warp_shuffle    one warp per output row: 32 A values loaded at once and broadcast by shuffles, lanes
                  across the columns (B transposed: strided reads)
  smem_tiled      one block (256 threads) per matrix: A and B staged in shared memory (B k-major,
                  transposed on the way in), one output per thread at a time
  coarsened       several matrices per block (up to 1024 outputs, 128 threads): tiny matrices share a block
  register_tiled  one block per matrix, each thread a TM x TN micro-tile held in registers (strided rows
                  and columns, so the shared-memory reads of a warp are contiguous)

Not covered: other dtypes than float32, sizes beyond the task's configurations (shared memory is sized
for them), tensor cores.
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.torch_impls.parts import float_literal, implementation
from cudaperf.datasets.records import Implementation

_ODD = {8: 7, 16: 13, 32: 29, 64: 61}


def odd_dims(m: int, k: int, n: int) -> tuple[int, int, int]:
    """The odd configuration's sizes: m and n a little smaller, k a little larger (multiples of nothing)."""
    return _ODD[m], k + 3, _ODD[n]


_PARAMS = ("const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ bias, "
           "float* __restrict__ out, int batch, int M, int K, int N")

_SHARED = """
__device__ __forceinline__ float b_at(const float* bp, int kk, int j, int K, int N) {
    return TRANS_B ? bp[(long long)j * K + kk] : bp[(long long)kk * N + j];
}
// A and B of `nm` consecutive matrices into shared memory (B stored k-major: Bs[kk * N + j])
__device__ __forceinline__ void stage(const float* ap, const float* bp, float* As, float* Bs, int nm, int M,
                                      int K, int N, int tid, int nt) {
    for (int e = tid; e < nm * M * K; e += nt) As[e] = ap[e];
    for (int e = tid; e < nm * K * N; e += nt) {
        int mat = e / (K * N), r = e % (K * N);
        Bs[mat * K * N + (TRANS_B ? (r % K) * N + r / K : r)] = bp[e];
    }
}
"""

_NAIVE = f"""
extern "C" __global__ void small_bmm({_PARAMS}) {{
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= (long long)batch * M * N) return;
    int j = (int)(e % N), i = (int)(e / N % M);
    long long m = e / ((long long)M * N);
    const float* ap = a + (m * M + i) * K;
    const float* bp = b + m * K * N;
    float acc = 0.0f;
    for (int kk = 0; kk < K; ++kk) acc = fmaf(ap[kk], b_at(bp, kk, j, K, N), acc);
    out[e] = epi(acc, bias, j);
}}
"""

_WARP = f"""
#define NJ ((MN + 31) / 32)
extern "C" __global__ void small_bmm({_PARAMS}) {{
    int lane = threadIdx.x % 32;
    long long w = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;
    if (w >= (long long)batch * M) return;  // warp-uniform: whole warps leave
    long long m = w / M;
    const float* ap = a + w * K;
    const float* bp = b + m * K * N;
    float acc[NJ];
#pragma unroll
    for (int u = 0; u < NJ; ++u) acc[u] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 32) {{
        float av = k0 + lane < K ? ap[k0 + lane] : 0.0f;
        int kn = min(32, K - k0);
        for (int q = 0; q < kn; ++q) {{
            float aq = __shfl_sync(0xffffffffu, av, q);
#pragma unroll
            for (int u = 0; u < NJ; ++u) {{
                int j = lane + 32 * u;
                if (j < N) acc[u] = fmaf(aq, b_at(bp, k0 + q, j, K, N), acc[u]);
            }}
        }}
    }}
#pragma unroll
    for (int u = 0; u < NJ; ++u) {{
        int j = lane + 32 * u;
        if (j < N) out[w * N + j] = epi(acc[u], bias, j);
    }}
}}
"""

_SMEM = f"""
extern "C" __global__ void small_bmm({_PARAMS}) {{
    __shared__ float As[MM * MK], Bs[MK * MN];
    long long m = blockIdx.x;
    int tid = threadIdx.x;
    stage(a + m * M * K, b + m * K * N, As, Bs, 1, M, K, N, tid, 256);
    __syncthreads();
    for (int e = tid; e < M * N; e += 256) {{
        int i = e / N, j = e % N;
        float acc = 0.0f;
        for (int kk = 0; kk < K; ++kk) acc = fmaf(As[i * K + kk], Bs[kk * N + j], acc);
        out[m * M * N + e] = epi(acc, bias, j);
    }}
}}
"""

_COARSE = f"""
#define MPB (1024 / (MM * MN) > 1 ? 1024 / (MM * MN) : 1)
extern "C" __global__ void small_bmm({_PARAMS}) {{
    // MPB consecutive matrices per block: their A (and B) blocks are contiguous, staged by one flat loop
    __shared__ float As[MPB * MM * MK], Bs[MPB * MK * MN];
    long long m0 = (long long)blockIdx.x * MPB;
    int nm = (int)min((long long)MPB, batch - m0), tid = threadIdx.x;
    stage(a + m0 * M * K, b + m0 * K * N, As, Bs, nm, M, K, N, tid, 128);
    __syncthreads();
    for (int e = tid; e < nm * M * N; e += 128) {{
        int mat = e / (M * N), r = e % (M * N), i = r / N, j = r % N;
        const float* as = As + mat * M * K + i * K;
        const float* bs = Bs + mat * K * N + j;
        float acc = 0.0f;
        for (int kk = 0; kk < K; ++kk) acc = fmaf(as[kk], bs[kk * N], acc);
        out[m0 * M * N + e] = epi(acc, bias, j);
    }}
}}
"""

_REGISTER = f"""
#define TM (MM >= 32 ? 4 : 2)
#define TN (MN >= 32 ? 4 : 2)
#define TY ((MM + TM - 1) / TM)
#define TX ((MN + TN - 1) / TN)
extern "C" __global__ void small_bmm({_PARAMS}) {{
    // blockDim (TX, TY); thread (tx, ty) owns rows ty + r * TY and columns tx + u * TX
    __shared__ float As[MM * MK], Bs[MK * MN];
    long long m = blockIdx.x;
    int tx = threadIdx.x, ty = threadIdx.y;
    stage(a + m * M * K, b + m * K * N, As, Bs, 1, M, K, N, ty * TX + tx, TX * TY);
    __syncthreads();
    float acc[TM][TN];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int u = 0; u < TN; ++u) acc[r][u] = 0.0f;
    for (int kk = 0; kk < K; ++kk) {{
        float av[TM], bv[TN];
#pragma unroll
        for (int r = 0; r < TM; ++r) av[r] = ty + r * TY < M ? As[(ty + r * TY) * K + kk] : 0.0f;
#pragma unroll
        for (int u = 0; u < TN; ++u) bv[u] = tx + u * TX < N ? Bs[kk * N + tx + u * TX] : 0.0f;
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int u = 0; u < TN; ++u) acc[r][u] = fmaf(av[r], bv[u], acc[r][u]);
    }}
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int u = 0; u < TN; ++u) {{
            int i = ty + r * TY, j = tx + u * TX;
            if (i < M && j < N) out[(m * M + i) * N + j] = epi(acc[r][u], bias, j);
        }}
}}
"""


def _tiles(v: dict[str, Any]) -> tuple[int, int]:
    """register_tiled's block (TX, TY), as its TM / TN / TX / TY macros compute it."""
    tm, tn = (4 if v["m"] >= 32 else 2), (4 if v["n"] >= 32 else 2)
    return (v["n"] + tn - 1) // tn, (v["m"] + tm - 1) // tm


def _defines(v: dict[str, Any]) -> str:
    _, act = chain_exprs([(v["act"], 0.0)] if v["act"] else [], "x", "v")
    scale = f" * {float_literal(v['scale'])}" if v["scale"] != 1.0 else ""
    return (f"#define TRANS_B {int(v['trans_b'])}\n#define HAS_BIAS {int(v['bias'])}\n"
            f"#define MM {v['m']}\n#define MK {v['k'] + 3}\n#define MN {v['n']}\n"
            "__device__ __forceinline__ float epi(float x, const float* bias, int j) {\n"
            "    float v = HAS_BIAS ? x + bias[j] : x;\n"
            f"    return ({act}){scale};\n}}\n" + _SHARED)


def bmm_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    mpb = max(1, 1024 // (v["m"] * v["n"]))
    tx, ty = _tiles(v)
    launches = {
        "naive": ("((batch * m * n + 255) // 256,), (256,)", ()),
        "warp_shuffle": ("((batch * m * 32 + 255) // 256,), (256,)", ("warp_per_row",)),
        "smem_tiled": ("(batch,), (256,)", ("block_per_matrix",)),
        "coarsened": (f"((batch + {mpb - 1}) // {mpb},), (128,)", ("smem_tiled", "matrices_per_block")),
        "register_tiled": (f"(batch,), ({tx}, {ty})", ("smem_tiled", "block_per_matrix")),
    }
    cuda = {"naive": _NAIVE, "warp_shuffle": _WARP, "smem_tiled": _SMEM, "coarsened": _COARSE,
            "register_tiled": _REGISTER}
    head = (f"batch, m, k = a.shape\nn = b.shape[{1 if v['trans_b'] else 2}]\n"
            "out = a.new_empty((batch, m, n))\n")
    bias = "self.bias" if v["bias"] else "None"
    init = "        self.bias = nn.Parameter(torch.randn(n) * 0.1)\n" if v["bias"] else ""
    return [implementation(task_id, strategy, f"batched {v['m']}x{v['k']}x{v['n']} matmul",
                           _defines(v) + cuda[strategy],
                           head + f"mod.small_bmm({grid}, a, b, {bias}, out, batch, m, k, n)\nreturn out",
                           "a, b", ("bmm", *tags), init, ", n")
            for strategy, (grid, tags) in launches.items()]
