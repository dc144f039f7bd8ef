"""A correct C candidate far slower than the naive port is timed from the bench's estimate rounds alone in
the RL mode (`RlSettings.slow_cut_ratio`, `timing.SlowCut`), on the GPU through the real evaluator: the
task's first timed candidate (its carrier, the naive port itself) runs the whole bench; a later one that
does the map on one block of 256 threads is cut short where its calls pass the floor, stays CORRECT, and
says so (INFO `timing_cut_slow`). Run:
    python3 -m pytest -q -s tests/gpu/test_slow_cut_gpu.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_c_session_gpu import _task_and_naive

from cudaperf.eval_modes import RlSettings
from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
from cudaperf.timing import ESTIMATE_ROUNDS
from cudaperf.types import Outcome, Solution, SolutionFormat

pytestmark = pytest.mark.gpu

WHOLE_GRID = "if (i < n) {\n        out[i] = f(x[i], y[i]);\n    }"
ONE_BLOCK = "for (int j = i; j < n; j += blockDim.x * gridDim.x) {\n        out[j] = f(x[j], y[j]);\n    }"
LAUNCH = "mod.map_kernel_k((((n) + 255) // 256,), (256,)"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    task, naive = _task_and_naive("map")
    slow = naive.replace(WHOLE_GRID, ONE_BLOCK).replace(LAUNCH, "mod.map_kernel_k((1,), (256,)")
    assert slow.count("(1,), (256,)") == 1 and ONE_BLOCK in slow
    config = EvalConfig(device="cuda", mode="rl", seeds=2, rl=RlSettings(slow_cut_floor_ms=5.0),
                        timing=TimingConfig(budget_ms=30.0, warmup_ms=10.0),
                        cache_dir=str(tmp_path_factory.mktemp("cache")))
    with Evaluator(config) as ev:
        carrier = ev.evaluate(task, Solution("naive", naive, SolutionFormat.FAST))
        cut = ev.evaluate(task, Solution("one-block", slow, SolutionFormat.FAST))
    for name, result in (("carrier", carrier), ("one block", cut)):
        print(f"\n{name}: {result.outcome.value} {[f.code for f in result.flags]}")
        for t in result.timings:
            print(f"  {t.config}: {t.candidate.median_ms:.4f} ms, {t.candidate.n_samples} samples")
    return carrier, cut


def test_the_carrier_runs_the_whole_bench(results):
    carrier, _ = results
    assert carrier.outcome is Outcome.CORRECT and "timing_cut_slow" not in {f.code for f in carrier.flags}
    assert all(t.candidate.n_samples > ESTIMATE_ROUNDS for t in carrier.timings)


def test_a_far_slower_candidate_is_correct_and_timed_from_the_estimate_rounds(results):
    _, cut = results
    assert cut.outcome is Outcome.CORRECT, (cut.message, [f.code for f in cut.flags])
    flagged = {f.config for f in cut.flags if f.code == "timing_cut_slow"}
    largest = max(cut.timings, key=lambda t: t.candidate.median_ms)
    assert largest.config in flagged and largest.candidate.n_samples == ESTIMATE_ROUNDS
