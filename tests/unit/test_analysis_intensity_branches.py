"""The work estimate counts the taken side of an `if` that the bound sizes decide, and both sides of
any other `if` (analysis.intensity, "branches decided by the sizes")."""

from __future__ import annotations

import pytest

from cudaperf.analysis.static import analyze_cuda

VECTORISED = '''extern "C" __global__ void k(const float* t, float* out, int D) {
    int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (D % 4 == 0) { out[q] = t[q / D]; }
    else { for (int u = 0; u < 4; ++u) out[4 * q + u] = t[(4 * q + u) / D] * 2.0f; }
}'''


def _work(source: str, sizes: dict | None):
    return analyze_cuda(source, sizes=sizes).kernels[0].work


@pytest.mark.parametrize(("d", "divisions", "flops"), [(64, 1, 0), (63, 4, 4)])
def test_a_branch_the_sizes_decide_counts_its_taken_side_only(d, divisions, flops):
    w = _work(VECTORISED, {"D": d})
    assert (w.divisions_per_thread.value, w.flops_per_thread.value) == (divisions, flops)


def test_without_the_sizes_both_sides_count():
    w = _work(VECTORISED, None)
    assert (w.divisions_per_thread.value, w.flops_per_thread.value) == (5, 4)


def test_accesses_on_the_untaken_side_request_nothing():
    assert [r.value for r in _work(VECTORISED, {"D": 64}).access_requests] == [1, 1, 0, 0]


def test_a_branch_on_the_thread_counts_both_sides_even_with_the_sizes_bound():
    source = VECTORISED.replace("D % 4 == 0", "threadIdx.x % 4 == 0")
    assert _work(source, {"D": 64}).divisions_per_thread.value == 5


def test_a_branch_on_memory_counts_both_sides():
    source = VECTORISED.replace("D % 4 == 0", "t[0] > 0.0f")
    assert _work(source, {"D": 64}).divisions_per_thread.value == 5
