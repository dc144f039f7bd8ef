"""A batch with no result for a while says where it is held (`agent.evaluation.ReportingEvaluator`'s
`on_stall`, `train.monitor.report_stalls`): the candidates out, the evaluator's account of its jobs and
every thread's stack, again while none comes, and nothing for a batch whose results keep coming. The
stand-in evaluator holds its results on an event; the real evaluator's account of a candidate spinning in
its correctness stage is read through the same wrapper at the end, and its results reach a training run's
`evaluations.jsonl` (`train.monitor.record_evaluations`) with the candidate's code."""

from __future__ import annotations

import json
import threading
import time

from cudaperf.agent.evaluation import BatchStall, LocalEvaluator, ReportingEvaluator
from cudaperf.anticheat.policy import Policy
from cudaperf.eval_modes import RlSettings
from cudaperf.evaluate import EvalConfig, TimingConfig
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import task_from_source
from cudaperf.train.monitor import EVALUATIONS_FILE, STALLS_FILE, record_evaluations, report_stalls
from cudaperf.types import EvalResult, Outcome, Solution, SolutionFormat, Task, TaskKind

STALL_S = 0.3


class Held:
    """Yields the first result at once, the second when `release` is set; says what it is doing."""

    arch = "sm_90"

    def __init__(self):
        self.release = threading.Event()

    def evaluate_stream(self, pairs):
        for i, (task, solution) in enumerate(pairs):
            if i == 1:
                self.wait_for_release()
            yield i, EvalResult(task.task_id, solution.solution_id, Outcome.CORRECT)

    def wait_for_release(self):
        assert self.release.wait(30), "the test never released the batch"

    def activity(self):
        return ("worker 0: stage 'correctness' for 5 s",)

    def close(self):
        pass


def pairs(n):
    task = Task("t", TaskKind.PYTORCH, "", ())
    return [(task, Solution(f"s{k}", "", SolutionFormat.FAST)) for k in range(n)]


def _held_batch(wait_s: float, stall_s: float = STALL_S) -> list[BatchStall]:
    inner, stalls = Held(), []
    judge = ReportingEvaluator(inner, lambda p: None, stalls.append, stall_s=stall_s)
    threading.Timer(wait_s, inner.release.set).start()
    assert len(list(judge.evaluate_stream(pairs(2)))) == 2
    return stalls


def test_a_batch_without_a_result_names_what_is_out_and_what_the_evaluator_is_doing():
    stall = _held_batch(1.0)[0]
    assert (stall.done, stall.total, stall.still_out) == (1, 2, ("t/s1",))
    assert stall.since_result_s >= STALL_S and stall.activity == ("worker 0: stage 'correctness' for 5 s",)


def test_the_stall_carries_the_stack_of_the_thread_that_waits():
    assert "wait_for_release" in _held_batch(1.0)[0].stacks


def test_a_long_stall_is_reported_again():
    assert len(_held_batch(1.5)) >= 2


def test_a_batch_whose_results_keep_coming_reports_no_stall():
    assert _held_batch(0.0, stall_s=5.0) == []  # a loaded machine's pause is not a stall


def test_a_failing_stall_report_does_not_end_the_batch():
    inner = Held()

    def fails(stall):
        raise RuntimeError("the log's disk is full")

    judge = ReportingEvaluator(inner, lambda p: None, fails, stall_s=STALL_S)
    threading.Timer(0.8, inner.release.set).start()
    assert len(list(judge.evaluate_stream(pairs(2)))) == 2


def test_report_stalls_prints_the_line_and_keeps_the_stacks(tmp_path, capsys):
    stall = BatchStall(1, 2, ("t/s1",), 70.0, 65.0, ("worker 0: idle",), "--- thread MainThread\n  here\n")
    report_stalls(time.perf_counter(), tmp_path)(stall)
    err = capsys.readouterr().err
    assert "batch stalled: 1 of 2 evaluated after 70 s, none in the last 65 s; still out: t/s1" in err
    assert "worker 0: idle" in err and "--- thread MainThread" in (tmp_path / STALLS_FILE).read_text()


SPIN_TASK = '''
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''

SPIN = """
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
"""


def test_the_real_evaluator_says_which_stage_holds_a_spinning_candidate(tmp_path):
    config = EvalConfig(device="cpu", mode="rl", cache_dir=str(tmp_path), build_workers=1, seeds=1,
                        policy=Policy(allow_torch_ops=True), rl=RlSettings(cpu_workers=1),
                        timing=TimingConfig(budget_ms=20, warmup_ms=5, baselines=("eager",)),
                        stage_timeouts_s={"correctness": 8.0})
    stalls: list[BatchStall] = []
    with LocalEvaluator(config) as evaluator:
        judge = ReportingEvaluator(evaluator, lambda p: None, stalls.append, stall_s=1.5)
        pair = (task_from_source(SPIN_TASK, "double"), solution_from_text(SPIN, "spin"))
        [(_, result)] = list(judge.evaluate_stream([pair]))
    assert result.outcome is Outcome.TIMEOUT
    activity = [line for stall in stalls for line in stall.activity]
    assert any("stage 'correctness' for" in line for line in activity), activity
    assert any(line.startswith("GPU gate: 1 job(s) checking") for line in activity)


def test_the_real_evaluators_results_reach_the_evaluations_file_with_their_code(tmp_path):
    config = EvalConfig(device="cpu", mode="rl", cache_dir=str(tmp_path), build_workers=1, seeds=1,
                        policy=Policy(allow_torch_ops=True), rl=RlSettings(cpu_workers=1),
                        timing=TimingConfig(budget_ms=20, warmup_ms=5, baselines=("eager",)),
                        stage_timeouts_s={"correctness": 8.0})
    task = task_from_source(SPIN_TASK, "double")
    candidates = [solution_from_text(SPIN, "spin"), solution_from_text(SPIN.replace("while True:\n"
                  "            pass", "return x * 2"), "double")]
    with LocalEvaluator(config) as evaluator:
        judge = ReportingEvaluator(evaluator, record_evaluations(time.perf_counter(), tmp_path / "run"))
        results = dict(judge.evaluate_stream([(task, c) for c in candidates]))
    lines = {r["solution_id"]: r for r in map(json.loads, (tmp_path / "run" / EVALUATIONS_FILE).open())}
    expected = {r.solution_id: r.outcome.value for r in results.values()}
    assert {k: line["outcome"] for k, line in lines.items()} == expected
    assert lines["double"]["outcome"] == "correct" and lines["spin"]["outcome"] == "timeout"
    assert lines["spin"]["source"] == candidates[0].source and lines["spin"]["stage"] == "correctness"
    assert lines["double"]["stage_durations_s"]["total"] > 0
