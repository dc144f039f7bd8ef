"""Review (session 16): where the refereed path of a C task differs from a PyTorch task's. Through a real
sandboxed worker and referee in CPU mode, on test_c_session.py's SQUARE task: a message that only a
PyTorch worker sends (a re-checked timing output), sent by a C worker, is a forgery (`verdict_mismatch`),
not a fault of the harness."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from test_c_session import SQUARE, SQUARE_OK
from test_c_session import _job as c_job
from test_referee import _codes, cache_dir, pool  # noqa: F401 - the same worker pool (fixtures)

from cudaperf.types import Outcome

HANDLERS = str(Path(__file__).with_name("test_review_s16_handlers.py"))


def _forged(pool, cache_dir, name: str):  # noqa: F811 - the fixtures' names
    job = c_job(SQUARE, SQUARE_OK, cache_dir=cache_dir)
    return pool.run({**job, "handler": f"{HANDLERS}:{name}", "referee": True})


def test_a_timed_output_shipped_by_a_c_worker_is_a_verdict_mismatch(pool, cache_dir):  # noqa: F811
    reply = _forged(pool, cache_dir, "ship_a_timed_output_in_a_c_job")
    assert reply.outcome is not Outcome.HARNESS_ERROR, (reply.message[:1500])
    assert "verdict_mismatch" in _codes(reply, "error"), reply.payload.get("flags")
    assert reply.worker_replaced
