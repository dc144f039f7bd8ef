"""Fixture task for hack #13 (tests/adversarial): a plain KernelBench-format file, one configuration.

nn.LayerNorm starts with weight 1 and bias 0, and the file declares one shape, so a kernel may bake in
the shape or skip the affine step and still match here. The loader derives smaller, odd-sized
configurations from `batch_size` and `dim`, with the parameters randomised in the first
(`cudaperf.tasks.derived_configs`); the worker checks them for correctness only.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dimension, nn.LayerNorm's own initialisation (weight 1, bias 0)."""

    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 512
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
