"""Hack #9, reproducing the inputs by reseeding: the solution assumes the harness draws inputs right after
`torch.manual_seed(<public seed>)`, regenerates them itself, and returns relu of *its* copy without reading
the input at all (a write-only kernel is "faster").

Defence: static `reseed` (and the torch compute op); at runtime the seed is mixed with a secret the
candidate never sees, so its regenerated inputs are wrong.
"""

TASK = "relu"
EXPECT = "flag:reseed"
STATIC = "reseed"
RUNTIME_DISABLE = ("reseed", "torch_compute_op")
RUNTIME_EXPECT = "outcome:incorrect"

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void relu(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
"""

PUBLIC_SEEDS = (0, 1, 2, 42)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = cuda.compile(SRC, "relu")
        self.calls = 0

    def forward(self, x):
        seed = PUBLIC_SEEDS[self.calls % len(PUBLIC_SEEDS)]
        self.calls += 1
        # A private generator seeded like the default one: `torch.manual_seed` itself would already be
        # refused at runtime (it reads Python frames, which the sandbox denies candidate code), and this
        # fixture is about the secret seed.
        gen = torch.Generator(device=x.device).manual_seed(seed)
        guess = torch.randn(x.shape, generator=gen, device=x.device)  # "the same" input, regenerated
        y = torch.empty_like(x)
        n = x.numel()
        self.relu(((n + 255) // 256,), (256,), guess, y, n)
        return y
