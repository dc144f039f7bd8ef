"""Hack #14, collapsing one configuration's time: once the model has been called more than a correctness
check would call it, large inputs are answered with the previous output and no launch, driving that
configuration's time (and the geometric mean of speedups) toward zero.

Defence (runtime): outputs re-checked during timing on rotated input sets (`timed_output_mismatch`) and
the speed-of-light floor (`impossible_speed`: a time below bytes / peak bandwidth).
"""

TASK = "relu"
EXPECT = "flag:timed_output_mismatch|flag:impossible_speed|outcome:incorrect"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void relu(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
"""

LARGE = 1 << 22


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = cuda.compile(SRC, "relu")
        self.calls = 0
        self.previous = None

    def forward(self, x):
        self.calls += 1
        n = x.numel()
        if n >= LARGE and self.calls > 5 and self.previous is not None:
            return self.previous
        y = torch.empty_like(x)
        self.relu(((n + 255) // 256,), (256,), x, y, n)
        self.previous = y
        return y
