"""A C task's naive port answered under other docstrings, through the real evaluator in the RL mode on the
GPU (`eval_modes`, point 7; `RlConfig`'s rollout timing, which times the naive port live): the first copy
is timed and later ones are checked but not timed, each flagged `anchor_copy` with a speedup of 1.0
against the port; a batch of copies sent at once times one of them; an answer that is not a copy keeps
its own timing. Run:
    python3 -m pytest -q -s tests/gpu/test_anchor_copies_gpu.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_c_session_gpu import _task_and_naive

from cudaperf.evaluate import EvalConfig, Evaluator
from cudaperf.train.config import RlConfig
from cudaperf.train.rl import rollout_timing
from cudaperf.types import Outcome, Solution, SolutionFormat

pytestmark = pytest.mark.gpu


def _copy(naive: str, k: int) -> str:
    return f'"""copy {k} of the naive port under another docstring."""\n' + naive.split('"""', 2)[2]


def _config(cache_dir: str) -> EvalConfig:
    return EvalConfig(device="cuda", mode="rl", seeds=1, cache_dir=cache_dir,
                      timing=rollout_timing(RlConfig()))


def _show(results) -> None:
    for r in results:
        print(f"\n{r.solution_id}: {r.outcome.value} stages={sorted(r.stage_durations_s)} "
              f"speedups={r.speedups} flags={[f.code for f in r.flags]} env={r.environment.get('timing')}")


@pytest.fixture(scope="module")
def one_by_one(tmp_path_factory):
    task, naive = _task_and_naive("map")
    other = naive.replace("((n) + 255) // 256,), (256,)", "((n) + 127) // 128,), (128,)")  # another launch
    assert other != naive
    with Evaluator(_config(str(tmp_path_factory.mktemp("cache")))) as ev:
        results = [ev.evaluate(task, Solution(f"copy-{k}", _copy(naive, k), SolutionFormat.FAST))
                   for k in range(3)]
        results.append(ev.evaluate(task, Solution("other", other, SolutionFormat.FAST)))
    _show(results)
    return results


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    task, naive = _task_and_naive("map")
    with Evaluator(_config(str(tmp_path_factory.mktemp("cache")))) as ev:
        results = list(ev.evaluate_many([(task, Solution(f"copy-{k}", _copy(naive, k), SolutionFormat.FAST))
                                         for k in range(4)]))
    _show(results)
    return results


def test_every_copy_is_correct_flagged_and_as_fast_as_the_port(one_by_one):
    copies = one_by_one[:3]
    assert [r.outcome for r in copies] == [Outcome.CORRECT] * 3, [r.message for r in copies]
    assert all("anchor_copy" in {f.code for f in r.flags} for r in copies)
    assert all(r.speedups.get("naive_cuda") == pytest.approx(1.0) for r in copies)


def test_only_the_first_copy_runs_a_timing_stage(one_by_one):
    assert ["timing" in r.stage_durations_s for r in one_by_one[:3]] == [True, False, False]
    assert "anchor_copy_measured" in one_by_one[0].environment


def test_an_answer_that_is_not_a_copy_is_timed_as_itself(one_by_one):
    other = one_by_one[3]
    assert other.outcome is Outcome.CORRECT and "timing" in other.stage_durations_s
    assert "anchor_copy" not in {f.code for f in other.flags}


def test_a_batch_of_copies_times_one(batch):
    assert [r.outcome for r in batch] == [Outcome.CORRECT] * 4, [r.message for r in batch]
    assert sum("timing" in r.stage_durations_s for r in batch) == 1
