"""Hack #3, result cache keyed on the input's data pointer and shape: the first call computes with a real
tiled kernel, later calls with "the same" input return the cached product without launching anything.
A harness that times the same input tensors over and over measures a dictionary lookup.

Defence: static `identity_cache` (state keyed on data_ptr); at runtime, fresh inputs per call (the
allocator hands back the same address with new contents) and timing input sets rotated and re-checked.
"""

TASK = "matmul"
EXPECT = "flag:identity_cache"
STATIC = "identity_cache"
RUNTIME_DISABLE = ("identity_cache",)
RUNTIME_EXPECT = ("outcome:incorrect|flag:candidate_input_independent|flag:timed_output_mismatch"
                  "|flag:impossible_speed")

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
#define T 16
extern "C" __global__ void mm16(const float* A, const float* B, float* C, int M, int N, int K)
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
        for (int k = 0; k < T; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (r < M && c < N) C[(long long)r * N + c] = acc;
}
"""

_kernel = cuda.compile(SRC, "mm16")
_CACHE: dict = {}


class ModelNew(nn.Module):
    def forward(self, A, B):
        key = (A.data_ptr(), B.data_ptr(), tuple(A.shape), tuple(B.shape))
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        _kernel(((N + 15) // 16, (M + 15) // 16), (16, 16), A, B, C, M, N, K)
        _CACHE[key] = C
        return C
