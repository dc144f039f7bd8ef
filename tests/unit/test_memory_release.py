"""What a PyTorch job leaves held after it ends (execute.torch_session), on the CPU: only the cross-job
reference cache, so that the next job (or the referee beside the worker, on a GPU) gets the rest; and the
memory plan's record of where its free bytes came from. The device side (the referee's and the worker's
caches given back to the driver) is in tests/gpu/test_full_size_gpu.py."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy
from cudaperf.execute import torch_session
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import task_from_source
from cudaperf.types import Solution, SolutionFormat

TASK = '''
import torch
import torch.nn as nn

CUDAPERF_TASK = {"no_derived_configs": "a unit test of what a job leaves held"}

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2

def get_inputs():
    return [torch.randn(64, 32)]

def get_init_inputs():
    return []
'''

CORRECT = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2
'''


@pytest.fixture(autouse=True)
def _worker_like_process(tmp_path_factory):
    from cudaperf.execute import guards
    from cudaperf.execute.child import warm_up_cuda

    warm_up_cuda()
    if not guards._installed.is_set():
        guards.install_audit_hook(temp_root=str(tmp_path_factory.getbasetemp()))
    torch_session.REFERENCES.clear()
    yield
    torch_session.REFERENCES.clear()


def _job(**overrides) -> dict:
    solution = Solution("s1", CORRECT, SolutionFormat.PYTORCH)
    job = EvalJob(task=task_from_source(TASK, "relu_twice"), solution=solution, device="cpu", seeds=(1, 2),
                  policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager",)), coverage=False)
    return job_message(dataclasses.replace(job, **overrides), "00ff00ff")


def _session_after(job: dict) -> tuple[torch_session.TorchSession, object]:
    session = torch_session.TorchSession(lambda stage: None)
    payload = session.run(job)
    return session, payload


def test_a_finished_job_holds_no_reference_beyond_the_cross_job_cache():
    session, payload = _session_after(_job())
    assert payload.outcome is None and all(c.correct for c in payload.correctness)
    assert (session.verified, session.built, session.timing_outputs) == ({}, {}, {})


def test_references_the_cache_does_not_keep_are_freed_when_the_job_ends(monkeypatch):
    held: list[weakref.ref] = []
    compute = torch_session.TorchSession.compute_reference

    def watched(self, config, seed):
        entry = compute(self, config, seed)
        held.extend(weakref.ref(t) for t in entry.inputs)
        return entry

    monkeypatch.setattr(torch_session.TorchSession, "compute_reference", watched)
    monkeypatch.setattr(torch_session, "cache_budget", lambda device: 0)  # the cache keeps nothing
    session, _ = _session_after(_job())
    gc.collect()
    assert held and all(ref() is None for ref in held)


def test_the_memory_plan_records_where_its_free_bytes_came_from():
    _, payload = _session_after(_job())
    assert "MemAvailable" in payload.environment["memory_free"]
    assert "GB (" in payload.environment["memory_plan"]  # the stage of the peak, named
