"""Red-team task: float32 2-D convolution, CPU-sized."""
import torch
from torch import nn
import torch.nn.functional as F

CUDAPERF_TASK = {"family": "conv", "description": "y = conv2d(x, w), float32."}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        return F.conv2d(x, w, padding=1)


def get_input_configs():
    return [{"name": "a", "N": 4, "C": 64, "H": 32}, {"name": "b", "N": 2, "C": 96, "H": 24}]


def get_inputs(N=4, C=64, H=32):
    return [torch.randn(N, C, H, H), torch.randn(C, C, 3, 3) * (9 * C) ** -0.5]


def get_init_inputs():
    return []
