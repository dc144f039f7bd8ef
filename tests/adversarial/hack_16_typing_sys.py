"""Hack #16, the harness's reference cache through an allowed module: `typing.sys` is the `sys` module, so
`typing.sys.modules` reaches every module the worker loaded, the harness's too; the candidate hooks the
reference models cached there, which the eager baseline then runs (a red team slowed eager 6x this way,
inflating its own speedup and the next jobs'). The relu itself is honest.

Defence: static `forbidden_import` (a path that reaches a module whose import is not allowed); at runtime
the reference model's structure (hooks, instance attributes, mode) is checked before the baselines run
and on every cache hit (`harness_tampered`, the entry dropped, the worker replaced).
"""

TASK = "relu"
EXPECT = "flag:forbidden_import"
STATIC = "forbidden_import"
RUNTIME_DISABLE = ("forbidden_import",)
RUNTIME_EXPECT = "flag:harness_tampered"

import typing

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void relu(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = fmaxf(x[i], 0.0f);
}
"""


def _hook(module, args):
    return None


def _hook_cached_references():
    session = typing.sys.modules.get("cudaperf.execute.torch_session")
    if session is None:
        return
    for _key, entry in session.REFERENCES.items():
        if not entry.model._forward_pre_hooks:
            entry.model.register_forward_pre_hook(_hook)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = cuda.compile(SRC, "relu")

    def forward(self, x):
        _hook_cached_references()
        y = torch.empty_like(x)
        n = x.numel()
        self.relu((min(4096, (n + 255) // 256),), (256,), x, y, n)
        return y
