"""Job handlers for tests/unit/test_referee_timed.py: the real evaluation (`dispatch.run_eval_job`, shipping
to the referee), observed or changed the way native code in the worker could change it."""

from __future__ import annotations


def count_reference_outputs(job, report):
    """The real evaluation, counting every reference output this process computes: the plan's measured
    reference, outputs completed after shipping, timing's expected outputs, the speed-of-light figures
    (the eager baseline, run as a baseline, is not counted)."""
    from cudaperf.execute import dispatch
    from cudaperf.execute.torch_session import TorchSession

    counts = {"n": 0}
    originals = {}

    def counting(name):
        original = originals[name] = getattr(TorchSession, name)

        def wrapper(self, *args, **kwargs):
            if name != "compute_reference" or self.phase != "candidate":  # a pending one has no outputs
                counts["n"] += 1
            return original(self, *args, **kwargs)
        return wrapper

    for name in ("compute_reference", "complete_reference", "timing_expected", "speed_of_light",
                 "rerun_reference"):
        setattr(TorchSession, name, counting(name))
    try:
        payload = dispatch.run_eval_job(job, report)
    finally:
        for name, original in originals.items():
            setattr(TorchSession, name, original)
    payload["reference_outputs"] = counts["n"]
    return payload


def skip_timed_outputs(job, report):
    """The real evaluation, with the re-checked timing outputs never shipped (what native code that wants
    its timing stage unchecked would do)."""
    from cudaperf.execute import dispatch
    from cudaperf.execute.outputs import Shipper

    original = Shipper.ship_timed
    Shipper.ship_timed = lambda self, config, outputs: None
    try:
        return dispatch.run_eval_job(job, report)
    finally:
        Shipper.ship_timed = original
