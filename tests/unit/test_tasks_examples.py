"""The bundled example tasks and their solutions, checked without a GPU: the tasks load with the promised
ids and configurations, the references run on the CPU, and every solution parses, defines `ModelNew`,
keeps torch compute out of `forward`, and has device code that NVRTC compiles for sm_90."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import torch

from cudaperf.tasks import load_tasks
from cudaperf.tasks.examples import EXAMPLE_TASK_IDS, example_solutions_dir, example_tasks_dir
from cudaperf.tasks.runtime import describe_task, load_module, make_inputs, run_reference_cpu

FORMATS = ("fast", "inline")
TASKS = {t.task_id: t for t in load_tasks(example_tasks_dir())}
SOLUTIONS = [(fmt, tid) for fmt in FORMATS for tid in EXAMPLE_TASK_IDS]


def _solution(fmt: str, task_id: str) -> tuple[str, ast.Module]:
    text = (example_solutions_dir(fmt) / f"{task_id}.py").read_text()
    return text, ast.parse(text)


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to string constants."""
    return {node.targets[0].id: node.value.value for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _nvrtc_cubin(source: str) -> bytes:
    from cuda.core import Program, ProgramOptions

    return Program(source, "c++", options=ProgramOptions(arch="sm_90")).compile("cubin").code


# -- tasks -------------------------------------------------------------------------------------------


def test_example_task_ids_are_exactly_the_promised_ones():
    assert sorted(TASKS) == sorted(EXAMPLE_TASK_IDS)


@pytest.mark.parametrize("task_id", EXAMPLE_TASK_IDS)
def test_example_task_has_at_least_three_configs(task_id):
    assert len(TASKS[task_id].configs) >= 3


@pytest.mark.parametrize("task_id", EXAMPLE_TASK_IDS)
def test_example_task_spans_small_and_tens_of_megabytes(task_id):
    sizes = [i.input_bytes for i in describe_task(TASKS[task_id])]
    assert min(sizes) < 1e6 and max(sizes) >= 20e6


@pytest.mark.parametrize("task_id", EXAMPLE_TASK_IDS)
def test_example_task_has_a_config_with_no_size_a_multiple_of_32(task_id):
    def awkward(params):
        return all(v % 32 for v in params.values() if isinstance(v, int))

    assert any(awkward(c.params) for c in TASKS[task_id].configs)


@pytest.mark.parametrize("task_id", EXAMPLE_TASK_IDS)
def test_example_task_inputs_are_random_not_constant(task_id):
    task = TASKS[task_id]
    module = load_module(task)
    inputs = make_inputs(module, task.configs[0], seed=1, device="cpu")
    assert all(t.std() > 0.1 for t in inputs if isinstance(t, torch.Tensor))


@pytest.mark.parametrize("task_id", EXAMPLE_TASK_IDS)
def test_example_reference_runs_on_cpu_for_the_small_config(task_id):
    assert run_reference_cpu(TASKS[task_id], TASKS[task_id].configs[0]) == ""


# -- solutions: static checks ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, task_id", SOLUTIONS)
def test_solution_defines_model_new_with_the_reference_constructor(fmt, task_id):
    _, tree = _solution(fmt, task_id)
    model_new = _class(tree, "ModelNew")
    init = next(n for n in model_new.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    reference = inspect.signature(load_module(TASKS[task_id]).Model.__init__)
    assert [a.arg for a in init.args.args] == list(reference.parameters)


# Calls allowed inside forward: allocation, layout, shape queries, Python builtins, and the solution's
# own kernels. Anything else (torch.add, x.sum(), F.softmax...) would be torch doing the work.
_ALLOWED_ATTRS = {"contiguous", "data_ptr", "numel", "empty", "empty_like", "size", "dim"}
_ALLOWED_NAMES = {"int", "all", "min", "max", "len", "range", "float", "bool"}
_OWN_KERNELS = re.compile(r"^(self\.kernels?(\.\w+)?|_ext\.\w+)$")


def _forward_calls(tree: ast.Module) -> list[str]:
    forward = next(n for n in _class(tree, "ModelNew").body
                   if isinstance(n, ast.FunctionDef) and n.name == "forward")
    return [ast.unparse(n.func) for n in ast.walk(forward) if isinstance(n, ast.Call)]


@pytest.mark.parametrize("fmt, task_id", SOLUTIONS)
def test_solution_forward_calls_no_torch_compute(fmt, task_id):
    _, tree = _solution(fmt, task_id)
    bad = [c for c in _forward_calls(tree)
           if not (_OWN_KERNELS.match(c) or c in _ALLOWED_NAMES or c.rsplit(".", 1)[-1] in _ALLOWED_ATTRS)]
    assert bad == []


@pytest.mark.parametrize("task_id", EXAMPLE_TASK_IDS)
def test_fast_solution_compiles_with_nvrtc_for_sm90(task_id):
    _, tree = _solution("fast", task_id)
    assert _nvrtc_cubin(_constants(tree)["SRC"])[:4] == b"\x7fELF"


@pytest.mark.parametrize("task_id", EXAMPLE_TASK_IDS)
def test_fast_solution_launches_only_kernels_its_source_defines(task_id):
    text, tree = _solution("fast", task_id)
    src = _constants(tree)["SRC"]
    defined = set(re.findall(r'extern "C" __global__ void(?: __launch_bounds__\(\d+\))?\s+(\w+)\(', src))
    used = set(re.findall(r"cuda\.compile\(SRC, \"(\w+)\"", text)) | set(
        re.findall(r"self\.kernels\.(\w+)\(", text))
    assert used and used <= defined


@pytest.mark.parametrize("task_id", EXAMPLE_TASK_IDS)
def test_inline_solution_device_code_compiles_with_nvrtc_for_sm90(task_id):
    # KERNELS holds only device code (no torch headers), so NVRTC can check it in milliseconds; the
    # host wrapper needs nvcc and the torch headers (~60 s a file) and is left to the GPU run.
    _, tree = _solution("inline", task_id)
    assert _nvrtc_cubin(_constants(tree)["KERNELS"])[:4] == b"\x7fELF"


def _load_inline_kwargs(tree: ast.Module) -> dict[str, ast.expr]:
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "load_inline")
    return {k.arg: k.value for k in call.keywords}


def test_inline_extension_names_are_unique():
    names = [ast.literal_eval(_load_inline_kwargs(_solution("inline", t)[1])["name"])
             for t in EXAMPLE_TASK_IDS]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("task_id", EXAMPLE_TASK_IDS)
def test_inline_functions_are_declared_and_defined(task_id):
    _, tree = _solution("inline", task_id)
    consts = _constants(tree)
    functions = ast.literal_eval(_load_inline_kwargs(tree)["functions"])
    assert all(f"{f}(" in consts["CPP"] and f"torch::Tensor {f}(" in consts["WRAPPER"] for f in functions)


@pytest.mark.parametrize("fmt, task_id", SOLUTIONS)
def test_build_extractor_resolves_every_cuda_unit(fmt, task_id):
    extract = pytest.importorskip("cudaperf.toolchain.extract",
                                  reason="engineer A's build module not present")
    units = extract.extract_units(_solution(fmt, task_id)[0])
    assert units and all(u.resolved for u in units)


@pytest.mark.parametrize("fmt, task_id", SOLUTIONS)
def test_solution_passes_the_static_policy(fmt, task_id):
    static = pytest.importorskip("cudaperf.anticheat.static", reason="anti-cheat static checks not present")
    from cudaperf.anticheat.policy import Policy
    from cudaperf.types import Severity

    flags = static.check_source(_solution(fmt, task_id)[0], Policy())
    assert [f for f in flags if f.severity is Severity.ERROR] == []


def test_example_dirs_exist_for_both_formats():
    assert all(Path(example_solutions_dir(f)).is_dir() for f in FORMATS)


def test_unknown_solution_format_is_refused():
    with pytest.raises(ValueError, match="no example solutions"):
        example_solutions_dir("triton")
