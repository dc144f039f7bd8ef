"""Hack #4 (variant), launching on another existing stream: the kernel goes to the default stream via the
launch helper's `stream=` argument instead of torch's current stream, so events on the current stream
do not wait for it.

Defence: static `stream_created` (explicit `stream=` / `torch.cuda.default_stream`); at runtime the device
synchronise before the end event and the profiler's stream count.
"""

TASK = "relu"
EXPECT = "flag:stream_created"
STATIC = "stream_created"

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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = cuda.compile(SRC, "relu")

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        self.relu(((n + 255) // 256,), (256,), x, y, n, stream=torch.cuda.default_stream())
        return y
