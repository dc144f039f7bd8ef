"""Honest layernorm for the plain KernelBench fixture task: the Welford kernel of honest_layernorm_welford.py,
any width, and the affine step always applied. Its parameters start as nn.LayerNorm's (weight 1, bias 0),
so the derived configuration that randomises the reference's gives these the same values.
"""

TASK = "kb_layernorm"

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
#define FULL 0xffffffffu

struct Stats { float n, mean, m2; };

__device__ __forceinline__ Stats combine(Stats a, Stats b)
{
    const float n = a.n + b.n;
    if (n == 0.0f) return a;
    const float d = b.mean - a.mean;
    const float wb = b.n / n;
    Stats r;
    r.n = n;
    r.mean = a.mean + d * wb;
    r.m2 = a.m2 + b.m2 + d * d * a.n * wb;
    return r;
}

__device__ __forceinline__ Stats warp_combine(Stats s)
{
    for (int o = 16; o > 0; o >>= 1) {
        Stats other;
        other.n = __shfl_xor_sync(FULL, s.n, o);
        other.mean = __shfl_xor_sync(FULL, s.mean, o);
        other.m2 = __shfl_xor_sync(FULL, s.m2, o);
        s = combine(s, other);
    }
    return s;
}

extern "C" __global__ void __launch_bounds__(256)
layernorm_welford(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                  float* __restrict__ y, int dim, float eps)
{
    __shared__ Stats part[8];
    __shared__ float stat[2];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const float* xr = x + (long long)blockIdx.x * dim;
    float* yr = y + (long long)blockIdx.x * dim;

    Stats s = {0.0f, 0.0f, 0.0f};
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {  // Welford update
        const float v = xr[c];
        s.n += 1.0f;
        const float d = v - s.mean;
        s.mean += d / s.n;
        s.m2 += d * (v - s.mean);
    }
    s = warp_combine(s);
    if (lane == 0) part[warp] = s;
    __syncthreads();
    if (warp == 0) {
        Stats t = lane < nwarps ? part[lane] : Stats{0.0f, 0.0f, 0.0f};
        t = warp_combine(t);
        if (lane == 0) { stat[0] = t.mean; stat[1] = rsqrtf(t.m2 / dim + eps); }
    }
    __syncthreads();
    const float mean = stat[0], rstd = stat[1];
    for (int c = threadIdx.x; c < dim; c += blockDim.x) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
}
"""


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(dim))  # nn.LayerNorm's initial values
        self.bias = nn.Parameter(torch.zeros(dim))
        self.kernel = cuda.compile(SRC, "layernorm_welford")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = x.shape[-1]
        y = torch.empty_like(x)
        rows = x.numel() // dim if dim else 0
        if rows:
            self.kernel((rows,), (256,), x, self.weight, self.bias, y, dim, self.eps)
        return y
