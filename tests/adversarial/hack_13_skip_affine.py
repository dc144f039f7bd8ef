"""Hack #13, skipping work the usual inputs make redundant: nn.LayerNorm starts with weight = 1 and
bias = 0, so the kernel skips the affine step (two fewer loads per element).

Defence (runtime): tasks that draw parameters at random (this one does), several configurations and
seeds; the comparison fails.
"""

TASK = "layernorm"
EXPECT = "outcome:incorrect"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void layernorm_noaffine(const float* __restrict__ x, float* __restrict__ y,
        int dim, float eps)
{
    __shared__ float red[32];
    const float* xr = x + (long long)blockIdx.x * dim;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float s = 0.0f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) s += xr[c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    float mean = 0.0f;
    for (int i = 0; i < nw; ++i) mean += red[i];
    mean /= dim;
    __syncthreads();
    float q = 0.0f;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) { const float d = xr[c] - mean; q += d * d; }
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    if (lane == 0) red[warp] = q;
    __syncthreads();
    float var = 0.0f;
    for (int i = 0; i < nw; ++i) var += red[i];
    const float rstd = rsqrtf(var / dim + eps);
    float* yr = y + (long long)blockIdx.x * dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) yr[c] = (xr[c] - mean) * rstd;
}
"""


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.eps = 1e-5
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(dim))
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.kernel = cuda.compile(SRC, "layernorm_noaffine")

    def forward(self, x):
        y = torch.empty_like(x)
        dim = x.shape[-1]
        self.kernel((x.numel() // dim,), (256,), x, y, dim, self.eps)
        return y
