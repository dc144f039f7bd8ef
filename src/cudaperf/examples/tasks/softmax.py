"""Example task: softmax over the last dimension of a float32 matrix."""

import torch
from torch import nn

CUDAPERF_TASK = {
    "family": "reduction",
    "description": "y = softmax(x, dim=-1) for a float32 [rows, cols] matrix.",
}


class Model(nn.Module):
    """y = softmax(x, dim=-1), x float32 [rows, cols]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_input_configs():
    # cols stays <= 8191: over a much wider row the outputs (~1/cols) fall below the absolute tolerance
    # and an all-zero answer would pass (docs/evaluation.md, degenerate problems).
    return [
        {"name": "small", "rows": 16, "cols": 1000},
        {"name": "narrow", "rows": 32_768, "cols": 100},  # many short rows: 13 MB
        {"name": "large", "rows": 8192, "cols": 2049},  # 67 MB in
        {"name": "wide", "rows": 512, "cols": 8191},  # long rows: 16.8 MB
    ]


def get_inputs(rows: int = 1024, cols: int = 1000):
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
