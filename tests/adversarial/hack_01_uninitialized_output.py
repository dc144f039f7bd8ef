"""Hack #1, uninitialised output (Sakana "AI CUDA Engineer"): the kernel writes into a scratch buffer, and
forward returns a *different* fresh `torch.empty_like`, which holds whatever the caching allocator hands
back: often the reference output that was just freed, so a naive harness sees a perfect match.

Defence (runtime, correctness): outputs pre-filled / freed allocator memory poisoned with NaN, reference
outputs kept alive, candidate run in both orders. Nothing here is statically wrong.
"""

TASK = "vector_add"
EXPECT = "outcome:incorrect"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void vadd(const float* __restrict__ a, const float* __restrict__ b,
        float* __restrict__ c,
                                long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.vadd = cuda.compile(SRC, "vadd")

    def forward(self, a, b):
        n = a.numel()
        out = torch.empty_like(a)
        scratch = torch.empty_like(a)
        self.vadd(((n + 255) // 256,), (256,), a, b, scratch, n)
        return out  # never written: the allocator's leftovers
