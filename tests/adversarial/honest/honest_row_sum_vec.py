"""Honest row_sum: a warp per short row, a block per long row; float4 loads when rows are 16-byte aligned
(cols % 4 == 0), four independent scalar accumulators otherwise; warp-shuffle tree reductions.
"""

TASK = "row_sum"

from torch import nn

from cudaperf import cuda

SRC = r"""
#define FULL 0xffffffffu

__device__ __forceinline__ float warp_sum(float v)
{
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    return v;  // valid in lane 0
}

template <bool VEC>
__device__ __forceinline__ float partial(const float* __restrict__ xr, int first, int step, int cols)
{
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int c = first; c < cols / 4; c += step) {
            const float4 v = x4[c];
            a0 += v.x; a1 += v.y; a2 += v.z; a3 += v.w;
        }
    } else {
        int c = first;
        for (; c + 3 * step < cols; c += 4 * step) {
            a0 += xr[c]; a1 += xr[c + step]; a2 += xr[c + 2 * step]; a3 += xr[c + 3 * step];
        }
        for (; c < cols; c += step) a0 += xr[c];
    }
    return (a0 + a1) + (a2 + a3);
}

template <bool VEC>
__device__ void warp_rows(const float* x, float* y, int rows, int cols)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float total = warp_sum(partial<VEC>(x + (long long)row * cols, lane, 32, cols));
    if (lane == 0) y[row] = total;
}

template <bool VEC>
__device__ void block_rows(const float* x, float* y, int cols)
{
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    float v = warp_sum(partial<VEC>(x + (long long)blockIdx.x * cols, threadIdx.x, blockDim.x, cols));
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = warp_sum(lane < nwarps ? part[lane] : 0.0f);
        if (lane == 0) y[blockIdx.x] = v;
    }
}

extern "C" __global__ void row_sum_warp_vec(const float* x, float* y, int rows, int cols) {
        warp_rows<true>(x, y, rows, cols); }
extern "C" __global__ void row_sum_warp(const float* x, float* y, int rows, int cols) {
        warp_rows<false>(x, y, rows, cols); }
extern "C" __global__ void __launch_bounds__(512) row_sum_block_vec(const float* x, float* y,
        int cols) { block_rows<true>(x, y, cols); }
extern "C" __global__ void __launch_bounds__(512) row_sum_block(const float* x, float* y, int cols) {
        block_rows<false>(x, y, cols); }
"""

ROWS_PER_BLOCK = 8


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = cuda.load(SRC)

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        y = x.new_empty(x.shape[:-1])
        rows = y.numel()
        if rows == 0:
            return y
        vec = cols % 4 == 0 and x.data_ptr() % 16 == 0
        if cols <= 2048:
            grid = ((rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK,)
            kernel = self.k.row_sum_warp_vec if vec else self.k.row_sum_warp
            kernel(grid, (32 * ROWS_PER_BLOCK,), x, y, rows, cols)
        else:
            kernel = self.k.row_sum_block_vec if vec else self.k.row_sum_block
            kernel((rows,), (512,), x, y, cols)
        return y
