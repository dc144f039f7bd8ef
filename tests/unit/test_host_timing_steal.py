"""`host_timing.steal_ticks`: the hypervisor's steal time from /proc/stat, for all CPUs or some."""

from __future__ import annotations

from cudaperf.host_timing import steal_ticks

STAT = """cpu  100 0 50 800 10 0 5 35 0 0
cpu0 60 0 30 390 5 0 3 12 0 0
cpu1 40 0 20 410 5 0 2 23 0 0
intr 1234 0 0
ctxt 999
"""


def test_all_cpus_come_from_the_summary_line():
    assert steal_ticks(stat_text=STAT) == (35, 1000)


def test_named_cpus_are_summed():
    assert steal_ticks([1], stat_text=STAT) == (23, 500)
    assert steal_ticks([0, 1], stat_text=STAT) == (35, 1000)


def test_a_cpu_that_is_not_listed_counts_nothing():
    assert steal_ticks([7], stat_text=STAT) == (0, 0)


def test_this_machine_can_be_read_or_says_nothing():
    steal, total = steal_ticks()
    assert 0 <= steal <= total
