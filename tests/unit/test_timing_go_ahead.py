"""The worker's "ready" before it times (`outputs.Shipper.ready`, `Session.prepare_and_ask`: the stage
`timing_prep`) and the parent's answer (`sandbox.Worker._go_ahead`): real sandboxed CPU-mode workers with
the referee, the C task SQUARE of test_c_session.py and the small PyTorch task of test_referee.py. A C
worker draws its timing references on the host before it asks for its turn on the GPU; a "ready" out of
turn is a forged message; timings from a worker that never asked are a verdict mismatch. The answer may
narrow the job's timing (what `on_proceed` returns: `jobs.narrowed_timing`), never widen it, and the
referee holds the worker's timings to the narrowed one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from test_c_session import SQUARE, SQUARE_OK
from test_c_session import _job as c_job
from test_referee import _codes, _job, cache_dir, pool  # noqa: F401 - the same worker pool (fixtures)
from test_session import CORRECT

from cudaperf.jobs import TimingConfig
from cudaperf.types import Outcome

HANDLERS = str(Path(__file__).with_name("go_ahead_handlers.py"))


def _c_events(pool, cache_dir, **fields) -> tuple[object, list[str]]:  # noqa: F811 - the fixtures' names
    job = c_job(SQUARE, SQUARE_OK, cache_dir=cache_dir)
    reply = pool.run({**job, "handler": f"{HANDLERS}:events_logged", "referee": True, **fields})
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    return reply, reply.payload["events"]


def test_a_c_worker_asks_to_time_after_the_referee_s_go_ahead(pool, cache_dir):  # noqa: F811
    reply, events = _c_events(pool, cache_dir)
    assert events.count("ready") == 1 and events.index("done") < events.index("ready"), events
    assert reply.payload["timings"]


def test_the_host_work_before_timing_is_a_stage_of_its_own(pool, cache_dir):  # noqa: F811
    reply, _ = _c_events(pool, cache_dir)
    assert reply.durations_s["timing_prep"] > 0 and reply.durations_s["timing"] > 0, reply.durations_s


def test_a_c_worker_draws_its_timing_references_before_it_asks_to_time(pool, cache_dir):  # noqa: F811
    _, events = _c_events(pool, cache_dir)
    ready = events.index("ready")
    assert "reference" in events[events.index("done"):ready] and "reference" not in events[ready:], events


def test_a_ready_before_the_go_ahead_is_a_forged_message(pool):  # noqa: F811
    reply = pool.run(_job(CORRECT, handler=f"{HANDLERS}:ready_first", referee=True))
    assert reply.outcome is Outcome.POLICY_VIOLATION, reply.message
    assert [f.code for f in reply.flags] == ["channel_forged"] and reply.worker_replaced


def test_timings_from_a_worker_that_never_asked_to_time_are_a_verdict_mismatch(pool):  # noqa: F811
    reply = pool.run(_job(CORRECT, handler=f"{HANDLERS}:timed_without_ready", referee=True))
    assert "verdict_mismatch" in _codes(reply, "error"), reply.payload.get("flags")


def test_a_c_worker_draws_each_correctness_seed_s_inputs_once_before_the_go_ahead(pool, cache_dir):  # noqa: F811
    _, events = _c_events(pool, cache_dir)
    own = [i for i, e in enumerate(events) if e == "inputs"]  # a reference's own draw is not logged
    assert len(own) == len(SQUARE.configs) * 2 and own[-1] < events.index("done"), " ".join(events)


def test_what_does_not_fit_the_host_budget_is_drawn_after_the_go_ahead(pool, cache_dir):  # noqa: F811
    reply, events = _c_events(pool, cache_dir, prepared_host_bytes=0)
    assert "reference" in events[events.index("ready"):], events
    correctness = reply.payload["correctness"]
    assert correctness and all(c["correct"] for c in correctness) and reply.payload["timings"]


ANCHOR_ONLY = TimingConfig(budget_ms=0.3, warmup_ms=0.05, baselines=(), overhead=False)


def test_the_go_ahead_s_timing_narrows_what_the_worker_times(pool):  # noqa: F811
    reply = pool.run(_job(CORRECT), on_proceed=lambda: ANCHOR_ONLY)
    assert reply.outcome is None and reply.payload["timings"], (reply.message, reply.logs[-2000:])
    assert all(t["eager"] is None and t["overhead_ms"] is None for t in reply.payload["timings"])


def test_the_referee_accepts_timings_of_the_narrowed_timing(pool):  # noqa: F811
    reply = pool.run(_job(CORRECT), on_proceed=lambda: ANCHOR_ONLY)
    assert "verdict_mismatch" not in _codes(reply), reply.payload.get("flags")
    assert all(c["correct"] for c in reply.payload["correctness"])


def test_a_go_ahead_asking_for_a_baseline_the_job_does_not_time_is_ignored(pool):  # noqa: F811
    reply = pool.run(_job(CORRECT, timing={**_job(CORRECT)["timing"], "baselines": []}),
                     on_proceed=lambda: TimingConfig(baselines=("eager",)))
    assert reply.payload["timings"] and all(t["eager"] is None for t in reply.payload["timings"])
    assert "verdict_mismatch" not in _codes(reply), reply.payload.get("flags")


def test_a_worker_timing_a_baseline_its_go_ahead_left_out_is_a_verdict_mismatch(pool):  # noqa: F811
    reply = pool.run(_job(CORRECT, handler=f"{HANDLERS}:narrowing_ignored", referee=True),
                     on_proceed=lambda: ANCHOR_ONLY)
    assert any(t["eager"] for t in reply.payload["timings"]), reply.payload["timings"]
    assert "verdict_mismatch" in _codes(reply, "error"), reply.payload.get("flags")


def test_a_c_worker_leaves_out_the_serial_baseline_its_go_ahead_left_out(pool, cache_dir):  # noqa: F811
    job = c_job(SQUARE, SQUARE_OK, cache_dir=cache_dir)
    reply = pool.run(job, on_proceed=lambda: TimingConfig(baselines=("naive_cuda",)))
    assert reply.outcome is None and reply.payload["timings"], (reply.message, reply.logs[-2000:])
    assert all("serial_c" not in b for b in reply.payload["extra_baselines"].values())
    assert "verdict_mismatch" not in _codes(reply), reply.payload.get("flags")
