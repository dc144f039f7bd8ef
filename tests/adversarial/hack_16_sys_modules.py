"""Hack #16, tampering with the harness through sys.modules: the solution finds the correctness module
among the loaded modules and replaces its comparison with one that always succeeds.

Defence: static `forbidden_import` (sys); at runtime the comparison runs on callables captured before the
candidate import, and the worker's integrity check reports `harness_tampered` and retires the worker.
"""

TASK = "relu"
EXPECT = "flag:forbidden_import"
STATIC = "forbidden_import"
RUNTIME_DISABLE = ("forbidden_import",)
RUNTIME_EXPECT = "flag:harness_tampered|outcome:incorrect|outcome:runtime_error"

import sys

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void noop(float* y) {}
"""


class _Ok:
    ok = True
    max_abs_error = 0.0
    max_rel_error = 0.0
    mismatch_fraction = 0.0
    message = ""
    flags = ()


for _name, _module in list(sys.modules.items()):
    if _name.endswith("correctness") and hasattr(_module, "compare"):
        _module.compare = lambda *args, **kwargs: _Ok()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.noop = cuda.compile(SRC, "noop")

    def forward(self, x):
        y = torch.empty_like(x)
        self.noop((1,), (1,), y)
        return y
