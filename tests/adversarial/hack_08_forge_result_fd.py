"""Hack #8, forging the result channel: at import the solution writes a well-formed "correct" result into
every file descriptor it can, hoping to hit the pipe the worker reports on.

Defence: static `forbidden_import` (os); at runtime the result channel carries a per-job nonce the
candidate never sees (`channel_forged`), the sandbox refuses reopening the channel fds. Writing into
every fd also hits the CUDA driver's device fds: the context dies and the worker is replaced (cuda_error).
"""

TASK = "row_sum"
EXPECT = "flag:forbidden_import"
STATIC = "forbidden_import"
RUNTIME_DISABLE = ("forbidden_import",)
RUNTIME_EXPECT = ("flag:channel_forged|outcome:incorrect|outcome:crash|outcome:harness_error"
                  "|outcome:cuda_error")

import json
import os

from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void fill_zero(float* y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.0f;
}
"""

_FORGED = (json.dumps({"outcome": "correct", "stage": "timing", "message": "", "correctness": [],
                       "timings": [], "flags": [], "coverage": 1.0}) + "\n").encode()
for _fd in range(3, 64):
    try:
        os.write(_fd, _FORGED)
    except OSError:
        pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fill = cuda.compile(SRC, "fill_zero")

    def forward(self, x):
        rows = x.shape[0]
        y = x.new_empty(rows)
        self.fill(((rows + 255) // 256,), (256,), y, rows)
        return y
