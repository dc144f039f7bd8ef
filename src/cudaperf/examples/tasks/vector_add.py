"""Example task: element-wise sum of two float32 vectors."""

import torch
from torch import nn

CUDAPERF_TASK = {
    "family": "elementwise",
    "description": "out = a + b for two float32 vectors of the same length n.",
}


class Model(nn.Module):
    """out = a + b, a and b float32 vectors of length n."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def get_input_configs():
    # No n is a multiple of 4 or of a block size, so vectorised kernels must handle a tail.
    return [
        {"name": "small", "n": 1_001},
        {"name": "medium", "n": 1_048_583},
        {"name": "large", "n": 8_388_617},  # 33.6 MB per vector, 101 MB moved per call
    ]


def get_inputs(n: int = 1_048_583):
    return [torch.randn(n), torch.randn(n)]


def get_init_inputs():
    return []
