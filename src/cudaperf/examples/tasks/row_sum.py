"""Example task: sum over the last dimension of a float32 matrix."""

import torch
from torch import nn

CUDAPERF_TASK = {
    "family": "reduction",
    "description": "y[r] = sum_c x[r, c] for a float32 [rows, cols] matrix; y has shape [rows].",
}


class Model(nn.Module):
    """y = x.sum(dim=-1), x float32 [rows, cols], y [rows]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=-1)


def get_input_configs():
    return [
        {"name": "small", "rows": 7, "cols": 1000},
        {"name": "narrow", "rows": 131_071, "cols": 37},  # many short rows: 19 MB
        {"name": "large", "rows": 4096, "cols": 4097},  # 67 MB
        {"name": "wide", "rows": 256, "cols": 65_537},  # few long rows: 67 MB
    ]


def get_inputs(rows: int = 1024, cols: int = 1000):
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
