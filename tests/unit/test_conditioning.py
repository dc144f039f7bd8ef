"""The rounding-sensitivity filter (datasets/conditioning.py): real gcc builds with and without fused
multiply-adds, and real float32 / float64 PyTorch runs, on small hand-written tasks."""

from __future__ import annotations

import json

import pytest

from cudaperf.datasets import conditioning
from cudaperf.datasets.measure import flagged_tasks
from cudaperf.datasets.records import GeneratedTask
from cudaperf.tasks.ctask import ArrayGen, CConfig, CParam, CTask, ParamKind, to_json
from cudaperf.types import TaskKind, Tolerance

pytestmark = pytest.mark.skipif(not conditioning.host_has_fma(), reason="the fused C build needs FMA3")


def c_task(body: str) -> CTask:
    source = f"void f(const float* x, const float* y, float* out, int n) {{\n" \
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


def test_a_task_whose_reference_fails_is_reported_not_raised():
    generated = GeneratedTask("pt_t", TaskKind.PYTORCH, "test", {}, "raise ValueError('no')", "k")
    assert conditioning.check_task(generated)["flags"] == ["reference_error"]
