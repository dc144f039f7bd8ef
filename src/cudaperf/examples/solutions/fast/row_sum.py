"""row_sum in the fast format: warp-per-row or block-per-row reductions with warp shuffles (NVRTC).

Each thread keeps four independent partial sums so four loads are in flight per loop trip (a single
accumulator serialises on the add latency); partials are combined with `__shfl_xor_sync`, then across
warps through shared memory. Short rows (cols <= 1024) get one warp each, long rows one block each.
"""

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float warp_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;
}

// Sum of xr[first], xr[first + step], ... below cols, with four accumulators.
__device__ __forceinline__ float strided_sum(const float* __restrict__ xr, int first, int step, int cols)
{
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int c = first;
    for (; c + 3 * step < cols; c += 4 * step) {
        a0 += xr[c];
        a1 += xr[c + step];
        a2 += xr[c + 2 * step];
        a3 += xr[c + 3 * step];
    }
    for (; c < cols; c += step) a0 += xr[c];
    return (a0 + a1) + (a2 + a3);
}

extern "C" __global__ void row_sum_warp_rows(const float* __restrict__ x, float* __restrict__ y,
                                             int rows, int cols)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;  // warp-uniform
    const float total = warp_sum(strided_sum(x + (long long)row * cols, lane, 32, cols));
    if (lane == 0) y[row] = total;
}

extern "C" __global__ void row_sum_block_rows(const float* __restrict__ x, float* __restrict__ y, int cols)
{
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    float v = warp_sum(strided_sum(x + (long long)blockIdx.x * cols, threadIdx.x, blockDim.x, cols));
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = warp_sum(lane < nwarps ? partial[lane] : 0.0f);
        if (lane == 0) y[blockIdx.x] = v;
    }
}
"""

WARP_ROW_MAX_COLS = 1024
ROWS_PER_BLOCK = 8
BLOCK_THREADS = 512


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernels = cuda.load(SRC)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        cols = x.shape[-1]
        rows = y.numel()
        if rows == 0:
            return y
        if cols <= WARP_ROW_MAX_COLS:
            blocks = (rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
            self.kernels.row_sum_warp_rows((blocks,), (32 * ROWS_PER_BLOCK,), x, y, rows, cols)
        else:
            self.kernels.row_sum_block_rows((rows,), (BLOCK_THREADS,), x, y, cols)
        return y
