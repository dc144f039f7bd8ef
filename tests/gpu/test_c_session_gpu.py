"""C→CUDA tasks on the GPU (marker `gpu`): generated tasks (seed 0 index) with their own naive CUDA port
as the candidate must be CORRECT through the real Evaluator (sandboxed worker, build pool, analysis);
a wrong candidate and one that leaves an output element unwritten must be INCORRECT; in-process, the
serial C and naive CUDA baselines must be timed. Run:
    python3 -m pytest -q -s tests/gpu/test_c_session_gpu.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy
from cudaperf.datasets import registry
from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
from cudaperf.execute import c_session, dispatch
from cudaperf.jobs import EvalJob, job_message
from cudaperf.tasks.ctask import from_json, to_task
from cudaperf.types import Outcome, Solution, SolutionFormat, TaskKind

pytestmark = pytest.mark.gpu

# Chosen to cover: float `out` map, float `inout` in-place map, a two-level reduction to one value whose
# naive port is one GPU thread, an `unsigned int` histogram written with atomics, and an `unsigned int`
# in-place segmented sort (inout restore matters: insertion sort on sorted keys is far cheaper).
TASKS = {
    "map": ("map", "c_map_0aa43681b742"),
    "map_inplace": ("map", "c_map_aff91953900a"),
    "reduce_all": ("reduce_all", "c_reduce_all_6fa678bbd227"),
    "histogram_uint": ("histogram", "c_histogram_1a264b134698"),
    "sort_uint_inout": ("sort", "c_sort_eff532b04bd7"),
}


def _task_and_naive(key: str):
    family, task_id = TASKS[key]
    generated = next(t for t in registry.build_index(0, kinds=(TaskKind.C,), families=(family,))
                     if t.task_id == task_id)
    naive = next(i for i in registry.implementations(generated) if i.baseline)
    return to_task(from_json(generated.text), naive_cuda=naive.source), naive.source


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    config = EvalConfig(device="cuda", seeds=2, timing=TimingConfig(budget_ms=30.0, warmup_ms=10.0),
                        cache_dir=str(tmp_path_factory.mktemp("cache")))
    with Evaluator(config) as ev:
        yield ev


def _evaluate(ev: Evaluator, key: str, source: str | None = None):
    task, naive = _task_and_naive(key)
    result = ev.evaluate(task, Solution(f"{key}-candidate", source or naive, SolutionFormat.FAST))
    print(f"\n{key}: {result.outcome.value} ({result.stage}) {result.message[:300]}")
    for t in result.timings:
        print(f"  {t.config}: candidate {t.candidate.median_ms:.4f} ms, floor {t.speed_of_light_ms}")
    return result


@pytest.mark.parametrize("key", list(TASKS))
def test_the_naive_port_as_candidate_is_correct_on_every_config(evaluator, key):
    result = _evaluate(evaluator, key)
    assert result.outcome is Outcome.CORRECT, (result.message, [f.code for f in result.flags],
                                               result.logs[-2000:])
    assert len(result.correctness) == 3 and all(c.correct for c in result.correctness)
    assert [t.config for t in result.timings] == [c.config for c in result.correctness]


def test_a_wrong_map_candidate_is_incorrect(evaluator):
    _, naive = _task_and_naive("map")
    wrong = naive.replace("out[i] = f(", "out[i] = 0.5f + f(")
    assert wrong != naive
    result = _evaluate(evaluator, "map", wrong)
    assert result.outcome is Outcome.INCORRECT and not any(c.correct for c in result.correctness)


def test_an_unwritten_output_element_is_incorrect_by_the_fill_pattern(evaluator):
    _, naive = _task_and_naive("map")
    skipping = naive.replace("if (i < n)", "if (i < n - 1)")
    assert skipping != naive
    result = _evaluate(evaluator, "map", skipping)
    assert result.outcome is Outcome.INCORRECT
    assert "fill pattern" in result.message, result.message


# -- in-process: the payload's baselines ----------------------------------------------------------


@pytest.fixture()
def worker_like_process(tmp_path_factory):
    """What the child does before jobs: load CUDA Python's libraries, install the audit hook once."""
    from cudaperf.execute import guards
    from cudaperf.execute.child import warm_up_cuda

    warm_up_cuda()
    if not guards._installed.is_set():
        guards.install_audit_hook(temp_root=str(tmp_path_factory.getbasetemp()))
    return str(tmp_path_factory.mktemp("cache"))


def _run_in_process(key: str, cache_dir: str) -> dict:
    task, naive = _task_and_naive(key)
    job = EvalJob(task=task, solution=Solution("inproc", naive, SolutionFormat.FAST), device="cuda:0",
                  seeds=(1, 2), policy=Policy(), timing=TimingConfig(budget_ms=50.0, warmup_ms=10.0),
                  coverage=True, cache_dir=cache_dir)
    payload = dispatch.run_eval_job(job_message(job, "5eed"), lambda stage: None)
    print(f"\n{key}: outcome {payload['outcome']} {payload['message'][:300]}")
    for config, extra in payload["extra_baselines"].items():
        cand = next(t for t in payload["timings"] if t["config"] == config)["candidate"]["median_ms"]
        print(f"  {config}: candidate {cand:.4f} ms, " +
              ", ".join(f"{k} {v['median_ms']:.4f} ms" for k, v in extra.items()))
    return payload


def test_serial_c_and_naive_cuda_are_timed_for_every_config(worker_like_process):
    payload = _run_in_process("map", worker_like_process)
    assert payload["outcome"] is None and all(c["correct"] for c in payload["correctness"]), (
        payload["message"])
    assert set(payload["extra_baselines"]) == {"small", "large", "odd"}
    assert all({"serial_c", "naive_cuda"} <= set(e) for e in payload["extra_baselines"].values())
    assert payload["coverage"] is not None and payload["coverage"] > 0.5


@pytest.mark.timing
def test_the_same_kernel_times_alike_as_candidate_and_naive_baseline(worker_like_process):
    payload = _run_in_process("map", worker_like_process)
    large = next(t for t in payload["timings"] if t["config"] == "large")["candidate"]["median_ms"]
    naive = payload["extra_baselines"]["large"]["naive_cuda"]["median_ms"]
    assert 0.75 < large / naive < 1.33, (large, naive)


def test_inout_tasks_time_the_restore_alongside(worker_like_process):
    payload = _run_in_process("sort_uint_inout", worker_like_process)
    assert payload["outcome"] is None and all(c["correct"] for c in payload["correctness"]), (
        payload["message"])
    assert all("inout_restore" in e for e in payload["extra_baselines"].values())


def test_reference_cache_is_reused_by_the_next_candidate(worker_like_process):
    c_session.C_REFERENCES.clear()
    _run_in_process("reduce_all", worker_like_process)
    cached = len(c_session.C_REFERENCES)
    _run_in_process("reduce_all", worker_like_process)
    assert cached > 0 and len(c_session.C_REFERENCES) == cached


def test_a_timed_answer_names_its_benches_and_their_rounds_within_its_timing_stage(evaluator):
    result = _evaluate(evaluator, "map")
    took = result.stage_durations_s
    print(f"  timing {took['timing']:.3f} s, benches {took['timing_bench']:.3f} s, "
          f"their rounds {took['timing_loop']:.3f} s")
    assert result.outcome is Outcome.CORRECT
    assert 0 < took["timing_loop"] <= took["timing_bench"] <= took["timing"]
