"""The first prompt: templates shipped as package files, filled from the task and the anti-cheat policy;
the worked examples they teach must themselves pass the policy and compile."""

from __future__ import annotations

import dataclasses
import re

import pytest

from cudaperf.agent.prompting import (
    EntryKind,
    derived_config_names,
    load_template,
    render_refine_message,
    render_task_prompt,
    without_task_options,
)
from cudaperf.anticheat.policy import DEFAULT_ALLOWED_IMPORTS, Policy
from cudaperf.anticheat.static import check_source
from cudaperf.tasks import load_task, task_from_source
from cudaperf.tasks.ctask import ArrayGen, CConfig, CParam, CTask, ParamKind, compile_check, to_task
from cudaperf.tasks.examples import example_tasks_dir
from cudaperf.types import InputConfig, Severity, Tolerance

SAXPY = CTask(
    task_id="c_saxpy_test", family="map", entry="saxpy",
    source="void saxpy(const float* x, float* y, float a, int n) { for (int i = 0; i < n; ++i) "
           "y[i] += a * x[i]; }",
    params=(CParam("x", "float", ParamKind.IN, "n"), CParam("y", "float", ParamKind.INOUT, "n"),
            CParam("a", "float", ParamKind.SCALAR), CParam("n", "int", ParamKind.SCALAR)),
    inputs={"x": ArrayGen("uniform", -1, 1), "y": ArrayGen("uniform", -1, 1)},
    configs=(CConfig("small", {"a": 2.0, "n": 1000}), CConfig("large", {"a": 0.5, "n": 1 << 20}),
             CConfig("odd", {"a": -1.0, "n": 100_003})),
    tolerance=Tolerance(1e-5, 1e-5), description="y += a*x.",
)


def _worked_example(template: str) -> str:
    return re.findall(r"```python\n(.*?)```", load_template(template), re.DOTALL)[-1]


@pytest.mark.parametrize("fmt", ["fast", "inline"])
def test_every_task_template_fills_every_placeholder(fmt):
    softmax = load_task(example_tasks_dir() / "softmax.py")
    for task in (softmax, to_task(SAXPY)):
        assert "${" not in render_task_prompt(task, fmt).user


def test_pytorch_prompt_lists_every_declared_input_configuration():
    task = load_task(example_tasks_dir() / "softmax.py")
    user = render_task_prompt(task).user
    assert all(f"`{c.name}`: " + ", ".join(f"{k}={v!r}" for k, v in c.params.items()) in user
               for c in task.configs if c.name not in derived_config_names(task))


def test_derived_configurations_are_counted_not_shown():
    source = (example_tasks_dir() / "relu.py").read_text()
    task = task_from_source(source, "relu")
    derived = InputConfig("derived_1", {"n": 1001}, module_values={"N": 77}, timed=False)
    user = render_task_prompt(dataclasses.replace(task, configs=(*task.configs, derived))).user
    assert "derived_1" not in user and "checks correctness on 1 more configuration (" in user


def test_pytorch_prompt_leaves_out_the_harness_options():
    task = load_task(example_tasks_dir() / "softmax.py")
    assert "CUDAPERF_TASK" in task.source and "CUDAPERF_TASK" not in render_task_prompt(task).user


def test_task_options_removal_keeps_the_rest_of_the_source():
    source = "import torch\nCUDAPERF_TASK = {\n    'family': 'x',\n}\n\n\n\nclass Model:\n    pass\n"
    assert without_task_options(source) == "import torch\n\nclass Model:\n    pass\n"


def test_c_prompt_names_the_entry_point_and_its_parameters():
    prompt = render_task_prompt(to_task(SAXPY))
    assert (prompt.entry, prompt.entry_kind) == ("saxpy", EntryKind.FUNCTION)
    assert "def saxpy(x, y, a, n)" in prompt.user and "- `y`: array of n `float` (inout)" in prompt.user


def test_pytorch_prompt_asks_for_model_new():
    prompt = render_task_prompt(load_task(example_tasks_dir() / "relu.py"))
    assert (prompt.entry, prompt.entry_kind) == ("ModelNew", EntryKind.CLASS)


def test_prompt_states_the_policy_imports():
    task = load_task(example_tasks_dir() / "relu.py")
    strict = render_task_prompt(task).user
    narrow = render_task_prompt(task, policy=Policy(allowed_imports=("torch", "cudaperf.cuda"))).user
    assert all(f"`{m}`" in strict for m in DEFAULT_ALLOWED_IMPORTS if m != "__future__")
    assert "`numpy`" not in narrow and "`cudaperf.cuda`" in narrow


def test_lenient_policy_changes_the_compute_rule():
    task = load_task(example_tasks_dir() / "relu.py")
    assert "no torch math" in render_task_prompt(task).user
    assert "no torch math" not in render_task_prompt(task, policy=Policy(allow_torch_ops=True)).user


def test_messages_are_system_then_user():
    roles = [m.role for m in render_task_prompt(load_task(example_tasks_dir() / "relu.py")).messages()]
    assert roles == ["system", "user"]


def test_unknown_format_is_rejected():
    with pytest.raises(ValueError, match="format"):
        render_task_prompt(load_task(example_tasks_dir() / "relu.py"), "triton")


@pytest.mark.parametrize("template", ["pytorch_fast", "pytorch_inline", "c_fast", "c_inline"])
def test_worked_example_passes_the_strict_policy(template):
    errors = [f for f in check_source(_worked_example(template), Policy()) if f.severity is Severity.ERROR]
    assert errors == []


@pytest.mark.parametrize("template", ["pytorch_fast", "c_fast"])
def test_fast_worked_example_compiles_with_nvrtc(template):
    check = compile_check(_worked_example(template))
    assert check.ok, check.log


def test_refine_message_carries_feedback_and_instruction():
    text = render_refine_message(0, "Verdict: CORRECT", "Make it faster.")
    assert "turn 1" in text and "Verdict: CORRECT" in text and "Make it faster." in text
