"""Job handlers for tests/unit/test_review_s15_*.py (no tests here): the real evaluation
(`dispatch.run_eval_job`), then its payload's timings changed the way native code in the worker could
change them before the reply goes out."""

from __future__ import annotations


def _forged(job, report, forge):
    from cudaperf.execute import dispatch

    payload = dispatch.run_eval_job(job, report)
    for timing in payload.get("timings") or []:
        forge(timing)
    return payload


def inflate_eager_median(job, report):
    """The eager baseline's median multiplied by a million, its mean and samples left as measured (the
    candidate's speedup over eager is median / median)."""
    def forge(timing):
        timing["eager"]["median_ms"] *= 1e6
    return _forged(job, report, forge)


def inflate_eager_with_negative_baseline(job, report):
    """The eager baseline's mean and median multiplied by a million, and an extra baseline whose negative
    sample count cancels the added time."""
    def forge(timing):
        eager = timing["eager"]
        added = eager["n_samples"] * eager["mean_ms"] * (1e6 - 1)
        eager["median_ms"] *= 1e6
        eager["mean_ms"] *= 1e6
        timing.setdefault("baselines", {})["ghost"] = {**eager, "n_samples": -1, "mean_ms": added}
    return _forged(job, report, forge)


def inflate_eager_with_nan_mean(job, report):
    """The eager baseline's median multiplied by a million, its mean not a number."""
    def forge(timing):
        timing["eager"]["median_ms"] *= 1e6
        timing["eager"]["mean_ms"] = float("nan")
    return _forged(job, report, forge)


def claim_correct_without_running(job, report):
    """No candidate run, nothing shipped: a payload whose outcome says "correct" (the worker's own code
    leaves the outcome None whenever correctness decides)."""
    return {"outcome": "correct", "stage": "timing", "message": "", "correctness": [], "timings": [],
            "flags": []}


def claim_correct_after_running(job, report):
    """The real evaluation (every output shipped, judged by the referee), its payload's outcome then set
    to "correct"."""
    from cudaperf.execute import dispatch

    payload = dispatch.run_eval_job(job, report)
    payload["outcome"] = "correct"
    return payload


def claim_harness_error_after_running(job, report):
    """The real evaluation (every output shipped, judged by the referee), its payload's outcome then set
    to "harness_error" (a wrong candidate escaping INCORRECT)."""
    from cudaperf.execute import dispatch

    payload = dispatch.run_eval_job(job, report)
    payload.update(outcome="harness_error", message="a fault of the harness, it says")
    return payload


def rename_timed_configs(job, report):
    """The real evaluation with the re-checked timing outputs never shipped, and each timing's
    configuration renamed (a trailing space) and its candidate median made a million times smaller."""
    from cudaperf.execute import dispatch
    from cudaperf.execute.outputs import Shipper

    original = Shipper.ship_timed
    Shipper.ship_timed = lambda self, config, outputs: None
    try:
        payload = dispatch.run_eval_job(job, report)
    finally:
        Shipper.ship_timed = original
    for timing in payload.get("timings") or []:
        timing["config"] += " "
        timing["candidate"]["median_ms"] /= 1e6
    return payload


def duplicate_timings(job, report):
    """The real evaluation, each configuration's timing reported twice, the copy's candidate median made a
    million times smaller."""
    import copy

    def forge(timing):
        pass

    payload = _forged(job, report, forge)
    extra = []
    for timing in payload.get("timings") or []:
        twin = copy.deepcopy(timing)
        twin["candidate"]["median_ms"] /= 1e6
        extra.append(twin)
    payload["timings"] = extra + list(payload.get("timings") or [])
    return payload


def candidate_median_as_text(job, report):
    """The real evaluation, the candidate's median written as text a million times smaller (the
    speed-of-light check reads numbers only)."""
    def forge(timing):
        timing["candidate"]["median_ms"] = repr(timing["candidate"]["median_ms"] / 1e6)
    return _forged(job, report, forge)


def kill_referee_then_claim_correct(job, report):
    """The real evaluation, then the referee killed (where the worker can see it: the sandbox's pid
    namespace hides it) and every configuration claimed correct: a verdict on the worker's word alone.
    `killed_referee` in the payload says whether the kill happened."""
    import os
    import signal
    import time
    from pathlib import Path

    from cudaperf.execute import dispatch

    payload = dispatch.run_eval_job(job, report)
    killed = False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"cudaperf.execute.referee" in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
                killed = True
        except OSError:
            continue
    if killed:
        time.sleep(1.0)  # gone for good before the reply (a referee still dying fails the request anyway)
    for c in payload.get("correctness") or []:
        c["correct"] = True
    payload.update(outcome=None, killed_referee=killed)
    return payload


def halve_candidate_times(job, report):
    """Every time figure of the candidate (median, mean, minimum, spread, each sample, its host path)
    halved, consistently: a candidate claiming twice its speed, which only the worker measured."""
    def forge(timing):
        candidate = timing["candidate"]
        for key in ("median_ms", "mean_ms", "min_ms", "iqr_ms", "host_ms_per_call"):
            if isinstance(candidate.get(key), (int, float)):
                candidate[key] /= 2
        candidate["samples_ms"] = [s / 2 for s in candidate.get("samples_ms") or ()]
    return _forged(job, report, forge)
