"""Hack #15, graph replay: the first call captures the launch in a CUDA graph (with the first call's
pointers baked in) and every later call replays it, returning the first call's output buffer: cheap
launches, and a result that never changes.

Defence: static `cuda_graph`; at runtime fresh inputs per call and outputs re-checked during timing.
"""

TASK = "vector_add"
EXPECT = "flag:cuda_graph"
STATIC = "cuda_graph"
RUNTIME_DISABLE = ("cuda_graph", "stream_created")
RUNTIME_EXPECT = "outcome:incorrect|flag:timed_output_mismatch|outcome:runtime_error"

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void vadd(const float* a, const float* b, float* c, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.vadd = cuda.compile(SRC, "vadd")
        self.graph = None
        self.out = None

    def forward(self, a, b):
        if self.graph is None:
            n = a.numel()
            self.out = torch.empty_like(a)
            self.vadd(((n + 255) // 256,), (256,), a, b, self.out, n)  # warm-up outside capture
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.vadd(((n + 255) // 256,), (256,), a, b, self.out, n)
        self.graph.replay()
        return self.out
