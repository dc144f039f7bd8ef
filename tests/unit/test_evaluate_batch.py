"""The batch side of the evaluator without a worker (`device="none"`): the static verdict before any build,
one failing result never ending a batch, the deadline, and the self-check's candidate."""

from __future__ import annotations

import textwrap
import threading

import pytest

from cudaperf.evaluate import (
    EvalConfig,
    Evaluator,
    harness_row,
    self_check_config,
    self_check_solution,
)
from cudaperf.results import ResultStore
from cudaperf.solutions import solution_from_text
from cudaperf.types import EvalResult, InputConfig, Outcome, Task, TaskKind

TASK_SRC = textwrap.dedent("""
    import torch

    class Model(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    def get_inputs(n=1000):
        return [torch.randn(n), torch.randn(n)]
""")

FAST_SRC = textwrap.dedent('''
    import torch
    from cudaperf import cuda

    SRC = r"""
    extern "C" __global__ void add(const float* a, const float* b, float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = a[i] + b[i];
    }
    """
    _add = cuda.compile(SRC, "add")

    class ModelNew(torch.nn.Module):
        def forward(self, a, b):
            out = torch.empty_like(a)
            n = a.numel()
            _add(((n + 255) // 256,), (256,), a, b, out, n)
            return out
''')
CHEATING = FAST_SRC.replace("        return out", "        return torch.add(a, b)")
NO_MODELNEW = FAST_SRC.replace("class ModelNew", "class Something")


def _task() -> Task:
    return Task(task_id="add", kind=TaskKind.PYTORCH, source=TASK_SRC, configs=(InputConfig("default", {}),))


@pytest.fixture
def evaluator(tmp_path):
    with Evaluator(EvalConfig(device="none", cache_dir=str(tmp_path), build_workers=1, analyze=False)) as ev:
        yield ev


@pytest.fixture
def submitted(evaluator, monkeypatch) -> list[str]:
    """The solution ids handed to the build pool."""
    ids: list[str] = []
    real = evaluator._builds.submit

    def submit(solution, **kwargs):
        ids.append(solution.solution_id)
        return real(solution, **kwargs)

    monkeypatch.setattr(evaluator._builds, "submit", submit)
    return ids


def _pairs(*named: tuple[str, str]) -> list:
    return [(_task(), solution_from_text(src, sid)) for sid, src in named]


BATCH = (("honest-1", FAST_SRC), ("cheat", CHEATING), ("honest-2", FAST_SRC.replace("256", "128")),
         ("no-entry", NO_MODELNEW))


def test_statically_rejected_candidates_are_never_built(evaluator, submitted):
    results = {r.solution_id: r for r in evaluator.evaluate_many(_pairs(*BATCH))}
    assert sorted(submitted) == ["honest-1", "honest-2"]
    assert results["cheat"].outcome is Outcome.POLICY_VIOLATION and results["cheat"].build is None


def test_with_the_gate_after_the_build_every_candidate_is_built(tmp_path, monkeypatch):
    config = EvalConfig(device="none", cache_dir=str(tmp_path), build_workers=1, analyze=False,
                        static_gate_first=False)
    with Evaluator(config) as ev:
        ids: list[str] = []
        real = ev._builds.submit
        monkeypatch.setattr(ev._builds, "submit", lambda s, **kw: ids.append(s.solution_id) or real(s, **kw))
        results = {r.solution_id: r for r in ev.evaluate_many(_pairs(*BATCH))}
    assert sorted(ids) == sorted(sid for sid, _ in BATCH)
    assert results["cheat"].outcome is Outcome.POLICY_VIOLATION and results["cheat"].build is not None


def test_one_evaluation_of_a_rejected_candidate_submits_no_build(evaluator, submitted):
    result = evaluator.evaluate(_task(), solution_from_text(CHEATING, "cheat"))
    assert result.stage == "static" and submitted == []


@pytest.mark.parametrize("source", ["", '"""Only a docstring."""\n', NO_MODELNEW], ids=["empty", "docstring",
                                                                                      "no-modelnew"])
def test_a_missing_entry_point_is_an_invalid_solution_at_the_static_stage(evaluator, submitted, source):
    result = evaluator.evaluate(_task(), solution_from_text(source, "s"))
    assert (result.outcome, result.stage, result.build) == (Outcome.INVALID_SOLUTION, "static", None)
    assert submitted == []


class _FailingStore(ResultStore):
    """A real store whose disk refuses one pair's first write."""

    def __init__(self, path, refuse: str):
        super().__init__(path)
        self.refuse, self.refused = refuse, False

    def append(self, result: EvalResult) -> None:
        if result.solution_id == self.refuse and not self.refused:
            self.refused = True
            raise OSError(28, "No space left on device")
        super().append(result)


def test_a_result_that_cannot_be_stored_becomes_its_stored_harness_error_row(evaluator, tmp_path):
    store = _FailingStore(tmp_path / "r.jsonl", refuse="honest-1")
    results = list(evaluator.evaluate_many(_pairs(*BATCH), store=store))
    stored = {r.solution_id: r for r in store.load()}
    assert len(results) == len(BATCH) == len(stored)
    row = stored["honest-1"]
    assert row.outcome is Outcome.HARNESS_ERROR and "No space left" in row.message


def test_a_failing_progress_bar_does_not_end_the_batch(evaluator, tmp_path, monkeypatch):
    from cudaperf import evaluate

    class Broken:
        def __init__(self, *args):
            pass

        def __enter__(self):
            def advance(result):
                raise RuntimeError("terminal went away")
            return advance

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(evaluate, "ProgressBar", Broken)
    store = ResultStore(tmp_path / "r.jsonl")
    results = list(evaluator.evaluate_many(_pairs(*BATCH), store=store, progress=True))
    assert len(results) == len(BATCH) and {r.outcome for r in results} == {Outcome.HARNESS_ERROR}
    assert all("terminal went away" in r.message for r in store.load())


def test_a_harness_row_keeps_the_ids_and_names_what_failed():
    original = EvalResult("t", "s", Outcome.CORRECT, stage_durations_s={"total": 1.5})
    row = harness_row(original, "printing", ValueError("bad value"))
    assert (row.task_id, row.solution_id, row.outcome) == ("t", "s", Outcome.HARNESS_ERROR)
    assert "printing" in row.message and "correct" in row.message and "bad value" in row.message


def test_nothing_starts_after_the_deadline(evaluator, tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    honest = [p for p in _pairs(*BATCH) if p[1].solution_id.startswith("honest")]
    assert list(evaluator.evaluate_many(honest, store=store, deadline_s=0.0)) == []
    assert store.load() == []


def test_a_fault_in_a_drain_thread_is_the_pairs_harness_row_not_a_batch_that_never_ends(evaluator,
                                                                                         monkeypatch):
    def broken(*_args):
        raise RuntimeError("drain fault")

    monkeypatch.setattr(evaluator, "_finish_safely", broken)
    honest = [p for p in _pairs(*BATCH) if p[1].solution_id.startswith("honest")]
    rows: list = []
    batch = threading.Thread(target=lambda: rows.extend(evaluator.evaluate_many(honest)), daemon=True)
    batch.start()
    batch.join(60)  # before the fix the batch waited for ever for the lost pairs
    assert not batch.is_alive()
    assert len(rows) == len(honest) and all(r.outcome is Outcome.HARNESS_ERROR for r in rows)
    assert all("drain fault" in r.message for r in rows)


def test_every_result_of_a_batch_records_its_total_wall_time(evaluator):
    results = list(evaluator.evaluate_many(_pairs(*BATCH)))
    assert all(r.stage_durations_s.get("total", -1) >= 0 for r in results)


def test_the_self_check_candidate_is_the_reference_itself():
    solution = self_check_solution(_task())
    assert solution.solution_id == "self-check/add" and "class ModelNew(Model)" in solution.source
    assert solution.source.startswith(TASK_SRC)


def test_the_self_check_configuration_skips_the_source_policy_only():
    config = self_check_config(device="none")
    assert (config.static_policy, config.coverage, config.policy.allow_torch_ops) == (False, False, True)
    assert config.timing.baselines == ("eager",) and config.timing.enabled
