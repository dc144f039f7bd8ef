"""Hack #13, skipping work the declared problem makes redundant: nn.LayerNorm's weight is 1 and its bias
0 until trained, so the kernel leaves the affine step out; on a plain KernelBench file, with one
configuration and parameters at their initial values, the output is exact.

Defence (runtime): the first derived configuration randomises the constant parameters of the reference
and gives the candidate's twins (same shape, same constant) the same values before the first forward
(`tasks.runtime.randomize_constant_parameters`); the kernel that ignores them fails there.
"""

TASK = "kb_layernorm"
EXPECT = "outcome:incorrect"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void __launch_bounds__(256)
layernorm_plain(const float* __restrict__ x, float* __restrict__ y, int dim, float eps)
{
    __shared__ float red[8];
    const float* xr = x + (long long)blockIdx.x * dim;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float s = 0.0f;
    for (int c = threadIdx.x; c < dim; c += 256) s += xr[c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    float mean = 0.0f;
    for (int i = 0; i < 8; ++i) mean += red[i];
    mean /= dim;
    __syncthreads();
    float q = 0.0f;
    for (int c = threadIdx.x; c < dim; c += 256) { const float d = xr[c] - mean; q += d * d; }
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    if (lane == 0) red[warp] = q;
    __syncthreads();
    float var = 0.0f;
    for (int i = 0; i < 8; ++i) var += red[i];
    const float rstd = rsqrtf(var / dim + eps);
    float* yr = y + (long long)blockIdx.x * dim;
    for (int c = threadIdx.x; c < dim; c += 256) yr[c] = (xr[c] - mean) * rstd;  // weight 1, bias 0
}
"""


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(dim))  # kept, as the reference's are, and never read
        self.bias = nn.Parameter(torch.zeros(dim))
        self.kernel = cuda.compile(SRC, "layernorm_plain")

    def forward(self, x):
        y = torch.empty_like(x)
        dim = x.shape[-1]
        if x.numel():
            self.kernel((x.numel() // dim,), (256,), x, y, dim, self.eps)
        return y
