"""The PyTorch task loader: KernelBench files, the multi-configuration extension, options, and clear
errors for broken files."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cudaperf.tasks import TaskError, load_task, load_tasks, timed_configs
from cudaperf.types import InputConfig, Task, TaskKind, Tolerance, from_dict, to_dict

KB_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Adds two tensors."""
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b

N = 1024

def get_inputs():
    return [torch.randn(N), torch.randn(N)]

def get_init_inputs():
    return []
'''

MULTI_TASK = '''
import torch

CUDAPERF_TASK = {"tolerances": {"float32": [1e-3, 2e-3]}, "allow_tf32": True, "family": "linear",
                 "description": "a linear layer", "timed_configs": ["big"]}

class Model(torch.nn.Module):
    def __init__(self, features, bias=True):
        super().__init__()
        self.lin = torch.nn.Linear(features, features, bias=bias)

    def forward(self, x):
        return self.lin(x)

def get_input_configs():
    return [{"name": "small", "batch": 2, "features": 8}, {"name": "big", "batch": 64, "features": 256}]

def get_inputs(batch=2, features=8):
    return [torch.randn(batch, features)]

def get_init_inputs(features=8):
    return [features]
'''


def declared(task) -> tuple:
    """The configurations the file declares (derived correctness-only ones are tested in
    test_derived_configs.py)."""
    return tuple(c for c in task.configs if c.timed)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_kernelbench_file_gives_one_default_config(tmp_path):
    task = load_task(_write(tmp_path, "19_add.py", KB_TASK))
    assert declared(task) == (InputConfig("default", {}),)


def test_task_id_is_the_file_stem_and_source_the_text(tmp_path):
    path = _write(tmp_path, "19_add.py", KB_TASK)
    task = load_task(path)
    assert (task.task_id, task.source, task.path, task.kind) == ("19_add", path.read_text(), str(path),
                                                                  TaskKind.PYTORCH)


def test_description_defaults_to_the_model_docstring(tmp_path):
    assert load_task(_write(tmp_path, "t.py", KB_TASK)).description == "Adds two tensors."


def test_multi_config_file_gives_named_configs_with_params(tmp_path):
    task = load_task(_write(tmp_path, "lin.py", MULTI_TASK))
    assert declared(task) == (InputConfig("small", {"batch": 2, "features": 8}),
                            InputConfig("big", {"batch": 64, "features": 256}))


def test_options_are_read_into_the_record(tmp_path):
    task = load_task(_write(tmp_path, "lin.py", MULTI_TASK))
    assert (task.tolerances, task.allow_tf32, task.family, task.description) == (
        {"float32": Tolerance(1e-3, 2e-3)}, True, "linear", "a linear layer")


def test_timed_configs_come_from_options_else_all(tmp_path):
    multi = load_task(_write(tmp_path, "lin.py", MULTI_TASK))
    kb = load_task(_write(tmp_path, "kb.py", KB_TASK))
    assert (timed_configs(multi), timed_configs(kb)) == (("big",), ("default",))


def test_task_round_trips_through_json(tmp_path):
    task = load_task(_write(tmp_path, "lin.py", MULTI_TASK))
    assert from_dict(Task, json.loads(json.dumps(to_dict(task)))) == task


def test_loading_leaves_no_module_behind(tmp_path):
    import sys

    before = set(sys.modules)
    load_task(_write(tmp_path, "lin.py", MULTI_TASK))
    assert not {m for m in set(sys.modules) - before if m.startswith("cudaperf_task_")}


def test_load_tasks_is_sorted_and_skips_private_files(tmp_path):
    for name in ("b.py", "a.py", "_helper.py", "__init__.py"):
        _write(tmp_path, name, KB_TASK)
    (tmp_path / "notes.txt").write_text("not a task")
    assert [t.task_id for t in load_tasks(tmp_path)] == ["a", "b"]


# -- broken files: each names the file and the reason ------------------------------------------------

BROKEN = {
    "syntax": ("def get_inputs(:\n", "syntax error at line 1"),
    "raises": ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
    "no_model": ("def get_inputs():\n    return []\n", "no `class Model(nn.Module)`"),
    "model_not_module": ("class Model:\n    pass\ndef get_inputs():\n    return []\n",
                         "no `class Model(nn.Module)`"),
    "no_get_inputs": ("import torch\nclass Model(torch.nn.Module):\n    pass\n", "no `get_inputs()`"),
}

CONFIG_BASE = '''
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x
def get_inputs(n=4):
    return [torch.randn(n)]
'''

BROKEN_CONFIGS = {
    "dup_names": ('[{"name": "a", "n": 1}, {"name": "a", "n": 2}]', "repeated: ['a']"),
    "no_name": ('[{"n": 1}]', "needs a 'name'"),
    "not_json": ('[{"name": "a", "n": torch.tensor(1)}]', "must be JSON data"),
    "tuple_param": ('[{"name": "a", "n": (1, 2)}]', "no tuples"),
    "nan_param": ('[{"name": "a", "n": float("nan")}]', "must be JSON data"),
    "unknown_kwarg": ('[{"name": "a", "m": 3}]', "get_inputs() does not accept ['m']"),
    "empty": ("[]", "non-empty list"),
    "not_dicts": ('["a"]', "expected a dict"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_file_raises_task_error_naming_file_and_reason(tmp_path, case):
    text, reason = BROKEN[case]
    path = _write(tmp_path, f"{case}.py", text)
    with pytest.raises(TaskError) as info:
        load_task(path)
    assert info.value.path == str(path) and reason in info.value.reason and str(path) in str(info.value)


@pytest.mark.parametrize("case", sorted(BROKEN_CONFIGS))
def test_bad_configurations_are_rejected_with_the_reason(tmp_path, case):
    configs, reason = BROKEN_CONFIGS[case]
    text = CONFIG_BASE + f"\ndef get_input_configs():\n    return {configs}\n"
    with pytest.raises(TaskError) as info:
        load_task(_write(tmp_path, f"{case}.py", text))
    assert reason in info.value.reason


@pytest.mark.parametrize("options, reason", [
    ('{"tolerance": {}}', "unknown keys ['tolerance']"),
    ('{"tolerances": {"float33": [1, 1]}}', "not a torch dtype name"),
    ('{"tolerances": {"float32": [1e-4]}}', "[atol, rtol]"),
    ('{"allow_tf32": "yes"}', "allow_tf32 must be True or False"),
    ('{"timed_configs": ["nope"]}', "unknown configurations ['nope']"),
    ('dict(family="x")', "must be a literal dict"),
])
def test_bad_options_are_rejected_with_the_reason(tmp_path, options, reason):
    text = CONFIG_BASE + f"\nCUDAPERF_TASK = {options}\n"
    with pytest.raises(TaskError) as info:
        load_task(_write(tmp_path, "opts.py", text))
    assert reason in info.value.reason


def test_unreadable_file_raises_task_error(tmp_path):
    with pytest.raises(TaskError, match="cannot read"):
        load_task(tmp_path / "missing.py")


def test_load_tasks_raises_naming_every_broken_file_by_default(tmp_path):
    _write(tmp_path, "good.py", KB_TASK)
    _write(tmp_path, "bad1.py", "def (:\n")
    _write(tmp_path, "bad2.py", "raise ValueError('x')\n")
    with pytest.raises(TaskError) as info:
        load_tasks(tmp_path)
    assert "bad1.py" in str(info.value) and "bad2.py" in str(info.value) and "2 broken" in str(info.value)


def test_load_tasks_collects_errors_when_given_a_list(tmp_path):
    _write(tmp_path, "good.py", KB_TASK)
    _write(tmp_path, "bad.py", "def (:\n")
    errors: list[TaskError] = []
    tasks = load_tasks(tmp_path, errors=errors)
    assert [t.task_id for t in tasks] == ["good"] and [Path(e.path).name for e in errors] == ["bad.py"]


def test_load_tasks_on_a_missing_directory_raises(tmp_path):
    with pytest.raises(TaskError, match="not a directory"):
        load_tasks(tmp_path / "nope")
