"""Review (session 16): an honest C candidate through the whole evaluator (static gate, build pool, a real
sandboxed CPU-mode worker and its referee), timed, evaluated twice in a row in one evaluator, in both
evaluation modes: CORRECT with no ERROR flag each time, and in the RL mode the first evaluation carries
the baselines and the second is anchored on them (the naive port as the live anchor, serial C cached).
Tasks: test_c_session.py's SQUARE (an `out` array) and SAXPY (an `inout` one); pure-torch candidates
(torch ops allowed), as CPU mode runs. The GPU twin (the naive port live) is
tests/gpu/test_review_s16_c_referee_gpu.py."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from test_c_session import SAXPY, SAXPY_OK, SQUARE, SQUARE_OK

from cudaperf.anticheat.policy import Policy
from cudaperf.evaluate import EvalConfig, Evaluator, RlSettings, TimingConfig
from cudaperf.tasks.ctask import to_task
from cudaperf.types import Outcome, Severity, Solution, SolutionFormat

CASES = {"square": (SQUARE, SQUARE_OK), "saxpy": (SAXPY, SAXPY_OK)}


def _run(mode: str, cache_dir: str) -> tuple[dict, dict]:
    config = EvalConfig(device="cpu", mode=mode, cache_dir=cache_dir, analyze=False, build_workers=1,
                        seeds=2, policy=Policy(allow_torch_ops=True),
                        rl=RlSettings(cpu_workers=1, budget_ms=1.0),  # below the job's: anchored ones show it
                        timing=TimingConfig(budget_ms=2.0, warmup_ms=0.5))
    results = {}
    with Evaluator(config) as ev:
        for name, (ctask, source) in CASES.items():
            task = to_task(ctask)
            for k in range(2):  # distinct texts: two candidates of the task, one after the other
                solution = Solution(f"{name}-{k}", f"{source}# copy {k}\n", SolutionFormat.FAST)
                results[(name, k)] = ev.evaluate(task, solution)
        return results, ev.mode_report


@pytest.fixture(scope="module")
def runs():
    """Both modes' results; the cache a directory the worker's uid can enter (the C reference library
    is read from it)."""
    out = {}
    for mode in ("default", "rl"):
        path = tempfile.mkdtemp(prefix=f"cudaperf-s16-{mode}-")
        os.chmod(path, 0o755)
        try:
            out[mode] = _run(mode, path)
        finally:
            shutil.rmtree(path, ignore_errors=True)
    return out


@pytest.mark.parametrize("mode", ["default", "rl"])
def test_an_honest_c_candidate_is_correct_every_time(runs, mode):
    results, _ = runs[mode]
    assert {k: r.outcome for k, r in results.items()} == dict.fromkeys(results, Outcome.CORRECT), {
        k: r.message[:300] for k, r in results.items()}


@pytest.mark.parametrize("mode", ["default", "rl"])
def test_an_honest_c_candidate_raises_no_error_flag(runs, mode):
    results, _ = runs[mode]
    errors = {k: [f.code for f in r.flags if f.severity is Severity.ERROR] for k, r in results.items()}
    assert errors == dict.fromkeys(results, [])


@pytest.mark.parametrize("mode", ["default", "rl"])
def test_every_configuration_of_an_honest_c_candidate_is_timed_with_serial_c(runs, mode):
    results, _ = runs[mode]
    assert all(len(r.timings) == 3 and "serial_c" in r.speedups for r in results.values())


def test_the_first_rl_evaluation_of_a_c_task_carries_and_the_second_is_anchored(runs):
    results, report = runs["rl"]
    schedule = {k: r.environment.get("baselines", "") for k, r in results.items()}
    assert all(schedule[(name, 0)] == "timed (first)" for name in CASES), schedule
    assert all(schedule[(name, 1)].startswith("naive_cuda live, cached from ") for name in CASES), schedule
    assert report["carriers"] == len(CASES) and report["timed"] == 2 * len(CASES)


def test_an_anchored_c_candidate_is_timed_with_the_ranking_budget(runs):
    results, _ = runs["rl"]
    timing = {name: results[(name, 1)].environment.get("timing") for name in CASES}
    assert timing == dict.fromkeys(CASES, "1 ms budget, baselines naive_cuda")


def test_an_rl_c_carrier_s_timing_note_names_the_c_baselines_it_timed(runs):
    results, _ = runs["rl"]
    timing = {name: results[(name, 0)].environment.get("timing") for name in CASES}
    assert timing == dict.fromkeys(CASES, "2 ms budget, baselines serial_c,naive_cuda")
