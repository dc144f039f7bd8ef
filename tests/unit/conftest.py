"""Fixtures shared by the unit tests that run candidates through a real CPU-mode worker."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def cpu_evaluator(tmp_path_factory):
    """The agent's `LocalEvaluator` on one real sandboxed CPU worker (torch ops allowed, timing against
    eager only), once per test module. The cache goes through the environment, not
    `EvalConfig.cache_dir`: the worker pool starts with the default cache's views, and a job naming
    another cache restarts its worker (from the evaluator's batch thread, whose exit then takes that
    worker down: every batch would pay a worker start). test_evaluate.py has its own `cpu_evaluator`,
    a plain `Evaluator`."""
    from cudaperf.agent.evaluation import LocalEvaluator
    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig, TimingConfig

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        config = EvalConfig(device="cpu", build_workers=1, seeds=1, policy=Policy(allow_torch_ops=True),
                            timing=TimingConfig(budget_ms=5, warmup_ms=1, baselines=("eager",)))
        with LocalEvaluator(config) as evaluator:
            yield evaluator


@pytest.fixture(scope="module")
def refereed_pool():
    """A real worker and its referee (test_referee's limits, a 1 MiB output region), warmed up once per
    module: the pool the refereed-timing tests run their probes through."""
    import dataclasses

    from test_referee import LIMITS, TIMEOUTS

    from cudaperf.execute import WorkerPool

    with WorkerPool(None, dataclasses.replace(LIMITS, output_region_bytes=1 << 20), timeouts=TIMEOUTS) as p:
        p.warm_up()
        yield p
