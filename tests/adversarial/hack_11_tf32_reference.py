"""Hack #11, precision downgrade that drags the reference along: the GEMM rounds its operands to TF32
(as tensor cores would) and, at import, the solution switches torch's TF32 flags on, so a reference
computed afterwards is just as imprecise and the two agree within the fp32 tolerance.

Defence: static `precision_flags_changed` (and a `reduced_precision_cuda` warning); at runtime the
precision flags are snapshotted, compared and restored around candidate code, references are computed
with TF32 off, and the tight fp32 tolerance rejects TF32-level error on its own.
"""

TASK = "matmul"
EXPECT = "flag:precision_flags_changed"
STATIC = "precision_flags_changed"
RUNTIME_DISABLE = ("precision_flags_changed",)
RUNTIME_EXPECT = "flag:precision_flags_changed|outcome:incorrect"

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
#define T 32
__device__ __forceinline__ float to_tf32(float v)
{
    unsigned int r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return __uint_as_float(r);
}

extern "C" __global__ void mm_tf32(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[T][T], Bs[T][T + 1];
    const int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T) {
        As[threadIdx.y][threadIdx.x] = (r < M && k0 + threadIdx.x < K) ?
                to_tf32(A[(long long)r * K + k0 + threadIdx.x]) : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && c < N) ?
                to_tf32(B[(long long)(k0 + threadIdx.y) * N + c]) : 0.0f;
        __syncthreads();
        for (int k = 0; k < T; ++k) acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (r < M && c < N) C[(long long)r * N + c] = acc;
}
"""

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "mm_tf32")

    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        self.kernel(((N + 31) // 32, (M + 31) // 32), (32, 32), A, B, C, M, N, K)
        return C
