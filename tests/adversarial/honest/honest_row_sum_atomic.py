"""Honest row_sum with a split-row grid: each block sums a chunk of one row and atomically adds its
partial into an output zeroed by `torch.zeros` (a torch fill kernel: allowed allocation, and a small
share of GPU time next to the reduction). Long rows get many blocks, so even 256 rows fill the GPU.
"""

TASK = "row_sum"

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void __launch_bounds__(256)
row_sum_chunks(const float* __restrict__ x, float* __restrict__ y, int cols, int chunk)
{
    __shared__ float part[8];
    const long long row = blockIdx.x;  // x: up to 2^31 - 1 rows; y (<= 65535) indexes the chunks
    const int start = blockIdx.y * chunk;
    const int end = min(cols, start + chunk);
    const float* xr = x + row * cols;
    float v = 0.0f;
    for (int c = start + threadIdx.x; c < end; c += blockDim.x) v += xr[c];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) atomicAdd(&y[row], v);
    }
}
"""

CHUNK = 4096
THREADS = 256


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "row_sum_chunks")

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        y = torch.zeros(x.shape[:-1], device=x.device, dtype=x.dtype)
        rows = y.numel()
        if rows == 0 or cols == 0:
            return y
        chunk = min(CHUNK, cols)
        threads = THREADS if chunk >= THREADS else 32 * ((chunk + 31) // 32)
        grid = (rows, (cols + chunk - 1) // chunk)
        self.kernel(grid, (threads,), x, y, cols, chunk)
        return y
