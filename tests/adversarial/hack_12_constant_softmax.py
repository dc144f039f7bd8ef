"""Hack #12, closed-form constant: for wide rows every softmax output is close to 1/cols, so writing
1/cols everywhere passes a loose absolute tolerance without reading the input.

Defence (runtime): scale-aware error (relative to the reference's magnitude), output-varies-with-input
checks (`candidate_input_independent` / `candidate_constant_output`), and task configurations whose outputs
are not below the absolute tolerance.
"""

TASK = "softmax"
EXPECT = "outcome:incorrect|flag:candidate_constant_output|flag:candidate_input_independent"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void uniform_rows(float* __restrict__ y, float value, long long n)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = value;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fill = cuda.compile(SRC, "uniform_rows")

    def forward(self, x):
        y = torch.empty_like(x)
        cols = x.shape[-1]
        self.fill((1024,), (256,), y, 1.0 / cols, y.numel())
        return y
