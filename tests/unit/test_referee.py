"""The referee (execute/referee.py): outputs shipped from a real sandboxed worker (CPU mode) through the
shared region, judged in a process the candidate never runs in; a worker whose reply native code could
rewrite (stood in for by handlers in sandbox_handlers.py that run the real evaluation and then rewrite
its payload) is contradicted (`verdict_mismatch`); a candidate that looks for reference outputs in the
worker finds none. Pure pieces (describing outputs, the region, the assembler, merging a verdict) are
tested without a process. The GPU side (native fixtures that copy a reference or forge a reply) is in
tests/gpu/test_sandbox_gpu.py."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy, is_violation
from cudaperf.execute import Limits, StageTimeouts, Worker, WorkerPool, dispatch, referee
from cudaperf.execute.outputs import (
    Assembler,
    Key,
    Malformed,
    Region,
    Shipper,
    describe,
    rebuild,
)
from cudaperf.execute.referee import create_region_fd
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import task_from_source
from cudaperf.types import Solution, SolutionFormat

sys.path.insert(0, str(Path(__file__).parent))
from test_session import CORRECT, MUTATING, SUBCLASS, TASK, WRONG  # the same small PyTorch task

HANDLERS = str(Path(__file__).with_name("sandbox_handlers.py"))
TIMEOUTS = StageTimeouts(default_s=120.0, start_s=180.0)
LIMITS = Limits(address_space_bytes=8 << 30, output_region_bytes=4096)  # a small region: many chunks

# Looks for the reference output of its own inputs in the worker's cross-job cache and returns a copy;
# zeros when it finds none (then it is wrong).
COPYING = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x, z):
        from cudaperf.execute import torch_session
        for entry in list(torch_session.REFERENCES._entries.values()):
            found = entry.outputs is not None and entry.inputs[0].shape == x.shape
            if found and torch.equal(entry.inputs[0], x) and torch.equal(entry.inputs[1], z):
                return entry.outputs.clone()
        return torch.zeros(x.shape[0], self.n)
'''


def _job(solution: str, **fields) -> dict:
    job = EvalJob(task=task_from_source(TASK, "relu_linear"), solution=Solution("s1", solution,
                  SolutionFormat.PYTORCH), device="cpu", seeds=(1, 2), policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager",)),
                  max_output_bytes=1 << 26)
    return {**job_message(job, "00ff00ff"), **fields}


def _handler(name: str, solution: str) -> dict:
    return _job(solution, handler=f"{HANDLERS}:{name}", referee=True)


def _codes(reply, severity: str | None = None) -> set[str]:
    return {f["code"] for f in reply.payload.get("flags", []) if severity in (None, f["severity"])}


@pytest.fixture(scope="module")
def cache_dir():
    """A build cache the worker's uid can enter (the C reference library is read from it)."""
    path = tempfile.mkdtemp(prefix="cudaperf-referee-cache-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def pool(cache_dir):
    with WorkerPool(None, dataclasses.replace(LIMITS, cache_dir=cache_dir), timeouts=TIMEOUTS) as p:
        p.warm_up()
        yield p


def _c_job(solution: str, cache_dir: str) -> dict:
    from test_c_session import SQUARE
    from test_c_session import _job as c_job

    return c_job(SQUARE, solution, cache_dir=cache_dir)


# -- through a real worker and referee ---------------------------------------------------------------


def test_correct_candidate_is_judged_by_the_referee_and_timed(pool):
    reply = pool.run(_job(CORRECT))
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    assert [c["correct"] for c in reply.payload["correctness"]] == [True, True]
    assert len(reply.payload["timings"]) == 2 and reply.sandbox["referee_s"] > 0


def test_wrong_candidate_is_incorrect_and_untimed(pool):
    reply = pool.run(_job(WRONG))
    assert not any(c["correct"] for c in reply.payload["correctness"])
    assert reply.payload["timings"] == []


def test_the_referee_sees_an_input_the_candidate_changed(pool):
    reply = pool.run(_job(MUTATING))
    assert "input_mutated" in _codes(reply, "error")
    assert "modified inputs[1]" in reply.payload["correctness"][0]["message"]


def test_a_tensor_subclass_output_is_refused_by_the_referee(pool):
    reply = pool.run(_job(SUBCLASS))
    assert "tensor_subclass_output" in _codes(reply, "error")


def test_a_correct_c_candidate_is_judged_by_the_referee_and_timed(pool, cache_dir):
    from test_c_session import SQUARE_OK

    reply = pool.run(_c_job(SQUARE_OK, cache_dir))
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    assert [c["correct"] for c in reply.payload["correctness"]] == [True, True, True]
    assert len(reply.payload["timings"]) == 3


def test_a_correct_c_candidate_timed_on_every_configuration_raises_no_flag(pool, cache_dir):
    from test_c_session import SQUARE_OK

    reply = pool.run(_c_job(SQUARE_OK, cache_dir))
    assert _codes(reply, "error") == set(), reply.payload.get("flags")


def test_a_c_candidate_that_skips_the_last_element_leaves_the_fill_pattern(pool, cache_dir):
    partial = "def square(x, out, n):\n    out[:n - 1].copy_(x[:n - 1] * x[:n - 1])\n"
    reply = pool.run(_c_job(partial, cache_dir))
    assert not any(c["correct"] for c in reply.payload["correctness"])
    assert "fill pattern" in reply.payload["correctness"][0]["message"]


# A derived configuration (a smaller `size`) on which this reference fails on the device, though not on
# `meta` (where `float()` has no data), so the loader keeps it.
FUSSY_TASK = '''
import torch
import torch.nn as nn

size = 1024

class Model(nn.Module):
    def forward(self, x):
        if float(x.abs().sum()) >= 0 and x.shape[0] != 1024:
            raise RuntimeError("this reference only runs at its declared size")
        return x * 2

def get_inputs():
    return [torch.randn(size)]

def get_init_inputs():
    return []
'''
FUSSY_CANDIDATE = """
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        if x.shape[0] != 1024:
            raise ValueError("only the declared size")
        return x * 2
"""


def test_a_derived_configuration_whose_reference_fails_is_dropped_not_blamed(pool):
    task = task_from_source(FUSSY_TASK, "fussy")
    assert [c.timed for c in task.configs] == [True, False, False]
    job = EvalJob(task=task, solution=Solution("s1", FUSSY_CANDIDATE, SolutionFormat.PYTORCH), device="cpu",
                  seeds=(1, 2), policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager",)))
    reply = pool.run(job_message(job, "00ff00ff"))
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    assert [(c["config"], c["correct"]) for c in reply.payload["correctness"]] == [("default", True)]
    dropped = [f["config"] for f in reply.payload["flags"] if f["code"] == "derived_config_dropped"]
    assert sorted(dropped) == ["derived_1", "derived_2"]


def test_a_forged_correct_claim_is_a_verdict_mismatch(pool):
    reply = pool.run(_handler("forge_claim", WRONG))
    assert not any(c["correct"] for c in reply.payload["correctness"])
    assert "verdict_mismatch" in _codes(reply, "error") and is_violation("verdict_mismatch")
    assert reply.worker_replaced


def test_a_verdict_claimed_without_shipped_outputs_is_a_verdict_mismatch(pool):
    reply = pool.run(_handler("claim_without_outputs", CORRECT))
    assert "verdict_mismatch" in _codes(reply, "error")
    assert not any(c["correct"] for c in reply.payload["correctness"])


def test_a_payload_that_does_not_parse_is_a_verdict_mismatch(pool):
    reply = pool.run(_handler("malformed_payload", WRONG))
    assert "verdict_mismatch" in _codes(reply, "error")
    assert not any(c["correct"] for c in reply.payload["correctness"])


def test_timed_calls_longer_than_the_timing_stage_are_a_verdict_mismatch(pool):
    reply = pool.run(_handler("inflate_timing", CORRECT))
    assert "verdict_mismatch" in _codes(reply, "error")


def test_an_honest_worker_raises_no_mismatch(pool):
    reply = pool.run(_job(CORRECT))
    assert reply.outcome is None and "verdict_mismatch" not in _codes(reply), reply.payload["flags"]


def test_a_claim_that_agrees_with_the_referee_is_still_a_forgery(pool):
    """A refereed worker's code writes no correctness of its own: a true claim was written by other code."""
    reply = pool.run(_handler("forge_claim", CORRECT))
    assert "verdict_mismatch" in _codes(reply, "error") and reply.worker_replaced


def test_the_worker_keeps_no_reference_output_after_a_job(pool):
    reply = pool.run(_handler("references_left", CORRECT))
    assert reply.payload["entries"] > 0 and reply.payload["with_outputs"] == 0


def test_a_candidate_finds_no_reference_output_to_copy_in_the_worker(pool):
    pool.run(_job(CORRECT))  # the same task and seeds before: the cross-job cache holds their references
    reply = pool.run(_job(COPYING))
    assert not any(c["correct"] for c in reply.payload["correctness"]), reply.payload["correctness"]


def test_without_the_referee_the_same_candidate_copies_the_reference():
    """The control: judged in its own process, the worker has the references at hand."""
    from cudaperf.execute import guards, torch_session

    if not guards._installed.is_set():
        guards.install_audit_hook(temp_root=str(Path(__file__).parent))
    torch_session.REFERENCES.clear()
    dispatch.run_eval_job(_job(CORRECT), lambda stage: None)
    payload = dispatch.run_eval_job(_job(COPYING), lambda stage: None)
    torch_session.REFERENCES.clear()
    assert all(c["correct"] for c in payload["correctness"])


def test_the_referee_runs_as_the_evaluator_outside_the_worker_s_namespaces(pool):
    worker = pool.workers[0]
    pid = worker.referee._proc.pid
    assert os.stat(f"/proc/{pid}").st_uid == os.getuid()
    assert os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid")
    if worker.boundary_state.get("pid_ns"):
        assert worker.boundary_state["uid"] != os.getuid() or os.getuid() != 0


def test_the_region_is_zeroed_after_each_job(pool):
    pool.run(_job(CORRECT))
    link = pool.workers[0].referee
    assert os.pread(link.region_fd, link.region_bytes, 0) == bytes(link.region_bytes)


def test_referee_off_leaves_the_worker_to_judge_itself():
    with WorkerPool(None, dataclasses.replace(LIMITS, referee=False), timeouts=TIMEOUTS) as p:
        reply = p.run(_job(CORRECT))
        assert p.workers[0].referee is None
    assert reply.outcome is None and all(c["correct"] for c in reply.payload["correctness"])
    assert "referee_s" not in reply.sandbox


# -- a worker started from a thread that then exits --------------------------------------------------


def test_a_worker_started_from_a_thread_that_exits_stays_alive_and_answers():
    worker = Worker(None, dataclasses.replace(LIMITS, referee=False), preload=())
    try:
        starter = threading.Thread(target=worker.start)
        starter.start()
        starter.join()
        reply = worker.run({"handler": f"{HANDLERS}:ok", "echo": 5}, TIMEOUTS)
        assert reply.outcome is None and reply.payload["echo"] == 5 and not reply.worker_replaced, reply
    finally:
        worker.close()


# -- the pieces ---------------------------------------------------------------------------------------


def test_described_outputs_rebuild_to_the_same_structure():
    value = (torch.arange(6.0).reshape(2, 3), [None, 3, 2.5, True], torch.tensor([], dtype=torch.int64))
    spec, tensors = describe(value)
    back = rebuild(spec, [t.clone() for t in tensors])
    assert type(back) is tuple and type(back[1]) is list and back[1] == [None, 3, 2.5, True]
    assert torch.equal(back[0], value[0]) and back[2].dtype == torch.int64


def test_a_tensor_subclass_is_described_by_name_and_rebuilt_as_a_subclass():
    class Lazy(torch.Tensor):
        pass

    spec, tensors = describe(torch.zeros(3).as_subclass(Lazy))
    assert spec["t"] == "other" and spec["tensor"] and spec["type"].endswith("Lazy") and tensors == []
    stand_in = rebuild(spec, [])
    assert isinstance(stand_in, torch.Tensor) and type(stand_in).__qualname__.endswith("Lazy")


def test_the_region_cannot_be_shrunk():
    fd = create_region_fd(8192)
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 10)
    finally:
        os.close(fd)


def _channel(region_bytes: int):
    """A shipper whose exchange feeds assemblers directly (what the parent and referee do)."""
    fd = create_region_fd(region_bytes)
    region = Region(fd, region_bytes)
    state: dict = {"messages": 0, "values": {}}

    def exchange(message: dict) -> dict:
        state["messages"] += 1
        for part in message.get("parts", []):
            key = tuple(part["key"])
            if "spec" in part:
                state[key] = Assembler(part["spec"], torch.device("cpu"), 1 << 30)
            if state[key].take(region, part["start"], part["nbytes"], part["offset"]):
                state["values"][key] = state[key].value()
        return {}

    return Shipper(exchange, region), state


def test_an_output_larger_than_the_region_travels_in_chunks_unchanged():
    shipper, state = _channel(4096)
    output = torch.randn(3000)  # 12,000 bytes: three chunks
    shipper.ship(Key("a", 0, 1), {"output": output, "inputs_after": None})
    back, after = state["values"][("a", 0, 1)]
    assert state["messages"] == 3 and torch.equal(back, output) and after is None


def test_small_outputs_wait_and_travel_together_in_one_message():
    shipper, state = _channel(4096)
    outputs = [torch.full((100,), float(i)) for i in range(5)]  # 400 bytes each
    for i, out in enumerate(outputs):
        shipper.ship(Key("a", i, 1), {"output": out, "inputs_after": None})
    assert state["messages"] == 0
    shipper.flush()
    assert state["messages"] == 1
    assert all(torch.equal(state["values"][("a", i, 1)][0], outputs[i]) for i in range(5))


def test_a_chunk_out_of_order_is_malformed():
    fd = create_region_fd(4096)
    region = Region(fd, 4096)
    spec, _ = describe((torch.zeros(2048), None))
    assembler = Assembler(spec, torch.device("cpu"), 1 << 20)
    with pytest.raises(Malformed):
        assembler.take(region, 4096, 4096)


def test_an_output_over_the_limit_is_counted_not_stored_and_still_judged():
    from cudaperf.correctness import compare

    fd = create_region_fd(4096)
    region = Region(fd, 4096)
    spec, _ = describe((torch.zeros(2048), None))
    assembler = Assembler(spec, torch.device("cpu"), 1000)
    assert not assembler.stored
    assert not assembler.take(region, 0, 4096) and assembler.take(region, 4096, 4096)
    result = compare(assembler.value()[0], torch.zeros(10))
    assert not result.ok and "shape (2048,), expected (10,)" in result.message


def test_apply_verdict_replaces_the_claim_and_the_worker_s_speed_of_light_flags():
    payload = {"outcome": None, "correctness": [{"config": "a", "correct": True}],
               "flags": [{"code": "impossible_speed", "config": "a", "message": "m", "severity": "error"},
                         {"code": "other", "config": "a", "message": "m", "severity": "info"}],
               "timings": [{"config": "a", "speed_of_light_ms": 1.0}]}
    verdict = {"correctness": [{"config": "a", "correct": False}], "flags": [],
               "sol": {"a": {"floor_ms": 2.0, "bytes_moved": 8.0, "flops": None}}}
    merged = referee.apply_verdict(payload, verdict)
    assert merged["correctness"] == [{"config": "a", "correct": False}]
    assert [f["code"] for f in merged["flags"]] == ["other"]
    assert merged["timings"][0]["speed_of_light_ms"] == 2.0


def test_a_failed_referee_makes_a_correctness_verdict_a_harness_error():
    merged = referee.apply_verdict({"outcome": None, "correctness": []}, {"error": "it died"})
    assert merged["outcome"] == "harness_error" and "it died" in merged["message"]
