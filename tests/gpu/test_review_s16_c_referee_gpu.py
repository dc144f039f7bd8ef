"""Review (session 16), on the GPU (marker `gpu`): honest C candidates (generated tasks' own naive CUDA
ports, a float `out` map, an in-place float map, an `unsigned int` histogram written with atomics) through
the real Evaluator with its referee (the default), timed, each evaluated twice in a row in one evaluator,
in both evaluation modes: CORRECT with no ERROR flag every time, and in the RL mode the first evaluation of
each task carries the baselines while the second is anchored (the naive port timed live, serial C from the
cache). What CPU mode cannot reach: the referee judging C outputs on the device, the naive port timed,
coverage. The CPU twin is tests/unit/test_review_s16_c_eval_modes.py. Run:
    python3 -m pytest -q -s tests/gpu/test_review_s16_c_referee_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from test_c_session_gpu import _task_and_naive  # the same generated tasks and their naive ports

from cudaperf.evaluate import EvalConfig, Evaluator, RlSettings, TimingConfig
from cudaperf.types import Outcome, Severity, Solution, SolutionFormat

pytestmark = pytest.mark.gpu

# test_c_session_gpu.TASKS keys: a float `out` map, an in-place float map, an `unsigned int` histogram
TASKS = ("map", "map_inplace", "histogram_uint")


def _run(mode: str, cache_dir: str) -> tuple[dict, dict]:
    config = EvalConfig(device="cuda", seeds=2, mode=mode, cache_dir=cache_dir,
                        timing=TimingConfig(budget_ms=20.0, warmup_ms=5.0),
                        # the candidates are the naive port itself: timed, not given the port's timings
                        rl=RlSettings(workers_per_gpu=2, anchor_copies=False))
    results = {}
    with Evaluator(config) as ev:
        for key in TASKS:
            task, naive = _task_and_naive(key)
            for k in range(2):  # distinct texts: two candidates of the task, one after the other
                solution = Solution(f"{key}-{k}", f"{naive}\n# copy {k}\n", SolutionFormat.FAST)
                result = ev.evaluate(task, solution)
                print(f"\n{mode} {key}-{k}: {result.outcome.value} {result.message[:300]} "
                      f"{result.environment.get('baselines', '')} {sorted(result.speedups)}")
                results[(key, k)] = result
        return results, ev.mode_report


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {mode: _run(mode, str(tmp_path_factory.mktemp(mode))) for mode in ("default", "rl")}


@pytest.mark.parametrize("mode", ["default", "rl"])
def test_an_honest_c_candidate_is_correct_every_time(runs, mode):
    results, _ = runs[mode]
    assert {k: r.outcome for k, r in results.items()} == dict.fromkeys(results, Outcome.CORRECT), {
        k: r.message[:300] for k, r in results.items()}


@pytest.mark.parametrize("mode", ["default", "rl"])
def test_an_honest_c_candidate_raises_no_error_flag(runs, mode):
    results, _ = runs[mode]
    errors = {k: [f"{f.code}: {f.message[:200]}" for f in r.flags if f.severity is Severity.ERROR]
              for k, r in results.items()}
    assert errors == dict.fromkeys(results, [])


def test_every_configuration_is_timed_against_serial_c_and_the_naive_port_in_the_default_mode(runs):
    results, _ = runs["default"]
    assert all(r.timings and {"serial_c", "naive_cuda"} <= set(r.speedups) for r in results.values()), {
        k: sorted(r.speedups) for k, r in results.items()}


def test_the_first_rl_evaluation_of_a_c_task_carries_and_the_second_is_anchored(runs):
    results, report = runs["rl"]
    schedule = {k: r.environment.get("baselines", "") for k, r in results.items()}
    assert all(schedule[(key, 0)] == "timed (first)" for key in TASKS), schedule
    assert all(schedule[(key, 1)].startswith("naive_cuda live, cached from ") for key in TASKS), schedule
    assert report["carriers"] == len(TASKS)
    notes = {results[(key, 0)].environment.get("timing") for key in TASKS}
    assert notes == {"20 ms budget, baselines serial_c,naive_cuda"}


def test_an_anchored_c_candidate_has_the_naive_port_live_and_serial_c_cached(runs):
    results, _ = runs["rl"]
    anchored = [results[(key, 1)] for key in TASKS]
    assert all({"serial_c", "naive_cuda"} <= set(r.speedups) for r in anchored)
    assert {r.environment.get("timing") for r in anchored} == {"10 ms budget, baselines naive_cuda"}


def test_an_honest_c_candidate_s_coverage_is_measured(runs):
    results, _ = runs["default"]
    assert all(r.coverage is not None and r.coverage > 0 for r in results.values()), {
        k: r.coverage for k, r in results.items()}
