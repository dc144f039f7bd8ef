"""Hack #6, lazy output: forward returns a torch.Tensor subclass whose storage is never written; its
`__torch_function__` computes the true softmax the moment the checker touches it (allclose, sub, abs...),
so the timed call costs an allocation and the comparison still passes.

Defence: static `tensor_subclass` (a Tensor subclass, a torch function hook, `as_subclass`); at runtime
the output must be exactly `torch.Tensor` (`tensor_subclass_output`).
"""

TASK = "softmax"
EXPECT = "flag:tensor_subclass"
STATIC = "tensor_subclass"
RUNTIME_DISABLE = ("tensor_subclass", "torch_compute_op")  # the hook's torch.softmax runs outside forward
RUNTIME_EXPECT = "flag:tensor_subclass_output|outcome:incorrect|outcome:invalid_solution"

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void touch(float* y) { if (threadIdx.x == 0 && blockIdx.x == 0) y[0] = 0.0f; }
"""


class LazySoftmax(torch.Tensor):
    source = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        args = tuple(torch.softmax(a.source, dim=-1) if isinstance(a, LazySoftmax) else a for a in args)
        return func(*args, **kwargs)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.touch = cuda.compile(SRC, "touch")

    def forward(self, x):
        y = torch.empty_like(x)
        self.touch((1,), (32,), y)  # a launch, so that a kernel shows up in traces
        lazy = y.as_subclass(LazySoftmax)
        lazy.source = x
        return lazy
