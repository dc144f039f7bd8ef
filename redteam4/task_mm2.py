"""Red-team task: float32 matrix product, CPU-sized."""
import torch
from torch import nn

CUDAPERF_TASK = {"family": "matmul", "description": "C = A @ B, float32."}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_input_configs():
    return [{"name": "a", "M": 384, "K": 512, "N": 320},
            {"name": "b", "M": 261, "K": 513, "N": 299},
            {"name": "c", "M": 512, "K": 512, "N": 512}]


def get_inputs(M=256, K=256, N=256):
    s = K ** -0.25
    return [torch.randn(M, K) * s, torch.randn(K, N) * s]


def get_init_inputs():
    return []
