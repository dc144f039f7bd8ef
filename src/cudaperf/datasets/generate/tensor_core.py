"""The tensor-core matmul kernels shared by the PyTorch (matmul_epilogue, attention scores) and C (matmul)
families: a 64x64 block tile of WMMA m16n16k8 TF32 tiles with the 3xTF32 split for float data
(`wmma_tf32_kernel`), or of m8n8k4 DMMA tiles for double data (`wmma_f64_kernel`, IEEE double
multiply-adds: no split needed), the epilogue fused after the tile is staged in shared memory. Each
family supplies its signature, how A and B are read and how an output is written.

3xTF32: x = hi + lo with both parts rounded to TF32, and a*b ~ lo*hi + hi*lo + hi*hi accumulated in fp32,
so fp32 tasks keep close to fp32 accuracy on the tensor cores (one TF32 product alone is off by ~1e-3
relative, outside the fp32 tolerances). The tensor cores' fp32 accumulation truncates toward zero, so a
running sum kept in one fragment over the whole k loop drifts (on the H200, k = 777 and 2048: 14 output
configurations of matmul_epilogue tasks failed their 1e-3 tolerances, most through a sqrt near zero); each
8-deep slice is summed in a fresh fragment and added to the running sum with ordinary, rounded fp32 adds.

Not covered: half / bf16 inputs (no task has them), asynchronous copies or pipelining.
"""

from __future__ import annotations

TF32_SPLIT = """
#include <mma.h>
using namespace nvcuda;

template <typename Fragment>
__device__ __forceinline__ void split_tf32(Fragment& hi, Fragment& lo) {
#pragma unroll
    for (int t = 0; t < hi.num_elements; ++t) {
        float v = hi.x[t], h = wmma::__float_to_tf32(v);
        hi.x[t] = h;
        lo.x[t] = wmma::__float_to_tf32(v - h);
    }
}
"""
TILE = 64  # outputs per block side; the block is 16 x 16 threads (8 warps)


def wmma_tf32_kernel(name: str, params: str, setup: str, a_at: str, b_at: str, store: str) -> str:
    """The kernel source. In `a_at` (A[row][p]) and `b_at` (B[p][col]) the names `row`, `col` and `p` are
    the global indices, already checked against `m`, `n` and `k`; `store` writes output (i, j) from the
    float `v` (i < m, j < n already checked); `setup` runs first (batch offsets, say)."""
    return TF32_SPLIT + f"""
extern "C" __global__ void {name}({params}) {{
    // warp w owns the 16x16 output tiles (w / 2, 2 (w % 2)) and (w / 2, 2 (w % 2) + 1) of the block's
    // 64x64 tile. Rows of 20 floats: wmma wants ldm % 4 == 0 and 32-byte aligned tile starts; zero-filled
    // tails, so no size needs to be a multiple of a tile.
    __shared__ __align__(32) float xs[64][20];  // A: [row][p]
    __shared__ __align__(32) float ws[64][20];  // B: [col][p], read as a column-major k x 16 fragment
    __shared__ __align__(32) float cs[64][68];  // the block's accumulators, for the fused epilogue
    int tid = threadIdx.y * 16 + threadIdx.x, warp = tid / 32;
    int row0 = blockIdx.y * 64, col0 = blockIdx.x * 64, rt = warp / 2, ct = 2 * (warp % 2);
    {setup}
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);
    for (int p0 = 0; p0 < k; p0 += 16) {{
#pragma unroll
        for (int l = 0; l < 4; ++l) {{
            int e = tid + 256 * l, r = e / 16, p = p0 + e % 16;
            {{ int row = row0 + r; xs[r][e % 16] = (row < m && p < k) ? (float)({a_at}) : 0.0f; }}
            {{ int col = col0 + r; ws[r][e % 16] = (col < n && p < k) ? (float)({b_at}) : 0.0f; }}
        }}
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 16; kk += 8) {{
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> ah, al;
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> bh, bl;
            wmma::load_matrix_sync(ah, &xs[rt * 16][kk], 20);
            split_tf32(ah, al);
#pragma unroll
            for (int q = 0; q < 2; ++q) {{
                wmma::load_matrix_sync(bh, &ws[(ct + q) * 16][kk], 20);
                split_tf32(bh, bl);
                wmma::fragment<wmma::accumulator, 16, 16, 8, float> part;  // this k slice alone
                wmma::fill_fragment(part, 0.0f);
                wmma::mma_sync(part, al, bh, part);
                wmma::mma_sync(part, ah, bl, part);
                wmma::mma_sync(part, ah, bh, part);
                // part and acc share the fragment layout: element-wise IEEE adds
#pragma unroll
                for (int t = 0; t < part.num_elements; ++t) acc[q].x[t] += part.x[t];
            }}
        }}
        __syncthreads();
    }}
    wmma::store_matrix_sync(&cs[rt * 16][ct * 16], acc[0], 68, wmma::mem_row_major);
    wmma::store_matrix_sync(&cs[rt * 16][(ct + 1) * 16], acc[1], 68, wmma::mem_row_major);
    __syncthreads();
#pragma unroll
    for (int l = 0; l < 16; ++l) {{
        int e = tid + 256 * l, i = row0 + e / 64, j = col0 + e % 64;
        if (i < m && j < n) {{ float v = cs[e / 64][e % 64]; {store} }}
    }}
}}
"""


def wmma_f64_kernel(name: str, params: str, setup: str, a_at: str, b_at: str, store: str) -> str:
    """As `wmma_tf32_kernel` for double data: m8n8k4 tiles, `v` a double. Shared memory is one buffer:
    the A and B slices during the k loop, then the block's accumulators (the static limit is 48 KiB)."""
    return f"""
#include <mma.h>
using namespace nvcuda;

extern "C" __global__ void {name}({params}) {{
    // warp w owns the eight 8x8 output tiles of rows 8w .. 8w + 7 of the block's 64x64 tile. Rows of 20
    // doubles for the slices (ldm even, 32-byte aligned tile starts), 68 for the accumulators.
    __shared__ __align__(32) double smem[64 * 68];
    double* xs = smem;            // A: [row][p], 64 x 20
    double* ws = smem + 64 * 20;  // B: [col][p], 64 x 20, read as column-major k x 8 fragments
    double* cs = smem;            // after the k loop: [row][col], 64 x 68
    int tid = threadIdx.y * 16 + threadIdx.x, warp = tid / 32;
    int row0 = blockIdx.y * 64, col0 = blockIdx.x * 64;
    {setup}
    wmma::fragment<wmma::accumulator, 8, 8, 4, double> acc[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) wmma::fill_fragment(acc[q], 0.0);
    for (int p0 = 0; p0 < k; p0 += 16) {{
#pragma unroll
        for (int l = 0; l < 4; ++l) {{
            int e = tid + 256 * l, r = e / 16, p = p0 + e % 16;
            {{ int row = row0 + r; xs[r * 20 + e % 16] = (row < m && p < k) ? (double)({a_at}) : 0.0; }}
            {{ int col = col0 + r; ws[r * 20 + e % 16] = (col < n && p < k) ? (double)({b_at}) : 0.0; }}
        }}
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 16; kk += 4) {{
            wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> af;
            wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::col_major> bf;
            wmma::load_matrix_sync(af, xs + warp * 8 * 20 + kk, 20);
#pragma unroll
            for (int q = 0; q < 8; ++q) {{
                wmma::load_matrix_sync(bf, ws + q * 8 * 20 + kk, 20);
                wmma::mma_sync(acc[q], af, bf, acc[q]);
            }}
        }}
        __syncthreads();
    }}
#pragma unroll
    for (int q = 0; q < 8; ++q)
        wmma::store_matrix_sync(cs + warp * 8 * 68 + q * 8, acc[q], 68, wmma::mem_row_major);
    __syncthreads();
#pragma unroll
    for (int l = 0; l < 16; ++l) {{
        int e = tid + 256 * l, i = row0 + e / 64, j = col0 + e % 64;
        if (i < m && j < n) {{ double v = cs[(e / 64) * 68 + e % 64]; {store} }}
    }}
}}
"""
