"""Hack #3 (call counting): correct for the first few calls, which is all a correctness check makes; after
that the kernel is no longer launched and the previous output is returned ("already warmed up").

Defence (runtime): outputs re-checked during timing on rotated fresh input sets (`timed_output_mismatch`).
Not statically detectable (a `forward_state` warning).
"""

TASK = "softmax"
EXPECT = "flag:timed_output_mismatch|outcome:incorrect|flag:impossible_speed"
STATIC = None

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols)
{
    __shared__ float red[32];
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float m = -3.402823466e38f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < (blockDim.x >> 5); ++w) m = fmaxf(m, red[w]);
    __syncthreads();
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    s = 0.0f;
    for (int w = 0; w < (blockDim.x >> 5); ++w) s += red[w];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) / s;
}
"""

WARM_CALLS = 3


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "softmax_rows")
        self.calls = 0
        self.last = None

    def forward(self, x):
        self.calls += 1
        if self.calls > WARM_CALLS and self.last is not None:
            return self.last
        y = torch.empty_like(x)
        cols = x.shape[-1]
        self.kernel((x.numel() // cols,), (256,), x, y, cols)
        self.last = y
        return y
