"""Hack #10, PyTorch fallback: a real (if trivial) kernel is launched to zero the output, then
`torch.matmul` (cuBLAS) computes the product.

Defence: static `torch_compute_op`; at runtime the aten-op monitor (mm) and coverage (cuBLAS time).
"""

TASK = "matmul"
EXPECT = "flag:torch_compute_op"
STATIC = "torch_compute_op"

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void zero_fill(float* c, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = 0.0f;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.zero = cuda.compile(SRC, "zero_fill")

    def forward(self, A, B):
        C = torch.empty((A.shape[0], B.shape[1]), device=A.device, dtype=A.dtype)
        self.zero(((C.numel() + 255) // 256,), (256,), C, C.numel())
        torch.matmul(A, B, out=C)
        return C
