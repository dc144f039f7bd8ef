"""A task as the ranker sees it: how to call a solution on one configuration without data, and the
problem's sizes there (elements in and out, element width, the C scalars, input value ranges).

`Problem.of(task)` takes the shared `cudaperf.types.Task` record (PyTorch or C) or a dataset
`GeneratedTask`. For PyTorch tasks the task module (trusted code) is run once to get `get_inputs`,
`get_init_inputs` and the reference `Model`; its inputs and the reference's output are made on torch's
`meta` device, so a configuration of gigabytes costs nothing. For C tasks the arrays are meta tensors of
the declared lengths and C element types, the scalars the configuration's values.

Not covered: real inputs or outputs (the evaluator's job), solution formats other than the fast one.
"""

from __future__ import annotations

import contextlib
import io
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cudaperf.tasks import ctask as _ctask
from cudaperf.types import Task, TaskKind


@dataclass(frozen=True)
class ProblemSizes:
    """The problem on one configuration (everything a pair of solutions shares)."""

    in_elems: int  # total elements over the input tensors / `in` and `inout` arrays
    out_elems: int  # total elements over the outputs / `out` and `inout` arrays
    elem_bytes: int  # width of the widest input element
    n_inputs: int
    scalars: dict[str, float] = field(default_factory=dict)  # C scalars, or numeric config parameters
    value_span: float | None = None  # C integer inputs: high - low of the draw (e.g. histogram keys)


class Problem:
    """Callable view of one task; caches the task module it runs (not thread-safe: one per thread)."""

    def __init__(self, task: Task):
        self.task = task
        self.kind = task.kind
        self.family = task.family or ""
        self._ctask = _ctask.from_task(task) if task.kind is TaskKind.C else None
        self._module: dict[str, Any] | None = None
        self._sizes: dict[str, ProblemSizes] = {}
        self._lock = threading.Lock()

    @staticmethod
    def of(task: Any) -> Problem:
        if isinstance(task, Problem):
            return task
        if isinstance(task, Task):
            return Problem(task)
        return Problem(task_record(task))

    @property
    def config_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.task.configs)

    # -- calling a solution --------------------------------------------------------------------------
    def call(self, namespace: Mapping[str, Any], config: Mapping[str, Any] | str) -> Any:
        """Call the solution whose module globals are `namespace` on `config` (meta tensors)."""
        name = config if isinstance(config, str) else config["name"]
        if self._ctask is not None:
            fn = namespace.get(self._ctask.entry)
            if fn is None:
                raise LookupError(f"no function {self._ctask.entry} in the solution")
            return fn(**self._c_arguments(name))
        module = self._task_module()
        params = self._params(name)
        init = module["get_init_inputs"](**params) if "get_init_inputs" in module else []
        model = namespace["ModelNew"](*init)
        return model(*module["get_inputs"](**params))

    def _c_arguments(self, name: str) -> dict[str, Any]:
        import torch

        t = self._ctask
        cfg = t.config(name)
        lengths = _ctask.array_lengths(t, cfg)
        args: dict[str, Any] = {}
        for p in t.params:
            if p.is_array:
                dtype = getattr(torch, _ctask.C_TYPES[p.ctype])
                args[p.name] = torch.empty(lengths[p.name], dtype=dtype, device="meta")
            else:
                value = cfg.scalars[p.name]
                args[p.name] = float(value) if p.ctype in ("float", "double") else int(value)
        return args

    def _params(self, name: str) -> dict[str, Any]:
        cfg = next(c for c in self.task.configs if c.name == name)
        return {k: v for k, v in cfg.params.items() if k != "name"}

    def _task_module(self) -> dict[str, Any]:
        with self._lock:
            if self._module is None:
                ns: dict[str, Any] = {"__name__": "cudaperf_ranker_task"}
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(self.task.source, self.task.path or "<task>", "exec"), ns)  # noqa: S102
                self._module = ns
            return self._module

    # -- sizes ---------------------------------------------------------------------------------------
    def sizes(self, config: str) -> ProblemSizes:
        if config not in self._sizes:
            self._sizes[config] = (
                self._c_sizes(config) if self._ctask is not None else self._torch_sizes(config)
            )
        return self._sizes[config]

    def _c_sizes(self, name: str) -> ProblemSizes:
        t = self._ctask
        cfg = t.config(name)
        lengths = _ctask.array_lengths(t, cfg)
        ins = [p for p in t.params if p.is_array and p.kind.value in ("in", "inout")]
        outs = [p for p in t.params if p.is_array and p.kind.value in ("out", "inout")]
        width = max((_C_BYTES.get(p.ctype, 4) for p in ins), default=4)
        spans = [
            g.high - g.low
            for p in ins
            for g in [cfg.inputs.get(p.name) or t.inputs.get(p.name)]
            if g is not None and g.distribution == "randint"
        ]
        scalars = {k: float(v) for k, v in cfg.scalars.items() if isinstance(v, (int, float))}
        return ProblemSizes(
            sum(lengths[p.name] for p in ins),
            sum(lengths[p.name] for p in outs),
            width,
            len(ins),
            scalars,
            float(min(spans)) if spans else None,
        )

    def _torch_sizes(self, name: str) -> ProblemSizes:
        import torch

        module = self._task_module()
        params = self._params(name)
        with torch.device("meta"), torch.no_grad():
            inputs = module["get_inputs"](**params)
            tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
            out_elems = self._reference_out_elems(module, params, inputs)
        width = max((x.element_size() for x in tensors), default=4)
        scalars = {k: float(v) for k, v in params.items() if isinstance(v, (int, float))}
        return ProblemSizes(sum(int(x.numel()) for x in tensors), out_elems, width, len(tensors), scalars)

    @staticmethod
    def _reference_out_elems(module: dict[str, Any], params: dict[str, Any], inputs: list) -> int:
        import torch

        try:
            init = module["get_init_inputs"](**params) if "get_init_inputs" in module else []
            out = module["Model"](*init)(*inputs)
        except Exception:  # noqa: BLE001 - an op without a meta kernel: the output size stays unknown
            return 0
        outs = out if isinstance(out, (tuple, list)) else [out]
        return sum(int(o.numel()) for o in outs if isinstance(o, torch.Tensor))


_C_BYTES = {"float": 4, "double": 8, "int": 4, "unsigned int": 4, "long long": 8, "unsigned char": 1}


def task_record(generated: Any) -> Task:
    """The shared `Task` record of a dataset `GeneratedTask` (its text is a module or a CTask JSON)."""
    from cudaperf.types import InputConfig

    if generated.kind is TaskKind.C:
        return _ctask.to_task(_ctask.from_json(generated.text))
    ns: dict[str, Any] = {"__name__": "cudaperf_ranker_task_configs"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(generated.text, generated.filename, "exec"), ns)  # noqa: S102 - generated task code
    configs = tuple(
        InputConfig(c["name"], {k: v for k, v in c.items() if k != "name"}) for c in ns["get_input_configs"]()
    )
    meta = ns.get("CUDAPERF_TASK", {})
    return Task(
        generated.task_id,
        TaskKind.PYTORCH,
        generated.text,
        configs,
        generated.filename,
        meta.get("family", generated.family),
    )


def log2p(x: float | None) -> float:
    return math.log2(1.0 + max(0.0, float(x))) if x is not None else float("nan")
