"""Review (session 15): a refereed worker's payload whose outcome says "correct" or "incorrect" (outcomes
the worker's own code never writes: it leaves the outcome None whenever correctness decides, and then
the referee's verdict decides). Native code in the worker can write any payload; such a one must never
come out CORRECT. Through a real sandboxed worker and referee (CPU mode) on test_referee.py's task, with
a candidate that is wrong (it adds one)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from test_referee import LIMITS, TIMEOUTS, _codes, _job  # the same task, job and limits
from test_referee_timed import pool  # noqa: F401 - the same worker pool (a fixture)
from test_session import WRONG

from cudaperf.execute import WorkerPool
from cudaperf.types import Outcome

HANDLERS = str(Path(__file__).with_name("test_review_s15_handlers.py"))


def _run(pool, name: str):  # noqa: F811 - the fixture's name
    return pool.run(_job(WRONG, handler=f"{HANDLERS}:{name}", referee=True))


def test_the_wrong_candidate_is_wrong_without_forgery(pool):  # noqa: F811
    reply = pool.run(_job(WRONG))
    assert reply.outcome is not Outcome.CORRECT
    assert not all(c["correct"] for c in reply.payload["correctness"])


def test_an_outcome_of_correct_with_nothing_shipped_is_not_correct(pool):  # noqa: F811
    reply = _run(pool, "claim_correct_without_running")
    assert reply.outcome is not Outcome.CORRECT, (reply.outcome, reply.message)


def test_an_outcome_of_correct_after_the_referee_judged_is_not_correct(pool):  # noqa: F811
    reply = _run(pool, "claim_correct_after_running")
    assert reply.outcome is not Outcome.CORRECT, (reply.outcome, reply.message)


def test_an_outcome_the_worker_never_writes_is_a_verdict_mismatch(pool):  # noqa: F811
    reply = _run(pool, "claim_correct_without_running")
    assert "verdict_mismatch" in _codes(reply, "error"), reply.payload.get("flags")


def test_a_wrong_candidate_judged_by_the_referee_cannot_turn_itself_into_a_harness_error(pool):  # noqa: F811
    reply = _run(pool, "claim_harness_error_after_running")
    assert reply.outcome is not Outcome.HARNESS_ERROR, (reply.outcome, reply.message)


@pytest.fixture(scope="module")
def unbounded_pool():
    """Workers without the sandbox boundary (`Limits.boundary=False`): there, the worker can see and kill
    the referee, as native code could where bubblewrap is missing."""
    limits = dataclasses.replace(LIMITS, output_region_bytes=1 << 20, boundary=False)
    with WorkerPool(None, limits, timeouts=TIMEOUTS) as p:
        p.warm_up()
        yield p


def test_a_payload_whose_referee_is_gone_is_never_taken_on_the_workers_word(unbounded_pool):
    reply = _run(unbounded_pool, "kill_referee_then_claim_correct")
    assert reply.payload.get("killed_referee"), "the worker could not find the referee to kill"
    assert reply.outcome is Outcome.HARNESS_ERROR, (reply.outcome, reply.message)
