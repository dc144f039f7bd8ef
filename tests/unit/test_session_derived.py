"""The worker's side of derived configurations and of the memory plan (execute.torch_session), in CPU mode,
in-process through `dispatch.run_eval_job`, on a plain one-configuration KernelBench-format task: the
loader derives smaller, odd-sized configurations from its module-level sizes, parameters randomised in
the first. Pure-torch candidates stand in for kernels specialised to the declared shape."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy
from cudaperf.execute import dispatch, memory_plan, torch_session
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import task_from_source
from cudaperf.tasks.derived_configs import is_derived
from cudaperf.types import Outcome, Severity, Solution, SolutionFormat

KB_LAYERNORM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        return self.ln(x)


batch_size = 16
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''

HONEST = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.ln.weight, self.ln.bias, 1e-5)
'''
SKIPS_AFFINE = HONEST.replace("self.ln.weight, self.ln.bias, 1e-5", "None, None, 1e-5")
BAKED_SHAPE = HONEST.replace("(x.shape[-1],)", "(64,)")  # the declared width, compiled in
# Runs on meta (the data-dependent check cannot be decided there), fails on the device for other batches.
DEVICE_ONLY_DECLARED = KB_LAYERNORM.replace("        return self.ln(x)", '''\
        if float(x.sum()) == float(x.sum()) and x.shape[0] != 16:
            raise RuntimeError("this model only runs on its declared batch")
        return self.ln(x)''')


@pytest.fixture(autouse=True)
def _worker_like_process(tmp_path_factory, monkeypatch):
    from cudaperf.execute import guards
    from cudaperf.execute.child import warm_up_cuda

    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "derived-cache"))
    warm_up_cuda()
    if not guards._installed.is_set():
        guards.install_audit_hook(temp_root=str(tmp_path_factory.getbasetemp()))
    torch_session.REFERENCES.clear()
    yield
    torch_session.REFERENCES.clear()


def _run(solution: str, task_source: str = KB_LAYERNORM, **overrides) -> dict:
    job = EvalJob(task=task_from_source(task_source, "kb_layernorm"),
                  solution=Solution("s1", solution, SolutionFormat.PYTORCH), device="cpu", seeds=(1, 2),
                  policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager",)), coverage=False)
    return dispatch.run_eval_job(job_message(dataclasses.replace(job, **overrides), "00ff"), lambda s: None)


def _correct_by_config(payload: dict) -> dict[str, bool]:
    return {c["config"]: c["correct"] for c in payload["correctness"]}


def _codes(payload: dict, severity: Severity | None = None) -> list[str]:
    return [f["code"] for f in payload["flags"] if severity is None or f["severity"] == severity.value]


def test_the_plain_task_gets_two_derived_configurations():
    task = task_from_source(KB_LAYERNORM, "kb_layernorm")
    assert [c.name for c in task.configs if is_derived(c)] == ["derived_1", "derived_2"]


def test_an_honest_candidate_passes_the_derived_configurations():
    payload = _run(HONEST)
    assert payload["outcome"] is None, payload["message"]
    assert _correct_by_config(payload) == {"default": True, "derived_1": True, "derived_2": True}


def test_derived_configurations_are_never_timed():
    payload = _run(HONEST)
    assert [t["config"] for t in payload["timings"]] == ["default"]


def test_skipping_the_affine_step_fails_where_parameters_are_randomised():
    correct = _correct_by_config(_run(SKIPS_AFFINE))
    assert correct["default"] and not correct["derived_1"]


def test_a_width_compiled_in_fails_the_derived_configurations():
    payload = _run(BAKED_SHAPE)
    failed = payload["outcome"] is not None or not all(_correct_by_config(payload).values())
    assert failed, payload


def test_a_derived_configuration_whose_reference_fails_on_the_device_is_dropped_with_a_note():
    payload = _run(HONEST, task_source=DEVICE_ONLY_DECLARED)
    assert payload["outcome"] is None, payload["message"]
    assert _correct_by_config(payload) == {"default": True}
    assert _codes(payload, Severity.INFO).count("derived_config_dropped") == 2


def test_the_memory_plan_is_recorded_in_the_environment():
    assert "references all" in _run(HONEST)["environment"]["memory_plan"]


@pytest.fixture
def tight_memory(monkeypatch):
    """The real plan, given just enough free bytes for one reference at a time and one input set."""
    real = torch_session.plan_memory

    def plan(free, footprint, wanted):
        tight = memory_plan.peak_bytes(footprint, wanted, False, 1, wanted.min_flush_bytes)
        return real(int(tight / memory_plan.HEADROOM) + 1, footprint, wanted)

    monkeypatch.setattr(torch_session, "plan_memory", plan)


def test_with_tight_memory_an_honest_candidate_still_passes(tight_memory):
    payload = _run(HONEST)
    assert payload["outcome"] is None, payload["message"]
    assert all(_correct_by_config(payload).values()) and payload["timings"]


def test_with_tight_memory_the_degradation_is_flagged(tight_memory):
    payload = _run(HONEST)
    assert "memory_plan_degraded" in _codes(payload, Severity.INFO)
    assert "one at a time" in payload["environment"]["memory_plan"]


def test_with_tight_memory_a_wrong_candidate_is_still_caught(tight_memory):
    correct = _correct_by_config(_run(SKIPS_AFFINE))
    assert correct["default"] and not correct["derived_1"]


def test_a_task_that_cannot_fit_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(torch_session, "free_device_bytes", lambda device: 1024)
    payload = _run(HONEST)
    assert payload["outcome"] == Outcome.SKIPPED.value and "free" in payload["message"]


def test_the_reference_fingerprint_sums_bytes_in_chunks(monkeypatch):
    monkeypatch.setattr(torch_session, "FINGERPRINT_CHUNK_BYTES", 7)
    t = torch.arange(100, dtype=torch.float32)
    assert torch_session._byte_sum(t) == int(t.view(torch.uint8).sum(dtype=torch.int64))
