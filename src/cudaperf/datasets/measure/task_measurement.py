"""The measurement of one dataset task inside a measuring child (`GpuRunner`, the `pool.Runner` the GPU
children run): every implementation checked on every configuration and seed, then all the correct ones
timed together with the baselines.

Per configuration:
1. prepare (CPU, outside the GPU lock): C tasks draw inputs per seed and run the serial C reference
   (`cref`, once per (configuration, seed)) and time its first round (the serial-C baseline, in rounds
   spread over the configuration with a calibration beside each: `serial.py`; the later rounds come after
   step 3 and after step 4); implementations are executed as modules and built through `cudaperf.cuda`
   (NVRTC, cached) once per task;
2. references on the GPU (PyTorch tasks: `Model` built after `torch.manual_seed(seed)`, inputs drawn on
   the device, once per (configuration, seed)); steps 2 and 3 hold the GPU lock shared (children sharing
   a GPU overlap them), torch.compile's first run (Triton benchmarks its candidate configurations there)
   and step 4 hold it exclusively (`pool.GpuLock`); Inductor's seconds of CPU compile hold nothing;
3. correctness per implementation and seed: outputs poisoned first (C `out` arrays filled with 0xFF,
   which is NaN in floats; PyTorch tasks get the caching allocator poisoned), compared with
   `correctness.compare` (scale-aware tolerance, NaN positions, exact integers);
4. one `bench_interleaved_report` run with every correct implementation and the baselines (PyTorch:
   eager and torch.compile of the reference; C: the naive CUDA port), L2 flushed before every call, the
   seeds' inputs rotated and outputs re-checked on a sample of rounds;
5. one row per (configuration, implementation) sent to the parent, with each timed function's host-path
   diagnostics (`_host_fields`: host path median and p90, the lead's GPU time and launches, host-bound
   samples; `cudaperf.timing`) and the serial-C rounds' calibration (`serial.SerialBaseline.fields`).

With `MeasureOptions.raise_priority`, the serial-C calls of step 1 and the timed run of step 4 run with
their thread's priority raised (`raised_priority`, nice -15 where permitted; rows say so in
`timing_nice`). It is off by default: on the H200 it did not make two runs agree better (see
`MeasureOptions`).

Why the C outputs travel in a holder object during timing: the timing harness treats every tensor of an
input set as an input (it checks them for mutation and swaps contents between sets on checked rounds); a
C kernel writes its `out` arrays, so those are kept out of its sight and the re-check reads them back
from the holder the call returns. Tasks with `inout` arrays are timed without re-checks (each call
changes its own input), and say so in `timing_checked`.

Why not the evaluator's in-worker recipe (`cudaperf.execute.session`): it evaluates one candidate per job
against references it computes for that job, behind import guards, the runtime op monitor and coverage
profiling, and times one candidate against the baselines. Here one reference per (configuration, seed)
serves every implementation of the task, and one interleaved run times all of them with the baselines
(the ratio between implementations is the dataset's point). What the two share is below them: the
comparison, poisoning and mutation checks (`cudaperf.correctness`), the interleaved timing and the
compiled baseline (`cudaperf.timing`), NVRTC builds (`cudaperf.cuda`), `execute.device_state.context_alive`
and the serial C reference (`cudaperf.tasks.cref`).

Not covered: process isolation and death handling (pool.py), anti-cheat (our own code is trusted),
static features (features.py).
"""

from __future__ import annotations

import contextlib
import os
import platform
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from cudaperf.correctness import (
    clone_inputs,
    compare,
    fill_sentinel_,
    inputs_mutated,
    poison_allocator,
    tensor_bytes,
)
from cudaperf.datasets import registry
from cudaperf.datasets.measure.options import MeasureOptions, measured_implementations
from cudaperf.datasets.measure.pool import ContextLost, GpuLock, task_from_job
from cudaperf.datasets.measure.results import ROW_VERSION, impl_hash
from cudaperf.datasets.measure.serial import (
    SERIAL_MAX_REPS,  # noqa: F401 - imported from here by benchmarks/serial_priority.py
    SerialBaseline,
    free_calibration_ms,
    time_serial,  # noqa: F401 - likewise
    timed_round,
)
from cudaperf.datasets.records import GeneratedTask, Implementation
from cudaperf.execute.device_state import context_alive, synchronize
from cudaperf.host_timing import isolated_host_timing
from cudaperf.jobs import TORCH_BASELINES
from cudaperf.tasks import cref
from cudaperf.tasks.ctask import ParamKind, from_json, make_inputs
from cudaperf.timing import BenchReport, FunctionFailed, bench_interleaved_report, compile_baseline
from cudaperf.types import TaskKind, Timing

MESSAGE_CHARS = 800
ILLEGAL_ADDRESS = '''
from cudaperf import cuda

SOURCE = r"""extern "C" __global__ void boom(float* p) { p[threadIdx.x] = 1.0f; }"""


def ENTRY(**kwargs):
    cuda.load(SOURCE).boom((1,), (32,), None)  # None: a NULL pointer
'''
NAIVE = "naive"  # the C->CUDA baseline's name among the timed functions when it is not measured itself
Emit = Callable[..., None]


@dataclass(frozen=True)
class CheckResult:
    """One implementation on one configuration, all seeds."""

    # ok | compile_error | import_error | incorrect | runtime_error | out_of_memory | reference_failed
    status: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None  # |out - ref| / bound, <= 1 passes
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Built:
    """An implementation executed as a module and its CUDA built, or why not."""

    module: types.ModuleType | None
    build_ms: float | None
    failure: CheckResult | None = None


@dataclass
class Timed:
    """The outcome of a configuration's interleaved run."""

    report: BenchReport | None
    checked: bool
    dropped: dict[str, str] = field(default_factory=dict)  # callable -> why it left the run
    notes: dict[str, str] = field(default_factory=dict)  # baseline -> why it is missing


@dataclass
class TimingPlan:
    """What a configuration's interleaved run will time, prepared under the shared GPU lock."""

    impl_ids: tuple[str, ...]  # the implementations in the run (whom to blame if the child dies)
    fns: dict[str, Callable]
    input_sets: list
    check: Callable | None  # None: timed without re-checks
    notes: dict[str, str] = field(default_factory=dict)  # baseline -> why it is missing


# --------------------------------------------------------------------------------------------------
# The runner the child builds


class GpuRunner:
    """Measures tasks on the child's GPU (device 0 of its CUDA_VISIBLE_DEVICES)."""

    def __init__(self, options: MeasureOptions, lock: GpuLock):
        self.options, self.lock = options, lock
        # fp32 references stay fp32 (docs/evaluation.md, pitfall 2)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.device = torch.device("cuda", 0)
        torch.cuda.set_device(self.device)
        torch.empty(1, device=self.device)  # create the context now: startup cost is not a task's

    def info(self) -> dict[str, Any]:
        return {"device": torch.cuda.get_device_name(self.device), "torch": torch.__version__,
                "cuda": torch.version.cuda, "host": platform.node()}

    def measure(self, job: dict[str, Any], emit: Emit) -> dict[str, Any]:
        task = task_from_job(job)
        skip = {tuple(k) for k in job["skip"]}
        kind = CTaskMeasure if task.kind is TaskKind.C else TorchTaskMeasure
        measurer = kind(task, self.options, self.device, emit, self.lock, skip, job)
        try:
            return measurer.run()
        except ContextLost:
            raise
        except Exception as exc:  # a harness fault: fine unless it took the context with it
            if not context_alive(self.device):
                raise ContextLost(f"{task.task_id}: {_text(exc)}") from exc
            raise
        finally:
            del measurer
            self.cleanup(task)

    def cleanup(self, task: GeneratedTask) -> None:
        """Free the task's memory and compiled graphs; never raises (a lost context is already reported
        by the exception in flight, and would make every call here fail)."""
        try:
            if task.kind is TaskKind.PYTORCH and self.options.compile_baseline:
                torch._dynamo.reset()  # compiled graphs of finished tasks would accumulate otherwise
            synchronize(self.device)
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001, S110 - see the docstring
            pass



def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MESSAGE_CHARS]


# --------------------------------------------------------------------------------------------------
# The recipe shared by both task kinds


class TaskMeasure:
    """One task: plan the keys, then per configuration prepare, reference, check, time, emit rows."""

    def __init__(self, task: GeneratedTask, options: MeasureOptions, device: torch.device, emit: Emit,
                 lock: GpuLock, skip: set, job_flags: dict[str, Any] | None = None):
        job_flags = job_flags or {}
        self.task, self.options, self.device, self.emit, self.lock, self.skip = (
            task, options, device, emit, lock, skip)
        self.impls = measured_implementations(registry.implementations(task), options.impls_per_task)
        self.built: dict[str, Built] = {}
        self.durations: dict[str, float] = {}
        self.config: str | None = None  # the configuration being measured
        self.compile_baseline = options.compile_baseline and not job_flags.get("no_compile_baseline")
        self.timing_nice: int | None = None  # the nice the timed windows ran at (`raised_priority`)

    # -- to be provided per kind -------------------------------------------------------------------
    def config_names(self) -> list[str]:
        raise NotImplementedError

    def measure_config(self, config: str, todo: list[Implementation]) -> None:
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        tid = self.task.task_id
        keys = [(tid, c, i.impl_id) for c in self.config_names() for i in self.impls]
        self.emit("plan", tid, [k for k in keys if k not in self.skip])
        waited = dict(self.lock.wait_s)
        for config in self.config_names():
            todo = [i for i in self.impls if (tid, config, i.impl_id) not in self.skip]
            if todo:
                self.measure_config(config, todo)
        for mode, seconds in self.lock.wait_s.items():  # time spent waiting for the GPU, per lock mode
            if seconds > waited[mode]:
                self.durations[f"wait_{mode}"] = seconds - waited[mode]
        return {"status": "ok", "durations_s": {k: round(v, 3) for k, v in self.durations.items()}}

    def phase(self, name: str, config: str | None, culprits: tuple[str, ...] = ()) -> None:
        """Tell the parent what is running (whom to blame if this process dies now)."""
        self.config = config or self.config
        self.emit("phase", self.task.task_id, name, config, list(culprits))

    @contextlib.contextmanager
    def gpu(self, config: str, *, exclusive: bool = False) -> Iterator[None]:
        """Hold the GPU lock (shared, or exclusive for a timed run). The phase says nobody is in flight
        while this child waits, so a timeout while waiting blames no implementation in particular."""
        self.phase("wait_gpu", config)
        with self.lock.exclusive() if exclusive else self.lock.shared():
            yield

    def timing_priority(self) -> contextlib.AbstractContextManager[int | None]:
        """`raised_priority` for a timed window, or nothing with `MeasureOptions.raise_priority` off (an
        A/B of the protocol, `scripts/dataset_repeatability.sh`)."""
        return raised_priority() if self.options.raise_priority else contextlib.nullcontext(None)

    @contextlib.contextmanager
    def timed_section(self, name: str) -> Iterator[None]:
        """Adds the section's wall time to `durations[name]` (reported in the task record)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.durations[name] = self.durations.get(name, 0.0) + time.perf_counter() - start

    def build(self, impl: Implementation, config: str) -> Built:
        """Execute the implementation's module and build its CUDA (NVRTC, cached); once per task."""
        if impl.impl_id in self.built:
            return self.built[impl.impl_id]
        from cudaperf import cuda

        self.phase("build", config, (impl.impl_id,))
        module = types.ModuleType(impl.impl_id.replace("/", "_"))
        try:
            code = compile(self.source_of(impl), impl.impl_id, "exec")
            exec(code, module.__dict__)  # noqa: S102 - our own generated code, trusted
        except Exception as exc:  # noqa: BLE001 - a broken template is a finding
            self.built[impl.impl_id] = Built(None, None, CheckResult("import_error", message=_text(exc)))
            return self.built[impl.impl_id]
        start = time.perf_counter()
        build_ms = None
        # Built here, outside the GPU phase, so the module's own cuda.load(SOURCE) hits the in-process cache.
        # Advisory: a module compiling with other options fails or passes on its own call (see failure()).
        with contextlib.suppress(cuda.CompileError):
            if isinstance(getattr(module, "SOURCE", None), str):
                cuda.load(module.SOURCE)
                build_ms = (time.perf_counter() - start) * 1e3
        self.built[impl.impl_id] = Built(module, build_ms)
        return self.built[impl.impl_id]

    def source_of(self, impl: Implementation) -> str:
        return impl.source

    def failure(self, impl_id: str, exc: BaseException) -> CheckResult:
        """An exception from an implementation: a value, unless the CUDA context is gone (then the child
        names the culprit and exits)."""
        from cudaperf import cuda

        if isinstance(exc, cuda.CompileError):
            return CheckResult("compile_error", message=_text(exc))
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            torch.cuda.empty_cache()  # a no-op without CUDA
            return CheckResult("out_of_memory", message=_text(exc))
        if not context_alive(self.device):
            culprits = (impl_id,) if impl_id not in (*TORCH_BASELINES, NAIVE) else ()
            self.phase("context_lost", self.config, culprits)
            raise ContextLost(f"{impl_id}: {_text(exc)}")
        return CheckResult("runtime_error", message=_text(exc))

    def bench(self, fns: dict[str, Callable], input_sets: list, check: Callable | None) -> Timed:
        """The interleaved run; a callable that raises leaves it (recorded) and the run starts again."""
        o = self.options
        timed = Timed(None, check is not None)
        while any(k not in (*TORCH_BASELINES, NAIVE) for k in fns):
            try:
                with torch.no_grad():
                    timed.report = bench_interleaved_report(
                        fns, input_sets, budget_ms=o.budget_ms, warmup_ms=o.warmup_ms,
                        l2_flush_bytes=None if o.l2_flush else 0, check=check, device=self.device,
                        min_reps=o.min_reps, max_reps=o.max_reps)
                for name in (*TORCH_BASELINES, NAIVE):  # a baseline's wrong outputs: said next to its time
                    if timed.report.check_failures.get(name):
                        timed.notes[name] = (f"{timed.report.check_failures[name]} re-checked "
                                             "outputs were wrong")
                return timed
            except FunctionFailed as failed:
                timed.dropped[failed.name] = self.failure(failed.name, failed.error).message
                fns = {k: v for k, v in fns.items() if k != failed.name}
        return timed

    def run_plan(self, config: str, plan: TimingPlan | None) -> Timed:
        """The interleaved run, alone on the GPU (the exclusive lock); baselines that left it say why."""
        if plan is None:
            return Timed(None, True)
        with self.gpu(config, exclusive=True):
            self.phase("timing", config, plan.impl_ids)
            with self.timed_section("timing"), self.timing_priority() as nice:
                timed = self.bench(plan.fns, plan.input_sets, plan.check)
            self.timing_nice = nice
        timed.notes.update(plan.notes)
        timed.notes.update({k: v for k, v in timed.dropped.items() if k in (*TORCH_BASELINES, NAIVE)})
        return timed

    def rows(self, config: str, todo: list[Implementation], results: dict[str, CheckResult], timed: Timed,
             baselines: dict[str, Any]) -> None:
        report = timed.report
        for impl in todo:
            result = results[impl.impl_id]
            timing = report.timings.get(impl.impl_id) if report else None
            status, message = result.status, result.message
            if result.ok and timing is None:
                status, message = "timing_failed", timed.dropped.get(impl.impl_id, "not timed")
            elif timing is not None and report.check_failures.get(impl.impl_id):
                status = "timing_check_failed"  # right on the checks, wrong on a re-check: a race
                message = f"{report.check_failures[impl.impl_id]} re-checked outputs were wrong during timing"
            built = self.built.get(impl.impl_id)
            self.emit("row", {
                "record": "row", "v": ROW_VERSION, "task_id": self.task.task_id, "kind": self.task.kind.value,
                "family": self.task.family, "config": config, "impl_id": impl.impl_id,
                "strategy": impl.strategy,
                "tags": list(impl.tags), "baseline_impl": impl.baseline,
                "source_hash": impl_hash(impl.source),
                "status": status,
                "correct": status == "ok", "max_abs_error": result.max_abs_error,
                "max_rel_error": result.max_rel_error, "message": message[:MESSAGE_CHARS],
                "build_ms": built.build_ms if built else None, **_timing_fields("", timing),
                **_host_fields("", report, impl.impl_id),
                **baselines, **_report_fields(report, impl.impl_id), "timing_checked": timed.checked,
                "timing_nice": self.timing_nice, "baseline_notes": timed.notes, "t": time.time()})


def _timing_fields(prefix: str, t: Timing | None) -> dict[str, Any]:
    names = ("median_ms", "iqr_ms", "min_ms", "mean_ms", "n_samples")
    if t is None:
        return {f"{prefix}{n}": None for n in names}
    return {f"{prefix}median_ms": t.median_ms, f"{prefix}iqr_ms": t.iqr_ms, f"{prefix}min_ms": t.min_ms,
            f"{prefix}mean_ms": t.mean_ms, f"{prefix}n_samples": t.n_samples}


def _baseline(report: BenchReport | None, name: str, label: str) -> dict[str, Any]:
    t = report.timings.get(name) if report else None
    return {f"{label}_ms": t.median_ms if t else None, f"{label}_iqr_ms": t.iqr_ms if t else None,
            **_host_fields(f"{label}_", report, name)}


HOST_FIELDS = ("host_path_ms", "host_path_p90_ms", "lead_ms", "lead_launches", "host_bound_samples")


def _host_fields(prefix: str, report: BenchReport | None, name: str) -> dict[str, Any]:
    """One timed function's host-path diagnostics (`cudaperf.timing`, module docstring): its host path's
    median and p90, its lead's median GPU time (every launch) and launches, its host-bound samples."""
    if report is None or name not in report.timings:
        return {f"{prefix}{f}": None for f in HOST_FIELDS}
    values = (report.host_path_median_ms.get(name), report.host_path_p90_ms.get(name),
              report.lead_median_ms.get(name), report.lead_launches.get(name),
              report.host_bound_samples.get(name))
    return {f"{prefix}{f}": v for f, v in zip(HOST_FIELDS, values, strict=True)}


def _report_fields(report: BenchReport | None, name: str) -> dict[str, Any]:
    if report is None:
        return {"overhead_ms": None, "timing_flags": [], "rounds": None, "l2_flush_bytes": None,
                "lead_us": None, "lead_kind": None, "lead_launch_ms": None}
    return {"overhead_ms": report.overhead_ms,
            "timing_flags": [f.code for f in report.flags_for(name)] + (
                [] if report.clock_consistent else ["timer_inconsistent_run"]),
            "rounds": report.rounds, "l2_flush_bytes": report.l2_flush_bytes, "lead_us": report.lead_us,
            "lead_kind": report.lead_kind, "lead_launch_ms": report.lead_launch_ms}


TIMING_NICE = -15  # the nice of a thread while it times (the GPU's interleaved run, the serial-C calls)


@contextlib.contextmanager
def raised_priority(nice: int = TIMING_NICE) -> Iterator[int | None]:
    """The calling thread at `nice` for the block, at its old nice after (Linux keeps nice per thread);
    yields the nice it ran at, or None where the OS refused (raising priority needs root or CAP_SYS_NICE).

    Why: the measuring children share the host's cores. While one times (alone on the GPU under the
    exclusive lock, or the serial-C reference on the CPU), the others compile: g++, NVRTC, Inductor.
    A timing thread that loses its core mid-window lets the GPU idle behind the lead, or stretches a
    serial-C call. On the H200, baselines measured twice in two calls differed by a median 22% (eager,
    serial C), against 3.7-4.8% for the naive ports and the implementations
    (scripts/compare_dataset_runs.py)."""
    tid = threading.get_native_id()
    try:
        before = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except (OSError, AttributeError):  # not permitted, or no such call on this OS
        yield None
        return
    try:
        yield nice
    finally:
        os.setpriority(os.PRIO_PROCESS, tid, before)


# --------------------------------------------------------------------------------------------------
# PyTorch -> CUDA tasks


@dataclass
class _TorchRef:
    seed: int
    init: list
    inputs: list
    output: Any
    model: Any = None  # kept for the first seed only (timing, eager and compile baselines)


class TorchTaskMeasure(TaskMeasure):
    """Reference: the task's `Model` on the GPU; baselines eager and torch.compile of it."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        from cudaperf.tasks import runtime, task_from_source

        self.runtime = runtime
        self.record = task_from_source(self.task.text, self.task.task_id)
        self.module = runtime.load_module(self.record)

    def config_names(self) -> list[str]:
        return [c.name for c in self.record.configs]

    def references(self, config: str) -> list[_TorchRef]:
        cfg = next(c for c in self.record.configs if c.name == config)
        refs = []
        for seed in self.options.seeds:
            init = self.runtime.make_init_inputs(self.module, cfg)
            torch.manual_seed(seed)
            model = self.module.Model(*init).to(self.device).eval()
            inputs = self.runtime.make_inputs(self.module, cfg, seed, self.device)
            with torch.no_grad():
                output = model(*clone_inputs(inputs))
            refs.append(_TorchRef(seed, init, inputs, output, model if not refs else None))
        synchronize(self.device)
        return refs

    def measure_config(self, config: str, todo: list[Implementation]) -> None:
        with self.timed_section("build"):
            for impl in todo:
                self.build(impl, config)
        with self.gpu(config):
            self.phase("reference", config)
            with self.timed_section("reference"):
                try:
                    refs = self.references(config)
                except Exception as exc:  # the task's own code: every row says why
                    if not context_alive(self.device):
                        raise ContextLost(f"reference: {_text(exc)}") from exc
                    failed = CheckResult("reference_failed", message=_text(exc))
                    self.rows(config, todo, dict.fromkeys([i.impl_id for i in todo], failed),
                              Timed(None, False), {})
                    return
            instances: dict[str, Any] = {}
            with self.timed_section("check"):
                results = {i.impl_id: self.check(i, config, refs, instances) for i in todo}
            plan = self.plan_timing(config, [i for i in todo if results[i.impl_id].ok], refs, instances)
            warm_inputs = clone_inputs(refs[0].inputs) if plan is not None and self.compile_baseline else None
            synchronize(self.device)  # nothing of ours left running when a timed run takes the GPU
        if warm_inputs is not None:
            self.add_compiled(config, plan, refs[0], warm_inputs)
        timed = self.run_plan(config, plan)
        baselines = {**_baseline(timed.report, "eager", "eager"),
                     **_baseline(timed.report, "compile", "compile"),
                     **_baseline(None, NAIVE, "naive"), **SerialBaseline(0.0).fields()}
        self.rows(config, todo, results, timed, baselines)

    def check(self, impl: Implementation, config: str, refs: list[_TorchRef], instances: dict) -> CheckResult:
        built = self.build(impl, config)
        if built.failure:
            return built.failure
        self.phase("check", config, (impl.impl_id,))
        worst_abs, worst_rel = 0.0, 0.0
        for ref in refs:
            try:
                torch.manual_seed(ref.seed)  # the same seed as the reference: the same weights
                new = built.module.ModelNew(*ref.init).to(self.device).eval()
                poison_allocator(self.device, tensor_bytes(ref.output))
                inputs = clone_inputs(ref.inputs)
                with torch.no_grad():
                    out = new(*inputs)
                synchronize(self.device)
            except Exception as exc:  # noqa: BLE001 - the implementation failed: a value
                return self.failure(impl.impl_id, exc)
            if inputs_mutated(ref.inputs, inputs):  # the reference does not: timing would be unfair
                return CheckResult("incorrect", message=f"seed {ref.seed}: modified its inputs")
            verdict = compare(out, ref.output, None, overrides=self.record.tolerances)
            if not verdict.ok:
                return CheckResult("incorrect", verdict.max_abs_error, verdict.max_rel_error,
                                   f"seed {ref.seed}: {verdict.message}")
            worst_abs = max(worst_abs, verdict.max_abs_error or 0.0)
            worst_rel = max(worst_rel, verdict.max_rel_error or 0.0)
            if ref is refs[0]:
                instances[impl.impl_id] = new
        return CheckResult("ok", worst_abs, worst_rel)

    def add_compiled(self, config: str, plan: TimingPlan, ref: _TorchRef, warm_inputs: list) -> None:
        """torch.compile of the first seed's model joins the plan, or the plan says why it is missing."""
        compiled, why = self.compiled(config, ref, warm_inputs)
        if compiled is not None:
            plan.fns["compile"] = lambda inputs: compiled(*inputs)
        else:
            plan.notes["compile"] = why

    def compiled(self, config: str, ref: _TorchRef, warm_inputs: list) -> tuple[Callable | None, str]:
        """torch.compile of the first seed's model, compiled and warmed here (outside the timing): Inductor's
        CPU work outside the GPU lock and the first run inside it (`compile_baseline(first_run_hold)`); a
        model that does not trace as one graph is compiled and warmed wholly under the lock instead."""
        self.phase("compile_baseline", config)
        with self.timed_section("compile_baseline"):
            warming = [True]  # a recompile later, inside the timed run's exclusive lock, must not lock again

            def hold() -> contextlib.AbstractContextManager[None]:
                return self.compile_hold(config) if warming[0] else contextlib.nullcontext()

            try:
                compiled = compile_baseline(ref.model, first_run_hold=hold, dynamic=False)  # one static graph
                with torch.no_grad():
                    compiled(*warm_inputs)
                warming[0] = False
                return compiled, ""
            except Exception:  # noqa: BLE001 - a graph break, say: the whole warm-up under the lock below
                if not context_alive(self.device):
                    self.phase("context_lost", config)
                    raise ContextLost("torch.compile's first run lost the CUDA context") from None
            try:
                with self.compile_hold(config):
                    compiled = compile_baseline(ref.model, dynamic=False)
                    with torch.no_grad():
                        compiled(*clone_inputs(ref.inputs))
                    synchronize(self.device)
                return compiled, ""
            except Exception as exc:  # noqa: BLE001 - the baseline is missing, the measurement goes on
                self.failure("compile", exc)
                return None, _text(exc)

    @contextlib.contextmanager
    def compile_hold(self, config: str) -> Iterator[None]:
        """The GPU lock, exclusively, for torch.compile's GPU work: at a kernel's first launch Triton times
        its candidate configurations and keeps the fastest, and other children's kernels beside it would
        skew that choice (the compile baseline of a key differed by a median 35% between two calls on
        the H200 while this lock was shared). The phase names the compile again once held, so a death
        there is blamed on the baseline (the parent retries the task without it)."""
        with self.gpu(config, exclusive=self.options.compile_first_run_exclusive):
            self.phase("compile_baseline", config)
            yield

    def plan_timing(self, config: str, timed_impls: list[Implementation], refs: list[_TorchRef],
                    instances: dict) -> TimingPlan | None:
        """The implementations, eager, and the expected outputs the run re-checks against."""
        if not timed_impls:
            return None
        model = refs[0].model
        fns: dict[str, Callable] = {i.impl_id: (lambda inputs, m=instances[i.impl_id]: m(*inputs))
                                    for i in timed_impls}
        fns["eager"] = lambda inputs: model(*inputs)
        notes = {}  # torch.compile joins later, outside the lock (`add_compiled`)
        if not self.compile_baseline and self.options.compile_baseline:
            notes["compile"] = "skipped: a measuring process died inside torch.compile on this task"
        with torch.no_grad():  # the first seed's model on every seed's inputs: what timing re-checks against
            expected = [refs[0].output] + [model(*clone_inputs(r.inputs)) for r in refs[1:]]
        tolerances = self.record.tolerances

        def check(name: str, index: int, out: Any) -> bool:
            return compare(out, expected[index], None, overrides=tolerances).ok

        return TimingPlan(tuple(i.impl_id for i in timed_impls), fns, [r.inputs for r in refs], check, notes)


# --------------------------------------------------------------------------------------------------
# C -> CUDA tasks


class Outputs:
    """The out/inout tensors of one input set, hidden from the timing harness (see the module docstring):
    not a list, tuple or dict, so `flatten_tensors` and `clone_inputs` pass it through untouched."""

    def __init__(self, arrays: dict[str, torch.Tensor]):
        self.arrays = arrays


@dataclass
class _CSeed:
    """One (configuration, seed) of a C task on the host: inputs and the serial reference's outputs."""

    seed: int
    values: dict[str, Any]  # scalars and numpy arrays as drawn (outs zero-filled)
    outputs: dict[str, np.ndarray]


@dataclass
class _CDevice:
    """The same on the GPU."""

    ins: dict[str, torch.Tensor]  # `in` arrays
    inout: dict[str, torch.Tensor]  # `inout` arrays before the call
    out_specs: dict[str, tuple[int, torch.dtype]]  # `out` arrays: length, dtype
    expected: dict[str, torch.Tensor]  # every output after the reference
    device: torch.device

    def fresh_outputs(self) -> dict[str, torch.Tensor]:
        outs = {n: fill_sentinel_(torch.empty(length, dtype=dt, device=self.device))
                for n, (length, dt) in self.out_specs.items()}
        return {**outs, **{n: t.clone() for n, t in self.inout.items()}}


class CTaskMeasure(TaskMeasure):
    """Reference: the serial C (`cref`) on the CPU, also timed; baseline: the naive CUDA port."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.ctask = from_json(self.task.text)
        self.scalars: dict[str, Any] = {}

    def config_names(self) -> list[str]:
        return [c.name for c in self.ctask.configs]

    def source_of(self, impl: Implementation) -> str:
        """The implementation's source, or (test hook `illegal_address_on`) one whose kernel writes to
        NULL: a sticky CUDA error, to test the death path on a real GPU."""
        if impl.impl_id != self.options.hooks.get("illegal_address_on"):
            return impl.source
        return ILLEGAL_ADDRESS.replace("ENTRY", self.ctask.entry)

    def prepare(self, config: str) -> list[_CSeed] | str:
        """Inputs and serial references per seed, and the serial-C baseline's first round on the first
        seed; or why not."""
        cfg = self.ctask.config(config)
        build = cref.build_reference(self.ctask)
        if not build.ok:
            return f"reference build failed: {build.log[-600:]}"
        seeds = []
        for seed in self.options.seeds:
            values = make_inputs(self.ctask, cfg, seed)
            run = cref.run_reference(self.ctask, cfg, seed, values=cref.copy_values(values))
            if not run.ok:
                return run.message
            seeds.append(_CSeed(seed, values, run.outputs))
        self.serial = SerialBaseline(self.options.serial_budget_ms)
        self.serial_call = (lambda fresh: cref.call(self.ctask, build, fresh), seeds[0].values)
        self.serial_round()
        return seeds

    def serial_round(self, config: str | None = None) -> None:
        """One round of the serial-C baseline if one is due (`serial.SerialBaseline.wants_round`): the
        calibration, then calls on fresh copies until the round's share of `serial_budget_ms` is spent,
        on a CPU the other children keep off, one serial timing at a time machine-wide
        (`host_timing.isolated_host_timing`; the children call `keep_off_timing_cpus` at start)."""
        if not self.serial.wants_round():
            return
        if config is not None:
            self.phase("serial_c", config)
        call, values = self.serial_call
        with self.timed_section("serial_c"), self.timing_priority() as nice:
            free_ms = free_calibration_ms()  # before the reserved CPU: is that one slower? (serial.py)
            with isolated_host_timing() as slot:
                self.serial.rounds.append(timed_round(call, values, self.serial.round_budget_ms, slot.cpus,
                                                      free_ms))
        self.timing_nice = nice

    def upload(self, seed: _CSeed) -> _CDevice:
        def dev(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

        ins = {p.name: dev(seed.values[p.name]) for p in self.ctask.params if p.kind is ParamKind.IN}
        inout = {p.name: dev(seed.values[p.name]) for p in self.ctask.params if p.kind is ParamKind.INOUT}
        specs = {p.name: (int(seed.values[p.name].size), _torch_dtype(seed.values[p.name].dtype))
                 for p in self.ctask.params if p.kind is ParamKind.OUT}
        return _CDevice(ins, inout, specs, {n: dev(a) for n, a in seed.outputs.items()}, self.device)

    def measure_config(self, config: str, todo: list[Implementation]) -> None:
        self.phase("reference", config)
        with self.timed_section("reference_cpu"):
            prepared = self.prepare(config)
        if isinstance(prepared, str):
            failed = CheckResult("reference_failed", message=prepared[:MESSAGE_CHARS])
            self.rows(config, todo, dict.fromkeys([i.impl_id for i in todo], failed), Timed(None, False), {})
            return
        seeds = prepared
        self.scalars = {p.name: seeds[0].values[p.name] for p in self.ctask.params if not p.is_array}
        naive = next((i for i in self.impls if i.baseline), None)
        checked = todo + ([naive] if naive and naive not in todo else [])
        with self.timed_section("build"):
            for impl in checked:
                self.build(impl, config)
        with self.gpu(config):
            devs = [self.upload(s) for s in seeds]
            with self.timed_section("check"):
                results = {i.impl_id: self.check(i, config, devs) for i in checked}
            plan = self.plan_timing(config, [i for i in todo if results[i.impl_id].ok], naive, results, devs)
            synchronize(self.device)  # nothing of ours left running when a timed run takes the GPU
        self.serial_round(config)  # the rounds spread over the configuration (serial.py)
        timed = self.run_plan(config, plan)
        self.serial_round(config)
        naive_name = naive.impl_id if naive in todo else NAIVE
        baselines = {**_baseline(None, "eager", "eager"), **_baseline(None, "compile", "compile"),
                     **_baseline(timed.report, naive_name, "naive"), **self.serial.fields()}
        self.rows(config, todo, results, timed, baselines)

    def entry(self, impl: Implementation) -> Callable:
        return getattr(self.built[impl.impl_id].module, self.ctask.entry)

    def check(self, impl: Implementation, config: str, devs: list[_CDevice]) -> CheckResult:
        built = self.build(impl, config)
        if built.failure:
            return built.failure
        if not callable(getattr(built.module, self.ctask.entry, None)):
            return CheckResult("import_error", message=f"no function {self.ctask.entry}")
        self.phase("check", config, (impl.impl_id,))
        tol = self.ctask.tolerance_for(self.ctask.config(config))
        worst_abs, worst_rel = 0.0, 0.0
        for seed, dev in zip(self.options.seeds, devs, strict=True):
            outs = dev.fresh_outputs()  # out arrays poisoned (NaN / -1), inout arrays as drawn
            ins = clone_inputs(dev.ins)  # a stray write must not spoil the inputs the others are checked on
            try:
                self.entry(impl)(**ins, **outs, **self.scalars)
                synchronize(self.device)
            except Exception as exc:  # noqa: BLE001 - the implementation failed: a value
                return self.failure(impl.impl_id, exc)
            if inputs_mutated(dev.ins, ins):
                return CheckResult("incorrect", message=f"seed {seed}: modified its input arrays")
            for name, want in dev.expected.items():
                verdict = compare(outs[name], want, tol, path=name)
                if not verdict.ok:
                    return CheckResult("incorrect", verdict.max_abs_error, verdict.max_rel_error,
                                       f"seed {seed}: {verdict.message}")
                worst_abs = max(worst_abs, verdict.max_abs_error or 0.0)
                worst_rel = max(worst_rel, verdict.max_rel_error or 0.0)
        return CheckResult("ok", worst_abs, worst_rel)

    def plan_timing(self, config: str, timed_impls: list[Implementation], naive: Implementation | None,
                    results: dict[str, CheckResult], devs: list[_CDevice]) -> TimingPlan | None:
        """The implementations and the naive port, each seed's inputs with fresh outputs, the re-check."""
        if not timed_impls:
            return None
        scalars = self.scalars

        def call(fn: Callable) -> Callable:
            def run(inputs: list) -> Outputs:
                fn(**inputs[0], **inputs[1].arrays, **scalars)
                return inputs[1]  # the holder: what the re-check reads
            return run

        fns = {i.impl_id: call(self.entry(i)) for i in timed_impls}
        if naive is not None and naive not in timed_impls and results[naive.impl_id].ok:
            fns[NAIVE] = call(self.entry(naive))
        input_sets = [[dev.ins, Outputs(dev.fresh_outputs())] for dev in devs]
        tol = self.ctask.tolerance_for(self.ctask.config(config))
        has_inout = any(dev.inout for dev in devs)

        def check(name: str, index: int, out: Outputs) -> bool:
            return all(compare(out.arrays[n], want, tol).ok for n, want in devs[index].expected.items())

        return TimingPlan(tuple(i.impl_id for i in timed_impls), fns, input_sets,
                          None if has_inout else check)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(1, dtype=dtype)).dtype
