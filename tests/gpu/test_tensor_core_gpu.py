"""The shared 3xTF32 tensor-core kernel (`cudaperf.datasets.generate.tensor_core.wmma_tf32_kernel`) on the GPU
over a long k: at least as accurate as a plain fp32 loop (the naive implementations' summation), both measured
against a float64 product. A running sum kept in one fragment drifts here, as the tensor cores' fp32
accumulation truncates (14 matmul_epilogue configurations failed their tolerances on the H200 that way);
tests/unit/test_tensor_core_accuracy_emulated.py checks the same on the CPU emulator.

Run: `python3 -m pytest -q -s -m gpu tests/gpu/test_tensor_core_gpu.py` (`-s` prints both errors).
"""

from __future__ import annotations

import pytest

from cudaperf import cuda
from cudaperf.datasets.generate.tensor_core import wmma_tf32_kernel

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

PARAMS = "const float* a, const float* b, float* c, int m, int n, int k"
LOOP = r"""
extern "C" __global__ void loop(const float* a, const float* b, float* c, int m, int n, int k) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m || j >= n) return;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) acc += a[i * k + p] * b[p * n + j];
    c[i * n + j] = acc;
}
"""


@pytest.mark.parametrize("k", [777, 2048, 8192])
def test_3xtf32_kernel_is_at_least_as_accurate_as_an_fp32_loop(k):
    m, n = 256, 320
    gen = torch.Generator(device="cuda").manual_seed(k)
    a = torch.randn(m, k, device="cuda", generator=gen)
    b = torch.randn(k, n, device="cuda", generator=gen)
    tc = torch.full((m, n), float("nan"), device="cuda")
    plain = torch.full((m, n), float("nan"), device="cuda")
    source = wmma_tf32_kernel("mm", PARAMS, "", "a[row * k + p]", "b[p * n + col]", "c[i * n + j] = v;")
    cuda.load(source).mm(((n + 63) // 64, (m + 63) // 64), (16, 16), a, b, tc, m, n, k)
    cuda.load(LOOP).loop(((n + 15) // 16, (m + 15) // 16), (16, 16), a, b, plain, m, n, k)
    torch.cuda.synchronize()
    exact = a.double() @ b.double()
    tc_error, loop_error = ((x.double() - exact).abs().max().item() for x in (tc, plain))
    print(f"k={k}: 3xTF32 max error {tc_error:.3g}, fp32 loop {loop_error:.3g}")
    assert tc_error <= loop_error, (tc_error, loop_error)
