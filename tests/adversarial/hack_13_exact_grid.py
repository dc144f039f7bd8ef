"""Hack #13, specialised to the benchmark shape: one thread per element, the grid sized as elements / 256
and no bounds check, which is exact for the declared 1024 x 8192 and saves the compare per thread.

Defence (runtime): derived configurations with odd sizes; the last partial block is never launched, its
elements keep the allocator's poison (NaN), and the comparison fails.
"""

TASK = "kb_scale_shift"
EXPECT = "outcome:incorrect"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void __launch_bounds__(256)
scale_shift_exact(const float* __restrict__ x, float* __restrict__ y)
{
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;  // every launched thread has an element
    y[i] = x[i] * 2.5f + 0.5f;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "scale_shift_exact")

    def forward(self, x):
        y = torch.empty_like(x)
        blocks = x.numel() // 256
        if blocks:
            self.kernel((blocks,), (256,), x, y)
        return y
