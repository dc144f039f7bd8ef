"""The C→CUDA task format, the serial C reference (gcc + ctypes) and the CPU compile check."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cudaperf.tasks import cref
from cudaperf.tasks.ctask import (
    ArrayGen,
    CConfig,
    CheckStatus,
    CParam,
    CTask,
    ParamKind,
    compile_check,
    cuda_units,
    eval_length,
    from_json,
    make_inputs,
    prompt_text,
    to_json,
    to_task,
    validate,
)
from cudaperf.types import TaskKind, Tolerance

SAXPY_C = """
void saxpy(const float* x, float* y, float a, int n) {
    for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}
"""


def saxpy_task() -> CTask:
    return CTask(
        task_id="saxpy_test", family="test", entry="saxpy", source=SAXPY_C,
        params=(CParam("x", "float", ParamKind.IN, "n"), CParam("y", "float", ParamKind.INOUT, "n"),
                CParam("a", "float", ParamKind.SCALAR), CParam("n", "int", ParamKind.SCALAR)),
        inputs={"x": ArrayGen("normal", 0, 1), "y": ArrayGen("uniform", -1, 1)},
        configs=(CConfig("small", {"n": 10, "a": 2.0}), CConfig("large", {"n": 1000, "a": 2.0}),
                 CConfig("odd", {"n": 257, "a": -0.5})),
        tolerance=Tolerance(1e-5, 1e-5))


CANDIDATE = '''
from cudaperf import cuda
SOURCE = r"""
extern "C" __global__ void saxpy_k(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
def saxpy(x, y, a, n):
    cuda.load(SOURCE).saxpy_k(((n + 255) // 256,), (256,), x, y, a, n)
'''


def test_ctask_round_trips_through_json():
    task = saxpy_task()
    assert from_json(to_json(task)) == task


def test_well_formed_task_has_no_problems():
    assert validate(saxpy_task()) == ()


def test_validate_reports_missing_generator_and_configs():
    bad = dataclasses.replace(saxpy_task(), inputs={}, configs=saxpy_task().configs[:1])
    problems = " ".join(validate(bad))
    assert "without a generator" in problems and "need >= 3" in problems


def test_length_expressions_use_integer_arithmetic():
    assert eval_length("(n+1)*m - 2", {"n": 3, "m": 5}) == 18
    assert eval_length("n/2", {"n": 7}) == 3


def test_length_expression_rejects_calls():
    with pytest.raises(ValueError):
        eval_length("__import__('os')", {})


def test_inputs_are_deterministic_per_seed_and_differ_across_seeds():
    task, cfg = saxpy_task(), saxpy_task().configs[1]
    a, b, c = make_inputs(task, cfg, 0), make_inputs(task, cfg, 0), make_inputs(task, cfg, 1)
    assert np.array_equal(a["x"], b["x"]) and not np.array_equal(a["x"], c["x"])
    assert a["x"].dtype == np.float32 and a["x"].shape == (1000,)


def test_reference_builds_runs_and_matches_numpy(tmp_path):
    task = saxpy_task()
    values = make_inputs(task, task.configs[2], 3)
    expected = np.float32(-0.5) * values["x"] + values["y"]
    run = cref.run_reference(task, "odd", 3, cache_dir=tmp_path, repeats=3)
    assert run.ok, run.message
    np.testing.assert_allclose(run.outputs["y"], expected, rtol=1e-6)
    assert len(run.samples_ms) == 3 and run.median_ms is not None and run.median_ms >= 0


def test_a_scrubbed_reference_run_leaves_no_output_in_the_arrays_it_wrote(tmp_path, monkeypatch):
    task = saxpy_task()
    written = []
    real_call = cref.call
    monkeypatch.setattr(cref, "call", lambda t, b, v: (real_call(t, b, v), written.append(v["y"]))[0])
    values = make_inputs(task, task.configs[2], 3)
    run = cref.run_reference(task, "odd", 3, cache_dir=tmp_path, repeats=2, values=values, scrub=True)
    assert run.ok and np.any(run.outputs["y"] != 0)
    assert len(written) == 3 and all(not np.any(y) for y in written)


def test_reference_build_is_cached_by_content(tmp_path):
    first = cref.build_reference(saxpy_task(), cache_dir=tmp_path)
    second = cref.build_reference(saxpy_task(), cache_dir=tmp_path)
    assert first.ok and not first.cache_hit and second.cache_hit and first.lib_path == second.lib_path


def test_reference_build_failure_is_a_value(tmp_path):
    broken = dataclasses.replace(saxpy_task(), source="void saxpy( {")
    run = cref.run_reference(broken, "small", cache_dir=tmp_path)
    assert not run.ok and "build failed" in run.message


def test_copy_values_copies_arrays_and_shares_scalars():
    values = {"x": np.zeros(3, dtype=np.float32), "n": 3}
    copied = cref.copy_values(values)
    copied["x"][0] = 1.0
    assert values["x"][0] == 0.0 and copied["n"] == 3


def test_csr_generators_give_a_valid_matrix():
    task = CTask("csr", "t", "f", "void f(", (
        CParam("row_ptr", "int", ParamKind.IN, "rows+1"), CParam("col_idx", "int", ParamKind.IN, "nnz"),
        CParam("rows", "int", ParamKind.SCALAR), CParam("cols", "int", ParamKind.SCALAR),
        CParam("nnz", "int", ParamKind.SCALAR)),
        {"row_ptr": ArrayGen("csr_row_ptr"), "col_idx": ArrayGen("csr_col_idx")}, (), Tolerance(0, 0))
    v = make_inputs(task, CConfig("c", {"rows": 50, "cols": 7, "nnz": 300}), 0)
    assert v["row_ptr"][0] == 0 and v["row_ptr"][-1] == 300 and np.all(np.diff(v["row_ptr"]) >= 0)
    assert v["col_idx"].min() >= 0 and v["col_idx"].max() < 7


def test_to_task_gives_a_c_task_record():
    task = to_task(saxpy_task(), path="x.ctask.json")
    assert task.kind is TaskKind.C and [c.name for c in task.configs] == ["small", "large", "odd"]


def test_prompt_states_the_entry_point_contract():
    text = prompt_text(saxpy_task())
    assert "def saxpy(" in text and "extern \"C\" __global__" in text


def test_cuda_units_are_found_without_running_the_candidate():
    assert len(cuda_units(CANDIDATE)) == 1
    assert cuda_units("not python { __global__ void k(){} }") == ("not python { __global__ void k(){} }",)


def test_compile_check_builds_a_cubin_on_the_cpu():
    check = compile_check(CANDIDATE)
    assert check.status is CheckStatus.OK and check.cubin_bytes > 0


def test_compile_check_reports_errors_as_values():
    check = compile_check(CANDIDATE.replace("a * x[i]", "a * undefined_name"))
    assert check.status is CheckStatus.COMPILE_ERROR and "undefined_name" in check.log


def test_compile_check_without_cuda_says_so():
    assert compile_check("x = 1").status is CheckStatus.NO_CUDA


def test_a_reference_cache_this_process_cannot_enter_falls_back_to_a_private_build(tmp_path, monkeypatch):
    import os
    import tempfile

    from cudaperf.tasks import cref

    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "private"))
    (tmp_path / "private").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    real_stat = os.stat

    def refuse(path, *args, **kwargs):
        if str(path).startswith(str(locked)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", refuse)
    task = saxpy_task()
    build = cref.build_reference(task, cache_dir=locked)
    assert build.ok and build.lib_path.startswith(str(tmp_path / "private"))
