"""Honest softmax: one-pass online max/sum (running max rescales the running sum), merged across lanes
with warp shuffles; a warp per row for short rows, a block per row (shared-memory merge) for long ones.
"""

TASK = "softmax"

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
#define FULL 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)

// (m, s) <- merge of two online-softmax states: running max m and sum of exp(x - m).
__device__ __forceinline__ void merge(float& m, float& s, float om, float os)
{
    const float nm = fmaxf(m, om);
    const float a = (m == NEG_INF) ? 0.0f : s * expf(m - nm);
    const float b = (om == NEG_INF) ? 0.0f : os * expf(om - nm);
    m = nm;
    s = a + b;
}

__device__ __forceinline__ void warp_merge(float& m, float& s)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float om = __shfl_xor_sync(FULL, m, o), os = __shfl_xor_sync(FULL, s, o);
        merge(m, s, om, os);
    }
}

__device__ __forceinline__ void accumulate(const float* xr, int first, int step, int cols, float& m, float& s)
{
    for (int c = first; c < cols; c += step) {
        const float v = xr[c];
        const float nm = fmaxf(m, v);
        s = s * expf(m - nm) + expf(v - nm);  // m == -inf only before the first element: exp(-inf) = 0
        m = nm;
    }
}

extern "C" __global__ void softmax_warp_rows(const float* __restrict__ x, float* __restrict__ y,
        int rows, int cols)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;  // warp-uniform
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    float m = NEG_INF, s = 0.0f;
    accumulate(xr, lane, 32, cols, m, s);
    warp_merge(m, s);
    const float inv = 1.0f / s;
    for (int c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
}

extern "C" __global__ void __launch_bounds__(256)
softmax_block_rows(const float* __restrict__ x, float* __restrict__ y, int cols)
{
    __shared__ float sm[32], ss[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    float m = NEG_INF, s = 0.0f;
    accumulate(xr, threadIdx.x, blockDim.x, cols, m, s);
    warp_merge(m, s);
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? sm[lane] : NEG_INF;
        s = lane < nwarps ? ss[lane] : 0.0f;
        warp_merge(m, s);
        if (lane == 0) { sm[0] = m; ss[0] = s; }
    }
    __syncthreads();
    m = sm[0];
    const float inv = 1.0f / ss[0];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) * inv;
}
"""

WARP_ROW_MAX_COLS = 1024
ROWS_PER_BLOCK = 8


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = cuda.load(SRC)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        if rows == 0:
            return y
        if cols <= WARP_ROW_MAX_COLS:
            self.k.softmax_warp_rows(
                ((rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK,), (32 * ROWS_PER_BLOCK,), x, y, rows, cols
            )
        else:
            self.k.softmax_block_rows((rows,), (256,), x, y, cols)
        return y
