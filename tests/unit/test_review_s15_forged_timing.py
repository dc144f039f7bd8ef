"""Review (session 15): the referee's bound on the worker's timed calls (`referee.RefereeJob._mismatches`:
they cannot add up to more than the timing stage lasted) against a payload forged after the real
evaluation, the way native code in the worker could forge it. A baseline's median made a million times
larger (the candidate's speedup is a ratio of medians) must be a `verdict_mismatch` whatever its other
figures say. Through a real sandboxed worker and referee (CPU mode) on test_referee.py's task. The known
hole, kept as a strict xfail: a candidate's own times halved in every figure pass (only the worker
measures them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from test_referee import _codes, _job  # the same task and job
from test_referee_timed import pool  # noqa: F401 - the same worker pool (a fixture)
from test_session import CORRECT

HANDLERS = str(Path(__file__).with_name("test_review_s15_handlers.py"))


def _forged(pool, name: str):  # noqa: F811 - the fixture's name
    reply = pool.run(_job(CORRECT, handler=f"{HANDLERS}:{name}", referee=True))
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    return reply


def test_a_baseline_median_beyond_its_samples_is_a_verdict_mismatch(pool):  # noqa: F811
    assert "verdict_mismatch" in _codes(_forged(pool, "inflate_eager_median"), "error")


def test_a_negative_sample_count_cannot_cancel_a_forged_baseline(pool):  # noqa: F811
    assert "verdict_mismatch" in _codes(_forged(pool, "inflate_eager_with_negative_baseline"), "error")


def test_a_mean_that_is_not_a_number_cannot_hide_a_forged_baseline(pool):  # noqa: F811
    assert "verdict_mismatch" in _codes(_forged(pool, "inflate_eager_with_nan_mean"), "error")


def test_timings_of_a_configuration_the_job_does_not_time_are_a_verdict_mismatch(pool):  # noqa: F811
    assert "verdict_mismatch" in _codes(_forged(pool, "rename_timed_configs"), "error")


def test_a_configuration_timed_twice_is_a_verdict_mismatch(pool):  # noqa: F811
    assert "verdict_mismatch" in _codes(_forged(pool, "duplicate_timings"), "error")


def test_a_candidate_median_written_as_text_is_a_verdict_mismatch(pool):  # noqa: F811
    assert "verdict_mismatch" in _codes(_forged(pool, "candidate_median_as_text"), "error")


@pytest.mark.xfail(strict=True, reason="known hole: the candidate's times are measured in its own process, "
                   "so native code there can claim to be faster than it is (referee.py, 'Not covered'; "
                   "dev/LOG.md, open questions); a defence makes this pass and the marker must go")
def test_a_candidate_claiming_twice_its_speed_is_caught(pool):  # noqa: F811
    assert "verdict_mismatch" in _codes(_forged(pool, "halve_candidate_times"), "error")
