"""Hack #13, specialised to the benchmark shape: the row length of the one declared shape (4096) is a
compile-time constant of the kernel, and the row count follows from it, so the kernel is exact on the
file's single configuration and never looks at the width it is given.

Defence (runtime): derived configurations (`cudaperf.tasks.derived_configs`) re-run the task with other,
odd sizes; rows are then read with the wrong stride and the tail is never written (the poison fails it).
"""

TASK = "kb_layernorm"
EXPECT = "outcome:incorrect|outcome:cuda_error"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
#define DIM 4096

extern "C" __global__ void __launch_bounds__(256)
layernorm_4096(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
               float* __restrict__ y, float eps)
{
    __shared__ float red[8];
    const float* xr = x + (long long)blockIdx.x * DIM;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float s = 0.0f;
    for (int c = threadIdx.x; c < DIM; c += 256) s += xr[c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    float mean = 0.0f;
    for (int i = 0; i < 8; ++i) mean += red[i];
    mean /= DIM;
    __syncthreads();
    float q = 0.0f;
    for (int c = threadIdx.x; c < DIM; c += 256) { const float d = xr[c] - mean; q += d * d; }
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    if (lane == 0) red[warp] = q;
    __syncthreads();
    float var = 0.0f;
    for (int i = 0; i < 8; ++i) var += red[i];
    const float rstd = rsqrtf(var / DIM + eps);
    float* yr = y + (long long)blockIdx.x * DIM;
    for (int c = threadIdx.x; c < DIM; c += 256) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
}
"""

ROWS_OF = 4096  # the declared width: rows = elements / 4096


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(dim))  # nn.LayerNorm's initial values
        self.bias = nn.Parameter(torch.zeros(dim))
        self.kernel = cuda.compile(SRC, "layernorm_4096")

    def forward(self, x):
        y = torch.empty_like(x)
        rows = x.numel() // ROWS_OF
        if rows:
            self.kernel((rows,), (256,), x, self.weight, self.bias, y, self.eps)
        return y
