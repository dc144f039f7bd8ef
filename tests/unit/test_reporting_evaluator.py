"""A batch that stalls says on which candidates (`agent.evaluation.ReportingEvaluator`,
`train.monitor.report_slow_results`): every result reaches `on_result` as it arrives, with the candidates
still out, and passes through unchanged; a training run's log gets a line for a slow result and for every
result of a batch out long, and none for a fast batch; `record_evaluations` keeps every result with its
candidate's code as it arrives. The inner evaluator here yields results in a set
order with set durations (what is tested is the wrapper's bookkeeping); the real evaluator goes through it
in the training and comparison tests."""

from __future__ import annotations

import json
import time

from cudaperf.agent.evaluation import BatchProgress, CandidateEvaluator, ReportingEvaluator
from cudaperf.train.monitor import EVALUATIONS_FILE, record_evaluations, report_slow_results, timing_breakdown
from cudaperf.types import ConfigTiming, EvalResult, Outcome, Solution, SolutionFormat, Task, TaskKind, Timing


class InOrder:
    """Yields each pair's result in `order`, each taking `took_s[i]` seconds by its durations."""

    arch = "sm_90"

    def __init__(self, order, took_s):
        self.order, self.took_s, self.closed = order, took_s, False

    def evaluate_stream(self, pairs):
        for i in self.order:
            task, solution = pairs[i]
            yield i, EvalResult(task.task_id, solution.solution_id, Outcome.CORRECT, stage="timing",
                                stage_durations_s={"total": self.took_s[i]})

    def close(self):
        self.closed = True


def pairs(n):
    task = Task("t", TaskKind.PYTORCH, "", ())
    return [(task, Solution(f"s{k}", f"// code {k}", SolutionFormat.FAST)) for k in range(n)]


def test_each_result_is_reported_with_the_candidates_still_out():
    seen: list[BatchProgress] = []
    judge = ReportingEvaluator(InOrder([2, 0, 1], [0.1] * 3), seen.append)
    results = list(judge.evaluate_stream(pairs(3)))
    assert [i for i, _ in results] == [2, 0, 1]
    assert [(p.done, p.total, p.still_out) for p in seen] == [(1, 3, ("t/s0", "t/s1")), (2, 3, ("t/s1",)),
                                                               (3, 3, ())]


def test_results_pass_through_unchanged_and_close_reaches_the_inner_evaluator():
    inner = InOrder([0, 1], [0.1, 0.1])
    judge = ReportingEvaluator(inner, lambda p: None)
    assert isinstance(judge, CandidateEvaluator) and judge.arch == "sm_90"
    assert [r for _, r in judge.evaluate_stream(pairs(2))] == [r for _, r in inner.evaluate_stream(pairs(2))]
    judge.close()
    assert inner.closed


def test_a_fast_batch_prints_nothing(capsys):
    judge = ReportingEvaluator(InOrder([0, 1], [0.5, 0.5]), report_slow_results(time.perf_counter()))
    list(judge.evaluate_stream(pairs(2)))
    assert capsys.readouterr().err == ""


def test_a_slow_result_is_printed_with_what_is_still_out(capsys):
    judge = ReportingEvaluator(InOrder([1, 0], [0.5, 61.0]), report_slow_results(time.perf_counter()))
    list(judge.evaluate_stream(pairs(2)))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "evaluated 1 of 2" in lines[0] and "t/s1 correct in stage 'timing' (61.0 s)" \
        in lines[0] and lines[0].endswith("still out: t/s0")


def test_every_result_of_a_batch_out_long_is_printed(capsys):
    on_result = report_slow_results(time.perf_counter(), tail_s=0.0)
    judge = ReportingEvaluator(InOrder([0, 1], [0.5, 0.5]), on_result)
    list(judge.evaluate_stream(pairs(2)))
    assert len(capsys.readouterr().err.splitlines()) == 2


def test_each_result_reaches_the_evaluations_file_with_its_candidates_code_as_it_arrives(tmp_path):
    judge = ReportingEvaluator(InOrder([1, 0], [0.5, 2.0]), record_evaluations(time.perf_counter(), tmp_path))
    stream = judge.evaluate_stream(pairs(2))
    next(stream)  # the first result: on file before the batch ends
    first = [json.loads(line) for line in (tmp_path / EVALUATIONS_FILE).read_text().splitlines()]
    assert [(r["solution_id"], r["source"], r["outcome"], r["stage"]) for r in first] == \
        [("s1", "// code 1", "correct", "timing")]
    list(stream)
    lines = (tmp_path / EVALUATIONS_FILE).read_text().splitlines()
    assert [json.loads(line)["stage_durations_s"]["total"] for line in lines] == [2.0, 0.5]


def test_a_timed_results_breakdown_names_each_configurations_bench_and_the_referees_time():
    timing = ConfigTiming("c", candidate=Timing(0.1, 0.01, 0.09, 0.1, 12), rounds=12, dispose_ms=3.25,
                          baselines={"naive_cuda": Timing(0.2, 0.01, 0.19, 0.2, 12)})
    result = EvalResult("t", "s", Outcome.CORRECT, timings=(timing,),
                        environment={"referee_ms": json.dumps({"timed": 41.0})})
    assert timing_breakdown(result) == {
        "configs": [{"config": "c", "rounds": 12, "dispose_ms": 3.25, "samples": 12, "candidate_ms": 0.1,
                     "baselines": ["naive_cuda"]}],
        "referee_ms": {"timed": 41.0}}


def test_a_referee_figure_that_is_not_json_is_kept_as_text():
    timing = ConfigTiming("c", candidate=Timing(0.1, 0.01, 0.09, 0.1, 12))
    result = EvalResult("t", "s", Outcome.CORRECT, timings=(timing,), environment={"referee_ms": "n/a"})
    assert timing_breakdown(result)["referee_ms"] == "n/a"
