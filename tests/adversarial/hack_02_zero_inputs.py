"""Hack #2, zeroing the inputs: the kernel writes zeros into both inputs and the output. If the reference
is computed afterwards on the same (uncloned) tensors, as in older KernelBench, it returns zeros too and
the comparison passes.

Defence (runtime, correctness): reference first on its own clone, inputs cloned per call and compared with
a saved copy (`input_mutated`). Not statically detectable.
"""

TASK = "vector_add"
EXPECT = "flag:input_mutated"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void zero3(float* a, float* b, float* c, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { a[i] = 0.0f; b[i] = 0.0f; c[i] = 0.0f; }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.zero3 = cuda.compile(SRC, "zero3")

    def forward(self, a, b):
        out = torch.empty_like(a)
        n = a.numel()
        self.zero3(((n + 255) // 256,), (256,), a, b, out, n)
        return out
