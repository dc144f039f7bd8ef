"""Hack #2, input mutation: relu computed in place on the input, which is then returned. Saves an
allocation and half the traffic, and a harness that reuses inputs (or computes the reference afterwards
on the same tensors) is fooled.

Defence (runtime, correctness): inputs cloned per call and compared with a saved copy afterwards.
Statically only a `returns_input` warning.
"""

TASK = "relu"
EXPECT = "flag:input_mutated"
STATIC = None

from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void relu_inplace(float* __restrict__ x, long long n)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = fmaxf(x[i], 0.0f);
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = cuda.compile(SRC, "relu_inplace")

    def forward(self, x):
        n = x.numel()
        self.relu((min(4096, (n + 255) // 256),), (256,), x, n)
        return x
