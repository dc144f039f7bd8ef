"""Running a PyTorch task's own code: its module, its inputs per configuration and seed, its constructor
arguments. Used inside the GPU worker, and on the `meta` device by `cudaperf tasks` to describe sizes.

Inputs are created directly on the target device: `get_inputs` runs under `torch.device(device)` as the
default device after `torch.manual_seed(seed)`, so `torch.randn(n)` draws on the GPU with the seeded CUDA
generator. Drawing gigabytes on the CPU and copying them over made one KernelBench evaluation take
74-120 s instead of ~3 s (see docs/evaluation.md, "measured pitfalls"). Tensors a task creates on another
device anyway (an explicit `device="cpu"`, numpy) are moved afterwards.

Not covered here: validation of task files (`cudaperf.tasks.kernelbench`), comparing outputs, timing,
running candidate code.
"""

from __future__ import annotations

import inspect
import math
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cudaperf.tasks.derived_configs import substitute
from cudaperf.tasks.task_module import exec_task_source, module_name_for
from cudaperf.types import InputConfig, Task


def load_module(task: Task, config: InputConfig | None = None) -> types.ModuleType:
    """The task's module, run afresh from `task.source` and kept in `sys.modules` (for pickling and
    torch.compile). For a derived configuration (`config.module_values`) the source is run with those
    module-level constants re-bound, as its own module. Raises whatever the source raises (the worker
    reports it as a harness fault)."""
    source = task_source_for(task, config)
    filename = task.path or f"<task {task.task_id}>"
    return exec_task_source(source, module_name=module_name_for(task.task_id, source),
                            filename=filename, keep=True)


def task_source_for(task: Task, config: InputConfig | None) -> str:
    """The source whose module serves `config`: the task's own, or it with the configuration's constants."""
    if config is None or not config.module_values:
        return task.source
    return substitute(task.source, config.module_values)


def accepted_kwargs(fn: Callable[..., Any], params: dict[str, Any]) -> dict[str, Any]:
    """The subset of `params` that `fn` accepts by name (all of them if it takes **kwargs)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {}
    kinds = {p.kind for p in sig.parameters.values()}
    if inspect.Parameter.VAR_KEYWORD in kinds:
        return dict(params)
    names = {n for n, p in sig.parameters.items()
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in params.items() if k in names}


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _move(value: Any, device: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value if value.device == device else value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_move(v, device) for v in value)
    return value


def make_inputs(module: types.ModuleType, config: InputConfig, seed: int, device: Any) -> list[Any]:
    """`get_inputs(**config.params)` drawn on `device` (default device) from `torch.manual_seed(seed)`.

    The same (module, config, seed, device) gives the same inputs; other seeds give other inputs."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(seed)  # seeds the CPU and every CUDA generator
    with torch.device(dev):
        raw = module.get_inputs(**config.params)
    return [_move(x, dev) for x in _as_list(raw)]


def make_init_inputs(module: types.ModuleType, config: InputConfig) -> list[Any]:
    """Constructor arguments: `get_init_inputs(**accepted params)`, `[]` when the task has none."""
    fn = getattr(module, "get_init_inputs", None)
    if fn is None:
        return []
    return _as_list(fn(**accepted_kwargs(fn, config.params)))


# -- describing and checking tasks cheaply -------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        import torch

        return math.prod(self.shape) * getattr(torch, self.dtype).itemsize


@dataclass(frozen=True)
class ConfigInfo:
    """Shapes of one configuration, computed on the `meta` device (no memory, no compute)."""

    config: str
    params: dict[str, Any]
    inputs: tuple[TensorInfo, ...] = ()
    outputs: tuple[TensorInfo, ...] = ()  # empty unless the reference ran on meta
    error: str = ""  # why the shapes are unknown, if they are

    @property
    def input_bytes(self) -> int:
        return sum(t.nbytes for t in self.inputs)

    @property
    def output_bytes(self) -> int:
        return sum(t.nbytes for t in self.outputs)


def _infos(values: Any) -> tuple[TensorInfo, ...]:
    import torch

    flat = [v for v in _as_list(values) if isinstance(v, torch.Tensor)]
    return tuple(TensorInfo(tuple(v.shape), str(v.dtype).removeprefix("torch.")) for v in flat)


def describe_config(module: types.ModuleType, config: InputConfig, *, run_reference: bool) -> ConfigInfo:
    """Input (and, with `run_reference`, output) shapes of one configuration on the meta device.

    Never raises: a task whose code cannot run on meta (a `.cuda()` call, a data-dependent op) gets its
    reason in `error`."""
    import torch

    info = ConfigInfo(config.name, dict(config.params))
    try:
        inputs = make_inputs(module, config, seed=0, device="meta")
        info = ConfigInfo(config.name, dict(config.params), inputs=_infos(inputs))
        if run_reference:
            with torch.device("meta"):
                model = module.Model(*make_init_inputs(module, config))
            outputs = model(*inputs)
            info = ConfigInfo(config.name, dict(config.params), inputs=info.inputs, outputs=_infos(outputs))
    except Exception as exc:  # noqa: BLE001 - the task's own code: report it, do not crash the listing
        info = ConfigInfo(config.name, dict(config.params), inputs=info.inputs,
                          error=f"{type(exc).__name__}: {exc}")
    return info


def describe_task(task: Task, *, run_reference: bool = False) -> tuple[ConfigInfo, ...]:
    """`describe_config` for every configuration of a task (the module is run once per distinct source)."""
    modules: dict[str, types.ModuleType] = {}
    infos = []
    for config in task.configs:
        source = task_source_for(task, config)
        try:
            if source not in modules:
                modules[source] = load_module(task, config)
        except Exception as exc:  # noqa: BLE001 - the task's own code
            infos.append(ConfigInfo(config.name, dict(config.params), error=f"{type(exc).__name__}: {exc}"))
            continue
        infos.append(describe_config(modules[source], config, run_reference=run_reference))
    return tuple(infos)


def run_reference_cpu(task: Task, config: InputConfig, seed: int = 0) -> str:
    """Run the reference for real on the CPU for one configuration; '' if it gave finite tensor
    outputs, else the problem. Used by `cudaperf tasks --check` on the smallest configuration."""
    import torch

    try:
        module = load_module(task, config)
        torch.manual_seed(seed)
        model = module.Model(*make_init_inputs(module, config))
        with torch.no_grad():
            out = model(*make_inputs(module, config, seed, "cpu"))
    except Exception as exc:  # noqa: BLE001 - the task's own code
        return f"{type(exc).__name__}: {exc}"
    tensors = [o for o in _as_list(out) if isinstance(o, torch.Tensor)]
    if not tensors:
        return f"forward returned {type(out).__name__}, not tensors"
    if not all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point()):
        return "forward returned NaN or Inf"
    return ""


def runs_on_meta(task: Task, config: InputConfig) -> str:
    """'' when the reference builds and runs on `config` on the meta device (shapes only), else why not."""
    try:
        module = load_module(task, config)
    except Exception as exc:  # noqa: BLE001 - the task's own code
        return f"{type(exc).__name__}: {exc}"
    info = describe_config(module, config, run_reference=True)
    if not info.error and not info.outputs:
        return "the reference returned no tensor"
    if _META_LIMITS.search(info.error):
        return ""  # the meta device cannot tell (a data-dependent op): the worker checks on the real device
    return info.error


# Errors that say the meta device cannot run an op, not that the shapes are wrong.
_META_LIMITS = re.compile(r"on meta tensors|meta tensor|Meta backend|'Meta'|data-dependent", re.IGNORECASE)


# -- parameters that still hold their initial constant ------------------------------------------------


def randomize_constant_parameters(reference: Any, candidate: Any, seed: int) -> str:
    """Give both models' constant-initialised tensors the same random values; '' or what stayed unmatched.

    A parameter or floating buffer of the reference whose elements all hold one value (LayerNorm's weight 1
    and bias 0, BatchNorm's running statistics) lets a kernel skip work that the value makes redundant. Each
    such tensor gets values drawn around its constant (`c·U(0.5, 1.5)`, or `U(-0.5, 0.5)` for 0, so variances
    stay positive), and the candidate's tensor of the same shape and constant, in order, gets the same
    values. A reference tensor with no such twin is still randomised: a candidate that kept no such tensor
    and skips the work then fails the comparison, which is the point."""
    import torch

    ours = _constant_tensors(reference)
    theirs = _constant_tensors(candidate)
    unmatched = []
    with torch.no_grad():
        for index, (name, tensor) in enumerate(ours):
            value = float(tensor.reshape(-1)[0])
            twin = next((i for i, (_, t) in enumerate(theirs)
                         if t.shape == tensor.shape and float(t.reshape(-1)[0]) == value), None)
            drawn = _around(value, tensor, (seed * 1009 + index) % (1 << 63))  # a Generator seed is int64
            tensor.copy_(drawn)
            if twin is None:
                unmatched.append(name)
            else:
                theirs.pop(twin)[1].copy_(drawn.to(dtype=tensor.dtype))
    return f"no twin in the candidate for {', '.join(unmatched[:5])}" if unmatched else ""


def _constant_tensors(model: Any) -> list[tuple[str, Any]]:
    import torch

    if not isinstance(model, torch.nn.Module):
        return []
    named = [*model.named_parameters(), *model.named_buffers()]
    return [(n, t) for n, t in named
            if t.is_floating_point() and t.numel() > 1 and bool((t == t.reshape(-1)[0]).all())]


def _around(value: float, like: Any, seed: int) -> Any:
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    u = torch.rand(like.shape, generator=gen, dtype=torch.float64)
    drawn = value * (0.5 + u) if value != 0 else u - 0.5
    return drawn.to(device=like.device, dtype=like.dtype)
