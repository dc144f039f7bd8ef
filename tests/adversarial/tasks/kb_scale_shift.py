"""Fixture task for hack #13 (tests/adversarial): a plain KernelBench-format file, one configuration.

The declared element count (1024 x 8192) is a multiple of every block size, so a grid sized for exactly
that count needs no bounds check here. The loader derives odd-sized configurations from `batch_size`
and `dim` (`cudaperf.tasks.derived_configs`), where such a grid leaves a tail unwritten.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x * 2.5 + 0.5, element-wise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.5 + 0.5


batch_size = 1024
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
