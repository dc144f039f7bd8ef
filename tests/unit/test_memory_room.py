"""Memory held for later jobs giving way to the job at hand, and the harness's own out-of-memory errors
(execute.memory_plan `room_bytes`, `to_evict`, `after_oom`; the worker's and the referee's use of them).

Pure arithmetic first, including a CPU reproduction of a KernelBench self-check's sequence of distinct
large tasks on an H200 (both caches full of earlier tasks' references); then a real PyTorch job in this
process (CPU) whose harness steps are made to run out of memory (a CUDA out-of-memory error cannot occur
on this machine: the one test double here raises torch's own `OutOfMemoryError` from the harness's step),
and the referee in this process. The device side is tests/gpu/test_full_size_gpu.py."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))

from cudaperf.anticheat.policy import Policy
from cudaperf.execute import torch_session
from cudaperf.execute.memory_plan import (
    HEADROOM,
    Footprint,
    Wanted,
    after_oom,
    plan_memory,
    room_bytes,
    stage_peaks,
    to_evict,
)
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import task_from_source
from cudaperf.types import Outcome, Solution, SolutionFormat

GB = 10**9
GIB = 1 << 30
MIB = 1 << 20
H200_BYTES = 150_110_000_000  # what the driver reports as total on the H200 of the logs
QUARTER = H200_BYTES // 4  # each cache's budget: the worker's REFERENCES and the referee's store
FLUSH = 540 * MIB


# -- choosing what to give back ---------------------------------------------------------------------


def test_only_other_tasks_entries_are_given_back():
    entries = [("a1", 10 * GB, False), ("own", 10 * GB, True), ("b1", 10 * GB, False)]
    assert to_evict(entries, 0, 100 * GB) == ["a1", "b1"]


def test_the_least_recently_used_go_first_and_only_as_many_as_needed():
    entries = [("old", 10 * GB, False), ("mid", 10 * GB, False), ("new", 10 * GB, False)]
    assert to_evict(entries, 50 * GB, 65 * GB) == ["old", "mid"]


def test_nothing_is_given_back_when_the_free_bytes_suffice():
    assert to_evict([("a", GB, False)], 10 * GB, 5 * GB) == []


def test_a_small_task_needs_little_room():
    assert room_bytes([MIB, MIB // 2], 3, 3, FLUSH, refereed=True) < 2 * GB


def test_the_referee_s_references_are_part_of_the_room():
    alone = room_bytes([GB], 3, 3, FLUSH, refereed=False)
    assert room_bytes([GB], 3, 3, FLUSH, refereed=True) >= alone + 3 * 2 * GB


# -- the plan after a harness step ran out -----------------------------------------------------------


def _wanted(fp: Footprint) -> Wanted:
    return Wanted(all_references_bytes=3 * fp.reference_bytes, seeds=1, input_sets=3, flush_bytes=FLUSH,
                  min_flush_bytes=120 * MIB, cache_bytes=QUARTER, refereed=True)


def test_after_running_out_the_plan_drops_to_its_smallest_at_once():
    fp = Footprint(input_bytes=GB, output_bytes=GB)
    plan = plan_memory(140 * GB, fp, _wanted(fp))
    smaller = after_oom(plan, fp, _wanted(fp), "timing (default)")
    assert (smaller.keep_references, smaller.input_sets, smaller.flush_bytes, smaller.cache_bytes) == (
        False, 1, 120 * MIB, 0)
    assert "timing (default) ran out of device memory" in smaller.degraded[-1]


def test_the_smallest_plan_has_nothing_smaller_to_retry_with():
    fp = Footprint(input_bytes=GB, output_bytes=GB)
    plan = after_oom(plan_memory(140 * GB, fp, _wanted(fp)), fp, _wanted(fp), "x")
    assert after_oom(plan, fp, _wanted(fp), "x") is None


def test_building_the_timing_sets_is_counted_and_never_exceeds_timing():
    fp = Footprint(input_bytes=17_179_869_184, output_bytes=141_705_216)  # the 17 GB pooling
    for keep in (True, False):
        peaks = stage_peaks(fp, _wanted(fp), keep, 3, FLUSH)
        assert 0 < peaks["timing inputs"] <= peaks["timing"]


# -- a self-check's sequence of distinct large tasks, on the arithmetic alone -------------------------

# (name, inputs, output) per configuration: the declared one and two derived at 0.36 and 0.12 of its
# size, the sizes of KernelBench level 1 (11: 4D tensor-matrix product; 45: 2D average pooling; 19: ReLU).
SEQUENCE = [
    ("11_4D_matmul", 2_150_629_376, 6_442_450_944),
    ("45_avg_pool", 17_179_869_184, 141_705_216),
    ("19_ReLU", 6_442_450_944, 6_442_450_944),
]
DERIVED = (1.0, 0.36, 0.12)


def _job_sizes(inputs: int, output: int) -> tuple[list[int], int]:
    """(input bytes per configuration, the referee's references of the job with one seed)."""
    sizes = [int(inputs * f) for f in DERIVED]
    return sizes, sum(int((inputs + output) * f) for f in DERIVED)


def _sequence(give_way: bool) -> list[tuple[str, int]]:
    """Each task's (name, input sets of its plan) after earlier tasks filled both caches to their
    budgets; `give_way`: other tasks' entries are given back first, as the worker and referee now do."""
    worker = [(f"earlier{i}", QUARTER // 4, False) for i in range(4)]  # least recently used first
    referee = [(f"earlier{i}", QUARTER // 4, False) for i in range(4)]
    plans = []
    for name, inputs, output in SEQUENCE:
        sizes, references = _job_sizes(inputs, output)
        if give_way:  # the worker first (before its sync), then the referee, each from the driver's free
            needed = room_bytes(sizes, 1, 3, FLUSH, refereed=True)
            held = sum(b for _, b, _ in worker) + sum(b for _, b, _ in referee)
            gone = set(to_evict(worker, H200_BYTES - held, needed))
            worker = [e for e in worker if e[0] not in gone]
            held = sum(b for _, b, _ in worker) + sum(b for _, b, _ in referee)
            gone = set(to_evict(referee, H200_BYTES - held, needed))
            referee = [e for e in referee if e[0] not in gone]
        held_by_referee = sum(b for _, b, _ in referee) + references
        # the worker counts its own cache as free (it trims it to the plan); the referee's is not
        free = H200_BYTES - held_by_referee
        fp = Footprint(inputs, output)
        wanted = Wanted(all_references_bytes=3 * sum(sizes) + 3 * int(output * sum(DERIVED)), seeds=1,
                        input_sets=3, flush_bytes=FLUSH, min_flush_bytes=120 * MIB, cache_bytes=QUARTER,
                        refereed=True)
        plan = plan_memory(free, fp, wanted)
        assert plan.fits, (name, plan.refused)
        plans.append((name, plan.input_sets))
        # after the job: both caches keep this task's references, within their budgets
        worker = _keep(worker, name, min(plan.cache_bytes, sum(sizes)))
        referee = _keep(referee, name, references)
    return plans


def _keep(entries: list, name: str, nbytes: int) -> list:
    """The cache after a job of `name` put `nbytes` in it: the oldest entries evicted past the budget."""
    entries = [(k, b, False) for k, b, _ in entries] + [(name, nbytes, False)]
    while len(entries) > 1 and sum(b for _, b, _ in entries) > QUARTER:
        entries.pop(0)
    return entries


def test_without_giving_way_the_pooling_after_full_caches_loses_an_input_set():
    assert dict(_sequence(give_way=False))["45_avg_pool"] < 3


def test_giving_way_lets_every_task_of_the_sequence_keep_its_three_input_sets():
    assert all(sets == 3 for _, sets in _sequence(give_way=True))


def test_the_room_of_a_full_size_task_asks_for_nearly_the_whole_device():
    sizes, _ = _job_sizes(17_179_869_184, 141_705_216)
    assert room_bytes(sizes, 1, 3, FLUSH, refereed=True) > HEADROOM * H200_BYTES


# -- the worker: a real PyTorch job on the CPU --------------------------------------------------------

# The small task, its correct candidate and the worker-like process of the release tests (the fixture
# is autouse here too: the pure tests above do not mind a warm, guarded process).
from test_memory_release import CORRECT, TASK, _worker_like_process  # noqa: E402, F401


def _run(seeds=(1, 2)) -> object:
    job = EvalJob(task=task_from_source(TASK, "relu_twice"), solution=Solution("s1", CORRECT,
                  SolutionFormat.PYTORCH), device="cpu", seeds=seeds, policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager",)), coverage=False)
    return torch_session.TorchSession(lambda stage: None).run(job_message(job, "00ff00ff"))


def _failing(monkeypatch, method: str, times: int) -> list:
    """Make `TorchSession.method` raise torch's OutOfMemoryError on its first `times` calls."""
    calls: list = []
    original = getattr(torch_session.TorchSession, method)

    def failing(self, *args, **kwargs):
        calls.append(args)
        if len(calls) <= times:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch_session.TorchSession, method, failing)
    return calls


def _degraded(payload) -> list[str]:
    return [f.message for f in payload.flags if f.code == "memory_plan_degraded"]


def test_the_plan_s_reference_out_of_memory_is_retried_after_the_caches_are_given_back(monkeypatch):
    _failing(monkeypatch, "compute_reference", 1)
    payload = _run()
    assert payload.outcome is None and all(c.correct for c in payload.correctness)


def test_the_plan_s_reference_out_of_memory_twice_is_skipped_with_why(monkeypatch):
    _failing(monkeypatch, "compute_reference", 2)
    payload = _run()
    assert payload.outcome is Outcome.SKIPPED and "out of device memory" in payload.message


def test_references_out_of_memory_are_retried_with_the_smallest_plan(monkeypatch):
    _failing(monkeypatch, "keep_references", 1)
    payload = _run()
    assert payload.outcome is None and all(c.correct for c in payload.correctness)
    assert any("the references ran out of device memory" in d for d in _degraded(payload))


def test_timing_out_of_memory_is_retried_with_one_input_set(monkeypatch):
    _failing(monkeypatch, "time_config", 1)
    payload = _run()
    assert payload.outcome is None and payload.timings
    assert any("timing (default) ran out" in d and "1 input set" in d for d in _degraded(payload))


def test_out_of_memory_again_with_the_smallest_plan_is_skipped_never_a_harness_error(monkeypatch):
    _failing(monkeypatch, "time_config", 2)
    payload = _run()
    assert payload.outcome is Outcome.SKIPPED and "out of device memory again" in payload.message


def test_timing_sets_are_drawn_afresh_without_computing_other_seeds_references(monkeypatch):
    computed: list = []
    original = torch_session.TorchSession.compute_reference
    original_plan = torch_session.plan_memory

    def one_at_a_time(free, fp, wanted):  # as on a device too small to keep every reference
        return dataclasses.replace(original_plan(free, fp, wanted), keep_references=False)

    def watched(self, config, seed):
        computed.append((self.current_stage, seed))
        return original(self, config, seed)

    monkeypatch.setattr(torch_session, "plan_memory", one_at_a_time)
    monkeypatch.setattr(torch_session.TorchSession, "compute_reference", watched)
    payload = _run(seeds=(1,))  # one correctness seed, three timing input sets
    assert payload.outcome is None and payload.timings
    assert [seed for stage, seed in computed if stage == "timing"] == []


# -- the referee, in this process ---------------------------------------------------------------------


def _referee():
    from cudaperf.execute.outputs import Region
    from cudaperf.execute.referee import Referee, create_region_fd

    return Referee(Region(create_region_fd(1 << 16), 1 << 16), torch.device("cpu"))


def _wire_job() -> dict:
    job = EvalJob(task=task_from_source(TASK, "relu_twice"), solution=Solution("s1", CORRECT,
                  SolutionFormat.PYTORCH), device="cpu", seeds=(1, 2), policy=Policy(allow_torch_ops=True))
    return job_message(job, "00ff00ff")


def test_the_referee_computes_a_pytorch_job_s_references_at_the_worker_s_sync():
    referee = _referee()
    try:
        referee.handle({"type": "job", "job": _wire_job()})
        before = len(referee.torch_store)
        referee.handle({"type": "sync"})
        assert (before, len(referee.torch_store)) == (0, 2)
    finally:
        torch.set_grad_enabled(True)


def test_the_referee_gives_its_cache_back_after_each_reference(monkeypatch):
    from cudaperf.execute import referee as referee_module

    releases: list = []
    monkeypatch.setattr(referee_module.Referee, "_release",
                        lambda self, above_bytes=0: releases.append(above_bytes))
    referee = _referee()
    try:
        referee.handle({"type": "job", "job": _wire_job()})
        releases.clear()
        referee.job.prepare_references()
        assert len(releases) == 2  # one per (configuration, seed)
    finally:
        torch.set_grad_enabled(True)


def test_a_reference_out_of_memory_in_the_referee_makes_room_once_then_skips_the_job(monkeypatch):
    from cudaperf.execute import referee as referee_module
    from cudaperf.execute import torch_judge

    rooms: list = []

    def out_of_memory(self, config, seed, entry):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")

    monkeypatch.setattr(torch_judge.TorchJudge, "_compute", out_of_memory)
    monkeypatch.setattr(referee_module.Referee, "make_room", lambda self, needed, own: rooms.append(needed))
    referee = _referee()
    try:
        referee.handle({"type": "job", "job": _wire_job()})
        referee.handle({"type": "sync"})
        verdict = referee.handle({"type": "finish", "outcome": None, "claim": [], "timings": []})
    finally:
        torch.set_grad_enabled(True)
    assert len(rooms) == 1 and "error" not in verdict and "out of device memory" in verdict["skipped"]


def test_a_skipped_verdict_makes_the_job_skipped_not_a_harness_error():
    from cudaperf.execute.referee import apply_verdict

    payload = apply_verdict({"outcome": None, "correctness": [{"config": "default"}], "flags": []},
                            {"skipped": "the references do not fit on the device: ..."})
    assert payload["outcome"] == "skipped" and payload["correctness"] == []


def test_timing_sets_drawn_afresh_equal_the_seeds_reference_inputs(monkeypatch):
    from cudaperf.execute.session import Session
    from cudaperf.tasks.runtime import make_inputs

    captured: list = []
    original_bench, original_plan = Session.bench, torch_session.plan_memory

    def capture(self, fns, input_sets, check, config, *rest, **options):
        captured.append([[t.clone() for t in inputs] for inputs in input_sets])
        return original_bench(self, fns, input_sets, check, config, *rest, **options)

    monkeypatch.setattr(torch_session, "plan_memory", lambda free, fp, wanted: dataclasses.replace(
        original_plan(free, fp, wanted), keep_references=False))
    monkeypatch.setattr(Session, "bench", capture)
    job = EvalJob(task=task_from_source(TASK, "relu_twice"), solution=Solution("s1", CORRECT,
                  SolutionFormat.PYTORCH), device="cpu", seeds=(1,), policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager",)), coverage=False)
    session = torch_session.TorchSession(lambda stage: None)
    assert session.run(job_message(job, "00ff00ff")).outcome is None
    module, config = next(iter(session.modules.values())), session.configs[0]
    expected = [make_inputs(module, config, seed, "cpu") for seed in session.timing_seeds]
    assert len(captured[0]) == 3 and all(torch.equal(a[0], b[0]) for a, b in zip(captured[0], expected))
