"""Repeatability task (benchmarks only): the STREAM triad out = a + 2.5 * b on float32 vectors.

Purely bandwidth-bound, long enough (~600 MB moved per call on the largest configuration) that the host's
launch and the timer's own cost are small beside it, and insensitive to the SM clock: it shows how
repeatable the harness itself is, apart from the GPU's clock changes that move compute-bound kernels.
"""

import torch
from torch import nn

CUDAPERF_TASK = {
    "family": "elementwise",
    "description": "out = a + 2.5 * b for two float32 vectors of the same length n.",
}


class Model(nn.Module):
    """out = a + 2.5 * b, a and b float32 vectors of length n."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + 2.5 * b


def get_input_configs():
    # n is not a multiple of 4 or of a block size: the vectorised kernel must handle a tail.
    return [
        {"name": "odd", "n": 1_000_003},
        {"name": "huge", "n": 50_331_653},  # 201 MB per vector, 604 MB moved per call
    ]


def get_inputs(n: int = 1_000_003):
    return [torch.randn(n), torch.randn(n)]


def get_init_inputs():
    return []
