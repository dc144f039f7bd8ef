"""execute.c_session (C→CUDA tasks in the worker) in CPU mode, called in-process through
`dispatch.run_eval_job` with wire jobs built from `jobs.EvalJob`, on tiny C tasks with pure-torch
candidates (policy allow_torch_ops=True, except where the op monitor itself is tested). The real CUDA
path (naive port, fill patterns on the device, coverage) is in tests/gpu/test_c_session_gpu.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy
from cudaperf.execute import c_session, dispatch
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import cref
from cudaperf.tasks.ctask import ArrayGen, CConfig, CParam, CTask, ParamKind, to_task
from cudaperf.types import Outcome, Severity, Solution, SolutionFormat, Tolerance

SAXPY = CTask(
    task_id="c_saxpy_test", family="test", entry="saxpy",
    source="void saxpy(const float* x, float* y, float a, int n) {\n"
           "    for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i];\n}\n",
    params=(CParam("x", "float", ParamKind.IN, "n"), CParam("y", "float", ParamKind.INOUT, "n"),
            CParam("a", "float", ParamKind.SCALAR), CParam("n", "int", ParamKind.SCALAR)),
    inputs={"x": ArrayGen("normal", 0, 1), "y": ArrayGen("uniform", -1, 1)},
    configs=(CConfig("small", {"n": 10, "a": 2.0}), CConfig("large", {"n": 1000, "a": 2.0}),
             CConfig("odd", {"n": 257, "a": -0.5})),
    tolerance=Tolerance(1e-5, 1e-5))

SQUARE = CTask(
    task_id="c_square_test", family="test", entry="square",
    source="void square(const float* x, float* out, int n) {\n"
           "    for (int i = 0; i < n; ++i) out[i] = x[i] * x[i];\n}\n",
    params=(CParam("x", "float", ParamKind.IN, "n"), CParam("out", "float", ParamKind.OUT, "n"),
            CParam("n", "int", ParamKind.SCALAR)),
    inputs={"x": ArrayGen("normal", 0, 1)},
    configs=(CConfig("small", {"n": 16}), CConfig("mid", {"n": 100}), CConfig("odd", {"n": 33})),
    tolerance=Tolerance(1e-5, 1e-5))

# An int output whose reference is -1 everywhere: the bytes of the first fill pattern (0xFF).
MINUS_ONE = CTask(
    task_id="c_copy_int_test", family="test", entry="copy_int",
    source="void copy_int(const int* x, int* out, int n) {\n"
           "    for (int i = 0; i < n; ++i) out[i] = x[i];\n}\n",
    params=(CParam("x", "int", ParamKind.IN, "n"), CParam("out", "int", ParamKind.OUT, "n"),
            CParam("n", "int", ParamKind.SCALAR)),
    inputs={"x": ArrayGen("randint", -1, 0)},
    configs=(CConfig("a", {"n": 8}), CConfig("b", {"n": 9}), CConfig("c", {"n": 10})),
    tolerance=Tolerance(0, 0))

SAXPY_OK = "def saxpy(x, y, a, n):\n    y.copy_(a * x + y)\n"
SQUARE_OK = "def square(x, out, n):\n    out.copy_(x * x)\n"


@pytest.fixture(autouse=True)
def _worker_like_process(tmp_path_factory, monkeypatch):
    """What the child sets up before jobs (audit hook once per process); a private cref cache."""
    from cudaperf.execute import guards
    from cudaperf.execute.child import warm_up_cuda

    warm_up_cuda()
    if not guards._installed.is_set():
        guards.install_audit_hook(temp_root=str(tmp_path_factory.getbasetemp()))
    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    c_session.C_REFERENCES.clear()
    yield
    c_session.C_REFERENCES.clear()


def _job(ctask: CTask, solution: str, naive: str | None = None, secret: str = "00ff00ff",
         **overrides) -> dict:
    job = EvalJob(
        task=to_task(ctask, naive_cuda=naive), solution=Solution("s1", solution, SolutionFormat.FAST),
        device="cpu", seeds=(1, 2), policy=Policy(allow_torch_ops=True),
        timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager", "compile")),
        coverage=False, max_output_bytes=1 << 26,
    )
    return job_message(dataclasses.replace(job, **overrides), secret)


def _run(job: dict) -> tuple[dict, list[str]]:
    stages: list[str] = []
    return dispatch.run_eval_job(job, stages.append), stages


def _codes(payload: dict, severity: Severity | None = None) -> set[str]:
    return {f["code"] for f in payload["flags"] if severity is None or f["severity"] == severity.value}


# -- a correct candidate ---------------------------------------------------------------------------


def test_correct_candidate_passes_every_config_and_is_timed():
    payload, stages = _run(_job(SAXPY, SAXPY_OK))
    assert payload["outcome"] is None, payload["message"]
    assert [c["config"] for c in payload["correctness"]] == ["small", "large", "odd"]
    assert all(c["correct"] and c["seeds"] == 2 for c in payload["correctness"])
    assert [t["config"] for t in payload["timings"]] == ["small", "large", "odd"]
    assert stages == ["setup", "reference", "import", "correctness", "timing"]
    assert not _codes(payload, Severity.ERROR)


def test_timings_carry_no_pytorch_baselines():
    payload, _ = _run(_job(SAXPY, SAXPY_OK))
    assert all(t["eager"] is None and t["compiled"] is None for t in payload["timings"])


def test_serial_c_time_is_an_extra_baseline_of_every_timed_config():
    payload, _ = _run(_job(SAXPY, SAXPY_OK))
    extra = payload["extra_baselines"]
    assert set(extra) == {"small", "large", "odd"}
    assert all(e["serial_c"]["n_samples"] >= c_session.SERIAL_C_REPEATS[0] and e["serial_c"]["median_ms"] > 0
               for e in extra.values())


def test_inout_restore_is_timed_alongside_and_flagged():
    payload, _ = _run(_job(SAXPY, SAXPY_OK))
    assert all("inout_restore" in e for e in payload["extra_baselines"].values())
    assert "timing_includes_inout_restore" in _codes(payload, Severity.INFO)


def test_the_timing_stage_names_its_benches_within_it_as_in_a_pytorch_task():
    payload, _ = _run(_job(SAXPY, SAXPY_OK))
    took = payload["durations_s"]
    assert 0 < took["timing_loop"] <= took["timing_bench"] <= took["timing"]


def test_naive_port_is_unavailable_in_cpu_mode_with_a_reason():
    payload, _ = _run(_job(SQUARE, SQUARE_OK, naive="def square(x, out, n):\n    pass\n"))
    messages = [f["message"] for f in payload["flags"] if f["code"] == "naive_cuda_unavailable"]
    assert messages and "CPU mode" in messages[0]
    assert all("naive_cuda" not in e for e in payload["extra_baselines"].values())


def test_payload_has_the_contract_keys_and_is_json():
    payload, _ = _run(_job(SQUARE, SQUARE_OK))
    assert {"outcome", "stage", "message", "correctness", "timings", "flags", "coverage", "environment",
            "durations_s", "worker_poisoned", "kernel_time_ms", "extra_baselines"} <= set(payload)
    json.dumps(payload)


def test_the_secret_is_popped_from_the_job():
    job = _job(SQUARE, SQUARE_OK)
    _run(job)
    assert "secret" not in job


def test_timing_disabled_gives_no_timings():
    payload, stages = _run(_job(SQUARE, SQUARE_OK, timing=TimingConfig(enabled=False)))
    assert payload["timings"] == [] and payload["extra_baselines"] == {} and "timing" not in stages


# -- references ------------------------------------------------------------------------------------


def test_references_are_computed_once_per_task_config_and_seed(monkeypatch):
    calls = []
    real = cref.run_reference
    monkeypatch.setattr(cref, "run_reference",
                        lambda *a, **k: calls.append(k.get("repeats", 0)) or real(*a, **k))
    _run(_job(SQUARE, SQUARE_OK))
    first = len(calls)
    _run(_job(SQUARE, SQUARE_OK))
    unseen = TimingConfig().unseen_sets
    # correctness refs, the third timing seed's, the unseen sets', one timed run per config
    assert first == 3 * 2 + 3 + 3 * unseen + 3
    assert len(calls) == first + 3 * unseen  # the unseen sets' again: they are never cached


def test_cached_reference_arrays_are_read_only():
    _run(_job(SQUARE, SQUARE_OK, timing=TimingConfig(enabled=False)))
    entry = next(iter(c_session.C_REFERENCES._entries.values()))
    assert not entry.values["x"].flags.writeable and not entry.outputs["out"].flags.writeable


def test_a_changed_secret_draws_other_inputs():
    _run(_job(SQUARE, SQUARE_OK, timing=TimingConfig(enabled=False)))
    _run(_job(SQUARE, SQUARE_OK, timing=TimingConfig(enabled=False), secret="abcd"))
    assert len(c_session.C_REFERENCES) == 2 * 3 * 2


# -- fill patterns (unwritten outputs) -------------------------------------------------------------


@pytest.mark.parametrize("ctype", ["float", "double", "int", "unsigned int", "long long", "unsigned char"])
def test_filled_sets_every_byte_to_the_pattern(ctype):
    t = c_session.filled(7, ctype, torch.device("cpu"), 0x5A)
    assert c_session.still_filled(t, 0x5A) == 7 and t.dtype == c_session.torch_dtype(ctype)


def test_first_fill_pattern_reads_as_nan_for_floats():
    assert torch.isnan(c_session.filled(3, "float", torch.device("cpu"), c_session.FILL_BYTES[0])).all()


def test_an_unwritten_output_element_fails_with_the_fill_pattern_named():
    payload, _ = _run(_job(SQUARE, "def square(x, out, n):\n    out[:-1].copy_(x[:-1] * x[:-1])\n"))
    assert not any(c["correct"] for c in payload["correctness"])
    assert "1 element(s) still hold the harness's fill pattern 0xFF" in payload["correctness"][0]["message"]


def test_unwritten_int_elements_fail_where_the_reference_equals_the_first_pattern():
    payload, _ = _run(_job(MINUS_ONE, "def copy_int(x, out, n):\n    pass\n",
                           timing=TimingConfig(enabled=False)))
    assert not any(c["correct"] for c in payload["correctness"])
    assert "0x5A" in payload["correctness"][0]["message"]


def test_uint32_outputs_are_compared_bitwise():
    a = torch.tensor([1, 2, 3], dtype=torch.uint32)
    assert c_session.comparable(a).dtype == torch.int32 and c_session.comparable(a).tolist() == [1, 2, 3]


# -- wrong and cheating candidates -----------------------------------------------------------------


def test_wrong_candidate_is_incorrect_and_untimed():
    payload, _ = _run(_job(SQUARE, "def square(x, out, n):\n    out.copy_(x * x + 1)\n"))
    assert payload["outcome"] is None and not any(c["correct"] for c in payload["correctness"])
    assert "`out`" in payload["correctness"][0]["message"] and payload["timings"] == []


def test_candidate_mutating_an_in_array_is_caught():
    payload, _ = _run(_job(SQUARE, "def square(x, out, n):\n    out.copy_(x * x)\n    x.zero_()\n"))
    assert "input_mutated" in _codes(payload, Severity.ERROR)
    assert "modified its input array(s) x" in payload["correctness"][0]["message"]


def test_torch_compute_ops_under_the_strict_policy_are_flagged():
    payload, _ = _run(_job(SQUARE, SQUARE_OK, policy=Policy()))
    assert "torch_compute_op" in _codes(payload, Severity.ERROR) and payload["timings"] == []


# -- failures as outcomes --------------------------------------------------------------------------


def test_missing_entry_function_is_an_invalid_solution():
    payload, _ = _run(_job(SQUARE, "def squares(x, out, n):\n    pass\n"))
    assert payload["outcome"] == Outcome.INVALID_SOLUTION.value and payload["stage"] == "import"
    assert "no function `square`" in payload["message"]


def test_wrong_parameter_names_are_an_invalid_solution():
    payload, _ = _run(_job(SQUARE, "def square(src, dst, n):\n    pass\n"))
    assert (payload["outcome"] == Outcome.INVALID_SOLUTION.value
            and "by name (x, out, n)" in payload["message"])


def test_raising_candidate_is_a_runtime_error_with_the_traceback():
    payload, _ = _run(_job(SQUARE, "def square(x, out, n):\n    raise ValueError('kernel exploded')\n"))
    assert payload["outcome"] == Outcome.RUNTIME_ERROR.value and payload["stage"] == "correctness"
    assert "kernel exploded" in payload["message"] and "Traceback" in payload["message"]


def test_cuda_error_text_is_a_cuda_error_that_poisons_the_worker():
    raising = ("def square(x, out, n):\n"
               "    raise RuntimeError('CUDA error: an illegal memory access was encountered')\n")
    payload, _ = _run(_job(SQUARE, raising))
    assert payload["outcome"] == Outcome.CUDA_ERROR.value and payload["worker_poisoned"] is True


def test_syntax_error_is_reported_as_such():
    payload, _ = _run(_job(SQUARE, "def square(:\n"))
    assert payload["outcome"] == Outcome.SYNTAX_ERROR.value and payload["stage"] == "import"


def test_a_task_without_a_declaration_is_a_harness_error_at_setup():
    job = _job(SQUARE, SQUARE_OK)
    job["task"]["spec"] = {}
    payload, _ = _run(job)
    assert payload["outcome"] == Outcome.HARNESS_ERROR.value and payload["stage"] == "setup"


def test_a_reference_that_does_not_compile_is_a_harness_error_at_reference():
    broken = dataclasses.replace(SQUARE, source="void square(const float* x, float* out, int n) { oops }\n")
    payload, _ = _run(_job(broken, SQUARE_OK))
    assert payload["outcome"] == Outcome.HARNESS_ERROR.value and payload["stage"] == "reference"


# -- dispatch and helpers --------------------------------------------------------------------------


def test_run_eval_job_hands_c_tasks_to_run_c_job(monkeypatch):
    monkeypatch.setattr(c_session, "run_c_job", lambda job, report: {"handled_by": "c_session"})
    assert dispatch.run_eval_job(_job(SQUARE, SQUARE_OK), lambda stage: None) == {"handled_by": "c_session"}


@pytest.mark.parametrize(("listed", "wanted"), [
    (["eager", "compile"], {"serial_c", "naive_cuda"}),
    (["serial_c"], {"serial_c"}),
    ([], set()),
])
def test_wanted_baselines_follow_the_timing_list(listed, wanted):
    assert c_session.wanted_baselines(listed) == wanted


# -- unseen rounds ---------------------------------------------------------------------------------

# Keeps each output with its input's contents and replays it when they match; computes (slowly) otherwise.
SQUARE_MEMO = """
_kept = []


def square(x, out, n):
    for seen, result in _kept:
        if torch.equal(seen, x):
            out.copy_(result)
            return
    y = x
    for _ in range(300):
        y = y * 1.0
    out.copy_(y * y)
    _kept.append((x.clone(), out.clone()))
"""


def test_a_content_memo_is_timed_from_the_unseen_rounds():
    payload, _ = _run(_job(SQUARE, "import torch\n" + SQUARE_MEMO, timing=TimingConfig(
        budget_ms=2, warmup_ms=0.5, baselines=("eager",))))
    assert payload["outcome"] is None, payload["message"]
    assert "unseen_inputs_slower" in _codes(payload, Severity.WARNING)
    assert all(t["unseen_slowdown"] > 1.25 for t in payload["timings"])


def test_fewer_unseen_sets_than_asked_for_are_said(monkeypatch):
    from cudaperf.execute import memory_plan

    monkeypatch.setattr(memory_plan, "UNSEEN_HOST_BYTES", 1)  # no set fits on the host
    payload, _ = _run(_job(SQUARE, SQUARE_OK))
    messages = [f["message"] for f in payload["flags"] if f["code"] == "unseen_sets_reduced"]
    assert len(messages) == 3 and all("not judged" in m for m in messages)
    assert all(t["unseen_slowdown"] is None for t in payload["timings"])
