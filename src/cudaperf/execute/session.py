"""The in-worker recipe: one evaluation job (a task and a candidate) from the job dict to the reply payload.

Runs inside the sandboxed worker (`cudaperf.execute.child`), or in-process in CPU mode for tests. The
stages, in order (each one a heartbeat; contract in dev/CONTRACTS.md, "The job sent to a worker"):

- setup: pop the secret and derive the seeds from it, select the device, TF32 off unless the task allows
  it (pitfall #2 of docs/evaluation.md), load the task module;
- reference: inputs per configuration x seed, created on the device (pitfall #1), the reference model built
  after `torch.manual_seed(seed)`, its outputs; kept across jobs by `REFERENCES` (see there why);
- import: the candidate module, inside `candidate_scope()` (as is every call into candidate code);
- construct: `ModelNew(*init_inputs)` after the same seed as the reference, so the weights match;
- correctness: per configuration x seed, the candidate runs before and after a reference re-run (hack #1),
  each time on cloned inputs checked for mutation afterwards (#2) with the caching allocator poisoned
  beforehand (#1); outputs compared scale-aware; degenerate outputs flagged (#12);
- timing: candidate, eager and torch.compile baselines interleaved on rotated, re-checked inputs
  (`cudaperf.timing`), then speed-of-light (`cudaperf.sol`);
- coverage: share of GPU time in the candidate's own kernels (`cudaperf.anticheat.coverage`).

Failures are values: an exception from candidate code becomes an Outcome (RUNTIME_ERROR with the traceback
tail, CUDA_ERROR with `worker_poisoned` when the context is gone, OUT_OF_MEMORY, COMPILE_ERROR,
SYNTAX_ERROR, INVALID_SOLUTION, OUTPUT_TOO_LARGE); one from the task or from cudaperf is HARNESS_ERROR.
Nothing leaves `run_eval_job` as an exception. `payload["outcome"]` stays None when correctness decides.

Not covered: process isolation, deadlines and the result channel (the sandbox and child of
`cudaperf.execute`), static checks, the final outcome (`cudaperf.evaluate.decide_outcome`), C->CUDA tasks
(`run_eval_job` hands them to `cudaperf.execute.c_session.run_c_job`). The runtime op monitor is not
active during timing (its per-op overhead would distort the candidate's samples); timing re-checks outputs
instead and coverage measures who does the work.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import platform
import re
import sys
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from cudaperf.correctness import (
    Comparison,
    clone_inputs,
    compare,
    degenerate_flags,
    derive_seed,
    flatten_tensors,
    inputs_mutated,
    mutated_positions,
    poison_allocator,
)
from cudaperf.execute.device_state import context_alive
from cudaperf.sol import count_flops, dominant_dtype, estimate, min_bytes, speed_flags
from cudaperf.timing import BenchReport, FunctionFailed, bench_interleaved_report, compile_baseline
from cudaperf.types import (
    ConfigCorrectness,
    ConfigTiming,
    Flag,
    InputConfig,
    Outcome,
    Severity,
    Solution,
    SolutionFormat,
    Task,
    TaskKind,
    from_dict,
    to_dict,
)

STAGES = ("setup", "reference", "import", "construct", "correctness", "timing", "coverage")
CANDIDATE = "candidate"  # the candidate's name among the timed functions
MESSAGE_CHARS = 4000  # failure messages carry the traceback tail, truncated to this
REFERENCE_CACHE_FRACTION = 0.25  # of device memory held by cached references across jobs
CPU_REFERENCE_CACHE_BYTES = 2 << 30

# Substrings (lower case) that identify errors raised by CUDA, whichever library reports them.
_OOM_TEXT = ("out of memory", "cuda_error_out_of_memory")
_CUDA_TEXT = ("cuda error", "cuda_error", "cudaerror", "illegal memory access", "misaligned address",
              "unspecified launch failure", "illegal instruction", "device-side assert", "launch failed",
              "cublas_status_execution_failed", "an illegal")
# Sticky errors: the CUDA context is unusable afterwards, the worker must be replaced.
_STICKY_TEXT = ("illegal memory access", "misaligned address", "unspecified launch failure",
                "illegal instruction", "device-side assert", "illegal address", "hardware stack error",
                "exception on sm", "launch failed")


class _Stop(BaseException):
    """The outcome is decided; the recipe stops. A BaseException so that an `except Exception` in code
    between the raise and the recipe (the profiler, candidate code) cannot swallow it."""

    def __init__(self, outcome: Outcome, message: str, poisoned: bool = False):
        super().__init__(message)
        self.outcome, self.message, self.poisoned = outcome, message, poisoned


# --------------------------------------------------------------------------------------------------
# References kept across jobs


@dataclass
class Reference:
    """One (configuration, seed): pristine inputs, the reference model, its outputs."""

    inputs: list
    init_inputs: list
    model: torch.nn.Module
    outputs: Any
    inputs_after: list | None  # the inputs after the reference ran, only when the reference mutates them
    fingerprint: tuple[int, ...] = ()
    extra: dict[Any, Any] = field(default_factory=dict)  # lazily: flops, the compiled model
    nbytes: int = 0


class ReferenceCache:
    """References of recent (task, configuration, seed) keys, least recently used evicted past a budget.

    Why state that outlives a job: evaluate.py sends every candidate of a task with the same public seeds,
    and the reference forward (and torch.compile of it, ~15 s) is the costliest step on large tasks.
    Keeping the outputs alive also keeps them out of the allocator's free list (hack #1). A fingerprint
    taken at creation is re-checked on every hit: an earlier candidate writing out of bounds into a cached
    tensor must not corrupt later verdicts.
    """

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple, Reference] = OrderedDict()

    def get(self, key: tuple) -> Reference | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if _fingerprint(entry) != entry.fingerprint:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def put(self, key: tuple, entry: Reference, budget_bytes: int) -> None:
        entry.fingerprint = _fingerprint(entry)
        self._entries[key] = entry
        while len(self._entries) > 1 and sum(e.nbytes for e in self._entries.values()) > budget_bytes:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


REFERENCES = ReferenceCache()


def _fingerprint(entry: Reference) -> tuple[int, ...]:
    """An integer sum of the raw bytes of every cached tensor and weight (one pass on the device; catches
    stray writes, not a deliberate collision)."""
    weights = list(entry.model.parameters()) + list(entry.model.buffers())
    tensors = flatten_tensors([entry.inputs, entry.outputs, entry.inputs_after, weights])
    return tuple(int(t.contiguous().reshape(-1).view(torch.uint8).sum(dtype=torch.int64)) if t.numel() else 0
                 for t in tensors)


def _nbytes(*objs: Any) -> int:
    return sum(t.numel() * t.element_size() for t in flatten_tensors(list(objs)))


def _cache_budget(device: torch.device) -> int:
    if device.type == "cuda":
        return int(REFERENCE_CACHE_FRACTION * torch.cuda.get_device_properties(device).total_memory)
    return CPU_REFERENCE_CACHE_BYTES


# --------------------------------------------------------------------------------------------------
# The job


@dataclass(frozen=True)
class _Job:
    task: Task
    solution: Solution
    device: torch.device
    public_seeds: tuple[int, ...]
    seeds: tuple[int, ...]  # derived: the secret mixed in
    timing_seeds: tuple[int, ...]  # derived; the first ones are the correctness seeds
    policy: Any
    timing: dict[str, Any]
    coverage: bool
    max_output_bytes: int
    cache_dir: str | None
    torch_extensions_dir: str | None


def _parse_job(job: dict, secret: str) -> _Job:
    from cudaperf.anticheat.policy import Policy

    public = tuple(int(s) for s in job.get("seeds") or [1])
    timing = {"enabled": True, "budget_ms": 100.0, "warmup_ms": 25.0, "baselines": ["eager", "compile"],
              "input_sets": 3, **(job.get("timing") or {})}
    extra = tuple(max(public) + 1 + i for i in range(max(0, int(timing["input_sets"]) - len(public))))
    timing_public = (public + extra)[: max(1, int(timing["input_sets"]))]
    return _Job(
        task=from_dict(Task, job["task"]), solution=from_dict(Solution, job["solution"]),
        device=torch.device(job.get("device", "cpu")), public_seeds=public,
        seeds=tuple(derive_seed(s, secret) for s in public),
        timing_seeds=tuple(derive_seed(s, secret) for s in timing_public),
        policy=from_dict(Policy, job.get("policy") or {}), timing=timing,
        coverage=bool(job.get("coverage", False)), max_output_bytes=int(job.get("max_output_bytes", 4 << 30)),
        cache_dir=job.get("cache_dir"), torch_extensions_dir=job.get("torch_extensions_dir"),
    )


# --------------------------------------------------------------------------------------------------
# The recipe


def run_eval_job(job: dict, report: Callable[[str], None]) -> dict:
    """Evaluate one job (see CONTRACTS) and return the reply payload. Never raises.

    `report(stage)` is the heartbeat, called as each stage starts. The secret is popped from `job` first,
    so the dict the caller holds no longer contains it once candidate code can run."""
    if isinstance(job.get("task"), dict) and job["task"].get("kind") == TaskKind.C.value:
        from cudaperf.execute.c_session import run_c_job  # C->CUDA tasks have their own recipe

        return run_c_job(job, report)
    return _Session(report).run(job)


class _Session:
    """State of one job; each method is one step of the recipe."""

    # The stages between setup and timing, in order: (heartbeat name, method). Subclasses for other task
    # kinds change this list, not the recipe.
    STAGES: tuple[tuple[str, str], ...] = (
        ("reference", "compute_references"), ("import", "import_candidate"),
        ("construct", "construct_first"), ("correctness", "check_correctness"),
    )

    def run(self, job: dict) -> dict:
        """The recipe. The secret leaves `job` before any candidate code can run."""
        secret = str(job.pop("secret", ""))
        try:
            self.stage("setup", self.setup, job, secret)
            del secret
            for name, method in self.STAGES:
                self.stage(name, getattr(self, method))
            if self.should_time():
                self.stage("timing", self.time_configs)
            if self.should_measure_coverage():
                self.stage("coverage", self.measure_coverage)
        except _Stop as stop:
            self.stop(stop)
        finally:
            self.cleanup()
        return self.payload()

    def __init__(self, report: Callable[[str], None]):
        self.report = report
        self.job: _Job | None = None
        self.device = torch.device("cpu")
        self.current_stage = ""
        self.outcome: Outcome | None = None
        self.message = ""
        self.poisoned = False
        self.flags: list[Flag] = []
        self.correctness: list[ConfigCorrectness] = []
        self.timings: list[ConfigTiming] = []
        self.coverage: float | None = None
        self.kernel_time_ms: dict[str, float] = {}  # own kernels' GPU time, from the coverage profiler
        self.environment: dict[str, str] = {}
        self.durations: dict[str, float] = {}
        self.model_new: type | None = None
        self.candidate_module_name: str | None = None
        self.built: dict[tuple[str, int], torch.nn.Module] = {}
        self.alive: list[Any] = []  # candidate objects (models, outputs), released inside the scope
        self.verified: dict[tuple, Reference] = {}  # references fingerprint-checked during this job
        self.timing_outputs: dict[tuple[str, int], Any] = {}  # seed-0 model on other seeds' inputs
        self.guards: _Guards | None = None  # created in setup (it needs the job's policy)

    # -- stages ----------------------------------------------------------------------------------
    def stage(self, name: str, fn: Callable, *args: Any) -> None:
        self.current_stage = name
        self.report(name)
        start = time.perf_counter()
        try:
            fn(*args)
        except _Stop:
            raise
        except Exception as exc:  # the task's or cudaperf's own code failed: not the candidate's fault
            _, poisoned = _classify(exc, self.device)
            raise _Stop(Outcome.HARNESS_ERROR, f"{name}: {_describe(exc)}", poisoned) from exc
        finally:
            self.durations[name] = self.durations.get(name, 0.0) + time.perf_counter() - start

    def setup(self, job: dict, secret: str) -> None:
        self.job = _parse_job(job, secret)
        self.device = self.job.device
        _select_device(self.device, self.job)
        self.environment = _environment(self.device)
        _set_precision(self.job.task.allow_tf32)
        preload_lazy_modules()
        self.guards = _Guards(self.job.policy)
        if self.job.task.kind is not TaskKind.PYTORCH:
            raise _Stop(Outcome.HARNESS_ERROR, "C->CUDA tasks are not run by the worker session yet")
        from cudaperf.tasks import timed_configs
        from cudaperf.tasks.runtime import load_module

        self.module = load_module(self.job.task)
        self.task_key = (self.job.task.task_id, hashlib.sha256(self.job.task.source.encode()).hexdigest())
        self.timed_names = timed_configs(self.job.task)

    def compute_references(self) -> None:
        for config in self.job.task.configs:
            for seed in self.job.seeds:
                self.reference(config, seed)

    def import_module(self) -> Any:
        """Run the solution file as a module, inside the candidate scope (both task kinds)."""
        from cudaperf.tasks.kernelbench import exec_task_source

        solution = self.job.solution
        digest = hashlib.sha256(solution.source.encode()).hexdigest()
        self.candidate_module_name = f"cudaperf_candidate_{digest[:12]}"
        self.guards.start()
        return self.candidate(lambda: exec_task_source(
            solution.source, module_name=self.candidate_module_name,
            filename=solution.path or f"<solution {solution.solution_id}>", keep=True), "import")

    def import_candidate(self) -> None:
        module = self.import_module()
        model_new = getattr(module, "ModelNew", None)
        if not (isinstance(model_new, type) and issubclass(model_new, torch.nn.Module)):
            raise _Stop(Outcome.INVALID_SOLUTION, "the solution defines no class ModelNew(torch.nn.Module)")
        self.model_new = model_new

    def construct_first(self) -> None:
        config, seed = self.job.task.configs[0], self.job.seeds[0]
        self.built[(config.name, seed)] = self.construct(config, seed)

    def check_correctness(self) -> None:
        for config in self.job.task.configs:
            self.correctness.append(self.correctness_for(config))
            self.release()

    def should_time(self) -> bool:
        return (bool(self.job.timing.get("enabled", True)) and all(c.correct for c in self.correctness)
                and not self._has_errors())

    def time_configs(self) -> None:
        by_name = {c.name: c for c in self.job.task.configs}
        for name in self.timed_names:
            self.timings.append(self.time_config(by_name[name]))
            self.release()

    def should_measure_coverage(self) -> bool:
        return (self.job.coverage and self.device.type == "cuda" and all(c.correct for c in self.correctness)
                and not self._has_errors())

    def measure_coverage(self) -> None:
        """Coverage on the first timed configuration. A failure of the profiler is a warning (the verdict
        stands: the op monitor already ran on every forward); a failure of the candidate is its outcome."""
        config = {c.name: c for c in self.job.task.configs}[self.timed_names[0]]
        seed = self.job.seeds[0]
        entry, model = self.reference(config, seed), self.construct(config, seed)
        inputs = clone_inputs(entry.inputs)
        try:
            from cudaperf.anticheat.coverage import kernel_names_from_source, measure_coverage

            # None when no name is found (kernel text built by f-strings): then every non-library
            # kernel counts as own, rather than an honest templated solution scoring zero.
            own_names = kernel_names_from_source(self.job.solution.source) or None
            result = measure_coverage(lambda: self.candidate(
                lambda: self.forward(model, inputs, None, False), "forward", config.name), own_names)
        except Exception as exc:  # noqa: BLE001 - the harness's profiler failed, not the candidate
            self.flags.append(Flag("coverage_failed", _describe(exc)[:500], Severity.WARNING, config.name))
            return
        self.coverage = result.coverage
        for name, ms, own in result.kernels:
            if own:
                self.kernel_time_ms[name] = self.kernel_time_ms.get(name, 0.0) + ms
        self.flags += self.guards.coverage_flags(result, config.name)

    # -- the reference ---------------------------------------------------------------------------
    def reference(self, config: InputConfig, seed: int) -> Reference:
        """The cached reference of (config, seed), computed on a miss."""
        from cudaperf.tasks.runtime import make_init_inputs, make_inputs

        key = (*self.task_key, config.name, repr(sorted(config.params.items())), seed, str(self.device),
               self.job.task.allow_tf32)
        entry = self.verified.get(key) or REFERENCES.get(key)
        if entry is not None:
            self.verified[key] = entry
            return entry
        inputs = make_inputs(self.module, config, seed, self.device)
        init_inputs = make_init_inputs(self.module, config)
        torch.manual_seed(seed)
        model = _construct(self.module.Model, init_inputs, self.device)
        work = clone_inputs(inputs)
        with torch.no_grad():
            outputs = model(*work)
        _synchronize(self.device)
        after = work if inputs_mutated(inputs, work) else None
        entry = Reference(inputs, init_inputs, model, outputs, after,
                          nbytes=_nbytes(inputs, outputs, after, list(model.parameters())))
        REFERENCES.put(key, entry, _cache_budget(self.device))
        self.verified[key] = entry
        return entry

    def rerun_reference(self, entry: Reference, config: str) -> None:
        """The reference again, between the two candidate runs: its freed temporaries are where an
        uninitialised candidate output would land (hack #1). Doubles as a determinism check."""
        work = clone_inputs(entry.inputs)
        with torch.no_grad():
            again = entry.model(*work)
        _synchronize(self.device)
        same = compare(again, entry.outputs, None, overrides=self.job.task.tolerances)
        if not same.ok:
            self.flags.append(Flag("task_nondeterministic", "the reference gives different outputs for the "
                                   f"same inputs ({same.message})", Severity.WARNING, config))
        del again, work

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
                _synchronize(self.device)
        except _Stop:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever candidate code raises is an Outcome
            raise self._candidate_failure(exc, what, config) from None
        finally:
            self.flags += self.guards.after(tf32, config)
        return result

    def _candidate_failure(self, exc: BaseException, what: str, config: str | None) -> _Stop:
        outcome, poisoned = _classify(exc, self.device)
        where = f"{what} ({config})" if config else what
        traceback.print_exception(exc, file=sys.stderr)  # the full text goes to the worker's log file
        return _Stop(outcome, f"{where}: {_describe(exc)}", poisoned)

    def construct(self, config: InputConfig, seed: int) -> torch.nn.Module:
        """ModelNew(*init_inputs) built after the reference's seed (so the weights match)."""
        built = self.built.pop((config.name, seed), None)
        if built is not None:
            return built
        init_inputs = self.reference(config, seed).init_inputs
        _check_constructor(self.model_new, init_inputs)
        torch.manual_seed(seed)  # outside the scope: torch's lazy CUDA seeding walks frames
        model = self.candidate(lambda: _construct(self.model_new, init_inputs, self.device), "construct",
                               config.name)
        self.alive.append(model)
        return model

    def forward(self, model: torch.nn.Module, inputs: list, config: str | None, monitored: bool = True):
        with torch.no_grad():
            if not monitored:
                return model(*inputs)
            monitor = self.guards.op_monitor()
            with monitor:
                out = model(*inputs)
        self.flags += [replace(f, config=f.config or config) for f in monitor.flags()]
        return out

    def run_candidate(self, model: torch.nn.Module, entry: Reference, config: str) -> tuple[Any, str]:
        """One forward on cloned inputs into a poisoned allocator; returns (output, mutation message)."""
        given = clone_inputs(entry.inputs)
        poison_allocator(self.device, _nbytes(entry.outputs))
        out = self.candidate(lambda: self.forward(model, given, config), "forward", config)
        self.alive.append(out)
        size = _nbytes(*[t for t in flatten_tensors(out) if type(t) is torch.Tensor])  # no subclass code
        if size > self.job.max_output_bytes:
            raise _Stop(Outcome.OUTPUT_TOO_LARGE, f"forward ({config}): the output has {size} bytes, more "
                        f"than the {self.job.max_output_bytes} allowed")
        return out, self._mutation(entry, given)

    def _mutation(self, entry: Reference, given: list) -> str:
        """'' when the inputs after the call are what they should be (untouched, or as the reference left
        them when the reference itself works in place)."""
        if entry.inputs_after is None:
            paths = mutated_positions(entry.inputs, given)
            return f"the candidate modified {', '.join(paths)}" if paths else ""
        same = compare(list(given), list(entry.inputs_after), None, overrides=self.job.task.tolerances)
        return "" if same.ok else f"the inputs after the call differ from the reference's: {same.message}"

    # -- correctness -----------------------------------------------------------------------------
    def correctness_for(self, config: InputConfig) -> ConfigCorrectness:
        results: list[tuple[str, Comparison]] = []
        outputs, references, inputs = [], [], []
        for i, seed in enumerate(self.job.seeds):
            entry = self.reference(config, seed)
            model = self.construct(config, seed)
            label = f"seed {self.job.public_seeds[i]}"
            first, mutated = self.run_candidate(model, entry, config.name)
            results += self._judge(first, entry, mutated, f"{label}, first run", config.name)
            if i == 0:
                self.rerun_reference(entry, config.name)
            second, mutated = self.run_candidate(model, entry, config.name)
            results += self._judge(second, entry, mutated, f"{label}, after the reference", config.name)
            outputs.append(first)
            references.append(entry.outputs)
            inputs.append(entry.inputs)
        differ = any(inputs_mutated(inputs[0], other) for other in inputs[1:])
        self.flags += degenerate_flags(outputs, references, differ, config=config.name)
        return _summarize(config.name, results, len(self.job.seeds))

    def _judge(self, out: Any, entry: Reference, mutated: str, label: str, config: str) -> list:
        result = compare(out, entry.outputs, None, overrides=self.job.task.tolerances)
        self.flags += [replace(f, config=config) for f in result.flags]
        if mutated:
            self.flags.append(Flag("input_mutated", mutated, Severity.ERROR, config))
            result = replace(result, ok=False, message=f"{mutated}; {result.message}".rstrip("; "))
        return [(label, result)]

    # -- timing ----------------------------------------------------------------------------------
    def time_config(self, config: InputConfig) -> ConfigTiming:
        seeds = self.job.timing_seeds
        entry = self.reference(config, seeds[0])
        input_sets = [clone_inputs(self.reference(config, s).inputs) for s in seeds]
        expected = [self.timing_expected(entry, config, s) for s in seeds]
        model = self.construct(config, seeds[0])
        fns = {CANDIDATE: lambda inputs: self._scoped_call(model, inputs), **self.baselines(entry, config)}
        checked = entry.inputs_after is None  # a reference working in place changes the inputs each call
        if not checked:
            self.flags.append(Flag("timing_unchecked", "the reference modifies its inputs, so outputs are "
                                   "not re-checked during timing", Severity.INFO, config.name))

        def check(name: str, index: int, out: Any) -> bool:
            return compare(out, expected[index], None, overrides=self.job.task.tolerances).ok

        bench = self.bench(fns, input_sets, check if checked else None, config.name)
        return self.summarize_timing(config, entry, bench)

    def timing_expected(self, entry: Reference, config: InputConfig, seed: int) -> Any:
        """The seed-0 reference model's output on another seed's inputs (timing uses one model)."""
        if seed == self.job.timing_seeds[0]:
            return entry.outputs
        key = (config.name, seed)
        if key not in self.timing_outputs:
            with torch.no_grad():
                self.timing_outputs[key] = entry.model(*clone_inputs(self.reference(config, seed).inputs))
        return self.timing_outputs[key]

    def _scoped_call(self, model: torch.nn.Module, inputs: list) -> Any:
        with self.scope():
            return model(*inputs)

    def baselines(self, entry: Reference, config: InputConfig) -> dict[str, Callable]:
        wanted = set(self.job.timing.get("baselines") or ())
        fns: dict[str, Callable] = {}
        if "eager" in wanted:
            fns["eager"] = lambda inputs: entry.model(*inputs)
        if "compile" in wanted:
            compiled = self.compiled(entry, config)
            if compiled is not None:
                fns["compile"] = lambda inputs: compiled(*inputs)
        return fns

    def compiled(self, entry: Reference, config: InputConfig) -> Callable | None:
        """torch.compile(reference), mode default, compiled (and warmed) outside the timing; cached."""
        if "compiled" not in entry.extra:
            start = time.perf_counter()
            try:
                compiled = compile_baseline(entry.model)
                with torch.no_grad():
                    compiled(*clone_inputs(entry.inputs))
                _synchronize(self.device)
                entry.extra["compiled"] = compiled
            except Exception as exc:  # noqa: BLE001 - the baseline is missing, the evaluation goes on
                entry.extra["compiled"] = f"{type(exc).__name__}: {exc}"[:500]
            self.durations["compile_baseline"] = time.perf_counter() - start
        compiled = entry.extra["compiled"]
        if isinstance(compiled, str):
            self.flags.append(Flag("compile_baseline_failed", compiled, Severity.WARNING, config.name))
            return None
        return compiled

    def bench(self, fns: dict, input_sets: list, check: Callable | None, config: str) -> BenchReport:
        """The interleaved run; a failing baseline is dropped (flagged) and the run repeated once."""
        timing = self.job.timing
        for _ in range(len(fns)):
            watch, tf32 = self.guards.window()
            try:
                with watch, tf32, torch.no_grad():
                    return bench_interleaved_report(
                        fns, input_sets, budget_ms=float(timing["budget_ms"]),
                        warmup_ms=float(timing["warmup_ms"]), l2_flush_bytes=None, check=check,
                        device=self.device)
            except FunctionFailed as failed:
                if failed.name == CANDIDATE:
                    raise self._candidate_failure(failed.error, "timing", config) from None
                self.flags.append(Flag(f"{failed.name}_baseline_failed", str(failed)[:500], Severity.WARNING,
                                       config))
                fns = {k: v for k, v in fns.items() if k != failed.name}
            finally:
                self.flags += self.guards.after(tf32, config)
        raise RuntimeError("every baseline failed")  # unreachable: the candidate alone cannot be dropped

    def summarize_timing(self, config: InputConfig, entry: Reference, bench: BenchReport) -> ConfigTiming:
        name = config.name
        self.flags += [f for f in bench.flags_for(CANDIDATE, name) if self.guards.active(f.code)]
        for baseline in ("eager", "compile"):
            if bench.check_failures.get(baseline):
                self.flags.append(Flag("baseline_output_mismatch", f"the {baseline} baseline's outputs "
                                       f"failed the re-check {bench.check_failures[baseline]} times",
                                       Severity.WARNING, name))
        if not bench.clock_consistent:
            self.flags.append(Flag("timer_inconsistent", f"event times sum to {bench.event_total_ms:.3f} ms, "
                                   f"more than the host clock's {bench.host_total_ms:.3f} ms", Severity.ERROR,
                                   name))
        timings = bench.timings
        sol, flops, bytes_moved = self.speed_of_light(entry)
        fastest_baseline_ms = min((t.median_ms for k, t in timings.items() if k != CANDIDATE), default=None)
        self.flags += speed_flags(timings[CANDIDATE].median_ms, fastest_baseline_ms, sol, config=name)
        return ConfigTiming(config=name, candidate=timings[CANDIDATE], eager=timings.get("eager"),
                            compiled=timings.get("compile"), speed_of_light_ms=sol.floor_ms,
                            bytes_moved=bytes_moved, flops=flops, overhead_ms=bench.overhead_ms, lead_us=bench.lead_us,
                            lead_kind=bench.lead_kind)

    def speed_of_light(self, entry: Reference):
        params = list(entry.model.parameters()) + list(entry.model.buffers())
        bytes_moved = min_bytes([entry.inputs, params], entry.outputs)
        if self.device.type != "cuda":
            return estimate(bytes_moved, None, None, self.device), None, bytes_moved
        if "flops" not in entry.extra:
            entry.extra["flops"] = count_flops(entry.model, clone_inputs(entry.inputs))
        flops = entry.extra["flops"]
        dtype = dominant_dtype([entry.inputs, entry.outputs])
        return estimate(bytes_moved, flops, dtype, self.device), flops, bytes_moved

    # -- end -------------------------------------------------------------------------------------
    def _has_errors(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.flags)

    def stop(self, stop: _Stop) -> None:
        self.outcome, self.message = stop.outcome, stop.message[:MESSAGE_CHARS]
        self.poisoned = self.poisoned or stop.poisoned

    def release(self) -> None:
        """Drop the candidate objects inside the guard scope, so that their finalizers run under it.
        (Reference cycles are collected by the child's after-job sweep, also under the scope: a
        gc.collect here would cost ~0.2 s per call with torch loaded.)"""
        if self.job is None:
            return
        with self.scope():
            self.alive.clear()
            self.built.clear()

    def cleanup(self) -> None:
        """Process-watch flags, then drop every trace of the candidate (unless CUDA is gone). A failure
        here must not lose the verdict: it becomes a flag, and the worker is replaced."""
        try:
            if self.guards is not None:
                self.flags += self.guards.finish()
            self.model_new = None
            if self.candidate_module_name:
                sys.modules.pop(self.candidate_module_name, None)
            self.release()
            if self.device.type == "cuda" and not self.poisoned:
                torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001 - the verdict is already decided: keep it
            self.flags.append(Flag("cleanup_failed", _describe(exc)[:500], Severity.WARNING))
            self.poisoned = True

    def payload(self) -> dict:
        return {
            "outcome": self.outcome.value if self.outcome else None,
            "stage": self.current_stage, "message": self.message,
            "correctness": [to_dict(c) for c in self.correctness],
            "timings": [to_dict(t) for t in self.timings],
            "flags": [to_dict(f) for f in _unique(self.flags)],
            "coverage": self.coverage,
            "kernel_time_ms": self.kernel_time_ms,
            "environment": self.environment,
            "durations_s": self.durations,
            "worker_poisoned": self.poisoned,
        }


# --------------------------------------------------------------------------------------------------
# Anti-cheat runtime pieces (cudaperf.anticheat), kept behind one small class


class _Guards:
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
        flags = [replace(f, config=f.config or config) for f in tf32.flags()]
        if self.snapshot is not None:
            changed = self.runtime.identity_changed(self.snapshot)
            if changed:
                self.runtime.restore_identities(self.snapshot)
                flags += [replace(f, config=f.config or config) for f in changed]
        return flags

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


def _construct(cls: type, init_inputs: list, device: torch.device) -> torch.nn.Module:
    """`cls(*init_inputs)` with parameters allocated on `device` (the caller seeds torch first, the same
    seed for the reference and the candidate, so their weights match)."""
    with torch.device(device):
        model = cls(*init_inputs)
    return model.to(device)


def _check_constructor(cls: type, init_inputs: list) -> None:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return  # no signature to check: construction itself will tell
    try:
        signature.bind(*init_inputs)
    except TypeError as exc:
        raise _Stop(Outcome.INVALID_SOLUTION, f"ModelNew{signature} cannot take the task's constructor "
                    f"arguments ({len(init_inputs)} positional): {exc}") from None


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _select_device(device: torch.device, job: _Job) -> None:
    if job.cache_dir:
        os.environ["CUDAPERF_CACHE_DIR"] = job.cache_dir
    if job.torch_extensions_dir:
        # The variables the pool built under (TORCH_CUDA_ARCH_LIST too): a different arch list would make
        # ninja rebuild the extension inside the worker instead of loading the prebuilt one.
        from cudaperf.toolchain.inline import worker_env

        os.environ.update(worker_env(job.torch_extensions_dir))
    if device.type == "cuda":
        torch.cuda.set_device(device)


def _set_precision(allow_tf32: bool) -> None:
    """TF32 off for matmul and cuDNN unless the task allows it (pitfall #2 of docs/evaluation.md: cuDNN
    convolutions default to TF32, and a correct fp32 kernel then fails a 1e-4 tolerance)."""
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32


def preload_lazy_modules() -> None:
    """Import what torch loads lazily on first use, before any candidate scope exists: torch._dynamo
    (imported by `torch._compile` wrappers under a dispatch mode; sympy walks frames while loading,
    which the scope refuses), the flop counter and the profiler."""
    for name in ("torch._dynamo", "torch.profiler", "torch.utils.flop_counter"):
        importlib.import_module(name)


def _classify(exc: BaseException, device: torch.device) -> tuple[Outcome, bool]:
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



def _describe(exc: BaseException) -> str:
    """'Type: message' and the tail of the traceback."""
    head = f"{type(exc).__name__}: {exc}"[: MESSAGE_CHARS // 4]
    tail = "".join(traceback.format_exception(exc))[-(MESSAGE_CHARS // 2):]
    return f"{head}\n{tail}"


def _summarize(config: str, results: list[tuple[str, Comparison]], seeds: int) -> ConfigCorrectness:
    failed = [(label, r) for label, r in results if not r.ok]
    comparisons = [r for _, r in results]
    return ConfigCorrectness(
        config=config, correct=not failed, seeds=seeds,
        max_abs_error=_largest(comparisons, "max_abs_error"),
        max_rel_error=_largest(comparisons, "max_rel_error"),
        mismatch_fraction=_largest(comparisons, "mismatch_fraction"),
        message=f"{failed[0][0]}: {failed[0][1].message}" if failed else "",
    )


def _largest(comparisons: list[Comparison], attr: str) -> float | None:
    return max((getattr(c, attr) for c in comparisons if getattr(c, attr) is not None), default=None)


def _unique(flags: list[Flag]) -> list[Flag]:
    seen: set[tuple] = set()
    out = []
    for flag in flags:
        key = (flag.code, flag.config, flag.message)
        if key not in seen:
            seen.add(key)
            out.append(flag)
    return out


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


def _environment(device: torch.device) -> dict[str, str]:
    env = {"torch": torch.__version__, "cuda": str(torch.version.cuda), "python": platform.python_version(),
           "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, capability=f"{props.major}.{props.minor}", driver=_driver_version(),
                   memory_bytes=str(props.total_memory))
    else:
        env.update(gpu="none", driver="none")
    return env
