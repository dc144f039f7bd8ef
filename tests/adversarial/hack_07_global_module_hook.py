"""Hack #7, a global module hook: `register_module_forward_pre_hook` at import adds three matrix products to
every module's call but the candidate's, so the eager reference and the compiled baseline (an
`nn.Module` wrapper) look about four times slower inside their timed calls; the hook stays in the worker
and slows the next jobs' baselines and candidates too (the same registry's forward hook can replace their
outputs). The kernel itself is an honest tiled matrix product.

Defence: static `global_torch_state` (any `register_module_*`); at runtime the contents of torch's global
hook registries are captured before the import, compared after every window of candidate code
(`monkey_patch`) and put back, so no later call of the job or of another job runs the hook.
"""

TASK = "matmul"
EXPECT = "flag:monkey_patch|flag:global_torch_state"
STATIC = "global_torch_state"
RUNTIME_DISABLE = ("global_torch_state",)
RUNTIME_EXPECT = "flag:monkey_patch"

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_pre_hook


def _drag(module, args):
    if not isinstance(module, ModelNew):
        for _ in range(3):
            torch.matmul(args[0], args[1])


register_module_forward_pre_hook(_drag)

from cudaperf import cuda

SRC = r"""
#define T 32

extern "C" __global__ void matmul_smem32(const float* __restrict__ A, const float* __restrict__ B,
                                         float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[T][T];
    __shared__ float Bs[T][T + 1];  // +1: the column reads of Bs hit distinct banks
    const int row = blockIdx.y * T + threadIdx.y;
    const int col = blockIdx.x * T + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T) {
        const int ak = k0 + threadIdx.x, bk = k0 + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[(long long)row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[(long long)bk * N + col] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < T; ++k) acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[(long long)row * N + col] = acc;
}
"""

T = 32


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "matmul_smem32")

    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        M, K = A.shape
        N = B.shape[1]
        C = A.new_empty((M, N))
        if M and N:
            self.kernel(((N + T - 1) // T, (M + T - 1) // T), (T, T), A, B, C, M, N, K)
        return C
