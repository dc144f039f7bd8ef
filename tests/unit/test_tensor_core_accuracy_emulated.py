"""Accuracy of the shared 3xTF32 tensor-core kernel
(`cudaperf.datasets.generate.tensor_core.wmma_tf32_kernel`) on the CPU emulator, whose TF32 multiply-add
truncates as the tensor cores do: over a long k loop the kernel must be at least as accurate as a plain fp32
loop (the naive implementations' summation), measured against a float64 product. A running sum kept in one
fragment fails this (2.5e-4 against 8.1e-5 at k = 512), as 14 output configurations failed their tolerances on
the H200.

Not covered: the double (DMMA) kernel, whose multiply-adds are IEEE fused (emulated as such).
"""

from __future__ import annotations

import numpy as np
import pytest

from cudaperf.datasets.generate.tensor_core import wmma_tf32_kernel

torch = pytest.importorskip("torch")

M = N = 64  # one block tile
K = 512


def _fp32_loop(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for p in range(a.shape[1]):
        out += np.outer(a[:, p], b[p]).astype(np.float32)
    return out


def test_3xtf32_kernel_is_at_least_as_accurate_as_an_fp32_loop_over_a_long_k():
    from cpu_cuda import CpuCuda

    source = wmma_tf32_kernel("mm", "const float* a, const float* b, float* c, int m, int n, int k", "",
                              "a[row * k + p]", "b[p * n + col]", "c[i * n + j] = v;")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = torch.full((M, N), float("nan"))
    CpuCuda().load(source).mm((1, 1), (16, 16), torch.from_numpy(a), torch.from_numpy(b), c, M, N, K)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    kernel_error = np.abs(c.numpy() - exact).max()
    loop_error = np.abs(_fp32_loop(a, b) - exact).max()
    assert kernel_error <= loop_error, (kernel_error, loop_error)
