"""The launches a fast-format solution makes for one input configuration, found without a GPU.

`trace_solution(source, task, config)` runs the solution's host code on torch `meta` tensors (shapes and
dtypes, no data) with a stand-in for `cudaperf.cuda`: `compile`/`load` compile nothing and return kernels
that record each call (grid, block, dynamic shared memory, the scalar arguments by parameter name, the
tensor arguments' element counts). So the launch shape against the problem (threads per element, blocks,
waves of the GPU) and the kernel parameters that bind the analysis' sizes come from the code itself, per
configuration: a two-pass reduction shows two launches, a bitonic sort its network depth as a launch count.

Why run the host code rather than read it: launch shapes are Python expressions over tensor shapes
(`(planes * oh * ((ow + 3) // 4) + 255) // 256`), often after a few assignments; running them on meta
tensors is exact and needs no evaluator of our own.

Trust: this runs the solution's Python in the calling process with the import of `cudaperf.cuda` redirected,
which is no sandbox. It is meant for the generated dataset (our own code) and for candidates a caller has
chosen to trust; `trace_isolated` runs the same trace for an untrusted candidate in a sandboxed CPU worker
(`cudaperf.execute.WorkerPool`, job handler `trace_job`).

Not covered: `load_inline` and `.cu` solutions (no host code to run without a C++ build: a `TraceResult`
with `ok=False` says so), host code that reads tensor values (`.item()`, data-dependent shapes: meta tensors
have no data, the trace stops there and keeps the launches made before), kernels launched by torch ops.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cudaperf.toolchain import signature as _sig

MAX_LAUNCHES = 4096  # a trace stops recording past this (a host loop of launches, e.g. a sorting network)


@dataclass(frozen=True)
class LaunchRecord:
    """One kernel call seen by the trace."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    scalars: dict[str, float] = field(default_factory=dict)  # parameter name -> value (numbers only)
    tensor_elems: tuple[int, ...] = ()  # element count of each tensor argument, in order
    tensors: dict[str, int] = field(default_factory=dict)  # parameter name -> elements (named tensors only)

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True)
class TraceResult:
    """The launches of one call of the solution on one configuration; `ok` False with `error` when the
    host code could not run to the end (the launches before the failure are kept)."""

    launches: tuple[LaunchRecord, ...]
    ok: bool
    error: str = ""
    truncated: bool = False  # more than MAX_LAUNCHES launches


class _StopTrace(Exception):
    """Raised by a recording kernel when MAX_LAUNCHES is reached: nothing more to learn."""


class _Recorder:
    def __init__(self):
        self.launches: list[LaunchRecord] = []
        self.truncated = False

    def record(self, name: str, params: tuple[_sig.Param, ...] | None, grid, block, args, smem_bytes):
        if len(self.launches) >= MAX_LAUNCHES:
            self.truncated = True
            raise _StopTrace
        scalars, elems, tensors = {}, [], {}
        for i, a in enumerate(args):
            pname = params[i].name if params is not None and i < len(params) else None
            if hasattr(a, "numel") and hasattr(a, "dtype"):
                elems.append(int(a.numel()))
                if pname is not None:
                    tensors[pname] = int(a.numel())
            elif isinstance(a, (bool, int, float)):
                scalars[pname or f"arg{i}"] = float(a)
        self.launches.append(
            LaunchRecord(name, _dim3(grid), _dim3(block), int(smem_bytes or 0), scalars, tuple(elems),
                         tensors)
        )


def _dim3(v: Any) -> tuple[int, int, int]:
    vals = [int(x) for x in v] if isinstance(v, (tuple, list)) else [int(v)]
    vals = (vals + [1, 1, 1])[:3]
    return vals[0], vals[1], vals[2]


class _Kernel:
    def __init__(self, recorder: _Recorder, name: str, params: tuple[_sig.Param, ...] | None):
        self._recorder, self._name, self._params = recorder, name, params

    def __call__(self, grid, block, *args, smem_bytes: int = 0, stream=None):
        self._recorder.record(self._name, self._params, grid, block, args, smem_bytes)

    def max_active_blocks_per_sm(self, block_threads: int, smem_bytes: int = 0) -> int:
        return 2048 // max(32, int(block_threads))  # a placeholder: the real figure needs the cubin


class _Module:
    def __init__(self, recorder: _Recorder, source: str):
        self._recorder = recorder
        self._kernels = _safe_kernels(source)

    def __getattr__(self, name: str) -> _Kernel:
        if name.startswith("__"):
            raise AttributeError(name)
        return self[name]

    def __getitem__(self, name: str) -> _Kernel:
        base = _sig.base_name(name)
        sig = self._kernels.get(base)
        return _Kernel(self._recorder, base, sig.params if sig else None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._kernels)


def _safe_kernels(source: str) -> dict[str, _sig.KernelSignature]:
    try:
        return _sig.parse_kernels(source)
    except Exception:  # noqa: BLE001 - an unreadable signature only loses parameter names
        return {}


def _fake_cuda(recorder: _Recorder) -> types.ModuleType:
    """A stand-in for `cudaperf.cuda` whose kernels record their launches."""
    mod = types.ModuleType("cudaperf.cuda")

    def compile(source: str, name: str, **_: Any) -> _Kernel:
        return _Module(recorder, source)[name]

    def load(source: str, **_: Any) -> _Module:
        return _Module(recorder, source)

    mod.compile, mod.load = compile, load
    mod.default_arch = lambda: "sm_90"
    mod.CompileError = RuntimeError
    return mod


def _importer(fake: types.ModuleType):
    """`__import__` that hands the solution the recording `cudaperf.cuda` and everything else as usual."""
    real = builtins.__import__
    package = types.ModuleType("cudaperf")
    package.cuda = fake

    def hook(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "cudaperf.cuda" and fromlist:
            return fake
        if name == "cudaperf.cuda":
            return package
        if name == "cudaperf" and fromlist and "cuda" in fromlist:
            return package
        return real(name, globals, locals, fromlist, level)

    return hook


def _namespace(recorder: _Recorder) -> dict[str, Any]:
    own_builtins = dict(vars(builtins))
    own_builtins["__import__"] = _importer(_fake_cuda(recorder))
    return {"__name__": "cudaperf_traced_solution", "__builtins__": own_builtins}


def trace_solution(source: str, task: Any, config: Mapping[str, Any] | str) -> TraceResult:
    """The launches `source` makes on `config` of `task` (a `ranker.problem.Problem`): never raises."""
    recorder = _Recorder()
    try:
        import torch

        ns = _namespace(recorder)
        with contextlib.redirect_stdout(io.StringIO()), torch.device("meta"), torch.no_grad():
            exec(compile(source, "<solution>", "exec"), ns)  # noqa: S102 - see the module docstring: trust
            task.call(ns, config)
        return TraceResult(tuple(recorder.launches), True, "", recorder.truncated)
    except _StopTrace:
        return TraceResult(tuple(recorder.launches), True, "", True)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return TraceResult(tuple(recorder.launches), False, f"{type(exc).__name__}: {exc}"[:300])


def waves(launch: LaunchRecord, blocks_per_sm: int, sms: int = 132) -> float:
    """How many times the GPU's SMs are filled by this launch's blocks (132 SMs: the H200)."""
    return launch.blocks / max(1, blocks_per_sm * sms)


def log2p(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


# --------------------------------------------------------------------------------------------------
# The same trace for untrusted candidates, inside a sandboxed CPU worker


TRACE_HANDLER = "cudaperf.ranker.trace:trace_job"


def trace_job(job: dict[str, Any], report: Any) -> dict[str, Any]:
    """Worker-side handler (`cudaperf.execute` child): trace `job["source"]` on `job["config"]` of the
    task `job["task"]` (a `Task` as a dict); the launches as plain dicts."""
    from cudaperf.ranker.problem import Problem
    from cudaperf.types import Task, from_dict

    report("import")
    result = trace_solution(job["source"], Problem(from_dict(Task, job["task"])), job["config"])
    return {
        "outcome": None,
        "stage": "trace",
        "message": result.error,
        "ok": result.ok,
        "truncated": result.truncated,
        "launches": [
            {
                "kernel": x.kernel,
                "grid": x.grid,
                "block": x.block,
                "smem_bytes": x.smem_bytes,
                "scalars": x.scalars,
                "tensor_elems": x.tensor_elems,
                "tensors": x.tensors,
            }
            for x in result.launches
        ],
    }


def trace_isolated(source: str, task: Any, config: str, pool: Any) -> TraceResult:
    """`trace_solution` run in a worker of `pool` (a `cudaperf.execute.WorkerPool`, CPU mode): the
    candidate's host code runs in the sandbox's child process, never here. A crash, timeout or policy
    finding of the worker is a failed trace with the worker's message."""
    from cudaperf.ranker.problem import Problem
    from cudaperf.types import to_dict

    problem = Problem.of(task)
    reply = pool.run(
        {"handler": TRACE_HANDLER, "task": to_dict(problem.task), "source": source, "config": config}
    )
    payload = reply.payload or {}
    if reply.outcome is not None or "launches" not in payload:
        why = getattr(reply.outcome, "value", reply.outcome)
        return TraceResult((), False, f"sandboxed trace: {why} at {reply.stage}: {reply.message}"[:300])
    launches = tuple(
        LaunchRecord(
            x["kernel"],
            tuple(x["grid"]),
            tuple(x["block"]),
            x["smem_bytes"],
            dict(x["scalars"]),
            tuple(x["tensor_elems"]),
            {str(k): int(v) for k, v in (x.get("tensors") or {}).items()},
        )
        for x in payload["launches"]
    )
    return TraceResult(launches, bool(payload["ok"]), payload.get("message", ""), bool(payload["truncated"]))
