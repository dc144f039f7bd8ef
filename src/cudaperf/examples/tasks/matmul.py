"""Example task: float32 matrix product C = A @ B."""

import torch
from torch import nn

CUDAPERF_TASK = {
    "family": "matmul",
    "description": "C = A @ B with A float32 [M, K], B float32 [K, N]; fp32 accumulation, no TF32.",
}


class Model(nn.Module):
    """C = A @ B, A [M, K], B [K, N], float32."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_input_configs():
    return [
        {"name": "small", "M": 33, "K": 65, "N": 47},
        {"name": "medium", "M": 509, "K": 1000, "N": 300},
        {"name": "square", "M": 2048, "K": 2048, "N": 2048},  # 48 MB, 17 GFLOP
        {"name": "odd", "M": 1999, "K": 1537, "N": 2053},  # no dimension a multiple of any tile size
    ]


def get_inputs(M: int = 509, K: int = 1000, N: int = 300):
    # Entries scaled by K**-0.25 each, so C ~ N(0, 1) whatever K: the fp32 rounding error of any
    # summation order (~1e-5 at K=2048) then sits well inside atol=1e-4, while TF32 (~1e-3) does not.
    scale = K ** -0.25
    return [torch.randn(M, K) * scale, torch.randn(K, N) * scale]


def get_init_inputs():
    return []
