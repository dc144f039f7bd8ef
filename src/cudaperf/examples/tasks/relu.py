"""Example task: ReLU of a float32 matrix."""

import torch
from torch import nn

CUDAPERF_TASK = {
    "family": "elementwise",
    "description": "y = max(x, 0) element-wise for a float32 [rows, cols] matrix.",
}


class Model(nn.Module):
    """y = relu(x), x float32 [rows, cols]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_input_configs():
    # Odd column counts: rows are not 16-byte aligned as a whole, only the full buffer is.
    return [
        {"name": "small", "rows": 17, "cols": 999},
        {"name": "medium", "rows": 1024, "cols": 1025},
        {"name": "large", "rows": 4096, "cols": 2049},  # 33.6 MB in, 33.6 MB out
    ]


def get_inputs(rows: int = 1024, cols: int = 1025):
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
