"""Worker handlers for test_timing_go_ahead.py: the real evaluation (`dispatch.run_eval_job`), with what the
worker tells the parent before it times logged, sent too early, or left out (as native code in the worker
could)."""

from __future__ import annotations


def events_logged(job, report):
    """The real evaluation with every message to the parent and every serial C reference computed logged in
    order (`events` in the payload: message types, "reference", and "inputs" for every input set the
    worker draws for itself: a reference's own draw, on whichever thread computes it, is not logged).
    The job's `prepared_host_bytes`, when given, replaces `c_session.PREPARED_HOST_BYTES` for it."""
    import threading

    from cudaperf.execute import c_session, dispatch

    budget, job = job.get("prepared_host_bytes"), {k: v for k, v in job.items() if k != "prepared_host_bytes"}
    real_budget = c_session.PREPARED_HOST_BYTES
    if budget is not None:
        c_session.PREPARED_HOST_BYTES = budget
    events: list[str] = []
    exchange, real_reference = report.exchange, c_session.compute_reference
    real_inputs = c_session.make_inputs

    def logged_exchange(message):
        events.append(message.get("type"))
        return exchange(message)

    inside = threading.local()  # set while this thread computes a reference

    def logged_reference(*args, **kwargs):
        events.append("reference")
        inside.reference = True
        try:
            return real_reference(*args, **kwargs)
        finally:
            inside.reference = False

    def logged_inputs(*args, **kwargs):
        if not getattr(inside, "reference", False):
            events.append("inputs")
        return real_inputs(*args, **kwargs)

    report.exchange, c_session.compute_reference = logged_exchange, logged_reference
    c_session.make_inputs = logged_inputs
    try:
        payload = dispatch.run_eval_job(job, report)
    finally:
        report.exchange, c_session.compute_reference = exchange, real_reference
        c_session.make_inputs = real_inputs
        c_session.PREPARED_HOST_BYTES = real_budget
    payload["events"] = events
    return payload


def ready_first(job, report):
    """Asks to time before anything is shipped (before the referee's go-ahead); never gets further."""
    report("setup")
    report.exchange({"type": "ready"})
    return {"outcome": None, "stage": "setup", "message": "", "flags": [], "timings": [], "correctness": []}


def timed_without_ready(job, report):
    """The real evaluation with the worker's "ready" left out: it times without asking for its turn."""
    from cudaperf.execute import dispatch, outputs

    real = outputs.Shipper.ready
    outputs.Shipper.ready = lambda self: {}
    try:
        return dispatch.run_eval_job(job, report)
    finally:
        outputs.Shipper.ready = real


def narrowing_ignored(job, report):
    """The real evaluation with the go-ahead's timing left unapplied (as native code in the worker could):
    it times what the job was sent with."""
    from cudaperf.execute import dispatch, session

    real = session.Session.narrow_timing
    session.Session.narrow_timing = lambda self, asked: None
    try:
        return dispatch.run_eval_job(job, report)
    finally:
        session.Session.narrow_timing = real
