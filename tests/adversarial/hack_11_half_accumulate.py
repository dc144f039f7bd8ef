"""Hack #11, reduced precision inside the kernel: operands converted to fp16 and accumulated with half2
FMAs (twice the arithmetic rate), for an fp32 task.

Defence (runtime): the tight fp32 tolerance (scale-aware) rejects fp16 accumulation error; statically
only a `reduced_precision_cuda` warning, since fp16 storage with fp32 accumulation can be legitimate.
"""

TASK = "matmul"
EXPECT = "outcome:incorrect"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
#include <cuda_fp16.h>
#define T 32
extern "C" __global__ void mm_half(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ __half As[T][T], Bs[T][T + 2];
    const int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
    __half acc = __float2half(0.0f);
    for (int k0 = 0; k0 < K; k0 += T) {
        As[threadIdx.y][threadIdx.x] = __float2half((r < M && k0 + threadIdx.x < K) ?
                A[(long long)r * K + k0 + threadIdx.x] : 0.0f);
        Bs[threadIdx.y][threadIdx.x] = __float2half((k0 + threadIdx.y < K && c < N) ?
                B[(long long)(k0 + threadIdx.y) * N + c] : 0.0f);
        __syncthreads();
        for (int k = 0; k < T; ++k) acc = __hfma(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (r < M && c < N) C[(long long)r * N + c] = __half2float(acc);
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "mm_half")

    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        self.kernel(((N + 31) // 32, (M + 31) // 32), (32, 32), A, B, C, M, N, K)
        return C
