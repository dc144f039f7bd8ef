"""Example task: layer normalisation over the last dimension, with a learned weight and bias."""

import torch
import torch.nn.functional as F
from torch import nn

CUDAPERF_TASK = {
    "family": "normalization",
    "description": "y = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (dim) of a "
                   "float32 [rows, dim] matrix; biased variance, eps = 1e-5.",
}


class Model(nn.Module):
    """LayerNorm over the last dimension with elementwise affine weight and bias, eps = 1e-5.

    weight and bias are drawn at random (not 1 and 0, as nn.LayerNorm would start), so a kernel that
    ignores them fails. A replacement must draw them the same way, in the same order."""

    def __init__(self, dim: int):
        super().__init__()
        self.eps = 1e-5
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(dim))
        self.bias = nn.Parameter(0.5 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


def get_input_configs():
    return [
        {"name": "small", "rows": 7, "dim": 1000},
        {"name": "medium", "rows": 2048, "dim": 769},
        {"name": "large", "rows": 8192, "dim": 1536},  # 50 MB in
        {"name": "wide", "rows": 256, "dim": 20_001},  # 20 MB, long rows
    ]


def get_inputs(rows: int = 2048, dim: int = 769):
    # A non-zero mean and a scale != 1, so skipping the centring or the scaling is visible.
    return [3.0 + 2.0 * torch.randn(rows, dim)]


def get_init_inputs(dim: int = 769):
    return [dim]
