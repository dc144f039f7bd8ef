"""What every in-worker evaluation shares, whatever the task kind: the `Session` skeleton, its safety steps.

A session is one job inside a sandboxed worker (`cudaperf.execute.child`), or in-process for tests. Its
recipe, in stages (each one a heartbeat, `jobs.STAGES`):

- setup (here): the secret popped from the wire job and mixed into the seeds (`jobs.read_job`), the device
  selected, TF32 off unless the task allows it, torch's lazy modules loaded, the runtime guards created;
  then the task kind's `load_task`;
- the task kind's stages (`Session.STAGES`: reference, import, [construct,] correctness);
- timing, when every configuration is correct and no ERROR flag was raised; with a referee it is preceded
  by `timing_prep`: the task kind's `prepare_timing` (host work that needs no GPU of its own), then the
  worker's word that it is ready to time (`Shipper.ready`: the sandbox gives the GPU to the job only then,
  so a scheduler's exclusive turn is not spent on host work);
- coverage, on a GPU under the same condition.

Each stage's wall time is in the payload's durations, with the timing stage's parts beside it
(`BENCH_DURATIONS`: its benches, and their timed rounds alone).

The shared safety steps: the stage wrapper (a failure of the task or of cudaperf is HARNESS_ERROR), the
candidate window (`Session.candidate`: the guard scope, synchronised, between two anti-cheat checks), the
classification of candidate exceptions into outcomes, the interleaved bench with its baseline-dropping,
the timing and coverage flags, cleanup inside the scope, and the payload (`jobs.EvalPayload`).

Failures are values: an exception from candidate code becomes an Outcome (RUNTIME_ERROR with the traceback
tail, CUDA_ERROR with `worker_poisoned` when the context is gone, OUT_OF_MEMORY, COMPILE_ERROR,
SYNTAX_ERROR, INVALID_SOLUTION, OUTPUT_TOO_LARGE); one from the task or from cudaperf is HARNESS_ERROR.
Nothing leaves `Session.run` as an exception. `EvalPayload.outcome` stays None when correctness decides.

Not covered: the recipes of each task kind (`torch_session.py`, `c_session.py`), which one runs a job
(`dispatch.py`), process isolation, deadlines and the result channel (`sandbox.py`, `child.py`), static
checks and the final outcome (`cudaperf.evaluate`). The runtime op monitor is not active during timing
(its per-op overhead would distort the candidate's samples); timing re-checks outputs instead and
coverage measures who does the work.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import platform
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import torch

from cudaperf.correctness import Comparison, compare, derive_seed
from cudaperf.execute.device_state import context_alive, initialise_cpu_math, synchronize
from cudaperf.execute.judge import summarize_correctness, unique_flags  # noqa: F401 - re-exported
from cudaperf.jobs import EvalJob, EvalPayload, narrowed_timing, read_job
from cudaperf.timing import (
    UNSEEN_MIN_ROUNDS,
    BenchReport,
    FunctionFailed,
    SlowCut,
    UnseenSet,
    bench_interleaved_report,
)
from cudaperf.types import (
    ConfigCorrectness,
    ConfigTiming,
    Flag,
    Outcome,
    Severity,
    SolutionFormat,
    Timing,
)

CANDIDATE = "candidate"  # the candidate's name among the timed functions
# Whose timed outputs are also re-checked on a sample of the rounds that cannot be told from the unchecked
# ones (`timing.bench_interleaved_report`, `silent_checks`): a candidate that tells the sampled re-check
# rounds apart (an input's version counter moves when their contents are copied in) could skip its work
# in the others.
SILENT_CHECKS = frozenset({CANDIDATE})
# The timing stage's parts its durations name beside the stages (`Session.bench`): every bench's wall time,
# and the host time of its timed rounds alone (of a run cut short, `timing.SlowCut`: its estimate rounds).
BENCH_DURATIONS = ("timing_bench", "timing_loop")
MESSAGE_CHARS = 4000  # failure messages carry the traceback tail, truncated to this

# Substrings (lower case) that identify errors raised by CUDA, whichever library reports them.
_OOM_TEXT = ("out of memory", "cuda_error_out_of_memory")
_CUDA_TEXT = ("cuda error", "cuda_error", "cudaerror", "illegal memory access", "misaligned address",
              "unspecified launch failure", "illegal instruction", "device-side assert", "launch failed",
              "cublas_status_execution_failed", "an illegal")
# Sticky errors: the CUDA context is unusable afterwards, the worker must be replaced.
_STICKY_TEXT = ("illegal memory access", "misaligned address", "unspecified launch failure",
                "illegal instruction", "device-side assert", "illegal address", "hardware stack error",
                "exception on sm", "launch failed")


class Stop(BaseException):
    """The outcome is decided; the recipe stops. A BaseException so that an `except Exception` in code
    between the raise and the recipe (the profiler, candidate code) cannot swallow it."""

    def __init__(self, outcome: Outcome, message: str, poisoned: bool = False):
        super().__init__(message)
        self.outcome, self.message, self.poisoned = outcome, message, poisoned


class Session:
    """State of one job; each method is one step of the recipe. Subclasses (one per task kind) give
    `STAGES`, `load_task`, the methods those stages name, `time_configs` and `measure_coverage`."""

    # The stages between setup and timing, in order: (heartbeat name, method).
    STAGES: tuple[tuple[str, str], ...] = ()
    # Whether a candidate far slower than its anchor may be timed from the estimate rounds alone
    # (`TimingConfig.slow_cut_ratio`): not where the referee expects every configuration's re-checked outputs.
    CUTS_SLOW = False

    def run(self, message: dict) -> EvalPayload:
        """The recipe, from the wire job (`jobs.job_message`) to the payload. The secret leaves `message`
        first, before any candidate code can run, and lives only inside `setup`."""
        try:
            self.stage("setup", self.setup, message)
            for name, method in self.STAGES:
                self.stage(name, getattr(self, method))
            if self.should_time():
                if self.shipper is not None:
                    self.stage("timing_prep", self.prepare_and_ask)
                self.stage("timing", self.time_configs)
            if self.should_measure_coverage():
                self.stage("coverage", self.measure_coverage)
        except Stop as stop:
            self.stop(stop)
        finally:
            self.cleanup()
        return self.payload()

    def __init__(self, report: Callable[[str], None]):
        self.report = report
        self.job: EvalJob | None = None
        self.seeds: tuple[int, ...] = ()  # the job's public seeds with the secret mixed in
        self.timing_seeds: tuple[int, ...] = ()  # likewise; the first ones are the correctness seeds
        self.unseen_seeds: tuple[int, ...] = ()  # likewise: the unseen input sets' (`EvalJob.unseen_seeds`)
        self.device = torch.device("cpu")
        self.current_stage = ""
        self.outcome: Outcome | None = None
        self.message = ""
        self.poisoned = False
        self.flags: list[Flag] = []
        self.correctness: list[ConfigCorrectness] = []
        self.timings: list[ConfigTiming] = []
        self.extra_baselines: dict[str, dict[str, Timing]] = {}  # C tasks (c_session.py)
        self.coverage: float | None = None
        self.kernel_time_ms: dict[str, float] = {}  # own kernels' GPU time, from the coverage profiler
        self.environment: dict[str, str] = {}
        self.durations: dict[str, float] = {}
        self.candidate_module_name: str | None = None
        self.l2_flush_bytes: int | None = None  # None: lead-sized (cudaperf.timing), unless the memory plan
        self.alive: list[Any] = []  # candidate objects (models, outputs), released inside the scope
        self.guards: Guards | None = None  # created in setup (it needs the job's policy)
        # The channel to the referee (referee.py) when the sandbox gives one: outputs are shipped there
        # and judged outside this process; `proceed` is its word on whether timing is worth it.
        self.shipper = shipper_of(report)
        self.proceed = True

    # -- stages ----------------------------------------------------------------------------------
    def stage(self, name: str, fn: Callable, *args: Any) -> None:
        self.current_stage = name
        self.report(name)
        start = time.perf_counter()
        try:
            fn(*args)
        except Stop:
            raise
        except Exception as exc:  # the task's or cudaperf's own code failed: not the candidate's fault
            _, poisoned = classify_failure(exc, self.device)
            raise Stop(Outcome.HARNESS_ERROR, f"{name}: {describe(exc)}", poisoned) from exc
        finally:
            self.add_duration(name, time.perf_counter() - start)

    def setup(self, message: dict) -> None:
        self.job, secret = read_job(message)
        self.seeds = tuple(derive_seed(s, secret) for s in self.job.seeds)
        self.timing_seeds = tuple(derive_seed(s, secret) for s in self.job.timing_seeds())
        self.unseen_seeds = tuple(derive_seed(s, secret) for s in self.job.unseen_seeds())
        del secret
        self.device = torch.device(self.job.device)
        select_device(self.device, self.job)
        self.environment = environment(self.device)
        set_precision(self.job.task.allow_tf32)
        preload_lazy_modules()
        self.guards = Guards(self.job.policy)
        self.load_task()

    def load_task(self) -> None:
        """The task kind's part of setup: the task module or declaration, `task_key`, `timed_names`."""
        raise NotImplementedError

    def prepare_and_ask(self) -> None:
        """With a referee, before timing: `prepare_timing` (for the job's whole timing), then the go-ahead
        (`Shipper.ready`), whose answer may narrow the timing (`narrow_timing`)."""
        self.prepare_timing()
        self.narrow_timing(self.shipper.ready().get("timing"))

    def narrow_timing(self, asked: Any) -> None:
        """The job's timing narrowed by the parent's answer to "ready" (`jobs.narrowed_timing`: fewer
        baselines, a smaller budget; never wider than the job's)."""
        self.job = replace(self.job, timing=narrowed_timing(self.job.task.kind, self.job.timing, asked))

    def prepare_timing(self) -> None:
        """What the timing stage can do before it has the GPU to itself (host work: drawing input sets,
        serial references). Nothing by default."""

    def time_configs(self) -> None:
        raise NotImplementedError

    def measure_coverage(self) -> None:
        raise NotImplementedError

    def import_module(self) -> Any:
        """Run the solution file as a module, inside the candidate scope (both task kinds)."""
        from cudaperf.tasks.task_module import exec_task_source

        solution = self.job.solution
        digest = hashlib.sha256(solution.source.encode()).hexdigest()
        self.candidate_module_name = f"cudaperf_candidate_{digest[:12]}"
        self.guards.start()
        return self.candidate(lambda: exec_task_source(
            solution.source, module_name=self.candidate_module_name,
            filename=solution.path or f"<solution {solution.solution_id}>", keep=True), "import")

    def should_time(self) -> bool:
        return (self.job.timing.enabled and all(c.correct for c in self.correctness)
                and not self.has_errors() and self.proceed)

    def should_measure_coverage(self) -> bool:
        return (self.job.coverage and self.device.type == "cuda" and all(c.correct for c in self.correctness)
                and not self.has_errors() and self.proceed)

    # -- the candidate ---------------------------------------------------------------------------
    def scope(self, importing: bool = False):
        """A fresh `candidate_scope`; importing an INLINE solution may run the (already done) build's
        programs and touch its own extensions directory. Never bind or store the result (guards.py)."""
        from cudaperf.execute.guards import INLINE_BUILD_PROGRAMS, candidate_scope

        if importing and self.job.solution.format is SolutionFormat.INLINE:
            dirs = (self.job.torch_extensions_dir,) if self.job.torch_extensions_dir else ()
            return candidate_scope(allowed_programs=INLINE_BUILD_PROGRAMS, writable_dirs=dirs)
        return candidate_scope()

    def candidate(self, fn: Callable[[], Any], what: str, config: str | None = None) -> Any:
        """Run candidate code in the guard scope, synchronised (so asynchronous faults surface here),
        inside one anti-cheat window."""
        watch, tf32 = self.guards.window()
        try:
            with watch, tf32, self.scope(importing=what == "import"):
                result = fn()
                synchronize(self.device)
        except Stop:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever candidate code raises is an Outcome
            raise self.candidate_failure(exc, what, config) from None
        finally:
            self.flags += self.guards.after(tf32, config)
        return result

    def candidate_failure(self, exc: BaseException, what: str, config: str | None) -> Stop:
        outcome, poisoned = classify_failure(exc, self.device)
        where = f"{what} ({config})" if config else what
        traceback.print_exception(exc, file=sys.stderr)  # the full text goes to the worker's log file
        return Stop(outcome, f"{where}: {describe(exc)}", poisoned)

    # -- correctness -----------------------------------------------------------------------------
    def compare_output(self, output: Any, expected: Any, tol: Any = None, path: str = "output") -> Comparison:
        """The one place where an output of candidate code meets its expected value, in correctness and in
        timing's re-checks (both task kinds): `correctness.compare` with the task's tolerances. A trusted
        referee process can take over here with one call."""
        return compare(output, expected, tol, overrides=self.job.task.tolerances, path=path)

    # -- timing and coverage ---------------------------------------------------------------------
    def bench(self, fns: dict, input_sets: list, check: Callable | None, config: str,
              unseen_sets: Sequence[UnseenSet] = (), anchor: str | None = None) -> BenchReport:
        """The interleaved run (with `unseen_sets` and the `anchor` they are judged against, which is
        dropped with its baseline if it fails); a failing baseline is dropped (flagged) and the run
        repeated once. Its wall time adds to `durations["timing_bench"]` and its timed rounds' host time
        to `durations["timing_loop"]` (`BENCH_DURATIONS`): the timing stage less them is the work around
        the bench (inputs on the device, references, outputs shipped), the bench less its loop the
        estimate and warm-up rounds."""
        started = time.perf_counter()
        try:
            report = self._bench_once_or_without_baseline(fns, input_sets, check, config, unseen_sets, anchor)
        finally:
            self.add_duration(BENCH_DURATIONS[0], time.perf_counter() - started)
        self.add_duration(BENCH_DURATIONS[1], report.host_total_ms / 1e3)
        return report

    def add_duration(self, name: str, seconds: float) -> None:
        self.durations[name] = self.durations.get(name, 0.0) + seconds

    def _bench_once_or_without_baseline(self, fns: dict, input_sets: list, check: Callable | None,
                                        config: str, unseen_sets: Sequence[UnseenSet],
                                        anchor: str | None) -> BenchReport:
        timing = self.job.timing
        for _ in range(len(fns)):
            watch, tf32 = self.guards.window()
            try:
                with watch, tf32, torch.no_grad():
                    return bench_interleaved_report(
                        fns, input_sets, budget_ms=float(timing.budget_ms), warmup_ms=float(timing.warmup_ms),
                        l2_flush_bytes=self.l2_flush_bytes, check=check, device=self.device,
                        measure_overhead=timing.overhead, silent_checks=SILENT_CHECKS,
                        unseen_sets=unseen_sets, anchor=anchor if anchor in fns else None,
                        slow_cut=self.slow_cut(fns, anchor))
            except FunctionFailed as failed:
                if failed.name == CANDIDATE:
                    raise self.candidate_failure(failed.error, "timing", config) from None
                self.flags.append(Flag(f"{failed.name}_baseline_failed", str(failed)[:500], Severity.WARNING,
                                       config))
                fns = {k: v for k, v in fns.items() if k != failed.name}
            finally:
                self.flags += self.guards.after(tf32, config)
        raise RuntimeError("every baseline failed")  # unreachable: the candidate alone cannot be dropped

    def slow_cut(self, fns: dict, anchor: str | None) -> SlowCut | None:
        """The candidate's cut against `anchor` (`TimingConfig.slow_cut_ratio`), for a task kind that may
        cut (`CUTS_SLOW`) and an anchor still timed."""
        timing = self.job.timing
        if not (self.CUTS_SLOW and timing.slow_cut_ratio > 1 and anchor in fns):
            return None
        return SlowCut(CANDIDATE, anchor, float(timing.slow_cut_ratio), float(timing.slow_cut_floor_ms))

    def note_unseen_count(self, count: int, config: str) -> None:
        """An INFO flag when `config` gets fewer unseen input sets than the job asked for (their host bytes
        or the device memory the plan leaves), saying whether a content memo is still judged."""
        wanted = self.job.timing.unseen_sets
        if count >= wanted:
            return
        judged = "still judged" if count >= UNSEEN_MIN_ROUNDS else "not judged (too few)"
        self.flags.append(Flag("unseen_sets_reduced", f"{count} unseen input set(s) instead of {wanted} "
                               f"(host bytes or the device memory the plan leaves): outputs kept by input "
                               f"contents are {judged}", Severity.INFO, config))

    @staticmethod
    def protocol_fields(bench: BenchReport) -> dict[str, Any]:
        """What a configuration's `ConfigTiming` records of the bench's own protocol, in either kind of task:
        the empty function's median, the lead, the timed rounds, the disposals' wall time and the
        candidate's slowdown on unseen input sets."""
        return {"overhead_ms": bench.overhead_ms, "lead_us": bench.lead_us, "lead_kind": bench.lead_kind,
                "rounds": bench.rounds, "dispose_ms": bench.dispose_ms,
                "unseen_slowdown": bench.unseen_slowdown.get(CANDIDATE)}

    def timing_flags(self, bench: BenchReport, config: str, baselines: Iterable[str]) -> None:
        """What the bench noticed: the candidate's flags under the policy, baselines whose outputs failed
        the re-check (a warning: the task's fault, not the candidate's), a forged or bypassed timer."""
        self.flags += [f for f in bench.flags_for(CANDIDATE, config) if self.guards.active(f.code)]
        for baseline in baselines:
            if bench.check_failures.get(baseline):
                self.flags.append(Flag("baseline_output_mismatch", f"the {baseline} baseline's outputs "
                                       f"failed the re-check {bench.check_failures[baseline]} times",
                                       Severity.WARNING, config))
        if not bench.clock_consistent:
            self.flags.append(Flag("timer_inconsistent", f"event times sum to {bench.event_total_ms:.3f} ms, "
                                   f"more than the host clock's {bench.host_total_ms:.3f} ms", Severity.ERROR,
                                   config))

    def coverage_of(self, call: Callable[[], Any], config: str) -> None:
        """Coverage of one `call` of the candidate (which runs it in its window), with the own kernels'
        GPU times and the coverage flags. A failure of the profiler is a warning (the verdict stands: the
        op monitor already ran on every call); a failure of the candidate is its outcome (a Stop)."""
        try:
            from cudaperf.anticheat.coverage import kernel_names_from_source, measure_coverage

            # None when no name is found (kernel text built by f-strings): then every non-library
            # kernel counts as own, rather than an honest templated solution scoring zero.
            own_names = kernel_names_from_source(self.job.solution.source) or None
            result = measure_coverage(call, own_names)
        except Exception as exc:  # noqa: BLE001 - the harness's profiler failed, not the candidate
            self.flags.append(Flag("coverage_failed", describe(exc)[:500], Severity.WARNING, config))
            return
        self.coverage = result.coverage
        for name, ms, own in result.kernels:
            if own:
                self.kernel_time_ms[name] = self.kernel_time_ms.get(name, 0.0) + ms
        self.flags += self.guards.coverage_flags(result, config)

    # -- end -------------------------------------------------------------------------------------
    def has_errors(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.flags)

    def stop(self, stop: Stop) -> None:
        self.outcome, self.message = stop.outcome, stop.message[:MESSAGE_CHARS]
        self.poisoned = self.poisoned or stop.poisoned

    def release(self) -> None:
        """Drop the candidate objects inside the guard scope, so that their finalizers run under it.
        (Reference cycles are collected by the child's after-job sweep, also under the scope: a
        gc.collect here would cost ~0.2 s per call with torch loaded.)"""
        if self.job is None:
            return
        with self.scope():
            self.drop_objects()

    def drop_objects(self) -> None:
        """Inside the scope (`release`): the candidate's objects, whose finalizers may run now; subclasses
        drop what else they hold of that kind."""
        self.alive.clear()

    def drop_handles(self) -> None:
        """Outside the scope (`cleanup`): subclasses drop their references to the candidate's class or
        function (its module stays in sys.modules until just after, so no candidate code runs here)."""

    def cleanup(self) -> None:
        """Process-watch flags, then drop every trace of the candidate (unless CUDA is gone). A failure
        here must not lose the verdict: it becomes a flag, and the worker is replaced."""
        try:
            if self.guards is not None:
                self.flags += self.guards.finish()
            self.drop_handles()
            if self.candidate_module_name:
                sys.modules.pop(self.candidate_module_name, None)
            self.release()
            if self.shipper is not None and not self.poisoned:
                self.scrub()
            if self.device.type == "cuda" and not self.poisoned:
                torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001 - the verdict is already decided: keep it
            self.flags.append(Flag("cleanup_failed", describe(exc)[:500], Severity.WARNING))
            self.poisoned = True

    def scrub(self) -> None:
        """With a referee: overwrite what this job computed that a later job's candidate, in this same
        process, could copy (reference outputs, kept candidate outputs), then every free block of the
        allocator, before the memory goes back to the driver. Subclasses overwrite their own first."""
        from cudaperf.correctness import poison_allocator

        poison_allocator(self.device)

    def payload(self) -> EvalPayload:
        return EvalPayload(
            outcome=self.outcome, stage=self.current_stage, message=self.message,
            correctness=tuple(self.correctness), timings=tuple(self.timings),
            extra_baselines=self.extra_baselines, flags=tuple(unique_flags(self.flags)),
            coverage=self.coverage, kernel_time_ms=self.kernel_time_ms, environment=self.environment,
            durations_s=self.durations, worker_poisoned=self.poisoned,
        )


# --------------------------------------------------------------------------------------------------
# Anti-cheat runtime pieces (cudaperf.anticheat), kept behind one small class


class Guards:
    """The runtime anti-cheat checks of `cudaperf.anticheat.runtime` around candidate code.

    Every window of candidate code (import, construct, each forward, the whole timing run) is wrapped in
    the process watch (threads, current stream) and the TF32 guard (precision flags, restored), entered
    OUTSIDE the candidate scope (they read /proc and torch state, which the scope refuses). The identities
    of the functions the harness trusts are compared with a snapshot taken before the import after every
    window and restored when changed (`monkey_patch`, hack #7), so the harness's own later steps run on
    the originals. Leftover threads, processes and the integrity of harness modules are also checked by
    the child after every job (child.py).
    """

    def __init__(self, policy: Any):
        from cudaperf.anticheat import runtime

        self.runtime = runtime
        self.policy = policy
        self.watch = runtime.ProcessWatch(policy=policy)
        self.snapshot = None

    def start(self) -> None:
        self.snapshot = self.runtime.identity_snapshot()

    def window(self):
        """Context managers to enter (in order) around one window of candidate code."""
        return self.watch, self.runtime.TF32Guard(self.policy)

    def after(self, tf32: Any, config: str | None) -> list[Flag]:
        """Flags of one finished window: precision changes, replaced trusted functions (restored)."""
        return [replace(f, config=f.config or config) for f in tf32.flags()] + self.put_back(config)

    def put_back(self, config: str | None) -> list[Flag]:
        """Trusted functions the candidate replaced so far, flagged and put back (also inside a window,
        before harness code there relies on them: an unseen input set drawn between timed rounds)."""
        if self.snapshot is None:
            return []
        changed = self.runtime.identity_changed(self.snapshot)
        if changed:
            self.runtime.restore_identities(self.snapshot)
        return [replace(f, config=f.config or config) for f in changed]

    def op_monitor(self):
        return self.runtime.TorchOpMonitor(self.policy)

    def coverage_flags(self, result: Any, config: str) -> list[Flag]:
        """`low_coverage`, `no_gpu_work`, `stream_created`, `vendor_kernel_name` under the policy."""
        from cudaperf.anticheat.coverage import coverage_flags

        return list(coverage_flags(result, self.policy, config=config))

    def active(self, code: str) -> bool:
        from cudaperf.anticheat.policy import RULES

        return code not in RULES or self.policy.active(code)

    def finish(self) -> list[Flag]:
        return list(self.watch.flags())


# --------------------------------------------------------------------------------------------------
# Helpers


def shipper_of(report: Callable[[str], None]) -> Any:
    """The referee channel the child attached to `report` (child.py), as an `outputs.Shipper`, or None
    (in-process runs, and a sandbox without a referee)."""
    exchange, region = getattr(report, "exchange", None), getattr(report, "region", None)
    if exchange is None or region is None:
        return None
    from cudaperf.execute.outputs import Shipper

    return Shipper(exchange, region)


def select_device(device: torch.device, job: EvalJob) -> None:
    if job.cache_dir:
        os.environ["CUDAPERF_CACHE_DIR"] = job.cache_dir
    if job.torch_extensions_dir:
        # The variables the pool built under (TORCH_CUDA_ARCH_LIST too): a different arch list would make
        # ninja rebuild the extension inside the worker instead of loading the prebuilt one.
        from cudaperf.toolchain.inline import worker_env

        os.environ.update(worker_env(job.torch_extensions_dir))
    if device.type == "cuda":
        torch.cuda.set_device(device)


def set_precision(allow_tf32: bool) -> None:
    """TF32 off for matmul and cuDNN unless the task allows it: cuDNN convolutions default to TF32, and a
    correct fp32 kernel then fails a 1e-4 tolerance against a reference computed in TF32."""
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32


def preload_lazy_modules() -> None:
    """Import what torch loads lazily on first use, before any candidate scope exists: torch._dynamo
    (imported by `torch._compile` wrappers under a dispatch mode; sympy walks frames while loading,
    which the scope refuses), the flop counter and the profiler; and MKL's vector math, whose first call
    must not be a parallel one (`device_state.initialise_cpu_math`)."""
    for name in ("torch._dynamo", "torch.profiler", "torch.utils.flop_counter"):
        importlib.import_module(name)
    initialise_cpu_math()


def classify_failure(exc: BaseException, device: torch.device) -> tuple[Outcome, bool]:
    """(outcome, worker_poisoned) for an exception raised by candidate code."""
    if isinstance(exc, FunctionFailed):
        exc = exc.error
    name = type(exc).__name__
    text = f"{name}: {exc}".lower()
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or any(t in text for t in _OOM_TEXT):
        return Outcome.OUT_OF_MEMORY, not context_alive(device)
    if isinstance(exc, SyntaxError):
        return Outcome.SYNTAX_ERROR, False
    if name == "CompileError" or "error building extension" in text:
        return Outcome.COMPILE_ERROR, False
    if name in ("CUDAError", "AcceleratorError") or any(t in text for t in _CUDA_TEXT):
        sticky = any(t in text for t in _STICKY_TEXT)
        return Outcome.CUDA_ERROR, sticky or not context_alive(device)
    return Outcome.RUNTIME_ERROR, False


def describe(exc: BaseException) -> str:
    """'Type: message' and the tail of the traceback."""
    head = f"{type(exc).__name__}: {exc}"[: MESSAGE_CHARS // 4]
    tail = "".join(traceback.format_exception(exc))[-(MESSAGE_CHARS // 2):]
    return f"{head}\n{tail}"


def _driver_version() -> str:
    """The NVIDIA driver version without nvidia-smi: /proc on Linux, else the CUDA driver API version."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+([\d.]+)", f.read())
        if match:
            return match.group(1)
    except OSError:
        pass
    try:
        from cuda.bindings import driver

        _, version = driver.cuDriverGetVersion()
        return f"CUDA driver API {version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001 - no cuda-python or no driver: the version is just unknown
        return "unknown"


def environment(device: torch.device) -> dict[str, str]:
    """Versions of what the verdict depends on: torch, CUDA, Python, the device (GPU name, driver...)."""
    env = {"torch": torch.__version__, "cuda": str(torch.version.cuda), "python": platform.python_version(),
           "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, capability=f"{props.major}.{props.minor}", driver=_driver_version(),
                   memory_bytes=str(props.total_memory))
    else:
        env.update(gpu="none", driver="none")
    return env
