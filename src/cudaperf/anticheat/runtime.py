"""Runtime anti-cheat checks, run inside the evaluation worker around candidate code.

Covers four independent guards, each returning `Flag`s (codes from `policy.RULES`):
- `TorchOpMonitor(policy)`: a `TorchDispatchMode` active around `forward`. Every aten op reaching the
  dispatcher is recorded, including ops issued from C++ (a `load_inline` extension calling `torch::matmul`),
  because the mode lives in the dispatcher's thread-local state. Ops outside the policy's allow-list
  (allocation, constant fills, views, metadata) are `torch_compute_op` (hack #10). Copies are compute,
  except an upload of host-made data to the device (a CPU source, same dtype): inputs live on the device,
  so such an upload cannot be carrying input data.
- `ProcessWatch`: live Python threads and torch's current CUDA stream before and after candidate code,
  without patching anything: a new live thread is `thread_created` (hack #5), a changed current stream is
  `stream_changed`, growth of the OS thread count is `native_threads_grew` (a warning: CUDA, NVRTC and
  OpenMP runtimes start threads lazily). Stream *creation* is not observable without patching torch;
  it is caught by the static rule `stream_created` and by `coverage.py`, which counts the streams the
  profiled kernels ran on. Threads started and finished inside the window are not seen.
- `identity_snapshot()` / `identity_changed(snapshot)` / `restore_identities(snapshot)`: the objects behind
  the functions the harness trusts (synchronize, Event.elapsed_time, allclose, perf_counter, Tensor.__eq__,
  sys.modules entries, trace hooks...) captured before candidate import and compared by identity after
  (`monkey_patch`, hack #7); likewise the contents of torch's global module-hook registries
  (`register_module_forward_hook` and its kin, which run inside the reference's and the baselines' calls
  and would outlive the job) and the torch-function and dispatch mode stacks.
- `TF32Guard`: torch's global precision settings (TF32 flags, float32 matmul precision, reduced-precision
  reductions, default dtype) snapshotted, compared and restored (`precision_flags_changed`, hack #11);
  likewise its process-wide runtime settings (the CUDA memory cap, the sync debug mode, TunableOp, the
  preferred BLAS and linear-algebra libraries, the thread count, deterministic algorithms, the attention
  backends: `global_torch_state`), which would reach the harness's own work and the baselines.

Not covered: this is not a sandbox. Candidate code runs in the same interpreter and could undo any of these
guards with enough effort; the static policy forbids the tools for that (private APIs, frames, gc, sys),
and the worker process (`cudaperf.execute`) is the real isolation. The monitor is meant for correctness
runs, not timed ones: a Python callback per aten op is overhead.
"""

from __future__ import annotations

import collections
import functools
import importlib
import inspect
import os
import sys
import threading
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cudaperf.anticheat.policy import Policy, make_flag
from cudaperf.types import Flag

# --------------------------------------------------------------------------------------------------
# aten op monitor

_COPY_OPS = frozenset({"_to_copy", "copy_"})


def _op_name(func: Any) -> str:
    """`mm` for aten::mm, `ns::op` for other namespaces (custom ops registered by an extension)."""
    try:
        qualified = func._schema.name
    except AttributeError:
        return str(func)
    namespace, _, name = qualified.partition("::")
    return name if namespace == "aten" else qualified


def _is_upload(name: str, args: tuple, kwargs: dict) -> bool:
    """A same-dtype copy from a CPU tensor to another device (host-made constants, never input data)."""
    if name == "_to_copy" and args and isinstance(args[0], torch.Tensor):
        src, device, dtype = args[0], kwargs.get("device"), kwargs.get("dtype")
        return (src.device.type == "cpu" and device is not None and torch.device(device).type != "cpu"
                and (dtype is None or dtype == src.dtype))
    if name == "copy_" and len(args) >= 2 and all(isinstance(a, torch.Tensor) for a in args[:2]):
        dst, src = args[0], args[1]
        return src.device.type == "cpu" and dst.device.type != "cpu" and dst.dtype == src.dtype
    return False


class TorchOpMonitor(TorchDispatchMode):
    """Records every aten op dispatched while active; `flags()` reports those outside the allow-list.

    Use around the candidate's forward only: `with TorchOpMonitor(policy) as m: out = model(*inputs)`.
    `ops` counts every op seen, `compute_ops` the ones that are not allowed.
    """

    def __init__(self, policy: Policy | None = None) -> None:
        super().__init__()
        self.policy = policy or Policy()
        self._allowed = frozenset(self.policy.allowed_aten_ops)
        self.ops: collections.Counter[str] = collections.Counter()
        self.compute_ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _op_name(func)
        self.ops[name] += 1
        if name not in self._allowed and not (name in _COPY_OPS and _is_upload(name, args, kwargs)):
            self.compute_ops[name] += 1
        return func(*args, **kwargs)

    def flags(self) -> tuple[Flag, ...]:
        if not self.compute_ops or not self.policy.active("torch_compute_op"):
            return ()
        listed = ", ".join(f"{n} x{c}" for n, c in sorted(self.compute_ops.items(), key=lambda kv: -kv[1]))
        return (make_flag("torch_compute_op", f"torch ran compute ops during forward: {listed}"),)


# --------------------------------------------------------------------------------------------------
# Threads and the current stream


def _native_thread_count() -> int | None:
    """OS threads of this process (Linux /proc); None elsewhere."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def _current_stream_handle() -> int | None:
    """torch's current CUDA stream handle, without initialising CUDA (0 = default stream when idle)."""
    if not torch.cuda.is_available():
        return None
    if not torch.cuda.is_initialized():
        return 0
    return int(torch.cuda.current_stream().cuda_stream)


def _describe_thread(t: threading.Thread) -> str:
    target = getattr(t, "_target", None)  # best effort: where the thread's work comes from
    where = getattr(target, "__qualname__", None) or type(t).__name__
    return f"{t.name!r} ({where})"


def _harness_thread(t: threading.Thread) -> bool:
    return t.name.startswith("cudaperf")


@dataclass
class ProcessWatch:
    """Threads and the current stream across one or more windows of candidate code (not nested).

    `with watch: ...` may be entered several times (import, construct, each forward): findings accumulate.
    Threads named `cudaperf*` belong to the harness and are ignored (override with `ignore`).
    """

    policy: Policy = field(default_factory=Policy)
    ignore: Callable[[threading.Thread], bool] = _harness_thread
    _threads: dict[int, threading.Thread] = field(default_factory=dict, repr=False)
    _native: int | None = None
    _stream: int | None = None
    _findings: list[Flag] = field(default_factory=list, repr=False)

    def __enter__(self) -> Self:
        self._threads = {t.ident or 0: t for t in threading.enumerate()}
        self._native = _native_thread_count()
        self._stream = _current_stream_handle()
        return self

    def __exit__(self, *exc_info: object) -> None:
        started = [t for t in threading.enumerate() if (t.ident or 0) not in self._threads and t.is_alive()]
        new = [t for t in started if not self.ignore(t)]
        if new:
            self._add("thread_created", "candidate code left threads running: "
                      + ", ".join(_describe_thread(t) for t in new))
        native = _native_thread_count()
        if native is not None and self._native is not None and native > self._native + len(started):
            self._add("native_threads_grew", f"OS threads went from {self._native} to {native}")
        stream = _current_stream_handle()
        if stream is not None and self._stream is not None and stream != self._stream:
            self._add("stream_changed",
                      f"the current CUDA stream changed from {self._stream:#x} to {stream:#x}")

    def _add(self, code: str, message: str) -> None:
        if self.policy.active(code):
            self._findings.append(make_flag(code, message))

    def flags(self) -> tuple[Flag, ...]:
        return tuple(self._findings)


# --------------------------------------------------------------------------------------------------
# Identities of the functions the harness trusts

CRITICAL_PATHS: tuple[str, ...] = (
    # timing
    "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize", "torch.cuda.Event.query", "torch.cuda.current_stream",
    "torch.cuda.Stream", "torch.cuda.Stream.synchronize", "torch.cuda.Stream.wait_stream",
    "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.monotonic_ns", "time.time",
    "cudaperf.cuda.Kernel.__call__", "cuda.core.launch", "torch.Tensor.zero_",  # the lead (cudaperf.lead)
    # comparison
    "torch.allclose", "torch.isclose", "torch.equal", "torch.isnan", "torch.isfinite", "torch.isinf",
    "torch.abs", "torch.max", "torch.sub", "torch.testing.assert_close", "torch.Tensor.__eq__",
    "torch.Tensor.__ne__", "torch.Tensor.__sub__", "torch.Tensor.allclose", "torch.Tensor.equal",
    "torch.Tensor.item", "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.cpu", "torch.Tensor.to",
    "torch.Tensor.abs", "torch.Tensor.max", "torch.Tensor.sub", "torch.Tensor.float", "torch.Tensor.double",
    "torch.Tensor.data_ptr", "math.isclose", "math.isfinite",
    # calling the model, building inputs, reporting
    "torch.nn.Module.__call__", "torch.nn.Module._call_impl", "torch.manual_seed", "torch.randn",
    "torch.rand", "torch.Generator", "builtins.isinstance", "builtins.type", "builtins.__import__",
    "json.dumps", "json.loads", "os.write",
)

# Modules whose sys.modules entries must still be the same objects (replacing a module is patching it).
_CRITICAL_MODULES = ("builtins", "time", "math", "json", "os", "torch", "torch.cuda", "torch.nn",
                     "torch.nn.functional", "torch.testing", "numpy")
_MISSING = object()


@dataclass(frozen=True)
class IdentitySnapshot:
    """The objects behind critical names at one moment (strong references: ids cannot be recycled)."""

    entries: Mapping[str, Any]


def _resolve_static(path: str) -> tuple[Any, str, Any]:
    """(owner, attribute, raw value) for a dotted path; the value is looked up without descriptors."""
    parts = path.split(".")
    split = _module_split(path)
    if split is None:
        return None, parts[-1], _MISSING
    owner: Any = sys.modules.get(split) or importlib.import_module(split)
    for attr in parts[split.count(".") + 1:-1]:
        owner = inspect.getattr_static(owner, attr, _MISSING)
        if owner is _MISSING:
            return None, parts[-1], _MISSING
    return owner, parts[-1], inspect.getattr_static(owner, parts[-1], _MISSING)


@functools.cache
def _module_split(path: str) -> str | None:
    """The longest importable module that `path` starts with (None: none is), found once per process.
    Why once: each failed import attempt searches every path finder, and the check after every candidate
    call resolves ~70 paths (2.6 ms of a worker's call, s21); the module found is then read from
    `sys.modules` each time, which is where `importlib.import_module` would have found it."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:i])
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        return name
    return None


# torch's global registries whose contents every module call goes through, the reference's and the
# baselines' too: a global forward hook can slow them (a baseline made to look slow) or replace their
# outputs, and, left in place, it runs in the worker's later jobs, inside other candidates' calls. So
# their contents are captured and compared (`_Contents`), not the registries' identities (which a
# registration keeps). The mode stacks likewise: a torch-function or dispatch mode entered and left
# pushed intercepts every later op.
_TORCH_HOOKS_MODULE = "torch.nn.modules.module"
_FUNCTION_MODES, _DISPATCH_MODES = "torch function modes", "torch dispatch modes"


@dataclass(frozen=True)
class _Contents:
    """A registry's entries at one moment: the same when the keys are equal and the values identical."""

    items: tuple[tuple[Any, Any], ...]

    def same(self, other: Any) -> bool:
        return isinstance(other, _Contents) and len(self.items) == len(other.items) and all(
            kb == ka and vb is va for (kb, vb), (ka, va) in zip(self.items, other.items, strict=True))


def _mode_stacks() -> tuple[list, list]:
    """The torch-function and dispatch mode stacks (torch's private readers: the trusted harness reads
    them; the static policy refuses the same names in candidate code)."""
    try:
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        return list(_get_current_function_mode_stack()), list(_get_current_dispatch_mode_stack())
    except Exception:  # noqa: BLE001 - another torch: the stacks are then not watched
        return [], []


def _registry_entries() -> dict[str, Any]:
    entries: dict[str, Any] = {}
    module = sys.modules.get(_TORCH_HOOKS_MODULE)
    for name, value in (vars(module).items() if module is not None else ()):
        if name.startswith("_global_") and isinstance(value, dict):
            entries[f"{_TORCH_HOOKS_MODULE}.{name}"] = _Contents(tuple(value.items()))
    functions, dispatch = _mode_stacks()
    entries[_FUNCTION_MODES] = _Contents(tuple(enumerate(functions)))
    entries[_DISPATCH_MODES] = _Contents(tuple(enumerate(dispatch)))
    return entries


def _hook_entries() -> dict[str, Any]:
    entries: dict[str, Any] = {
        "sys.gettrace()": sys.gettrace(),
        "sys.getprofile()": sys.getprofile(),
        "sys.meta_path": tuple(sys.meta_path),
        "sys.path_hooks": tuple(sys.path_hooks),
    }
    if hasattr(threading, "gettrace"):
        entries["threading.gettrace()"] = threading.gettrace()
    for name in _CRITICAL_MODULES:
        entries[f"sys.modules[{name!r}]"] = sys.modules.get(name, _MISSING)
    entries.update(_registry_entries())
    return entries


def identity_snapshot(extra: Iterable[str] = ()) -> IdentitySnapshot:
    """Capture the critical functions (`CRITICAL_PATHS` + `extra` dotted paths) and interpreter hooks."""
    entries = {path: _resolve_static(path)[2] for path in (*CRITICAL_PATHS, *extra)}
    entries.update(_hook_entries())
    return IdentitySnapshot(types.MappingProxyType(entries))


def _same(before: Any, after: Any) -> bool:
    if isinstance(before, _Contents):
        return before.same(after)
    if isinstance(before, tuple) and isinstance(after, tuple):
        return len(before) == len(after) and all(a is b for a, b in zip(before, after, strict=True))
    return before is after


def changed_identities(snapshot: IdentitySnapshot) -> tuple[str, ...]:
    """Names whose object is no longer the one captured. Names missing at capture time are skipped: a
    module imported later (numpy by the candidate) or a lazily created attribute is not a patch."""
    hooks = _hook_entries()
    changed = []
    for key, before in snapshot.entries.items():
        if before is _MISSING:
            continue
        after = hooks[key] if key in hooks else _resolve_static(key)[2]
        if not _same(before, after):
            changed.append(key)
    return tuple(changed)


def identity_changed(snapshot: IdentitySnapshot) -> tuple[Flag, ...]:
    """`monkey_patch` flag naming every critical function or hook replaced since `snapshot`."""
    changed = changed_identities(snapshot)
    if not changed:
        return ()
    return (make_flag("monkey_patch", "replaced since the candidate was imported: " + ", ".join(changed)),)


def restore_identities(snapshot: IdentitySnapshot) -> tuple[str, ...]:
    """Put every changed entry back (best effort); returns the names still changed afterwards."""
    for key in changed_identities(snapshot):
        try:
            _restore(key, snapshot.entries[key])
        except Exception:  # noqa: BLE001, S112 -- never raise: the verdict must survive a failed restore
            continue
    return changed_identities(snapshot)


def _restore(key: str, value: Any) -> None:
    if isinstance(value, _Contents):
        _restore_contents(key, value)
    elif key == "sys.gettrace()":
        sys.settrace(value)
    elif key == "sys.getprofile()":
        sys.setprofile(value)
    elif key == "threading.gettrace()":
        threading.settrace(value)
    elif key in ("sys.meta_path", "sys.path_hooks"):
        getattr(sys, key.split(".")[1])[:] = list(value)
    elif key.startswith("sys.modules["):
        name = key[len("sys.modules['"):-2]
        if value is _MISSING:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = value
    else:
        owner, attr, _ = _resolve_static(key)
        if value is _MISSING:
            delattr(owner, attr)
        else:
            setattr(owner, attr, value)


def _restore_contents(key: str, value: _Contents) -> None:
    """A registry's entries put back; a mode stack popped down to its captured depth (what lies below
    it cannot be swapped back: still changed, and reported so by `restore_identities`)."""
    if key in (_FUNCTION_MODES, _DISPATCH_MODES):
        which = 0 if key == _FUNCTION_MODES else 1
        pop = torch._C._pop_torch_function_stack if which == 0 else _pop_dispatch_mode
        while len(_mode_stacks()[which]) > len(value.items):
            pop()
        return
    registry = getattr(sys.modules[_TORCH_HOOKS_MODULE], key.rsplit(".", 1)[1])
    registry.clear()
    registry.update(value.items)


def _pop_dispatch_mode() -> None:
    from torch.utils._python_dispatch import _pop_mode

    _pop_mode()


# --------------------------------------------------------------------------------------------------
# Precision flags


@dataclass(frozen=True)
class _Setting:
    name: str
    get: Callable[[], Any]
    set: Callable[[Any], None]


def _attr_setting(dotted: str) -> _Setting | None:
    """A setting stored as an attribute (e.g. torch.backends.cuda.matmul.allow_tf32), if this torch has it."""
    owner_path, _, attr = dotted.rpartition(".")
    owner: Any = torch
    for part in owner_path.split(".")[1:]:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    try:
        getattr(owner, attr)
    except AttributeError:
        return None
    except RuntimeError:
        pass  # readable later, or reported as unreadable: the attribute exists
    return _Setting(dotted, lambda: getattr(owner, attr), lambda v: setattr(owner, attr, v))


# The legacy flags and getters describe the *effective* precision whenever they are readable; the
# fp32_precision API (torch >= 2.9) cannot be put back to "none" once the legacy setters were used without
# making the legacy getters refuse to read ("mix of legacy and new APIs"). So restoring sets the legacy
# settings first and touches the new API only if the effective state is still wrong.
_LEGACY_ATTRS = (
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cudnn.allow_tf32",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
)
_NEW_API_ATTRS = (
    "torch.backends.fp32_precision",
    "torch.backends.cuda.matmul.fp32_precision",
    "torch.backends.cudnn.fp32_precision",
    "torch.backends.cudnn.conv.fp32_precision",
    "torch.backends.cudnn.rnn.fp32_precision",
)


def _legacy_settings() -> list[_Setting]:
    settings = [s for s in map(_attr_setting, _LEGACY_ATTRS) if s is not None]
    settings.append(_Setting("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision,
                             torch.set_float32_matmul_precision))
    settings.append(_Setting("torch.get_default_dtype()", torch.get_default_dtype, torch.set_default_dtype))
    return settings


def _new_api_settings() -> list[_Setting]:
    return [s for s in map(_attr_setting, _NEW_API_ATTRS) if s is not None]


@dataclass(frozen=True)
class _Unreadable:
    """A setting whose getter raised (torch refuses to read legacy TF32 flags after the new API was used)."""

    error: str


def _read(settings: Iterable[_Setting]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for s in settings:
        try:
            state[s.name] = s.get()
        except Exception as e:  # noqa: BLE001 -- torch raises RuntimeError for mixed legacy/new API use
            state[s.name] = _Unreadable(type(e).__name__)
    return state


def read_precision_state() -> dict[str, Any]:
    """name -> value of every precision setting this torch has (an `_Unreadable` when the getter raises)."""
    return {**_read(_new_api_settings()), **_read(_legacy_settings())}


def _apply(settings: Iterable[_Setting], state: Mapping[str, Any]) -> None:
    current = _read(settings)
    for s in settings:
        want = state.get(s.name)
        if want is None or isinstance(want, _Unreadable) or current.get(s.name) == want:
            continue
        try:
            s.set(want)
        except Exception:  # noqa: BLE001, S112 -- reported by the caller as not restored
            continue


def _effective_differences(state: Mapping[str, Any]) -> tuple[str, ...]:
    """Settings that differ from `state`; new-API values are ignored while every legacy one matches."""
    now = read_precision_state()
    legacy = [s.name for s in _legacy_settings()]
    if all(now.get(k) == state.get(k) for k in legacy if k in state):
        return ()
    return tuple(k for k, v in state.items() if now.get(k) != v)


def restore_precision_state(state: Mapping[str, Any]) -> tuple[str, ...]:
    """Put the precision back to `state`; returns the names whose effective value still differs.

    Legacy settings first; then each new-API setting, kept only if the legacy view stays as in `state`."""
    legacy = _legacy_settings()
    _apply(legacy, state)
    if _effective_differences(state):  # the legacy setters alone could not do it: force the new API
        _apply(_new_api_settings(), state)
        _apply(legacy, state)
        return _effective_differences(state)
    for s in _new_api_settings():
        before = _read([s])[s.name]
        _apply([s], state)
        if _effective_differences(state) and not isinstance(before, _Unreadable):
            _apply([s], {s.name: before})
    return _effective_differences(state)


def _call_setting(name: str, get: Callable[[], Any] | None, put: Callable[[Any], None] | None,
                  cuda: bool = False) -> _Setting | None:
    """A setting read by calling `get()` and written by `put(value)`, if this torch has both; `cuda`: read
    only once CUDA is initialised (its getters would initialise it, or raise without a GPU)."""
    if get is None or put is None:
        return None
    if cuda:
        return _Setting(name, lambda: get() if torch.cuda.is_initialized() else None, put)
    return _Setting(name, get, put)


@functools.cache  # read after every window of candidate code: the readers are found once per process
def _global_settings() -> tuple[_Setting, ...]:
    """torch's process-wide runtime settings that a kernel evaluation never changes and that would reach
    the harness's own work: a memory cap makes its next allocations fail (the job then looks like the
    harness's fault, not the candidate's), a sync debug mode raises in its synchronisations, the thread
    count, the math libraries, TunableOp, deterministic algorithms and the attention backends change how
    fast the baselines run."""
    cuda, backends = torch.cuda, torch.backends.cuda
    tunable = getattr(cuda, "tunable", None)
    settings = [
        _call_setting("torch.cuda.get_per_process_memory_fraction()",
                      getattr(cuda, "get_per_process_memory_fraction", None),
                      getattr(cuda, "set_per_process_memory_fraction", None), cuda=True),
        _call_setting("torch.cuda.get_sync_debug_mode()", getattr(cuda, "get_sync_debug_mode", None),
                      getattr(cuda, "set_sync_debug_mode", None), cuda=True),
        _call_setting("torch.cuda.tunable.is_enabled()", getattr(tunable, "is_enabled", None),
                      getattr(tunable, "enable", None)),
        _call_setting("torch.backends.cuda.preferred_blas_library()",
                      getattr(backends, "preferred_blas_library", None),
                      getattr(backends, "preferred_blas_library", None)),
        _call_setting("torch.backends.cuda.preferred_linalg_library()",
                      getattr(backends, "preferred_linalg_library", None),
                      getattr(backends, "preferred_linalg_library", None)),
        _call_setting("torch.get_num_threads()", torch.get_num_threads, torch.set_num_threads),
        _call_setting("torch.are_deterministic_algorithms_enabled()",
                      torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms),
    ]
    for kind in ("flash", "mem_efficient", "math", "cudnn"):
        settings.append(_call_setting(f"torch.backends.cuda.{kind}_sdp_enabled()",
                                      getattr(backends, f"{kind}_sdp_enabled", None),
                                      getattr(backends, f"enable_{kind}_sdp", None)))
    mha = getattr(torch.backends, "mha", None)
    settings.append(_call_setting("torch.backends.mha.get_fastpath_enabled()",
                                  getattr(mha, "get_fastpath_enabled", None),
                                  getattr(mha, "set_fastpath_enabled", None)))
    settings += [_attr_setting(name) for name in (*_backend_switches(), *_BACKEND_NESTED_ATTRS)]
    settings.append(_call_setting("torch.is_anomaly_enabled()", torch.is_anomaly_enabled,
                                  torch.set_anomaly_enabled))
    settings.append(_call_setting("torch.is_warn_always_enabled()", torch.is_warn_always_enabled,
                                  torch.set_warn_always))
    return tuple(s for s in settings if s is not None)


# Backend settings below a module (objects of torch.backends), not found by `_backend_switches`. The TF32
# flags and the matmul precision are `read_precision_state`'s (oneDNN's matmul precision follows
# `torch.set_float32_matmul_precision`, so it is watched through that: a red team's change was caught).
_BACKEND_NESTED_ATTRS = (
    "torch.backends.mkldnn.conv.fp32_precision", "torch.backends.mkldnn.rnn.fp32_precision",
    "torch.backends.cuda.matmul.allow_fp16_accumulation",
)


def _backend_switches() -> tuple[str, ...]:
    """Every public bool, int, float or str attribute of the torch.backends modules loaded now
    (cudnn.enabled, cudnn.benchmark, mkldnn.enabled, opt_einsum.enabled...): found, not listed, so a
    switch a later torch adds is watched too; the precision flags are left to `read_precision_state`."""
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("torch.backends."):
            continue
        # a backend module is often torch's PropModule, whose switches are properties of its class
        for attr in sorted(set(dir(module)) | set(vars(type(module)))):
            if attr.startswith("_") or attr in ("allow_tf32", "fp32_precision"):
                continue
            try:
                value = getattr(module, attr)
            except Exception:  # noqa: BLE001, S112 -- a switch that cannot be read here is not watched
                continue
            if isinstance(value, (bool, int, float, str)):
                found.append(f"{name}.{attr}")
    return tuple(found)


class TF32Guard:
    """`with TF32Guard() as g: ...` then `g.flags()`: precision settings changed inside, restored on exit;
    likewise torch's process-wide runtime settings (`_global_settings`: `global_torch_state`)."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        self.before: dict[str, Any] = {}
        self.changed: tuple[str, ...] = ()
        self.not_restored: tuple[str, ...] = ()
        self.settings: tuple[_Setting, ...] = ()
        self.before_global: dict[str, Any] = {}
        self.changed_global: tuple[str, ...] = ()

    def __enter__(self) -> Self:
        self.before = read_precision_state()
        self.settings = _global_settings()
        self.before_global = _read(self.settings)
        return self

    def __exit__(self, *exc_info: object) -> None:
        after = read_precision_state()
        self.changed = tuple(k for k, v in self.before.items() if after.get(k) != v)
        if self.changed:
            self.not_restored = restore_precision_state(self.before)
        after_global = _read(self.settings)
        # a setting unread before (None: CUDA not yet initialised, e.g. by the candidate's import) is not
        # compared: its first reading is torch's default, not a change
        self.changed_global = tuple(k for k, v in self.before_global.items()
                                    if v is not None and after_global.get(k) != v)
        if self.changed_global:
            _apply(self.settings, self.before_global)
            now = _read(self.settings)
            self.not_restored += tuple(k for k in self.changed_global if now.get(k) != self.before_global[k])

    def flags(self) -> tuple[Flag, ...]:
        flags = []
        for code, changed in (("precision_flags_changed", self.changed),
                              ("global_torch_state", self.changed_global)):
            if not changed or not self.policy.active(code):
                continue
            message = "candidate code changed " + ", ".join(changed)
            missed = [k for k in self.not_restored if k in changed]
            if missed:
                message += f" (could not restore {', '.join(missed)})"
            flags.append(make_flag(code, message))
        return tuple(flags)
