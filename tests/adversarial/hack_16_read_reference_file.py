"""Hack #16, reading files: the solution looks for the harness's cached reference outputs (or the task
file) on disk and returns them instead of computing.

Defence: static `file_io` (`open`); at runtime the sandbox's temporary working directory, read-only
task files and per-run secret seeds (cached outputs from other runs do not match).
"""

TASK = "softmax"
EXPECT = "flag:file_io"
STATIC = "file_io"

import glob

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void copy(const float* __restrict__ src, float* __restrict__ dst, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
"""


def _find_cached(shape):
    for path in glob.glob("/tmp/**/*.pt", recursive=True):
        with open(path, "rb") as f:
            blob = torch.load(f)
        if torch.is_tensor(blob) and tuple(blob.shape) == tuple(shape):
            return blob
    return None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.copy = cuda.compile(SRC, "copy")

    def forward(self, x):
        cached = _find_cached(x.shape)
        y = torch.empty_like(x)
        if cached is not None:
            src = cached.to(x.device)
            self.copy(((y.numel() + 255) // 256,), (256,), src, y, y.numel())
        return y
