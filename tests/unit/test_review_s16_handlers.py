"""Job handlers for tests/unit/test_review_s16_*.py (no tests here): the real evaluation of a C job
(`dispatch.run_eval_job`), with a message added that native code in the worker could send on the
worker's output channel."""

from __future__ import annotations


def ship_a_timed_output_in_a_c_job(job, report):
    """As the timing stage begins (after `done`), a re-checked timing output of the first configuration
    shipped the way a PyTorch worker ships one: a C worker re-checks its timing outputs itself and ships
    none, so no honest C worker sends this."""
    import torch

    from cudaperf.execute import dispatch
    from cudaperf.execute.outputs import Shipper

    shipper = Shipper(report.exchange, report.region)
    config = job["task"]["configs"][0]["name"]

    def heartbeat(stage):
        if stage == "timing":
            shipper.ship_timed(config, {("candidate", 0): (torch.zeros(16),)})
        report(stage)

    heartbeat.exchange, heartbeat.region = report.exchange, report.region
    return dispatch.run_eval_job(job, heartbeat)
