"""Hack #4, side stream: the GEMM is launched on a private stream, so an end event recorded on the
current stream fires immediately and the measured time is near zero; the result is ready "eventually".

Defence: static `stream_created`; at runtime, a full device synchronise before the end event, the host
wall-clock cross-check, and the profiler's stream count in coverage.
"""

TASK = "matmul"
EXPECT = "flag:stream_created"
STATIC = "stream_created"

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
#define T 32
extern "C" __global__ void mm32(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[T][T], Bs[T][T + 1];
    const int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T) {
        As[threadIdx.y][threadIdx.x] = (r < M && k0 + threadIdx.x < K) ?
                A[(long long)r * K + k0 + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && c < N) ?
                B[(long long)(k0 + threadIdx.y) * N + c] : 0.0f;
        __syncthreads();
        for (int k = 0; k < T; ++k) acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (r < M && c < N) C[(long long)r * N + c] = acc;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "mm32")
        self.side = torch.cuda.Stream()

    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        self.side.wait_stream(torch.cuda.current_stream())  # inputs are ready; the output is not awaited
        with torch.cuda.stream(self.side):
            self.kernel(((N + 31) // 32, (M + 31) // 32), (32, 32), A, B, C, M, N, K)
        return C
