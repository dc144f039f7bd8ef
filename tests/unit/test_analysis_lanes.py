"""The concrete warp: C integer semantics, sectors per request and shared-memory wavefronts."""

from __future__ import annotations

import pytest

from cudaperf.analysis.lanes import (
    Lanes,
    _c_div,
    _c_mod,
    bank_wavefronts,
    dominant_stride,
    sectors_per_request,
)
from cudaperf.analysis.static import analyze_cuda

LANE = Lanes(tuple(range(32)))


def test_c_division_truncates_toward_zero():
    assert (_c_div(-7, 2), _c_mod(-7, 2), _c_div(7, -2)) == (-3, -1, -3)


def test_concrete_lanes_follow_integer_division_of_the_index():
    # lanes 0-15 share row 0, lanes 16-31 row 1: two 64-byte runs, 4 sectors
    k = analyze_cuda('extern "C" __global__ void k(float* o, int n) { '
                     'o[(threadIdx.x / 16) * n + threadIdx.x % 16] = 1; }')
    assert k.kernels[0].accesses[0].sectors == 4


@pytest.mark.parametrize(("stride", "bytes_", "sectors"),
                         [(1, 4, 4), (2, 4, 8), (32, 4, 32), (1, 16, 16), (0, 4, 1)])
def test_sectors_per_request(stride, bytes_, sectors):
    assert sectors_per_request(LANE * (stride * bytes_), bytes_) == sectors


@pytest.mark.parametrize(("stride_words", "degree"), [(1, 1), (2, 2), (8, 8), (32, 32), (33, 1)])
def test_bank_wavefronts_of_four_byte_words(stride_words, degree):
    assert bank_wavefronts(LANE * (4 * stride_words), 4) == degree


def test_float4_broadcast_and_unit_stride_have_no_conflict():
    assert bank_wavefronts(Lanes.const(64), 16) == 1
    assert bank_wavefronts(LANE * 16, 16) == 1


def test_dominant_stride_ignores_a_row_break():
    # 16 lanes per row, 4 floats apart
    offsets = Lanes(tuple((i % 16) * 16 + (i // 16) * 4096 for i in range(32)))
    assert dominant_stride(offsets, 4) == 4
