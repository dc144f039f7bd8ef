"""Hack #13, specialised to the benchmark shape: the float4 kernel assumes n is a multiple of 1024 (true
of the size it was tuned on) and silently skips the tail.

Defence (runtime): several input configurations per task, sizes chosen not to be multiples of any
vector or block width; the unwritten tail holds poison and fails the comparison.
"""

TASK = "vector_add"
EXPECT = "outcome:incorrect"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void __launch_bounds__(256)
vadd_f4(const float4* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ c)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // exactly one float4 per thread, no bounds check
    const float4 x = a[i], y = b[i];
    c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "vadd_f4")

    def forward(self, a, b):
        out = torch.empty_like(a)
        blocks = a.numel() // 1024  # 256 threads x 4 floats
        if blocks:
            self.kernel((blocks,), (256,), a, b, out)
        return out
