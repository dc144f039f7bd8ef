"""The evaluator's optional dynamic stage on a real GPU: ncu counters merged into the static features."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
from cudaperf.solutions import load_solution
from cudaperf.tasks import load_task
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir

pytestmark = [pytest.mark.gpu, pytest.mark.timing]  # ncu counters want an idle GPU


def test_profiled_correct_candidate_gets_ncu_counters():
    task = load_task(Path(example_tasks_dir()) / "vector_add.py")
    sol = load_solution(Path(example_solutions_dir("fast")) / "vector_add.py")
    config = EvalConfig(device="cuda", profile=True, coverage=False, timing=TimingConfig(enabled=False))
    with Evaluator(config) as ev:
        result = ev.evaluate(task, sol)
    assert result.correct, result.message
    (kernel,) = result.features
    print("dynamic features:", kernel.dynamic, [f.message for f in result.flags if f.code == "analysis_note"])
    assert kernel.dynamic.get("gpu_time_ms", 0) > 0
    assert 0 < kernel.dynamic.get("achieved_occupancy", 0) <= 1.0 + 1e-6
