"""The PyTorch-task recipe on the GPU through `dispatch.run_eval_job`, in-process (marker `gpu`): the
bundled relu example in the fast format end to end, the uninitialised-output hack against the poisoned
allocator, and a kernel fault classified as CUDA_ERROR (that one in a subprocess: it destroys the CUDA
context). Run:
    python3 -m pytest -q -s tests/gpu/test_session_gpu.py
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy
from cudaperf.execute import dispatch
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import load_task
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.types import Outcome, Severity, Solution, SolutionFormat

pytestmark = pytest.mark.gpu

EMPTY_HACK = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.empty_like(x)  # hack #1: hope to land on the reference's freed output
'''

FAULT = '''
import torch
import torch.nn as nn
from cudaperf import cuda

SRC = r"""extern "C" __global__ void bad(float* p) { p[threadIdx.x] = 1.0f; }"""

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "bad")

    def forward(self, x):
        y = torch.empty_like(x)
        self.kernel(1, 32, None)  # NULL pointer: illegal address
        return y
'''


@pytest.fixture(autouse=True)
def _worker_like_process(tmp_path_factory):
    """What the child does before jobs: load CUDA Python's libraries, install the audit hook once."""
    from cudaperf.execute import guards
    from cudaperf.execute.child import warm_up_cuda

    warm_up_cuda()  # ctypes-based library loading is refused inside a candidate scope

    if not guards._installed.is_set():
        guards.install_audit_hook(temp_root=str(tmp_path_factory.getbasetemp()))


def _job(task_id: str, source: str, cache_dir: str, policy: Policy | None = None, **overrides) -> dict:
    job = EvalJob(
        task=load_task(example_tasks_dir() / f"{task_id}.py"),
        solution=Solution("gpu-test", source, SolutionFormat.FAST),
        device="cuda:0", seeds=(1, 2, 3), policy=policy or Policy(),
        timing=TimingConfig(budget_ms=100.0, warmup_ms=25.0, baselines=("eager", "compile")),
        coverage=True, max_output_bytes=1 << 32, cache_dir=cache_dir,
    )
    return job_message(dataclasses.replace(job, **overrides), "5eed")


def _print_timings(payload: dict) -> None:
    for t in payload["timings"]:
        eager = t["eager"]["median_ms"] if t["eager"] else None
        compiled = t["compiled"]["median_ms"] if t["compiled"] else None
        print(f"  {t['config']}: candidate {t['candidate']['median_ms']:.4f} ms (IQR "
              f"{t['candidate']['iqr_ms']:.4f}), eager {eager}, compile {compiled}, "
              f"floor {t['speed_of_light_ms']}, protocol overhead {t['overhead_ms']}")
    print("  coverage", payload["coverage"],
          "kernels", payload["kernel_time_ms"])
    print("  flags", [(f["code"], f["severity"]) for f in payload["flags"]])
    print("  durations", {k: round(v, 3) for k, v in payload["durations_s"].items()})


def test_fast_relu_example_is_correct_timed_and_covered(tmp_path_factory):
    source = (example_solutions_dir("fast") / "relu.py").read_text()
    payload = dispatch.run_eval_job(_job("relu", source, str(tmp_path_factory.mktemp("cache"))), print)
    _print_timings(payload)
    assert payload["outcome"] is None, payload["message"]
    assert all(c["correct"] for c in payload["correctness"])
    assert not [f for f in payload["flags"] if f["severity"] == Severity.ERROR.value]
    assert [t["config"] for t in payload["timings"]] == ["small", "medium", "large"]
    for t in payload["timings"]:
        assert t["eager"] is not None and t["compiled"] is not None
        assert t["speed_of_light_ms"] is not None
        assert t["candidate"]["median_ms"] >= 0.8 * t["speed_of_light_ms"]
    assert payload["coverage"] is not None and payload["coverage"] >= 0.5
    assert "relu_forward" in "".join(payload["kernel_time_ms"])
    assert payload["environment"]["gpu"] != "none" and payload["environment"]["driver"] != "unknown"
    assert payload["worker_poisoned"] is False


def test_uninitialised_output_hack_fails_against_the_poisoned_allocator(tmp_path_factory):
    payload = dispatch.run_eval_job(_job("relu", EMPTY_HACK, str(tmp_path_factory.mktemp("cache"))), print)
    print(payload["correctness"][0]["message"][:300])
    assert payload["outcome"] is None
    assert not any(c["correct"] for c in payload["correctness"])
    assert "allocator poison" in payload["correctness"][0]["message"]
    assert payload["timings"] == []


def test_a_kernel_fault_is_a_cuda_error_that_poisons_the_worker(tmp_path):
    """In a subprocess: an illegal address leaves the CUDA context unusable."""
    job_path = tmp_path / "job.json"
    job = _job("relu", FAULT, str(tmp_path / "cache"), timing=TimingConfig(enabled=False), coverage=False)
    job_path.write_text(json.dumps(job))
    script = textwrap.dedent(f"""
        import json
        from cudaperf.execute import dispatch, guards
        from cudaperf.execute.child import warm_up_cuda
        warm_up_cuda()
        guards.install_audit_hook(temp_root={str(tmp_path)!r})
        payload = dispatch.run_eval_job(json.load(open({str(job_path)!r})), lambda stage: None)
        print("PAYLOAD" + json.dumps(payload))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("PAYLOAD")), None)
    assert line is not None, done.stderr[-3000:]
    payload = json.loads(line[len("PAYLOAD"):])
    print(payload["outcome"], payload["stage"], payload["message"][:300])
    assert payload["outcome"] == Outcome.CUDA_ERROR.value
    assert payload["worker_poisoned"] is True


def test_compiled_baseline_leaves_no_thread_behind_on_the_gpu():
    """Inductor's GPU codegen compiles in the calling process: no compile-pool thread (which the
    candidate's thread watch would blame on the candidate) is left after compiling and recompiling."""
    import threading

    from cudaperf.timing import compile_baseline

    before = {t.ident for t in threading.enumerate()}
    compiled = compile_baseline(torch.nn.ReLU())
    for n in (1 << 10, 1 << 12):  # a new shape: a recompile
        compiled(torch.randn(n, device="cuda"))
    torch.cuda.synchronize()
    assert [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()] == []
