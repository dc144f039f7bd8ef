"""layernorm in the fast format: mean, then variance around the mean, then the affine write (NVRTC).

Two statistics passes (sum, then sum of squared deviations) instead of one sum-of-squares pass avoid
the cancellation of E[x^2] - E[x]^2 when the mean is large compared with the spread; the row is re-read
from L1/L2, which costs little next to the one unavoidable read from DRAM. Short rows (dim <= 1024) get
one warp each, long rows one block each. Parameters are drawn exactly as the reference `Model` draws
them, so both start equal under the same seed.
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

// Sum over the whole block; every thread gets the result. `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < nwarps ? scratch[lane] : 0.0f);
}

extern "C" __global__ void layernorm_warp_rows(const float* __restrict__ x, const float* __restrict__ w,
                                               const float* __restrict__ b, float* __restrict__ y,
                                               int rows, int dim, float eps)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;  // warp-uniform
    const float* xr = x + (long long)row * dim;
    float* yr = y + (long long)row * dim;
    float s = 0.0f;
    for (int c = lane; c < dim; c += 32) s += xr[c];
    const float mean = warp_sum(s) / dim;
    float q = 0.0f;
    for (int c = lane; c < dim; c += 32) { const float d = xr[c] - mean; q += d * d; }
    const float rstd = rsqrtf(warp_sum(q) / dim + eps);
    for (int c = lane; c < dim; c += 32) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
}

extern "C" __global__ void layernorm_block_rows(const float* __restrict__ x, const float* __restrict__ w,
                                                const float* __restrict__ b, float* __restrict__ y,
                                                int dim, float eps)
{
    __shared__ float scratch[32];
    const float* xr = x + (long long)blockIdx.x * dim;
    float* yr = y + (long long)blockIdx.x * dim;
    float s = 0.0f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) s += xr[c];
    const float mean = block_sum(s, scratch) / dim;
    float q = 0.0f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) { const float d = xr[c] - mean; q += d * d; }
    const float rstd = rsqrtf(block_sum(q, scratch) / dim + eps);
    for (int c = threadIdx.x; c < dim; c += blockDim.x) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
}
"""

WARP_ROW_MAX_DIM = 1024
ROWS_PER_BLOCK = 8
BLOCK_THREADS = 512


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.eps = 1e-5
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(dim))
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.kernels = cuda.load(SRC)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.weight.contiguous()
        b = self.bias.contiguous()
        y = torch.empty_like(x)
        dim = x.shape[-1]
        rows = x.numel() // dim if dim else 0
        if rows == 0:
            return y
        if dim <= WARP_ROW_MAX_DIM:
            blocks = (rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
            self.kernels.layernorm_warp_rows((blocks,), (32 * ROWS_PER_BLOCK,),
                                             x, w, b, y, rows, dim, self.eps)
        else:
            self.kernels.layernorm_block_rows((rows,), (BLOCK_THREADS,), x, w, b, y, dim, self.eps)
        return y
