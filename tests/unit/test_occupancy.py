"""Theoretical occupancy for kernels: the worked example of structure.md and the limiting factors."""

from __future__ import annotations

from cudaperf.analysis.occupancy import ARCHS, theoretical_occupancy


def test_structure_md_worked_example_gives_four_blocks():
    occ = theoretical_occupancy("sm_90", 256, 12, 4224, 48 * 1024)
    assert occ.active_blocks_per_sm == 4 and occ.limiting_factors == ("shared_memory",)


def test_small_kernel_is_warp_limited_at_full_occupancy():
    occ = theoretical_occupancy("sm_90", 256, 32)
    assert occ.occupancy == 1.0 and "warps" in occ.limiting_factors


def test_register_heavy_kernel_is_register_limited():
    occ = theoretical_occupancy("sm_90", 256, 128)
    assert occ.limiting_factors == ("registers",) and occ.occupancy == 0.25


def test_turing_has_half_the_warps():
    assert ARCHS["sm_75"].max_threads_per_sm == 1024
    assert theoretical_occupancy("sm_75", 1024, 16).occupancy == 1.0


def test_unknown_arch_gives_none():
    assert theoretical_occupancy("sm_61", 256, 32) is None


def test_block_above_1024_threads_cannot_run():
    assert theoretical_occupancy("sm_90", 2048, 16).active_blocks_per_sm == 0
