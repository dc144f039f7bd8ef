"""The rounding-sensitivity filter (datasets/filters/rounding.py): real gcc builds with and without fused
multiply-adds and with libm results nudged by CUDA's error bounds, and real float32 / float64 PyTorch
runs, on small hand-written tasks."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from cudaperf.datasets.filters import rounding as conditioning
from cudaperf.datasets.measure.results import flagged_tasks
from cudaperf.datasets.records import GeneratedTask
from cudaperf.tasks import cref
from cudaperf.tasks.ctask import ArrayGen, CConfig, CParam, CTask, ParamKind, to_json
from cudaperf.types import TaskKind, Tolerance

pytestmark = pytest.mark.skipif(not conditioning.host_has_fma(), reason="the fused C build needs FMA3")


def c_task(body: str) -> CTask:
    source = f"#include <math.h>\nvoid f(const float* x, const float* y, float* out, int n) {{\n" \
             f"    for (int i = 0; i < n; ++i) out[i] = {body};\n}}\n"
    return CTask(
        task_id="t", family="test", entry="f", source=source,
        params=(CParam("x", "float", ParamKind.IN, "n"), CParam("y", "float", ParamKind.IN, "n"),
                CParam("out", "float", ParamKind.OUT, "n"), CParam("n", "int", ParamKind.SCALAR)),
        inputs={"x": ArrayGen("uniform", -2, 2), "y": ArrayGen("uniform", -2, 2)},
        configs=(CConfig("small", {"n": 1000}), CConfig("odd", {"n": 4097}), CConfig("large", {"n": 20000})),
        tolerance=Tolerance(1e-4, 1e-4))


# The last bit of x*y + 3 (in [2, 4) its unit in the last place is 2^-22): one rounding (fused) or two
# (plain) set it differently for many elements, and the output is a step function of it.
LAST_BIT = "((int)((x[i] * y[i] + 3.0f) * 4194304.0f) & 1) ? 1.0f : 0.0f"


def test_a_step_on_a_fusable_product_is_fma_sensitive(tmp_path):
    task = c_task(LAST_BIT)
    assert conditioning.c_sensitivity(task, str(tmp_path)).flag == "fma_sensitive"


def test_a_fused_saxpy_stays_within_tolerance(tmp_path):
    task = c_task("2.5f * x[i] + y[i]")
    assert conditioning.emits_fma(task.source)
    assert conditioning.c_sensitivity(task, str(tmp_path)).flag == ""


def test_a_source_without_products_is_not_run_twice():
    assert not conditioning.emits_fma(c_task("x[i] + y[i]").source)


def test_the_message_names_the_configuration_and_seed(tmp_path):
    task = c_task(LAST_BIT)
    assert conditioning.c_sensitivity(task, str(tmp_path)).message.startswith("small seed 0: out:")


TORCH_TASK = '''
import torch
import torch.nn as nn

CUDAPERF_TASK = {{"family": "test", "tolerances": {{"float32": [0.0001, 0.0001]}}}}


class Model(nn.Module):
    def forward(self, x):
        return {expr}


def get_input_configs():
    return [{{"name": "small", "n": 64}}, {{"name": "large", "n": 4096}}, {{"name": "odd", "n": 1000}}]


def get_inputs(n=64, **_):
    return [torch.randn(n)]


def get_init_inputs(**_):
    return []
'''


def test_cancellation_in_float32_is_precision_sensitive():
    text = TORCH_TASK.format(expr="(x + 1.0e4) - 1.0e4")
    assert conditioning.torch_sensitivity(text, "pt_t").flag == "precision_sensitive"


def test_a_scaled_input_is_not_precision_sensitive():
    assert conditioning.torch_sensitivity(TORCH_TASK.format(expr="x * 3.0 + 1.0"), "pt_t").flag == ""


def test_a_tensor_created_inside_forward_follows_the_float64_run():
    text = TORCH_TASK.format(expr="torch.zeros(x.shape[0]).index_add(0, torch.arange(x.shape[0]), x)")
    assert conditioning.torch_sensitivity(text, "pt_t").flag == ""


def test_the_tolerance_is_halved_for_each_of_two_answers():
    assert conditioning._halved(Tolerance(1e-3, 2e-3, 1)) == Tolerance(5e-4, 1e-3, 1)


def test_a_verdict_row_flags_the_task_for_measure(tmp_path):
    task = c_task(LAST_BIT)
    generated = GeneratedTask("c_t", TaskKind.C, "test", {}, to_json(task), "k")
    row = conditioning.check_task(generated, str(tmp_path))
    (tmp_path / "validate-rounding.jsonl").write_text(json.dumps(row) + "\n")
    assert flagged_tasks([tmp_path]) == {"c_t": ("fma_sensitive",)}


# The bit of expf(x) worth 2 ulp where expf(x) is in [1, 2) (x in [0, 0.69)): a result 2 ulp away, as
# CUDA's expf may return, sets it differently, and the output is a step function of it.
EXPF_BIT = "((int)(expf(x[i]) * 4194304.0f) & 1) ? 1.0f : 0.0f"


def test_a_step_on_an_expf_result_is_libm_sensitive(tmp_path):
    assert conditioning.libm_sensitivity(c_task(EXPF_BIT), str(tmp_path)).flag == "libm_sensitive"


def test_a_smooth_sum_of_math_calls_is_not_libm_sensitive(tmp_path):
    assert conditioning.libm_sensitivity(c_task("expf(x[i]) + cosf(y[i])"), str(tmp_path)).flag == ""


def test_only_the_math_functions_with_an_error_bound_count_as_calls():
    task = c_task("hypotf(fabsf(x[i]), sqrtf(fmaxf(y[i], 0.0f)))")
    assert conditioning.libm_calls(task.source) == ("hypotf",)


def test_the_two_nudged_builds_move_each_result_by_the_bound_in_opposite_directions(tmp_path):
    task = c_task("expf(x[i])")
    nudged = dataclasses.replace(task, source=conditioning.nudge_prelude(("expf",)) + task.source)
    config = task.configs[0]
    outs = []
    for build_task, flags in [(task, cref.CFLAGS), *[(nudged, (*cref.CFLAGS, f"-DCUDAPERF_NUDGE_FLIP={f}"))
                                                     for f in (0, 1)]]:
        values = cref.make_inputs(task, config, 0)
        cref.call(task, cref.build_reference(build_task, cache_dir=str(tmp_path), flags=flags), values)
        outs.append(values["out"].view(np.int32).astype(np.int64))  # positive floats: ulps are integer steps
    steps = (outs[1] - outs[0], outs[2] - outs[0])
    assert set(np.abs(steps[0])) == {2} and np.array_equal(steps[0], -steps[1])


def test_an_only_check_names_itself_in_the_row(tmp_path):
    generated = GeneratedTask("c_t", TaskKind.C, "test", {}, to_json(c_task(EXPF_BIT)), "k")
    row = conditioning.check_task(generated, str(tmp_path), only="libm")
    assert (row["check"], row["flags"]) == ("libm", ["libm_sensitive"])


def test_an_unknown_check_is_refused():
    generated = GeneratedTask("c_t", TaskKind.C, "test", {}, to_json(c_task(EXPF_BIT)), "k")
    with pytest.raises(ValueError, match="unknown check"):
        conditioning.check_task(generated, only="ulp")


def test_a_task_whose_reference_fails_is_reported_not_raised():
    generated = GeneratedTask("pt_t", TaskKind.PYTORCH, "test", {}, "raise ValueError('no')", "k")
    assert conditioning.check_task(generated)["flags"] == ["reference_error"]
