"""The triad task in the fast format: one NVRTC kernel, float4 loads and stores in a grid-stride loop,
the < 4 leftover elements one by one (the float4 path only when every buffer is 16-byte aligned)."""

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void triad(const float* __restrict__ a, const float* __restrict__ b,
                                 float* __restrict__ out, long long n)
{
    const bool use_vec4 = ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)
                            | reinterpret_cast<unsigned long long>(out)) & 15ull) == 0;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long tail_start = 0;
    if (use_vec4) {
        const long long n4 = n >> 2;
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        float4* out4 = reinterpret_cast<float4*>(out);
        for (long long i = first; i < n4; i += stride) {
            const float4 x = a4[i];
            const float4 y = b4[i];
            out4[i] = make_float4(x.x + 2.5f * y.x, x.y + 2.5f * y.y, x.z + 2.5f * y.z, x.w + 2.5f * y.w);
        }
        tail_start = n4 << 2;
    }
    for (long long i = tail_start + first; i < n; i += stride) {
        out[i] = a[i] + 2.5f * b[i];
    }
}
"""

THREADS = 256
MAX_BLOCKS = 65_536


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "triad")

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        if n == 0:
            return out
        blocks = max(1, min((n // 4 + THREADS - 1) // THREADS, MAX_BLOCKS))
        self.kernel((blocks,), (THREADS,), a, b, out, n)
        return out
