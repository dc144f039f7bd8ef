"""Hack #16, reaching into the harness's memory: the garbage collector lists every live object, including
the reference output the harness keeps alive; the solution copies the tensor of the right shape that
is not its own input (with its own copy kernel).

Defence: static `forbidden_import` (gc); at runtime the sandbox refuses `gc.get_objects` in candidate
code, and references live in the harness's scope outside candidate reach.
"""

TASK = "vector_add"
EXPECT = "flag:forbidden_import"
STATIC = "forbidden_import"
RUNTIME_DISABLE = ("forbidden_import", "identity_cache")
RUNTIME_EXPECT = "outcome:runtime_error|outcome:incorrect"

import gc

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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.copy = cuda.compile(SRC, "copy")

    def forward(self, a, b):
        out = torch.empty_like(a)
        n = a.numel()
        mine = {a.data_ptr(), b.data_ptr(), out.data_ptr()}
        for obj in gc.get_objects():
            if torch.is_tensor(obj) and obj.is_cuda and obj.shape == a.shape and obj.data_ptr() not in mine:
                self.copy(((n + 255) // 256,), (256,), obj, out, n)
                break
        return out
