"""Loader for PyTorch→CUDA task files: the KernelBench problem format plus a multi-configuration extension.

A task file is a Python module (trusted code) that defines
  * `class Model(nn.Module)`: the reference to replace;
  * `get_inputs(**params) -> list`: the `forward` arguments (tensors, numbers);
  * `get_init_inputs(**params) -> list` (optional, default `[]`): the constructor arguments; it receives
    the configuration's parameters that its signature accepts;
  * `get_input_configs() -> list[dict]` (optional, the extension): one dict per input configuration,
    `{"name": "large", "n": 8_388_617}`; `name` names it, the other keys are the keyword arguments of
    `get_inputs`. Without it the task has one configuration, `default`, and `get_inputs()` gets nothing,
    which is exactly a KernelBench file;
  * `CUDAPERF_TASK = {...}` (optional, a literal dict, read without running the file): `tolerances`
    (`{"float32": [atol, rtol]}`), `allow_tf32` (bool), `family`, `description`, `timed_configs`
    (configuration names to time; default all declared ones), `no_derived_configs` (a reason: see below).
A task that declares fewer than three configurations gets correctness-only configurations derived from its
module-level size constants (`cudaperf.tasks.derived_configs`), unless it opts out with a stated reason.
The task id is the file stem. Loading runs the module once in a fresh namespace to validate it; a broken
file raises `TaskError` naming the file and the reason.

Not covered here: making inputs or running the model (`cudaperf.tasks.runtime`), C→CUDA tasks
(`cudaperf.tasks.ctask`), evaluating candidates.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

from cudaperf.tasks.task_module import exec_task_source, module_name_for
from cudaperf.types import InputConfig, Task, TaskKind, Tolerance

__all__ = ["TaskError", "exec_task_source", "load_task", "load_tasks", "module_name_for", "task_from_source"]

OPTIONS_NAME = "CUDAPERF_TASK"
DEFAULT_CONFIG = "default"
_OPTION_KEYS = {"tolerances", "allow_tf32", "family", "description", "timed_configs", "no_derived_configs"}
_CONFIG_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")  # names end up in tables, file names and JSON keys


class TaskError(Exception):
    """A task file that cannot be used; `str()` is `<path>: <reason>`."""

    def __init__(self, path: str | Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


class _Invalid(ValueError):
    """A task file breaks the format; the message is the reason shown to the user."""


# -- options (CUDAPERF_TASK), read statically --------------------------------------------------------


def read_options(source: str) -> dict[str, Any]:
    """The literal `CUDAPERF_TASK` dict of a task source ({} when absent). Raises ValueError if it is not a
    literal: options are read without running the file (e.g. by `timed_configs`), so they must be data."""
    tree = ast.parse(source)
    found: dict[str, Any] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
        if any(isinstance(t, ast.Name) and t.id == OPTIONS_NAME for t in targets):
            try:
                found = ast.literal_eval(node.value)
            except ValueError as exc:
                raise _Invalid(f"{OPTIONS_NAME} must be a literal dict (line {node.lineno})") from exc
    if not isinstance(found, dict):
        raise _Invalid(f"{OPTIONS_NAME} must be a dict, got {type(found).__name__}")
    return found


def timed_configs(task: Task) -> tuple[str, ...]:
    """Names of the configurations to time: `CUDAPERF_TASK["timed_configs"]`, default all of them; for a
    C task, its declaration's (`CTask.timed_names`).

    Lives here rather than on `Task` because the record has no such field yet (see the final report)."""
    if task.kind is TaskKind.C:
        from cudaperf.tasks.ctask import from_task

        return from_task(task).timed_names
    names = read_options(task.source).get("timed_configs") if task.kind is TaskKind.PYTORCH else None
    return tuple(names) if names else tuple(c.name for c in task.configs if c.timed)


def _parse_tolerances(raw: Any) -> dict[str, Tolerance]:
    import torch

    if not isinstance(raw, dict):
        raise _Invalid('tolerances must be a dict like {"float32": [atol, rtol]}')
    out = {}
    for dtype_name, value in raw.items():
        if not isinstance(getattr(torch, str(dtype_name), None), torch.dtype):
            raise _Invalid(f"tolerances: {dtype_name!r} is not a torch dtype name (e.g. 'float32')")
        if isinstance(value, dict):
            value = [value.get("atol"), value.get("rtol")]
        if (not isinstance(value, (list, tuple)) or len(value) != 2
                or not all(isinstance(v, (int, float)) and v >= 0 for v in value)):
            raise _Invalid(f"tolerances[{dtype_name!r}] must be [atol, rtol], two numbers >= 0")
        out[str(dtype_name)] = Tolerance(atol=float(value[0]), rtol=float(value[1]))
    return out


def _check_options(options: dict[str, Any], config_names: list[str]) -> None:
    unknown = set(options) - _OPTION_KEYS
    if unknown:  # a typo ("tolerance") would otherwise be ignored silently
        raise _Invalid(f"{OPTIONS_NAME} has unknown keys {sorted(unknown)}; known: {sorted(_OPTION_KEYS)}")
    if not isinstance(options.get("allow_tf32", False), bool):
        raise _Invalid("allow_tf32 must be True or False")
    for key in ("family", "description"):
        if key in options and not isinstance(options[key], str):
            raise _Invalid(f"{key} must be a string")
    reason = options.get("no_derived_configs")
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        raise _Invalid("no_derived_configs must state the reason, e.g. \"the kernel size is the problem\"")
    timed = options.get("timed_configs")
    if timed is not None:
        if not isinstance(timed, (list, tuple)) or not timed:
            raise _Invalid("timed_configs must be a non-empty list of configuration names")
        missing = [n for n in timed if n not in config_names]
        if missing:
            raise _Invalid(f"timed_configs names unknown configurations {missing}; have {config_names}")


# -- configurations ----------------------------------------------------------------------------------


def _json_roundtrips(params: dict[str, Any]) -> bool:
    try:
        return json.loads(json.dumps(params, allow_nan=False)) == params
    except (TypeError, ValueError):
        return False


def _config_from(item: Any, index: int, get_inputs: Any) -> InputConfig:
    if not isinstance(item, dict):
        raise _Invalid(f"get_input_configs()[{index}] is a {type(item).__name__}, expected a dict")
    name = item.get("name")
    if not isinstance(name, str) or not _CONFIG_NAME.match(name):
        raise _Invalid(f"get_input_configs()[{index}] needs a 'name' made of letters, digits, _ . -")
    params = {k: v for k, v in item.items() if k != "name"}
    if not all(isinstance(k, str) for k in params) or not _json_roundtrips(params):
        # Configurations travel as JSON to the worker: what arrives must be what the file said.
        raise _Invalid(f"configuration {name!r}: parameters must be JSON data (numbers, strings, "
                         f"lists, dicts; no tuples, tensors or NaN), got {params!r}")
    try:
        inspect.signature(get_inputs).bind(**params)
    except TypeError as exc:
        raise _Invalid(f"configuration {name!r}: get_inputs() does not accept {sorted(params)}: {exc}"
                       ) from None
    return InputConfig(name=name, params=params)


def configs_of(module: types.ModuleType) -> tuple[InputConfig, ...]:
    """The module's input configurations, validated. Raises ValueError with the reason."""
    fn = getattr(module, "get_input_configs", None)
    if fn is None:
        return (InputConfig(DEFAULT_CONFIG, {}),)
    raw = fn()
    if not isinstance(raw, (list, tuple)) or not raw:
        raise _Invalid("get_input_configs() must return a non-empty list of dicts")
    configs = tuple(_config_from(item, i, module.get_inputs) for i, item in enumerate(raw))
    names = [c.name for c in configs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise _Invalid(f"configuration names must be unique; repeated: {dupes}")
    return configs


# -- the loader --------------------------------------------------------------------------------------


def _check_module(module: types.ModuleType) -> None:
    import torch

    model = getattr(module, "Model", None)
    if not (isinstance(model, type) and issubclass(model, torch.nn.Module)):
        raise _Invalid("no `class Model(nn.Module)` defined")
    if not callable(getattr(module, "get_inputs", None)):
        raise _Invalid("no `get_inputs()` function defined")
    if hasattr(module, "get_init_inputs") and not callable(module.get_init_inputs):
        raise _Invalid("`get_init_inputs` is not a function")


def _description(options: dict[str, Any], module: types.ModuleType) -> str:
    if options.get("description"):
        return options["description"]
    doc = inspect.getdoc(module.Model) or inspect.getdoc(module) or ""
    return doc.strip()


def task_from_source(source: str, task_id: str, path: str | None = None) -> Task:
    """Validate a task's source and build its `Task` record. Raises TaskError."""
    where = path or f"<task {task_id}>"
    try:
        options = read_options(source)
    except SyntaxError as exc:
        raise TaskError(where, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    except _Invalid as exc:
        raise TaskError(where, str(exc)) from None
    try:
        module = exec_task_source(source, module_name=module_name_for(task_id, source), filename=where,
                                  keep=False)
    except Exception as exc:  # noqa: BLE001 - the task's own code may raise anything: name it
        raise TaskError(where, f"running the file raised {type(exc).__name__}: {exc}") from None
    try:
        _check_module(module)
        configs = configs_of(module)
        _check_options(options, [c.name for c in configs])
        tolerances = _parse_tolerances(options.get("tolerances", {}))
    except Exception as exc:  # noqa: BLE001 - user code (get_input_configs) may raise anything: name it
        reason = str(exc) if isinstance(exc, _Invalid) else f"{type(exc).__name__}: {exc}"
        raise TaskError(where, reason) from None
    task = Task(task_id=task_id, kind=TaskKind.PYTORCH, source=source, configs=configs, path=path,
                family=options.get("family"), tolerances=tolerances,
                allow_tf32=options.get("allow_tf32", False), description=_description(options, module))
    return _with_derived_configs(task, options)


def _with_derived_configs(task: Task, options: dict[str, Any]) -> Task:
    """The task with its derived correctness-only configurations (and a note when they fall short)."""
    from cudaperf.tasks import derived_configs, runtime

    if options.get("no_derived_configs"):
        if len(task.configs) >= derived_configs.MIN_CONFIGS:
            return task
        return replace(task, notes=(f"no derived configurations: {options['no_derived_configs']}",))
    derivation = derived_configs.cached_derive(
        task.source, task.configs, lambda c: runtime.runs_on_meta(task, c))
    notes = (derivation.note,) if derivation.note else ()
    return replace(task, configs=task.configs + derivation.configs, notes=notes)


def load_task(path: str | Path) -> Task:
    """Load one task file; the task id is the file stem (for `.ctask.json` C tasks, the id the file
    declares). Raises TaskError (file and reason)."""
    p = Path(path)
    if p.name.endswith(".ctask.json"):  # a C->CUDA task (cudaperf.tasks.ctask)
        from cudaperf.tasks.ctask import load_task_file

        try:
            return load_task_file(p)
        except (OSError, ValueError) as exc:
            raise TaskError(p, str(exc)) from None
    try:
        source = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(p, f"cannot read: {exc}") from None
    return task_from_source(source, p.stem, str(p))


def task_files(directory: str | Path) -> list[Path]:
    """The task files of a directory: `*.py` (PyTorch) and `*.ctask.json` (C), sorted, not private
    (`_x.py`, `__init__.py`)."""
    found = [*Path(directory).glob("*.py"), *Path(directory).glob("*.ctask.json")]
    return sorted(p for p in found if not p.name.startswith("_") and p.is_file())


def load_tasks(directory: str | Path, errors: list[TaskError] | None = None) -> list[Task]:
    """Load every task file of `directory` (sorted by name).

    Broken files: when `errors` is a list, each one's TaskError is appended to it and the file skipped;
    when `errors` is None, one TaskError naming every broken file is raised — dropping files silently
    would shrink a benchmark without anyone noticing.
    """
    d = Path(directory)
    if not d.is_dir():
        raise TaskError(d, "not a directory")
    tasks, failed = [], []
    for p in task_files(d):
        try:
            tasks.append(load_task(p))
        except TaskError as exc:
            failed.append(exc)
    if failed and errors is None:
        raise TaskError(d, f"{len(failed)} broken task file(s):\n" + "\n".join(str(e) for e in failed))
    if errors is not None:
        errors.extend(failed)
    return tasks
