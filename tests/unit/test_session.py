"""The PyTorch-task recipe (execute.torch_session) in CPU mode, called in-process through
`dispatch.run_eval_job` with wire jobs built from `jobs.EvalJob`, on a small inline task with pure-torch
candidates (policy allow_torch_ops=True). The GPU-only parts (poison, L2 flush, coverage) are in
tests/gpu/test_session_gpu.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy
from cudaperf.execute import dispatch, torch_session
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import task_from_source
from cudaperf.timing import UNSEEN_MIN_ROUNDS
from cudaperf.types import Outcome, Severity, Solution, SolutionFormat, TaskKind

TASK = '''
import torch
import torch.nn as nn

CUDAPERF_TASK = {"no_derived_configs": "a unit test of the worker's stages on the declared configurations"}

class Model(nn.Module):
    """y = relu(x @ W^T + b) * 2 + z, with a seeded Linear layer."""
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x, z):
        return torch.relu(self.linear(x)) * 2 + z

def get_input_configs():
    return [{"name": "small", "n": 16}, {"name": "odd", "n": 23}]

def get_inputs(n=16):
    return [torch.randn(8, n), torch.randn(8, n)]

def get_init_inputs(n=16):
    return [n]
'''

CORRECT = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)  # built after the same seed: the same weights

    def forward(self, x, z):
        return torch.relu(self.linear(x)) * 2 + z
'''

WRONG = CORRECT.replace("torch.relu(self.linear(x)) * 2 + z", "self.linear(x) * 2 + z")
MUTATING = CORRECT.replace("return torch.relu(self.linear(x)) * 2 + z",
                           "z.add_(torch.relu(self.linear(x)) * 2)\n        return z")
SUBCLASS = CORRECT.replace("class ModelNew", '''class Lazy(torch.Tensor):
    pass

class ModelNew''').replace("return torch.relu(self.linear(x)) * 2 + z",
                           "return (torch.relu(self.linear(x)) * 2 + z).as_subclass(Lazy)")
RAISING = CORRECT.replace("return torch.relu(self.linear(x)) * 2 + z", "raise ValueError('kernel exploded')")
NO_MODELNEW = CORRECT.replace("class ModelNew", "class SomethingElse")
BAD_CONSTRUCTOR = CORRECT.replace("def __init__(self, n):", "def __init__(self):").replace(
    "nn.Linear(n, n)", "nn.Linear(16, 16)")
PATCHING = CORRECT.replace("return torch.relu",
                           "torch.allclose = lambda *args, **kwargs: True\n        return torch.relu")
TF32 = CORRECT.replace("return torch.relu",
                       "torch.backends.cuda.matmul.allow_tf32 = True\n        return torch.relu")


@pytest.fixture(autouse=True)
def _worker_like_process(tmp_path_factory):
    """What the child sets up before jobs: preloaded modules, the audit hook (once per process)."""
    from cudaperf.execute import guards
    from cudaperf.execute.child import warm_up_cuda

    warm_up_cuda()  # imports cudaperf.cuda (and CUDA Python where present) outside any candidate scope

    if not guards._installed.is_set():
        guards.install_audit_hook(temp_root=str(tmp_path_factory.getbasetemp()))
    torch_session.REFERENCES.clear()
    yield
    torch_session.REFERENCES.clear()


def _job(solution: str, task_source: str = TASK, secret: str = "00ff00ff", **overrides) -> dict:
    job = EvalJob(
        task=task_from_source(task_source, "relu_linear"),
        solution=Solution("s1", solution, SolutionFormat.PYTORCH),
        device="cpu", seeds=(1, 2), policy=Policy(allow_torch_ops=True),
        timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager",)),
        coverage=False, max_output_bytes=1 << 26,
    )
    return job_message(dataclasses.replace(job, **overrides), secret)


def _run(job: dict) -> tuple[dict, list[str]]:
    stages: list[str] = []
    payload = dispatch.run_eval_job(job, stages.append)
    return payload, stages


def _codes(payload: dict) -> set[str]:
    return {f["code"] for f in payload["flags"]}


def _errors(payload: dict) -> set[str]:
    return {f["code"] for f in payload["flags"] if f["severity"] == Severity.ERROR.value}


# -- a correct candidate ---------------------------------------------------------------------------


def test_correct_candidate_passes_every_config_and_is_timed():
    payload, stages = _run(_job(CORRECT))
    assert payload["outcome"] is None, payload["message"]
    assert [c["config"] for c in payload["correctness"]] == ["small", "odd"]
    assert all(c["correct"] and c["seeds"] == 2 for c in payload["correctness"])
    assert [t["config"] for t in payload["timings"]] == ["small", "odd"]
    assert all(t["eager"] is not None for t in payload["timings"])
    assert not _errors(payload)
    assert stages == ["setup", "reference", "import", "construct", "correctness", "timing"]


def test_correct_candidate_is_timed_from_every_round_or_from_its_flagged_unseen_rounds():
    """Every configuration gets the bench's 10-round minimum, unless noise on a loaded CPU made the honest
    candidate look slower on its unseen sets (the documented false-trigger rate, `timing.UNSEEN_QUORUM`):
    then it is timed from those rounds and the configuration carries the warning."""
    payload, _ = _run(_job(CORRECT))
    flagged = {f["config"] for f in payload["flags"] if f["code"] == "unseen_inputs_slower"}
    for timing in payload["timings"]:
        least = UNSEEN_MIN_ROUNDS if timing["config"] in flagged else 10
        assert timing["candidate"]["n_samples"] >= least, (timing["config"], flagged)


def test_payload_has_the_contract_keys_and_is_json():
    payload, _ = _run(_job(CORRECT))
    assert {"outcome", "stage", "message", "correctness", "timings", "flags", "coverage", "environment",
            "durations_s", "worker_poisoned", "kernel_time_ms"} <= set(payload)
    assert payload["environment"]["torch"] == torch.__version__
    assert payload["coverage"] is None and payload["worker_poisoned"] is False
    json.dumps(payload)


def test_the_timing_stage_names_its_benches_and_their_timed_rounds_within_it():
    payload, _ = _run(_job(CORRECT))
    took = payload["durations_s"]
    assert 0 < took["timing_loop"] <= took["timing_bench"] <= took["timing"]


def test_an_untimed_job_names_no_bench():
    payload, _ = _run(_job(CORRECT, timing=TimingConfig(enabled=False)))
    assert not {"timing_bench", "timing_loop"} & set(payload["durations_s"])


def test_the_secret_is_popped_from_the_job():
    job = _job(CORRECT)
    _run(job)
    assert "secret" not in job


def test_timing_disabled_gives_no_timings():
    payload, stages = _run(_job(CORRECT, timing=TimingConfig(enabled=False)))
    assert payload["timings"] == [] and "timing" not in stages


def test_reference_outputs_are_reused_across_jobs():
    _run(_job(CORRECT))
    cached = len(torch_session.REFERENCES._entries)
    _run(_job(CORRECT))
    assert cached > 0 and len(torch_session.REFERENCES._entries) == cached


# -- wrong and cheating candidates -----------------------------------------------------------------


def test_wrong_candidate_is_incorrect_with_a_message_and_untimed():
    payload, _ = _run(_job(WRONG))
    assert payload["outcome"] is None
    assert not any(c["correct"] for c in payload["correctness"])
    assert "outside" in payload["correctness"][0]["message"]
    assert payload["timings"] == []


def test_candidate_mutating_its_input_is_caught():
    payload, _ = _run(_job(MUTATING))
    assert "input_mutated" in _errors(payload)
    assert not any(c["correct"] for c in payload["correctness"])
    assert "modified inputs[1]" in payload["correctness"][0]["message"]


def test_tensor_subclass_output_is_rejected():
    payload, _ = _run(_job(SUBCLASS))
    assert "tensor_subclass_output" in _errors(payload)
    assert not any(c["correct"] for c in payload["correctness"])


def test_changing_tf32_is_flagged():
    payload, _ = _run(_job(TF32))
    assert "precision_flags_changed" in _errors(payload)
    assert torch.backends.cuda.matmul.allow_tf32 is False  # restored


def test_replacing_a_trusted_function_is_flagged_and_undone():
    original = torch.allclose
    payload, _ = _run(_job(PATCHING))
    assert "monkey_patch" in _errors(payload)
    assert torch.allclose is original


def test_torch_ops_under_the_strict_policy_are_flagged_and_not_timed():
    payload, _ = _run(_job(CORRECT, policy=Policy()))
    assert "torch_compute_op" in _errors(payload)
    assert payload["timings"] == []


# -- failures as outcomes --------------------------------------------------------------------------


def test_raising_candidate_is_a_runtime_error_with_the_traceback():
    payload, _ = _run(_job(RAISING))
    assert payload["outcome"] == Outcome.RUNTIME_ERROR.value
    assert payload["stage"] == "correctness"
    assert "kernel exploded" in payload["message"] and "Traceback" in payload["message"]


@pytest.mark.parametrize(("raised", "outcome", "poisoned"), [
    ("RuntimeError('CUDA error: an illegal memory access was encountered')", Outcome.CUDA_ERROR, True),
    ("torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2 GiB')", Outcome.OUT_OF_MEMORY,
     False),
    ("CompileError('kernel.cu(3): error: expected a ;')", Outcome.COMPILE_ERROR, False),
])
def test_errors_are_classified(raised, outcome, poisoned):
    source = ("from cudaperf.cuda import CompileError\n"
              + RAISING.replace("ValueError('kernel exploded')", raised))
    payload, _ = _run(_job(source))
    assert payload["outcome"] == outcome.value
    assert payload["worker_poisoned"] is poisoned


def test_missing_modelnew_is_an_invalid_solution():
    payload, _ = _run(_job(NO_MODELNEW))
    assert payload["outcome"] == Outcome.INVALID_SOLUTION.value and payload["stage"] == "import"


def test_wrong_constructor_is_an_invalid_solution():
    payload, _ = _run(_job(BAD_CONSTRUCTOR))
    assert payload["outcome"] == Outcome.INVALID_SOLUTION.value and payload["stage"] == "construct"


def test_syntax_error_is_reported_as_such():
    payload, _ = _run(_job("class ModelNew(:\n"))
    assert payload["outcome"] == Outcome.SYNTAX_ERROR.value


def test_output_over_the_size_limit_is_rejected():
    payload, _ = _run(_job(CORRECT, max_output_bytes=16))
    assert payload["outcome"] == Outcome.OUTPUT_TOO_LARGE.value


def test_a_broken_reference_is_a_harness_error():
    broken = TASK.replace("return torch.relu(self.linear(x)) * 2 + z", "raise RuntimeError('bad task')")
    job = _job(CORRECT)
    job["task"]["source"] = broken
    payload, _ = _run(job)
    assert payload["outcome"] == Outcome.HARNESS_ERROR.value and payload["stage"] == "reference"


def test_a_c_task_without_its_declaration_is_a_harness_error_at_setup():
    job = _job(CORRECT)  # kind "c", no CTask in Task.spec: the C recipe refuses it before any candidate code
    job["task"]["kind"] = TaskKind.C.value
    payload, _ = _run(job)
    assert payload["outcome"] == Outcome.HARNESS_ERROR.value and payload["stage"] == "setup"


# -- degenerate tasks ------------------------------------------------------------------------------


def test_a_constant_task_is_flagged_as_the_task_s_fault():
    constant = TASK.replace("return torch.relu(self.linear(x)) * 2 + z", "return torch.zeros_like(x) + 3")
    same = CORRECT.replace("return torch.relu(self.linear(x)) * 2 + z", "return torch.zeros_like(x) + 3")
    payload, _ = _run(_job(same, task_source=constant))
    assert {"task_constant_output", "task_input_independent"} <= _codes(payload)
    assert not any(code.startswith("candidate_") for code in _codes(payload))


def test_autograd_a_candidate_turns_on_in_its_timed_call_does_not_outlive_the_call():
    import contextlib
    import types

    class LeavesGradOn(torch.nn.Module):
        def forward(self, x):
            torch.set_grad_enabled(True)  # left on for whatever runs next: the baselines
            return x * 2

    session = types.SimpleNamespace(scope=contextlib.nullcontext)
    with torch.no_grad():  # as the bench runs
        torch_session.TorchSession._scoped_call(session, LeavesGradOn(), [torch.ones(2)])
        assert not torch.is_grad_enabled()
