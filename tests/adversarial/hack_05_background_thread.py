"""Hack #5, background thread: forward returns an allocated output at once and a thread launches the kernel
a moment later, after the timer has stopped but (usually) before the comparison.

Defence: static (threading is not an allowed import: `thread_created`); at runtime the process watch
(new live threads), the sandbox refusing thread creation in candidate code, and the post-job sweep.
"""

TASK = "relu"
EXPECT = "flag:thread_created"
STATIC = "thread_created"
RUNTIME_DISABLE = ("thread_created", "stream_created")
RUNTIME_EXPECT = "outcome:runtime_error|flag:thread_created|flag:lingering_threads|outcome:incorrect"

import threading

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

    def _later(self, x, y, n, stream):
        with torch.cuda.stream(stream):
            self.relu(((n + 255) // 256,), (256,), x, y, n)

    def forward(self, x):
        y = torch.empty_like(x)
        stream = torch.cuda.current_stream()
        threading.Thread(target=self._later, args=(x, y, x.numel(), stream), daemon=True).start()
        return y
