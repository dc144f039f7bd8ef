"""Building solutions: one pure function, and a process pool that runs it on every core.

Covers: `build_solution(solution, *, arch, cache_dir) -> BuildResult`, which finds the solution's CUDA units
by AST (`extract.py`), compiles NVRTC units into the shared cache (`nvrtc.py`) and prebuilds `load_inline`
units (`inline.py`), and never raises; and `BuildPool`, a spawn-context process pool whose futures
always resolve to a `BuildResult`, even when a build process dies (and which runs other picklable calls
for its owner, `submit_call`, without that recovery).

Outcomes: CORRECT means built (`ok=True`); SYNTAX_ERROR when the file does not parse; COMPILE_ERROR with
the compiler log; SKIPPED when this machine cannot build a unit (load_inline without a CUDA torch, plain
CUDA C files which the C-task runner builds); HARNESS_ERROR for a fault of cudaperf itself. Units whose
arguments are not constants are listed in `message` and the build is still ok: the worker compiles them.

Crash handling: a process that dies (segfault in a compiler library, OOM kill) breaks a
`ProcessPoolExecutor` and fails every build in flight, not only the guilty one. The pool is replaced and
each failed build is retried once alone in a fresh process; a build that kills that process too gets
COMPILE_ERROR. Spawn, not fork: the parent may hold CUDA state and threads that a fork would copy broken.

Not covered: timeouts per build (NVRTC has no way to stop a compile; the evaluator's deadline applies).
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Self

from cudaperf.toolchain.extract import INLINE, NVRTC, CudaUnit, extract_units
from cudaperf.toolchain.nvrtc import CompileError, compile_cuda
from cudaperf.types import BuildResult, Outcome, ResourceUsage, Solution, SolutionFormat

MAX_LOG_CHARS = 20_000

BuildFn = Callable[..., BuildResult]
"""`build_fn(solution, *, arch, cache_dir) -> BuildResult`, module-level (picklable). The default is
`build_solution`; tests pass another to simulate a build process that crashes."""


def build_solution(solution: Solution, *, arch: str = "sm_90", cache_dir: str | None = None) -> BuildResult:
    """Build every CUDA unit of `solution` for `arch`. Pure apart from the cache; never raises."""
    t0 = time.perf_counter()
    try:
        return _build(solution, arch, cache_dir, t0)
    except Exception:  # noqa: BLE001 - a bug in cudaperf must come back as a value, not kill the pool
        return _result(solution, Outcome.HARNESS_ERROR, t0, log=_truncate(traceback.format_exc()),
                       message="internal error while building (a cudaperf bug, not the candidate's)")


def _build(solution: Solution, arch: str, cache_dir: str | None, t0: float) -> BuildResult:
    if solution.format is SolutionFormat.CUDA_C:
        return _result(solution, Outcome.SKIPPED, t0,
                       message="plain CUDA C solutions are built by the C-task runner, not the build pool")
    try:
        ast.parse(solution.source)
    except SyntaxError as exc:
        return _result(solution, Outcome.SYNTAX_ERROR, t0, message=f"line {exc.lineno}: {exc.msg}")
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes; nesting Python cannot compile
        return _result(solution, Outcome.SYNTAX_ERROR, t0,
                       message=f"not loadable Python: {type(exc).__name__}")
    units = extract_units(solution.source)
    nvrtc = _build_nvrtc([u for u in units if u.kind == NVRTC and u.resolved], arch, cache_dir)
    if isinstance(nvrtc, BuildResult):
        return _retime(nvrtc, solution, t0)
    resources, logs, hits = nvrtc
    built = sum(1 for u in units if u.resolved)
    note = _unresolved_note(units)
    if any(u.kind == INLINE and u.resolved for u in units):
        from cudaperf.toolchain.inline import build_inline

        inline = build_inline(units, solution=solution, arch=arch, cache_dir=cache_dir)
        if not inline.ok:
            message = "; ".join(m for m in (inline.message, note) if m)
            return _result(solution, inline.outcome, t0, log=_truncate("\n".join([*logs, inline.log])),
                           resources=tuple(resources), units=built, hits=hits, message=message)
        resources += inline.resources
        logs.append(inline.log)
    return _result(solution, Outcome.CORRECT, t0, log=_truncate("\n".join(x for x in logs if x)),
                   resources=tuple(resources), units=built, hits=hits, message=note)


def _build_nvrtc(units: list[CudaUnit], arch: str, cache_dir: str | None):
    """(resources, logs, cache hits), or a COMPILE_ERROR BuildResult for the first unit that fails."""
    resources: list[ResourceUsage] = []
    logs: list[str] = []
    hits = 0
    for unit in units:
        try:
            out = compile_cuda(unit.source, arch=unit.arch or arch, options=unit.options,
                               name_expressions=unit.name_expressions, cache_dir=cache_dir)
        except CompileError as exc:
            return BuildResult(ok=False, outcome=Outcome.COMPILE_ERROR, format=SolutionFormat.FAST,
                               log=_truncate(exc.log), units=len(units),
                               message=f"NVRTC failed on the CUDA source compiled at line {unit.line}")
        resources.extend(out.resources)
        logs.append(out.log)
        hits += out.cache_hit
    return resources, logs, hits


def _unresolved_note(units: list[CudaUnit]) -> str:
    pending = [u for u in units if not u.resolved]
    if not pending:
        return ""
    reasons = "; ".join(f"line {u.line}: {u.message}" for u in pending)
    return f"{len(pending)} CUDA unit(s) not prebuilt (compiled when the solution runs): {reasons}"


def _result(solution: Solution, outcome: Outcome, t0: float, *, log: str = "", message: str = "",
            resources: tuple[ResourceUsage, ...] = (), units: int = 0, hits: int = 0) -> BuildResult:
    return BuildResult(ok=outcome is Outcome.CORRECT, outcome=outcome, format=solution.format,
                       resources=resources, log=log, duration_s=time.perf_counter() - t0, cache_hits=hits,
                       units=units, message=message)


def _retime(result: BuildResult, solution: Solution, t0: float) -> BuildResult:
    from dataclasses import replace

    return replace(result, format=solution.format, duration_s=time.perf_counter() - t0)


def _truncate(text: str) -> str:
    if len(text) <= MAX_LOG_CHARS:
        return text
    half = MAX_LOG_CHARS // 2
    return text[:half] + f"\n... [{len(text) - MAX_LOG_CHARS} characters cut] ...\n" + text[-half:]


# --------------------------------------------------------------------------------------------------
# The pool


def _warm_up() -> None:
    """Pool-process initializer: keep off the CPUs reserved for serial-C timing (`host_timing`; the
    compilers it runs inherit that), and load NVRTC once so the first build is not charged for it."""
    from cudaperf.host_timing import keep_off_timing_cpus
    from cudaperf.toolchain.nvrtc import nvrtc_version

    keep_off_timing_cpus()
    try:
        nvrtc_version()
    except Exception:  # noqa: BLE001 - a missing NVRTC shows up, with its message, in the first build
        return


class BuildPool:
    """`max_workers` spawned build processes. `submit` returns a Future that always yields a BuildResult."""

    def __init__(self, max_workers: int | None = None, *, build_fn: BuildFn | None = None):
        self.max_workers = max_workers or os.cpu_count() or 1
        self._build_fn = build_fn or build_solution
        self._lock = threading.Lock()
        self._closed = False
        self._isolated: set[ProcessPoolExecutor] = set()
        self._executor = self._new_executor(self.max_workers)

    def submit(self, solution: Solution, *, arch: str = "sm_90", cache_dir: str | None = None) -> Future:
        """Build `solution` in a pool process; the Future resolves to its BuildResult."""
        outer: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("BuildPool is closed")
            executor = self._executor
            inner = executor.submit(self._build_fn, solution, arch=arch, cache_dir=cache_dir)
        inner.add_done_callback(lambda f: self._settle(f, outer, executor, solution, arch, cache_dir))
        return outer

    def submit_call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Run another picklable top-level function in a pool process (the evaluator's structural
        analysis, so it overlaps with the candidate's run instead of holding the caller's thread). No
        recovery: a broken pool or a failure is the Future's exception, for the caller to handle."""
        with self._lock:
            if self._closed:
                raise RuntimeError("BuildPool is closed")
            return self._executor.submit(fn, *args, **kwargs)

    def map(self, solutions: Iterable[Solution], *, arch: str = "sm_90",
            cache_dir: str | None = None) -> Iterator[BuildResult]:
        """BuildResults in the order of `solutions` (all submitted at once)."""
        futures = [self.submit(s, arch=arch, cache_dir=cache_dir) for s in solutions]
        for future in futures:
            yield future.result()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            executors = [self._executor, *self._isolated]
        for executor in executors:
            executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------------
    @staticmethod
    def _new_executor(workers: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_warm_up)

    def _settle(self, inner: Future, outer: Future, executor: ProcessPoolExecutor, solution: Solution,
                arch: str, cache_dir: str | None) -> None:
        """Done-callback of a pool build: pass the result on, or recover from a broken pool."""
        try:
            outer.set_result(inner.result())
            return
        except BrokenProcessPool:
            pass
        except CancelledError:
            outer.set_result(_failure(solution, Outcome.HARNESS_ERROR,
                                      "build cancelled: the pool was closed"))
            return
        except Exception as exc:  # noqa: BLE001 - e.g. a solution that cannot be pickled: still a value
            outer.set_result(_failure(solution, Outcome.HARNESS_ERROR, f"build failed to run: {exc!r}"))
            return
        self._replace_broken(executor)
        self._retry_alone(outer, solution, arch, cache_dir)

    def _replace_broken(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is broken and not self._closed:
                self._executor = self._new_executor(self.max_workers)
        broken.shutdown(wait=False, cancel_futures=True)

    def _retry_alone(self, outer: Future, solution: Solution, arch: str, cache_dir: str | None) -> None:
        """Rebuild in a process of its own: the crash of the shared pool may have been another build's."""
        with self._lock:
            if self._closed:
                outer.set_result(_failure(solution, Outcome.HARNESS_ERROR,
                                          "the pool was closed during a retry"))
                return
            alone = self._new_executor(1)
            self._isolated.add(alone)
            inner = alone.submit(self._build_fn, solution, arch=arch, cache_dir=cache_dir)
        inner.add_done_callback(lambda f: self._settle_alone(f, outer, alone, solution))

    def _settle_alone(self, inner: Future, outer: Future, alone: ProcessPoolExecutor,
                      solution: Solution) -> None:
        try:
            result = inner.result()
        except BrokenProcessPool:
            result = _failure(solution, Outcome.COMPILE_ERROR,
                              "the build process died while building this solution (crash or out of memory)")
        except BaseException as exc:  # noqa: BLE001 - any other failure is still reported as a value
            result = _failure(solution, Outcome.HARNESS_ERROR, f"isolated rebuild failed to run: {exc!r}")
        outer.set_result(result)
        with self._lock:
            self._isolated.discard(alone)
        alone.shutdown(wait=False)


def _failure(solution: Solution, outcome: Outcome, message: str) -> BuildResult:
    return BuildResult(ok=False, outcome=outcome, format=solution.format, message=message)
