"""On the GPU (marker `gpu`): a refereed PyTorch worker holds no right answer on a timing input set while
the candidate's code runs in the timing stage, with both baselines (eager and torch.compile) timed beside
it. Through a real sandboxed worker and referee, with the probe of tests/unit/timing_probe_handlers.py at
each of the candidate's calls in the timing stage: live CUDA tensors (gc), fresh allocations of the
output's size (the caching allocator's freed blocks of that size), and a raw read of every inactive block
of the allocator, the baselines' private pool included (`cuMemcpyDtoH`, at every 512-byte offset). Each
disposal of a baseline output is checked afterwards (nothing readable left), and its cost printed. A small
configuration (the allocator's small pool) and a 2 MiB one (its large pool); the task as it is, and two
whose answer is also a temporary of the forward: copied once more at the end (`.clone()`), and sliced out
of a larger tensor holding it twice (`cat([y, y])[:rows]`: the output is a view, the rest of its storage a
copy). The baselines' memory mechanism (`execute.baseline_memory.CudaPool`) on its own: a routed call's
freed block holds the fill after the scrub, a live one is left intact, the general pool never gets the
pool's blocks, a compiled call allocates in it, and the routing and scrub add nothing to the timed
samples. What the CPU twin (tests/unit/test_referee_timing_answers.py) cannot reach: the caching
allocator, stream order, the compiled baseline. Run:
    python3 -m pytest -q -s tests/gpu/test_referee_timing_answers_gpu.py
It prints `[timing-answers] probe {...}` lines, one per task (expect live 0, freed 0, device_blocks 0,
left_readable 0, calls and disposed > 20), `[timing-answers] ... memory: ...` lines (the mechanism and its
host time per scrub, one scrub per settle before a candidate call), `[timing-answers] overwrite ...` lines
(the cost per overwritten output: the fill, queued) and, from the `timing` tests, `[timing-answers]
routed ...` lines (the eager-like median plain and routed, the scrub's cost per call).
"""

from __future__ import annotations

import secrets
import sys
import time
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy
from cudaperf.execute import Limits, StageTimeouts, WorkerPool
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import task_from_source
from cudaperf.types import Solution, SolutionFormat

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from test_referee_timing_answers import NEAR  # the candidate: correct, never bit-equal to the reference

PROBES = str(Path(__file__).parents[1] / "unit" / "timing_probe_handlers.py")
TIMEOUTS = StageTimeouts(default_s=300.0, start_s=180.0)
TASK = '''
import torch
import torch.nn as nn

CUDAPERF_TASK = {"no_derived_configs": "a GPU test of the timing stage on its declared configurations"}

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x, z):
        return torch.relu(self.linear(x)) * 2 + z

def get_input_configs():
    return [{"name": "small", "n": 16, "rows": 8}, {"name": "large", "n": 1024, "rows": 512}]

def get_inputs(n=16, rows=8):
    return [torch.randn(rows, n), torch.randn(rows, n)]

def get_init_inputs(n=16, rows=8):
    return [n]
'''


# The answer is also a temporary of the forward: copied once more at the end, or sliced out of a tensor
# holding it twice (the output is a view; the rest of its storage, freed later, is a copy)
LAST = "return torch.relu(self.linear(x)) * 2 + z"
TEMPORARY_TASKS = {
    "copied": TASK.replace(LAST, "return (torch.relu(self.linear(x)) * 2 + z).clone()"),
    "sliced": TASK.replace(LAST, "y = torch.relu(self.linear(x)) * 2 + z\n"
                                 "        return torch.cat([y, y])[: x.shape[0]]"),
}


def _probed(source: str, name: str):
    """The probed job on `source` through a real worker and referee; prints what the probe found and the
    cost of the baselines' disposal and memory mechanism."""
    job = EvalJob(task=task_from_source(source, name), solution=Solution("near", NEAR,
                  SolutionFormat.PYTORCH), device="cuda:0", seeds=(1, 2), policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=20.0, warmup_ms=5.0, baselines=("eager", "compile")))
    message = {**job_message(job, secrets.token_hex(16)),
               "handler": f"{PROBES}:probe_right_answers_on_device", "referee": True}
    with WorkerPool([0], Limits(), timeouts=TIMEOUTS) as p:
        p.warm_up()
        reply = p.run(message)
    probe = reply.payload.get("probe", {})
    print(f"\n[timing-answers] {name}: probe {probe}")
    print(f"[timing-answers] {name}: memory: {reply.payload.get('environment', {}).get('baseline_memory')}")
    if probe.get("disposed"):
        per_us = 1e6 * probe["dispose_s"] / probe["disposed"]
        print(f"[timing-answers] {name}: overwrite through the worker: {per_us:.1f} µs per baseline output "
              "(the fill, queued; the pool's scrub and the wait are the settles', in `memory:` above)")
    return reply


@pytest.fixture(scope="module")
def probed():
    return _probed(TASK, "relu_linear_gpu")


@pytest.fixture(scope="module", params=sorted(TEMPORARY_TASKS))
def probed_temporary(request):
    return request.param, _probed(TEMPORARY_TASKS[request.param], f"relu_linear_{request.param}_gpu")


def test_the_probed_candidate_is_correct_and_timed_against_both_baselines(probed):
    assert probed.outcome is None, (probed.message, probed.logs[-3000:])
    assert all(c["correct"] for c in probed.payload["correctness"]), probed.payload["correctness"]
    timings = probed.payload["timings"]
    assert len(timings) == 2 and all(t["eager"] and t["compiled"] for t in timings), timings
    codes = {f["code"] for f in probed.payload["flags"]}
    assert not codes & {"timed_output_mismatch", "baseline_output_mismatch", "verdict_mismatch"}, codes
    assert probed.payload["probe"]["calls"] > 20


def test_no_live_cuda_tensor_holds_the_right_answer_while_the_candidate_runs(probed):
    assert probed.payload["probe"]["live"] == 0, probed.payload["probe"]


def test_no_freed_block_of_the_output_s_size_holds_the_right_answer_while_the_candidate_runs(probed):
    assert probed.payload["probe"]["freed"] == 0, probed.payload["probe"]


def test_no_inactive_block_of_the_allocator_holds_the_right_answer_while_the_candidate_runs(probed):
    assert probed.payload["probe"]["device_blocks"] == 0, probed.payload["probe"]


def test_every_baseline_output_is_overwritten_before_it_is_released(probed):
    probe = probed.payload["probe"]
    assert probe["disposed"] > 20 and probe["left_readable"] == 0, probe


def test_a_model_whose_answer_is_a_temporary_is_timed_against_both_baselines(probed_temporary):
    name, reply = probed_temporary
    assert reply.outcome is None, (name, reply.message, reply.logs[-3000:])
    assert all(c["correct"] for c in reply.payload["correctness"]), reply.payload["correctness"]
    timings = reply.payload["timings"]
    assert len(timings) == 2 and all(t["eager"] and t["compiled"] for t in timings), timings
    codes = {f["code"] for f in reply.payload["flags"]}
    assert not codes & {"timed_output_mismatch", "baseline_output_mismatch", "verdict_mismatch",
                        "baseline_memory_unscrubbed"}, codes
    assert reply.payload["probe"]["calls"] > 20


def test_no_inactive_block_holds_an_answer_that_was_a_baseline_s_temporary(probed_temporary):
    name, reply = probed_temporary
    probe = reply.payload["probe"]
    assert probe["device_blocks"] == 0 and probe["freed"] == 0, (name, probe)


def test_no_live_tensor_holds_an_answer_that_was_a_baseline_s_temporary(probed_temporary):
    name, reply = probed_temporary
    probe = reply.payload["probe"]
    assert probe["live"] == 0 and probe["left_readable"] == 0, (name, probe)


@pytest.mark.timing  # asserts on medians: runs alone (gpu_check.sh timing-tests), not beside xdist workers
@pytest.mark.parametrize("nbytes", [4 << 10, 4 << 20, 256 << 20])
def test_disposing_adds_no_time_to_the_timed_samples(nbytes):
    """The same bench with the eager-like function plain and `Disposed` (the worker's own disposal): its
    median within 10% and 3 µs (the disposal is outside the window); prints the wall time it adds."""
    from cudaperf.execute.torch_session import TorchSession
    from cudaperf.timing import Disposed, bench_interleaved_report

    device = torch.device("cuda", 0)
    session = types.SimpleNamespace(device=device, baseline_memory=None)
    sets = [[torch.randn(nbytes // 4, device=device)] for _ in range(3)]

    def run(fns):
        torch.cuda.synchronize()
        began = time.perf_counter()
        report = bench_interleaved_report(fns, sets, budget_ms=0, warmup_ms=0, min_reps=200, max_reps=200,
                                          measure_overhead=False)
        return report, time.perf_counter() - began

    def baseline(inputs):
        return inputs[0] * 2

    def candidate(inputs):
        return inputs[0] + inputs[0]

    def dispose(out):
        TorchSession.dispose_baseline_output(session, out, frozenset())

    run({"candidate": candidate, "eager": baseline})  # warm: kernels, allocator
    plain, plain_s = run({"candidate": candidate, "eager": baseline})
    disposed, disposed_s = run({"candidate": candidate, "eager": Disposed(baseline, dispose)})
    calls = 1 + 3 + disposed.warmup_rounds + disposed.rounds  # the eager-like function's, all disposed
    extra_us = 1e6 * (disposed_s - plain_s) / calls
    before, after = plain.timings["eager"].median_ms, disposed.timings["eager"].median_ms
    print(f"\n[timing-answers] disposal of a {nbytes} B output: {1e3 * disposed.dispose_ms / calls:.1f} µs "
          f"each (+{extra_us:.1f} µs wall per call); eager median {before:.4f} ms plain, {after:.4f} ms "
          "disposed")
    assert disposed.dispose_ms > 0
    assert abs(after - before) <= 0.10 * before + 0.003  # 3 µs: the protocol's own cross-run spread


def test_every_kind_of_baseline_output_is_overwritten_on_the_gpu_but_an_input_view():
    """The disposal on CUDA outputs of every shape a task returns: a dict of tuples and lists, an expanded
    view, integer, bool, complex, half and bfloat16 tensors, an empty one, a transposed one; a view of an
    input (its storage in `keep`) is left as it is, and nothing is left queued (stream order)."""
    from cudaperf.execute.torch_session import TorchSession

    device = torch.device("cuda", 0)
    session = types.SimpleNamespace(device=device, baseline_memory=None)
    x = torch.randn(64, 32, device=device)
    kept = x.clone()
    out = {"a": (torch.randn(64, 1, device=device).expand(64, 8), torch.arange(3, device=device),
                 torch.ones(2, dtype=torch.bool, device=device)),
           "b": [torch.randn(4, dtype=torch.complex64, device=device), torch.zeros(0, device=device),
                 torch.randn(3, device=device).bfloat16(), torch.randn(3, device=device).half(),
                 torch.randn(256, 256, device=device).t(), x.t(), 3.5]}
    TorchSession.dispose_baseline_output(session, out, frozenset({x.untyped_storage().data_ptr()}))
    floats = [out["a"][0], out["b"][2], out["b"][3], out["b"][4], out["b"][0].real]
    assert all(bool(t.isnan().all()) for t in floats)
    assert not out["a"][1].any() and not out["a"][2].any() and torch.equal(x, kept)


# The aliasing tasks of the CPU twin, with the compiled baseline too: what torch.compile returns for an
# output that is an input's view or a tensor the model holds (plainly or in a list) must stay intact.
@pytest.mark.parametrize("which", ["ALIASING_TASK", "LISTED_TASK"])
def test_a_compiled_baseline_output_aliasing_an_input_or_the_model_is_left_intact(which):
    import test_referee_timing_answers as cpu

    job = EvalJob(task=task_from_source(getattr(cpu, which), f"aliasing_gpu_{which.lower()}"),
                  solution=Solution("copy", cpu.ALIASING_CANDIDATE, SolutionFormat.PYTORCH), device="cuda:0",
                  seeds=(1, 2), policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=20.0, warmup_ms=5.0, baselines=("eager", "compile")))
    with WorkerPool([0], Limits(), timeouts=TIMEOUTS) as p:
        p.warm_up()
        reply = p.run({**job_message(job, secrets.token_hex(16)), "referee": True})
    assert reply.outcome is None, (reply.message, reply.logs[-3000:])
    why = [f["message"] for f in reply.payload["flags"] if f["code"] == "compile_baseline_failed"]
    timings = reply.payload["timings"]
    assert all(t["eager"] and t["compiled"] for t in timings), (why, timings)
    codes = {f["code"] for f in reply.payload["flags"]}
    assert not codes & {"timed_output_mismatch", "baseline_output_mismatch", "verdict_mismatch"}, \
        reply.payload["flags"]


# -- the baselines' memory mechanism on its own (execute.baseline_memory.CudaPool) --------------------


def _raw(address: int, nbytes: int) -> bytes:
    """`nbytes` of device memory at `address`, read raw (no tensor)."""
    import numpy as np
    from cuda.bindings import driver

    host = np.empty(nbytes, dtype=np.uint8)
    (error,) = driver.cuMemcpyDtoH(host.ctypes.data, address, nbytes)
    assert error == driver.CUresult.CUDA_SUCCESS, error
    return host.tobytes()


def _pool_ranges(memory) -> list[tuple[int, int]]:
    return [(seg["address"], seg["address"] + seg["total_size"])
            for seg in torch.cuda.memory_snapshot(memory.pool.id) if seg.get("device") == memory.index]


@pytest.mark.parametrize("elements", [1 << 10, 1 << 20])  # 4 KiB (small pool), 4 MiB (large pool)
def test_a_block_a_routed_call_freed_holds_the_fill_after_the_scrub(elements):
    from cudaperf.execute.baseline_memory import FILL_BYTE, CudaPool

    device = torch.device("cuda", 0)
    memory = CudaPool(device)
    assert memory.pool is not None, memory.kind
    with memory.routed():
        temporary = torch.arange(elements, device=device, dtype=torch.float32) + 1
        address, out = temporary.data_ptr(), temporary.clone()
        del temporary
    torch.cuda.synchronize(device)
    assert any(low <= address < high for low, high in _pool_ranges(memory))
    assert _raw(address, elements * 4) == (torch.arange(elements, dtype=torch.float32) + 1).numpy().tobytes()
    memory.scrub()
    torch.cuda.synchronize(device)
    assert _raw(address, elements * 4) == bytes([FILL_BYTE]) * (elements * 4)
    assert torch.equal(out.cpu(), torch.arange(elements, dtype=torch.float32) + 1)  # live: intact
    assert memory.failure == "" and memory.calls == 1 and memory.blocks >= 1
    memory.close()


@pytest.mark.parametrize("elements", [1 << 10, 1 << 20])
def test_the_general_pool_is_never_given_a_block_of_the_baselines_pool(elements):
    from cudaperf.execute.baseline_memory import CudaPool

    device = torch.device("cuda", 0)
    memory = CudaPool(device)
    with memory.routed():
        for _ in range(4):
            (torch.randn(elements, device=device) * 2 + 1).clone()
    ranges = _pool_ranges(memory)
    others = [torch.empty(elements, device=device) for _ in range(32)]
    assert ranges and not any(low <= t.data_ptr() < high for t in others for low, high in ranges)
    memory.close()


def test_a_compiled_call_allocates_in_the_baselines_pool_when_routed():
    from cudaperf.execute.baseline_memory import CudaPool
    from cudaperf.timing import compile_baseline

    device = torch.device("cuda", 0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()).to(device)
    compiled = compile_baseline(model)
    x = torch.randn(512, 256, device=device)
    memory = CudaPool(device)
    with torch.no_grad():
        compiled(x)  # the compile itself, outside
        with memory.routed():
            out = compiled(x)
    ranges = _pool_ranges(memory)
    assert any(low <= out.data_ptr() < high for low, high in ranges), (hex(out.data_ptr()), ranges)
    memory.close()


@pytest.mark.timing  # asserts on medians: runs alone (gpu_check.sh timing-tests), not beside xdist workers
@pytest.mark.parametrize("nbytes", [4 << 10, 4 << 20, 256 << 20])
def test_routing_and_scrubbing_add_no_time_to_the_timed_samples(nbytes):
    """The same bench with an eager-like function whose answer is a temporary (copied at the end), once
    disposed as an unrefereed worker would (its output only), once routed and scrubbed as a refereed one
    does: its median within 10% and 3 µs (the routing is host work hidden by the lead, the scrub outside the
    window); prints the scrub's cost per call."""
    from cudaperf.execute.baseline_memory import CudaPool
    from cudaperf.execute.torch_session import TorchSession
    from cudaperf.timing import Disposed, bench_interleaved_report

    device = torch.device("cuda", 0)
    memory = CudaPool(device)
    plain_session = types.SimpleNamespace(device=device, baseline_memory=None)
    routed_session = types.SimpleNamespace(device=device, baseline_memory=memory)
    sets = [[torch.randn(nbytes // 4, device=device)] for _ in range(3)]

    def run(fns):
        torch.cuda.synchronize()
        return bench_interleaved_report(fns, sets, budget_ms=0, warmup_ms=0, min_reps=200, max_reps=200,
                                        measure_overhead=False)

    def baseline(inputs):
        return (inputs[0] * 2 + 1).clone()

    def candidate(inputs):
        return inputs[0] + inputs[0]

    def plain(out):
        TorchSession.dispose_baseline_output(plain_session, out, frozenset())

    def routed(out):
        TorchSession.dispose_baseline_output(routed_session, out, frozenset())

    with torch.no_grad():
        run({"candidate": candidate, "eager": Disposed(baseline, plain)})  # warm: kernels, allocator
        before = run({"candidate": candidate, "eager": Disposed(baseline, plain)})
        calls, seconds = memory.calls, memory.seconds
        after = run({"candidate": candidate, "eager": Disposed(memory.around(baseline), routed)})
    per_call = after.warmup_rounds + after.rounds + 4
    plain_ms, routed_ms = before.timings["eager"].median_ms, after.timings["eager"].median_ms
    scrubs = max(1, memory.calls - calls)
    scrub_us = 1e6 * (memory.seconds - seconds) / scrubs
    per_scrub_mb = memory.nbytes / max(1, memory.calls) / 1e6
    print(f"\n[timing-answers] routed {nbytes} B: eager median {plain_ms:.4f} ms disposed plainly, "
          f"{routed_ms:.4f} ms routed and scrubbed; scrub {scrub_us:.1f} µs host per call "
          f"({memory.blocks / max(1, memory.calls):.1f} blocks, {per_scrub_mb:.3f} MB), disposal "
          f"{1e3 * after.dispose_ms / per_call:.1f} µs per call routed, "
          f"{1e3 * before.dispose_ms / per_call:.1f} µs plain")
    assert memory.failure == "" and memory.calls > calls
    assert abs(routed_ms - plain_ms) <= 0.10 * plain_ms + 0.003
    memory.close()
