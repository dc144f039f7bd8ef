"""benchmarks/lead_probe.py: the per-pass summary (pure; the probe itself needs a GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from lead_probe import summarise

# marker ns, side [first entry, last exit] ns, lead trace rows [entry, exit, sm]
_PASS = ([1_000, 201_000], [150_000, 215_000],
         [[2_000, 200_000, 0], [3_000, 199_000, 0], [2_500, 200_500, 1]], None)


def test_times_are_microseconds_from_the_first_marker():
    row = summarise("persistent", [_PASS])
    assert (row["lead_end_us"], row["side_first_entry_us"], row["lead_last_exit_us"]) == (200.0, 149.0, 199.5)


def test_blocks_are_counted_per_sm():
    row = summarise("persistent", [_PASS])
    assert (row["blocks_per_sm_min"], row["blocks_per_sm_max"], row["sms_used"]) == (1, 2, 2)


def test_a_memset_pass_has_no_block_figures():
    row = summarise("memset", [(_PASS[0], _PASS[1], None, None)])
    assert "blocks_per_sm_min" not in row and row["side_last_exit_us"] == 214.0


def test_the_hosts_wait_for_the_gate_is_in_microseconds():
    row = summarise("persistent+gate", [(*_PASS[:3], 12e-6)])
    assert round(row["gate_wait_us"], 6) == 12.0
