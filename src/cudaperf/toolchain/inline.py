"""Building a KernelBench-style `load_inline` solution ahead of time, so the GPU worker only loads it.

Covers: the per-solution extensions directory (`extensions_dir_for`, content-hashed, under
`<cache_dir>/torch_extensions/`), the environment both sides must share (`inline_env`, `worker_env`), and
`build_inline`, which calls `torch.utils.cpp_extension.load_inline` with exactly the candidate's
arguments, captures the compiler output, and reads resource usage with `cuobjdump -res-usage`.

Why exactly the candidate's arguments: torch names the build after the extension name and decides
whether to rebuild from a hash of the sources and flags, and ninja from the command lines in
`build.ninja`. Any extra flag here (even `-Xptxas -v`) would make the worker's identical call rebuild
(~50 s on the H200 machine). For the same reason the target architecture goes through
`TORCH_CUDA_ARCH_LIST` ("9.0+PTX" for sm_90, which is also torch's own default on a single H200), and the
worker must set the same variables: `worker_env(extensions_dir)` reads them back from a small file the
build leaves in that directory.

Two torch internals are touched, each guarded by `hasattr` (the build still works without them, only
less well): the in-process `JIT_EXTENSION_VERSIONER` is reset before each build, because a pool process
that built another solution's extension of the same name would otherwise suffix this one `_v1`, a name
the worker (a fresh process, version 0) never looks for; and `_import_module_from_library` is replaced by
a no-op during the call, so the candidate's native code (static initialisers) never runs in the build
process.

Not covered: NVRTC units (`nvrtc.py`), loading the extension in the worker (`load_inline` itself does it,
from the same directory).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from cudaperf.toolchain.cache import resolve_cache_dir
from cudaperf.toolchain.extract import INLINE, CudaUnit
from cudaperf.toolchain.ptxas import only_arch, res_usage
from cudaperf.types import BuildResult, Outcome, ResourceUsage, Solution, SolutionFormat

ENV_FILE = "cudaperf_env.json"
MAX_LOG_CHARS = 20_000


def extensions_dir_for(solution: Solution, cache_dir: str | os.PathLike[str] | None) -> Path:
    """`<cache_dir>/torch_extensions/<sha256(source)[:16]>`: the TORCH_EXTENSIONS_DIR of this solution."""
    digest = hashlib.sha256(solution.source.encode()).hexdigest()[:16]
    return resolve_cache_dir(cache_dir) / "torch_extensions" / digest


def torch_arch_list(arch: str) -> str:
    """"sm_90" -> "9.0+PTX" (torch's default for one such GPU); "sm_90a" -> "9.0a"."""
    digits = arch.split("_", 1)[-1]
    suffix = digits[-1] if digits[-1].isalpha() else ""
    number = digits[:-1] if suffix else digits
    version = f"{number[:-1]}.{number[-1]}"
    return f"{version}{suffix}" if suffix else f"{version}+PTX"


def inline_env(arch: str, extensions_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The environment under which the extension is built, and must be loaded."""
    return {"TORCH_EXTENSIONS_DIR": str(extensions_dir), "TORCH_CUDA_ARCH_LIST": torch_arch_list(arch)}


def worker_env(extensions_dir: str | os.PathLike[str]) -> dict[str, str]:
    """What the GPU worker sets before the candidate's `load_inline` runs: the variables the build used
    (read from the directory), or just TORCH_EXTENSIONS_DIR when nothing was built there."""
    try:
        saved = json.loads((Path(extensions_dir) / ENV_FILE).read_text())
    except (OSError, ValueError):
        saved = {}
    return {**{k: str(v) for k, v in saved.items()}, "TORCH_EXTENSIONS_DIR": str(extensions_dir)}


def build_inline(units: list[CudaUnit], *, solution: Solution, arch: str,
                 cache_dir: str | os.PathLike[str] | None) -> BuildResult:
    """Build every resolved `load_inline` unit of `solution`. Never raises."""
    t0 = time.perf_counter()
    inline_units = [u for u in units if u.kind == INLINE and u.resolved]
    if not inline_units:
        return _result(Outcome.CORRECT, t0, message="no load_inline call with constant arguments to prebuild")
    why_not = _cannot_build_reason()
    if why_not is not None:
        outcome = Outcome.SKIPPED if "no CUDA" in why_not else Outcome.HARNESS_ERROR
        return _result(outcome, t0, message=why_not)
    ext_dir = extensions_dir_for(solution, cache_dir)
    env = inline_env(arch, ext_dir)
    ext_dir.mkdir(parents=True, exist_ok=True)
    (ext_dir / ENV_FILE).write_text(json.dumps({k: v for k, v in env.items() if k != "TORCH_EXTENSIONS_DIR"}))
    logs, resources = [], []
    for unit in inline_units:
        ok, log, so_path = _build_one(unit, env)
        logs.append(log)
        if not ok:
            return _result(Outcome.COMPILE_ERROR, t0, log="\n".join(logs), units=len(inline_units),
                           message=f"load_inline build failed (line {unit.line})")
        if so_path is not None:
            resources.extend(only_arch(res_usage(so_path), arch))
    return _result(Outcome.CORRECT, t0, log="\n".join(logs), units=len(inline_units),
                   resources=tuple(resources))


def _cannot_build_reason() -> str | None:
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError as exc:
        return f"no CUDA build possible: torch is not importable ({exc})"
    if torch.version.cuda is None:
        return (f"torch {torch.__version__} has no CUDA support (a CPU build): load_inline extensions are "
                "built by the pool on a machine with a CUDA build of torch")
    if cpp_extension.CUDA_HOME is None:
        return "CUDA_HOME not found (no nvcc): set CUDA_HOME so load_inline can compile"
    try:
        cpp_extension.verify_ninja_availability()
    except RuntimeError as exc:
        return f"ninja is required by load_inline: {exc}"
    return None


def _build_one(unit: CudaUnit, env: dict[str, str]) -> tuple[bool, str, Path | None]:
    from torch.utils import cpp_extension

    name = unit.kwargs.get("name", unit.args[0] if unit.args else None)
    args, kwargs = _fresh(unit.args), _fresh(unit.kwargs)  # load_inline mutates its lists
    with _environ(env), _captured_output() as captured, _no_import(cpp_extension):
        _reset_versioner(cpp_extension)
        try:
            cpp_extension.load_inline(*args, **kwargs)
            ok, error = True, ""
        except Exception as exc:  # noqa: BLE001 - any failure of the candidate's build is its compile error
            ok, error = False, f"{type(exc).__name__}: {exc}"
    log = _truncate("\n".join(s for s in (captured.text, error) if s))
    build_dir = kwargs.get("build_directory") or Path(env["TORCH_EXTENSIONS_DIR"]) / str(name)
    so_path = Path(build_dir) / f"{name}.so"
    return ok, log, so_path if ok and so_path.is_file() else None


def _fresh(value):
    return copy.deepcopy(value)


def _reset_versioner(cpp_extension) -> None:
    versioner = getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None)
    if versioner is not None and isinstance(getattr(versioner, "entries", None), dict):
        versioner.entries.clear()


@contextlib.contextmanager
def _no_import(cpp_extension) -> Iterator[None]:
    original = getattr(cpp_extension, "_import_module_from_library", None)
    if original is None:
        yield
        return
    cpp_extension._import_module_from_library = lambda *a, **k: None
    try:
        yield
    finally:
        cpp_extension._import_module_from_library = original


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Captured:
    text = ""  # filled when the capture ends


@contextlib.contextmanager
def _captured_output() -> Iterator[_Captured]:
    """Send fds 1 and 2 to a temp file for the duration: the compilers are subprocesses writing there
    directly, so swapping `sys.stdout` would miss them. Process-wide, which is right in a pool process."""
    import sys

    captured = _Captured()
    with tempfile.TemporaryFile(mode="w+b", prefix="cudaperf-inline-") as sink:
        saved = [os.dup(1), os.dup(2)]
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield captured
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for f in saved:
                os.close(f)
            sink.seek(0)
            captured.text = sink.read().decode(errors="replace").strip()


def _truncate(text: str) -> str:
    if len(text) <= MAX_LOG_CHARS:
        return text
    half = MAX_LOG_CHARS // 2
    return text[:half] + f"\n... [{len(text) - MAX_LOG_CHARS} characters cut] ...\n" + text[-half:]


def _result(outcome: Outcome, t0: float, *, log: str = "", units: int = 0, message: str = "",
            resources: tuple[ResourceUsage, ...] = ()) -> BuildResult:
    return BuildResult(ok=outcome is Outcome.CORRECT, outcome=outcome, format=SolutionFormat.INLINE,
                       resources=resources, log=log, duration_s=time.perf_counter() - t0, units=units,
                       message=message)
