"""Honest relu organised the way people write code: a cached kernel factory, a launch-geometry helper
taking shapes, a launch method, and a self-test under `if __name__ == "__main__"` that compares against
torch.relu (never executed by the harness). Shape arithmetic flows through helpers; no tensor math does.
"""

TASK = "relu"

import functools

import torch
from torch import nn

from cudaperf import cuda

TEMPLATE = r"""
extern "C" __global__ void relu_ept(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    // EPT consecutive elements per thread, strided by the block so warps stay coalesced
    const long long base = (long long)blockIdx.x * blockDim.x * EPT + threadIdx.x;
    #pragma unroll
    for (int e = 0; e < EPT; ++e) {
        const long long i = base + (long long)e * blockDim.x;
        if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    }
}
"""


@functools.lru_cache(maxsize=8)
def _kernel(elements_per_thread: int):
    return cuda.compile(TEMPLATE, "relu_ept", options=(f"-DEPT={elements_per_thread}",))


def _grid(numel: int, threads: int, per_thread: int) -> tuple[int]:
    per_block = threads * per_thread
    return ((numel + per_block - 1) // per_block,)


class ModelNew(nn.Module):
    def __init__(self, threads: int = 256, per_thread: int = 4):
        super().__init__()
        self.threads = threads
        self.per_thread = per_thread

    def _launch(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        n = src.numel()
        if n:
            _kernel(self.per_thread)(_grid(n, self.threads, self.per_thread), (self.threads,), src, dst, n)

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        self._launch(x, out)
        return out


if __name__ == "__main__":
    t = torch.randn(1000, device="cuda")
    print(torch.equal(ModelNew()(t), torch.relu(t)))
