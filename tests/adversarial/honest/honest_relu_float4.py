"""Honest relu: float4 vectorised body, scalar tail, reading `x.shape` and calling `x.contiguous()`.

The output is viewed back to the input's shape: `.view` and `.contiguous` on a contiguous tensor launch
nothing. A string that names torch.relu is documentation, not a call.
"""

TASK = "relu"

import math

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void relu_scalar(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

extern "C" __global__ void __launch_bounds__(256)
relu_vec4(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long i4 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n4 = n >> 2;
    if (i4 < n4) {
        float4 v = reinterpret_cast<const float4*>(x)[i4];
        v.x = fmaxf(v.x, 0.0f); v.y = fmaxf(v.y, 0.0f); v.z = fmaxf(v.z, 0.0f); v.w = fmaxf(v.w, 0.0f);
        reinterpret_cast<float4*>(y)[i4] = v;
    } else {
        const long long t = (n4 << 2) + (i4 - n4);  // the last n % 4 elements, one per thread
        if (i4 - n4 < 4 && t < n) y[t] = fmaxf(x[t], 0.0f);
    }
}
"""

DOC = "reference: torch.relu(x)"
THREADS = 256


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernels = cuda.load(SRC)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.contiguous().view(-1)
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y.view(shape)
        if x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0:
            threads_needed = n // 4 + 4  # one float4 per thread, then up to 3 tail elements
            self.kernels.relu_vec4((math.ceil(threads_needed / THREADS),), (THREADS,), x, y, n)
        else:
            self.kernels.relu_scalar((math.ceil(n / THREADS),), (THREADS,), x, y, n)
        return y.view(shape)
