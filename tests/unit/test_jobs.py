"""The records between the evaluator and its workers (cudaperf.jobs): JSON round trips, the secret beside
the record, one home for the timing defaults, a malformed payload as a value, and the go-ahead's timing,
which only narrows the job's."""

from __future__ import annotations

import json

import pytest

from cudaperf.anticheat.policy import Policy
from cudaperf.jobs import (
    EvalJob,
    EvalPayload,
    ProfileJob,
    TimingConfig,
    job_message,
    narrowed_timing,
    read_job,
    read_payload,
)
from cudaperf.types import (
    ConfigCorrectness,
    ConfigTiming,
    Flag,
    InputConfig,
    Outcome,
    Severity,
    Solution,
    SolutionFormat,
    Task,
    TaskKind,
    Timing,
    from_dict,
    to_dict,
)


def _job(**fields) -> EvalJob:
    task = Task("t", TaskKind.PYTORCH, "source", (InputConfig("small", {"n": 4}),))
    return EvalJob(task=task, solution=Solution("s", "code", SolutionFormat.FAST), **fields)


def _timing(ms: float) -> Timing:
    return Timing(median_ms=ms, iqr_ms=0.0, min_ms=ms, mean_ms=ms, n_samples=5)


def test_a_job_survives_the_wire_unchanged():
    job = _job(device="cuda:0", seeds=(1, 2, 3), policy=Policy(allow_torch_ops=True),
               timing=TimingConfig(budget_ms=5.0, baselines=("eager",)), coverage=True, cache_dir="/c")
    wire = json.loads(json.dumps(job_message(job, "5eed")))
    assert read_job(wire) == (job, "5eed")


def test_reading_a_job_pops_its_secret_from_the_message():
    message = job_message(_job(), "5eed")
    read_job(message)
    assert "secret" not in message


def test_the_secret_is_not_a_field_of_the_job():
    job, _ = read_job(job_message(_job(), "5eed"))
    assert "5eed" not in json.dumps(job_message(job, ""))


def test_a_partial_timing_section_takes_the_timing_defaults():
    message = job_message(_job(), "")
    message["timing"] = {"enabled": False}
    job, _ = read_job(message)
    assert job.timing == TimingConfig(enabled=False)


def test_the_evaluator_and_the_job_share_one_timing_default():
    from cudaperf.evaluate import EvalConfig

    assert EvalConfig().timing == TimingConfig() == _job().timing


def test_timing_seeds_start_with_the_correctness_seeds_and_add_fresh_ones():
    assert _job(seeds=(1, 2)).timing_seeds() == (1, 2, 3)
    assert _job(seeds=(1, 2, 3, 4)).timing_seeds() == (1, 2, 3)


def test_unseen_seeds_lie_above_every_other_seed():
    job = _job(seeds=(1, 2, 3, 4))
    assert min(job.unseen_seeds()) > max(job.seeds + job.timing_seeds())
    assert len(job.unseen_seeds()) == job.timing.unseen_sets


def test_jobs_with_different_nonces_share_no_unseen_seed():
    a, b = _job(seeds=(1, 2), unseen_nonce=7), _job(seeds=(1, 2), unseen_nonce=8)
    assert not set(a.unseen_seeds()) & set(b.unseen_seeds())
    assert a.timing_seeds() == b.timing_seeds()  # the others repeat: references can be reused


def test_a_job_without_seeds_is_rejected_with_the_fix():
    with pytest.raises(ValueError, match="at least one public seed"):
        _job(seeds=())


def test_zero_timing_input_sets_are_rejected_with_the_fix():
    with pytest.raises(ValueError, match="at least one input set"):
        TimingConfig(input_sets=0)


def test_a_payload_survives_the_wire_unchanged():
    payload = EvalPayload(
        outcome=None, stage="timing", message="", correctness=(ConfigCorrectness("small", True, 2),),
        timings=(ConfigTiming("small", _timing(1.0)),), extra_baselines={"small": {"serial_c": _timing(9.0)}},
        flags=(Flag("timer_inconsistent", "x", Severity.ERROR, "small"),), coverage=0.9,
        kernel_time_ms={"k": 0.5}, environment={"torch": "2"}, durations_s={"setup": 0.1},
    )
    assert read_payload(json.loads(json.dumps(to_dict(payload)))) == payload


def test_the_child_s_verdict_only_payload_reads_with_defaults():
    wire = {"outcome": "crash", "stage": "import", "message": "boom", "worker_poisoned": True}
    payload = read_payload(wire)
    assert (payload.outcome, payload.correctness, payload.worker_poisoned) == (Outcome.CRASH, (), True)


def test_a_malformed_payload_is_a_harness_error_value():
    payload = read_payload({"outcome": "no such outcome"})
    assert payload.outcome is Outcome.HARNESS_ERROR and "malformed" in payload.message


def test_the_profile_job_file_reads_back_as_its_record():
    job = ProfileJob(task=_job().task, solution=_job().solution, config="small", temp_dir="/tmp/p", calls=2)
    assert from_dict(ProfileJob, json.loads(json.dumps(to_dict(job)))) == job


# -- the go-ahead's timing -------------------------------------------------------------------------------

RANKING = TimingConfig(budget_ms=10.0, warmup_ms=5.0, baselines=("eager",), overhead=False)


def test_the_go_ahead_s_timing_narrows_baselines_budget_and_the_empty_function():
    got = narrowed_timing(TaskKind.PYTORCH, TimingConfig(), to_dict(RANKING))
    assert (got.baselines, got.budget_ms, got.warmup_ms, got.overhead) == (("eager",), 10.0, 5.0, False)


def test_the_go_ahead_s_timing_never_widens_the_job_s():
    sent = TimingConfig(budget_ms=1.0, warmup_ms=0.5, baselines=("eager",), overhead=False)
    wider = TimingConfig(budget_ms=100.0, warmup_ms=25.0, baselines=("eager", "compile"), overhead=True)
    assert narrowed_timing(TaskKind.PYTORCH, sent, to_dict(wider)) == sent


def test_a_c_job_s_go_ahead_narrows_by_the_baselines_it_times():
    got = narrowed_timing(TaskKind.C, TimingConfig(), to_dict(TimingConfig(baselines=("naive_cuda",))))
    assert got.baselines == ("naive_cuda",)
    sent = TimingConfig(baselines=("naive_cuda",))  # ("eager",) means both C baselines: wider
    assert narrowed_timing(TaskKind.C, sent, to_dict(TimingConfig(baselines=("eager",)))) == sent


def test_the_go_ahead_s_slow_cut_is_taken():
    got = narrowed_timing(TaskKind.C, TimingConfig(), to_dict(TimingConfig(slow_cut_ratio=10.0,
                                                                           slow_cut_floor_ms=50.0)))
    assert (got.slow_cut_ratio, got.slow_cut_floor_ms) == (10.0, 50.0)


def test_a_go_ahead_without_a_slow_cut_leaves_the_job_s():
    sent = TimingConfig(slow_cut_ratio=4.0)
    assert narrowed_timing(TaskKind.C, sent, to_dict(TimingConfig())).slow_cut_ratio == 4.0


@pytest.mark.parametrize("ratio, floor_ms", [(1.0, 100.0), (-2.0, 100.0), (10.0, -1.0)])
def test_a_slow_cut_is_off_or_above_one_with_a_floor_of_at_least_zero(ratio, floor_ms):
    with pytest.raises(ValueError, match="slow_cut"):
        TimingConfig(slow_cut_ratio=ratio, slow_cut_floor_ms=floor_ms)


@pytest.mark.parametrize("asked", [None, 3, "x", {"budget_ms": "abc"}, {"input_sets": 0}, {"nope": 1}])
def test_a_missing_or_malformed_go_ahead_timing_leaves_the_job_s(asked):
    assert narrowed_timing(TaskKind.PYTORCH, TimingConfig(), asked) == TimingConfig()
