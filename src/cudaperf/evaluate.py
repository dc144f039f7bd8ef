"""The evaluation recipe: static policy → build (CPU pool) → sandboxed GPU worker → `EvalResult`.

Covers: configuration (`EvalConfig`), the parent-side orchestration of one evaluation and of a batch,
and the final outcome decision (`decide_outcome`). The static verdict (a syntax error, the policy's ERROR
flags, a missing entry point: `anticheat.entry_point`) is decided first, before anything is built, so a
rejected candidate costs milliseconds, not a `load_inline` build of about a minute of CPU. In a batch the
builds of the candidates that pass it are submitted to the CPU pool at once, so compilation overlaps with
GPU work; one thread per GPU worker drains the queue (with `RlSettings.task_affinity`, each bound to its
worker and taking first the candidates of the task that worker ran last, `TaskQueue`); each result is
appended to the store as soon as it
exists, so an interrupted batch loses nothing and resumes. One candidate never ends a batch: an exception
while finishing, storing or showing its result becomes a HARNESS_ERROR row for it (`harness_row`), stored,
and the batch goes on. `EvalConfig.mode="rl"` keeps every check and changes only the schedule (several
workers per GPU, a check pass then a timed pass under a GPU gate, baselines cached per task and
configuration): `cudaperf.eval_modes` says exactly what differs, and does it.

Not covered here: the job sent to a worker and its payload (`cudaperf.jobs`), what runs inside the worker
(`cudaperf.execute.dispatch` and the sessions), how builds work (`cudaperf.toolchain`), the sandbox
(`cudaperf.execute.sandbox`), the anti-cheat rules and which flag codes mean cheating
(`cudaperf.anticheat.policy`). This module never executes candidate code itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, Self

from cudaperf.anticheat.policy import Policy, is_violation
from cudaperf.eval_modes import CachedBaselines, EvalMode, RlScheduler, RlSettings, fill_timings
from cudaperf.jobs import EvalJob, EvalPayload, TimingConfig, job_message, read_payload
from cudaperf.stats import geomean
from cudaperf.types import (
    BuildResult,
    ConfigCorrectness,
    ConfigTiming,
    EvalResult,
    Flag,
    Outcome,
    Severity,
    Solution,
    SolutionFormat,
    Task,
    Timing,
)

__all__ = ["EvalConfig", "EvalMode", "Evaluator", "RlSettings", "TimingConfig", "decide_outcome",
           "default_cache_dir", "harness_row", "self_check_config", "self_check_solution",
           "with_cached_baselines"]


def default_cache_dir() -> Path:
    return Path(os.environ.get("CUDAPERF_CACHE_DIR", Path.home() / ".cache" / "cudaperf"))


@dataclass(frozen=True)
class EvalConfig:
    device: str = "auto"
    """'auto' (a GPU if present, else build + static checks only), 'cuda', 'cpu' (pure-PyTorch candidates,
    tests and CI), or 'none' (never run candidate code: build + static checks, the rest SKIPPED)."""
    gpus: tuple[int, ...] | None = None
    """GPU indices to use, one worker each; None = every visible GPU."""
    seeds: int = 3
    """Public seeds per configuration for correctness; each is mixed with the secret."""
    secret: str | None = None
    """Secret mixed into seeds (hex). None = a fresh random secret per Evaluator."""
    policy: Policy | None = None
    """The anti-cheat policy; None = the strict default `Policy()`."""
    timing: TimingConfig = field(default_factory=TimingConfig)
    coverage: bool = True
    """Measure the share of GPU time spent in the candidate's own kernels (torch profiler)."""
    analyze: bool = True
    """Attach static structural features (ptxas resources, occupancy, coalescing, barriers...) to results
    of solutions that built; pure analysis of the text, the compile is a cache hit."""
    profile: bool = False
    """Optional dynamic stage: Nsight Compute counters for correct candidates (achieved occupancy, sectors
    per request, DRAM throughput, bank conflicts...). Costs seconds per candidate; needs ncu."""
    build_workers: int = 0
    """Processes in the CPU build pool; 0 = one per core."""
    arch: str | None = None
    """Target architecture for builds (e.g. 'sm_90'); None = the first GPU's, or sm_90 without a GPU."""
    cache_dir: str | None = None
    """Content-addressed build cache; None = $CUDAPERF_CACHE_DIR or ~/.cache/cudaperf."""
    max_output_bytes: int | None = None
    """Largest output a candidate may return (a huge output is an error, not an OOM of the harness). None:
    sized per task by the worker from the device's free memory and the task's footprint
    (`execute.memory_plan`); a number caps that further."""
    stage_timeouts_s: dict[str, float] = field(default_factory=dict)
    """Per-stage deadline overrides (stages: setup, reference, import, construct, correctness, timing,
    coverage); unnamed stages use the mode's deadlines (`deadlines_s`)."""
    boundary: bool = True
    """The sandbox's operating-system boundary (`execute.sandbox.Limits.boundary`). Off only to measure
    what it costs (an A/B benchmark); the sandbox logs and records what is then missing."""
    referee: bool = True
    """Judge correctness in a referee process beside each worker, where candidate code never runs
    (`execute.referee`). Off only to measure what it costs, or to show what it catches (a control arm)."""
    shared_c_references_bytes: int = 4 << 30
    """Byte budget of the one store of C reference outputs the referees share (in the evaluator's
    process, out of every worker's reach: `execute.shared_references`), so each (task, configuration,
    seed) is computed once per evaluator, not once per referee; 0: each referee computes its own.
    `Evaluator.reference_store_report` says how many were computed and served."""
    static_policy: bool = True
    """Apply the static source policy (`anticheat.static.check_source`). False only for the self-check,
    whose candidate is the task's own trusted reference (`self_check_config`); a syntax error and a
    missing entry point are still decided statically."""
    static_gate_first: bool = True
    """Decide the static verdict before submitting the build, so a rejected candidate is never built.
    False: every build is submitted up front and the verdict waits for it (the order before issue 18),
    kept only so `benchmarks/build_saving.py` measures both in one run."""
    mode: str = "default"
    """'default' (the full protocol per candidate) or 'rl' (the same checks, scheduled for batches: several
    workers per GPU, baselines cached per task and configuration, ranking budgets; `cudaperf.eval_modes`
    says exactly what differs)."""
    rl: RlSettings = field(default_factory=RlSettings)
    """The RL mode's scheduling; ignored in the default mode."""

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cuda", "cpu", "none"):
            raise ValueError(f"EvalConfig.device={self.device!r}: use 'auto', 'cuda', 'cpu' or 'none'")
        if self.seeds < 1:
            raise ValueError(f"EvalConfig.seeds={self.seeds}: at least one seed is needed")
        if self.device == "cpu" and self.gpus:
            raise ValueError("EvalConfig.device='cpu' with gpus set: drop gpus or use device='cuda'")
        if self.shared_c_references_bytes < 0:
            raise ValueError(f"EvalConfig.shared_c_references_bytes={self.shared_c_references_bytes}: use 0 "
                             "to turn the referees' shared store off, or a positive byte budget")
        if self.mode not in {m.value for m in EvalMode}:
            raise ValueError(f"EvalConfig.mode={self.mode!r}: use 'default' or 'rl'")

    def deadlines_s(self, gpu: bool = False) -> dict[str, float]:
        """The stage deadlines a job runs under, beyond the sandbox's defaults: the RL mode's own
        (`RlSettings.gpu_stage_timeouts_s` where the workers run on a GPU, else `stage_timeouts_s`), then
        `stage_timeouts_s` over them."""
        if self.mode != EvalMode.RL.value:
            return dict(self.stage_timeouts_s)
        own = self.rl.gpu_stage_timeouts_s if gpu else self.rl.stage_timeouts_s
        return {**own, **self.stage_timeouts_s}


def _cuda_devices() -> list[int]:
    try:
        import torch
    except ImportError:
        return []
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def _device_arch(devices: list[int]) -> str:
    if not devices:
        return "sm_90"
    import torch

    major, minor = torch.cuda.get_device_capability(devices[0])
    return f"sm_{major}{minor}"


class Evaluator:
    """Owns a CPU build pool and one sandboxed worker per GPU. Use as a context manager."""

    def __init__(self, config: EvalConfig | None = None):
        self.config = config or EvalConfig()
        self.policy = self.config.policy or Policy()
        self.secret = self.config.secret or secrets.token_hex(16)
        self.cache_dir = Path(self.config.cache_dir) if self.config.cache_dir else default_cache_dir()
        self.mode, self.devices = self._resolve_devices()
        self.arch = self.config.arch or _device_arch(self.devices if self.mode == "cuda" else [])
        self._builds = None
        self._workers = None
        self._rl: RlScheduler | None = None  # the RL mode's schedule (`eval_modes`), made on entering
        self._bound = threading.local()  # `worker`: the pool index this batch thread's jobs run on, if any
        self._last_task: dict[int, str] = {}  # per worker index: the task its last bound job was of

    # -- lifecycle -------------------------------------------------------------------------------
    def _resolve_devices(self) -> tuple[str, list[int]]:
        cfg = self.config
        if cfg.device in ("none", "cpu"):
            return cfg.device, []
        found = _cuda_devices()
        devices = [d for d in (cfg.gpus if cfg.gpus is not None else found) if d in found]
        if devices:
            return "cuda", devices
        if cfg.device == "cuda":
            raise RuntimeError("EvalConfig.device='cuda' but no CUDA GPU is visible; use device='auto'")
        return "none", []

    def __enter__(self) -> Self:
        from cudaperf.host_timing import PROTOCOL_ENV, ensure_lock_file
        from cudaperf.toolchain.pool import BuildPool

        self.cache_dir.mkdir(parents=True, exist_ok=True)
        ensure_lock_file(self.cache_dir)  # the serial-C timing lock, before workers that cannot create it
        self._builds = BuildPool(self.config.build_workers or os.cpu_count() or 1)
        if self.mode in ("cuda", "cpu"):
            from cudaperf.execute.sandbox import Limits, WorkerPool

            # The cache named from the start: each worker's view covers it, so no worker restarts on
            # its first job to widen its view. The baseline protocol's switch reaches the workers.
            limits = Limits(cache_dir=str(self.cache_dir), boundary=self.config.boundary,
                            referee=self.config.referee, env_allow=(PROTOCOL_ENV,),
                            shared_c_references_bytes=self.config.shared_c_references_bytes)
            self._workers = WorkerPool(self._worker_devices(), limits)
        if self.config.mode == EvalMode.RL.value:
            # a CPU-mode worker cannot time the naive CUDA port, so its copies would have no timings to take
            settings = dataclasses.replace(self.config.rl,
                                           anchor_copies=self.config.rl.anchor_copies and self.mode == "cuda")
            self._rl = RlScheduler(self._finish_with, with_cached_baselines, self.config.timing, settings,
                                   one_pass=self.config.referee)
        return self

    def _worker_devices(self) -> list[int | None] | None:
        """One worker per GPU (None: one CPU-mode worker); in the RL mode `RlSettings` says how many."""
        rl = self.config.rl if self.config.mode == EvalMode.RL.value else None
        if self.mode == "cuda":
            return [d for d in self.devices for _ in range(rl.workers_per_gpu if rl else 1)]
        return [None] * rl.cpu_workers if rl else None

    def gate_states(self) -> dict[str, float] | None:
        """The RL mode's GPU gate: the wall seconds it spent in each of its states so far
        (`eval_modes.GpuGate.states`); None in the default mode, which has no gate."""
        return self._rl.gate.states() if self._rl is not None else None

    def timing_paused(self) -> contextlib.AbstractContextManager[None] | None:
        """The RL mode's GPU gate lent to work outside the evaluator (`GpuGate.paused`: the policy's
        generation): while held, no timed pass starts and checks go on. None in the default mode, which
        has no gate: nothing there keeps its timing off a GPU in use."""
        return self._rl.gate.paused() if self._rl is not None else None

    @property
    def mode_report(self) -> dict[str, Any]:
        """What the evaluation mode's schedule did (the RL mode: passes, carriers, gate waits, baseline
        drift); empty in the default mode."""
        return self._rl.report() if self._rl is not None else {}

    def activity(self) -> tuple[str, ...]:
        """Where the evaluator's jobs are now, one line each: every worker's job and stage and how long
        it has been there (`WorkerPool.activity`), and the RL mode's gate and carriers
        (`RlScheduler.describe`). For a batch that stalls (`agent.evaluation.ReportingEvaluator`)."""
        workers, rl = self._workers, self._rl
        lines = workers.activity() if workers is not None else ()
        return lines + ((rl.describe(),) if rl is not None else ())

    @property
    def reference_store_report(self) -> dict[str, int]:
        """The referees' shared store of C references over the evaluator's life: references computed
        for it, served from it, waits for another referee's computation, evictions (`WorkerPool.
        reference_store_report`); empty without one."""
        return self._workers.reference_store_report() if self._workers is not None else {}

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._workers is not None:
            self._workers.close()
            self._workers = None
        if self._builds is not None:
            self._builds.close()
            self._builds = None

    # -- one evaluation --------------------------------------------------------------------------
    def evaluate(self, task: Task, solution: Solution) -> EvalResult:
        """Evaluate one solution. Never raises for a fault of the candidate."""
        self._require_open()
        start = self._static(task, solution)
        if start.rejection is not None and self.config.static_gate_first:
            return start.rejection
        finish = self._rl.finish if self._rl is not None else self._finish
        return finish(task, solution, start, self._submit_build(solution))

    def _require_open(self) -> None:
        if self._builds is None:
            raise RuntimeError("Evaluator used outside its context: use `with Evaluator(...) as ev:`")

    def _static(self, task: Task, solution: Solution) -> _Start:
        """The static verdict, before any build: the policy's flags, and the rejection if there is one."""
        started = time.perf_counter()
        flags = self._static_flags(solution)
        start = _Start(task.task_id, solution.solution_id, _now(), flags, {})
        rejection = _static_rejection(start, task, solution)
        start.durations["static"] = time.perf_counter() - started
        return dataclasses.replace(start, rejection=rejection)

    def _submit_build(self, solution: Solution) -> _Submitted:
        """The build, and the structural analysis beside it in the pool (off this thread, which would
        otherwise hold the worker idle and the process's GIL while it parses: ~60 ms a candidate)."""
        self._require_open()
        if solution.format is SolutionFormat.PYTORCH:
            return _Submitted(None, None)
        build = self._builds.submit(solution, arch=self.arch, cache_dir=str(self.cache_dir))
        analyze = _analyzer()[0] if self.config.analyze else None
        analysis = (self._builds.submit_call(analyze, solution.source, arch=self.arch, sass=False)
                    if analyze is not None else None)
        return _Submitted(build, analysis)

    def _finish(self, task: Task, solution: Solution, start: _Start, submitted: _Submitted,
                timing: TimingConfig | None = None, hold: Callable | None = None,
                on_proceed: Callable[[], TimingConfig | None] | None = None,
                on_checked: Callable[[], None] | None = None,
                on_result: Callable[[], None] | None = None) -> EvalResult:
        """The recipe once the static verdict is known and the build submitted: build, worker, features.
        `timing` replaces the configuration's for this job; `hold()`, a context manager, is held around
        the worker's run; `on_checked()` is called when the referee finds the candidate correct,
        `on_proceed()` before the candidate can be timed (a `TimingConfig` it returns narrows `timing`)
        and `on_result()` once the worker's result is in (`execute.sandbox.Worker.run`); all for an
        evaluation mode's schedule, `eval_modes`."""
        if start.rejection is not None:  # only with static_gate_first off: the build ran for nothing
            build = self._wait_build(submitted.build, start.durations)
            return dataclasses.replace(start.rejection, build=build)
        build = self._wait_build(submitted.build, start.durations)
        if build is not None and not build.ok and build.outcome is not Outcome.SKIPPED:
            return start.result(build.outcome, "build", build.message, build=build, logs=build.log)
        if self._workers is None:
            skipped = start.result(Outcome.SKIPPED, "execute", self._skip_reason(), build=build)
            return self._with_features(task, solution, skipped, submitted.analysis)
        with hold() if hold is not None else contextlib.nullcontext():
            ran = self._run_in_worker(task, solution, build, start, timing, on_proceed, on_checked, on_result)
        return self._with_features(task, solution, with_native_timing_note(solution, ran), submitted.analysis)

    def _finish_with(self, task: Task, solution: Solution, start: _Start, submitted: _Submitted,
                     timing: TimingConfig, hold: Callable,
                     on_proceed: Callable[[], TimingConfig | None] | None = None,
                     on_checked: Callable[[], None] | None = None,
                     on_result: Callable[[], None] | None = None) -> EvalResult:
        """`_finish` for an evaluation mode's schedule (`eval_modes.Finish`): on a copy of `start`'s
        durations, so one evaluation may reach a worker more than once."""
        start = dataclasses.replace(start, durations=dict(start.durations))
        return self._finish(task, solution, start, submitted, timing, hold, on_proceed, on_checked,
                            on_result)

    def _skip_reason(self) -> str:
        why = "no CUDA GPU on this machine" if self.config.device != "none" else "EvalConfig.device='none'"
        return f"{why}: build, static checks and structural analysis ran; correctness and timing skipped"

    def _with_features(self, task: Task, solution: Solution, result: EvalResult,
                       analysis: Future | None = None) -> EvalResult:
        """Static features for every result that got past the build (from `analysis`, the pool's run of
        the analysis, when there is one); ncu counters for correct ones."""
        if not self.config.analyze or solution.format is SolutionFormat.PYTORCH:
            return result
        t0 = time.perf_counter()
        analyze, missing = _analyzer()
        if analyze is None:  # without the `analysis` extra the result stands, with a note saying why
            note = Flag("analysis_note", f"structural analysis unavailable ({missing}); "
                        "install cudaperf[analysis]", Severity.INFO)
            return dataclasses.replace(result, flags=result.flags + (note,))
        report = _analysis_result(analysis) or analyze(solution.source, arch=self.arch, sass=False)
        features, notes = tuple(report.kernels), tuple(report.diagnostics)
        if self.config.profile and result.correct and self.mode == "cuda":
            from cudaperf.analysis.dynamic import profile_features

            features, more = profile_features(task, solution, features)
            notes += more
        flags = result.flags + tuple(Flag("analysis_note", n[:300], Severity.INFO) for n in notes[:5])
        durations = {**result.stage_durations_s, "analysis": time.perf_counter() - t0}
        return dataclasses.replace(result, features=features, flags=flags, stage_durations_s=durations)

    def _static_flags(self, solution: Solution) -> tuple[Flag, ...]:
        from cudaperf.anticheat.static import check_source

        flags = tuple(check_source(solution.source, self.policy))
        return flags if self.config.static_policy else tuple(f for f in flags if f.code == "syntax_error")

    @staticmethod
    def _wait_build(future: Future | None, durations: dict[str, float]) -> BuildResult | None:
        if future is None:
            return None
        t0 = time.perf_counter()
        build = future.result()
        durations["build_wait"] = time.perf_counter() - t0
        durations["build"] = build.duration_s
        return build

    def _job(self, task: Task, solution: Solution, timing: TimingConfig | None = None) -> EvalJob:
        from cudaperf.toolchain.inline import extensions_dir_for

        inline = solution.format is SolutionFormat.INLINE
        return EvalJob(
            task=task, solution=solution, device="cpu" if self.mode == "cpu" else "cuda:0",
            # The same public seeds for every job of this Evaluator, so the worker can reuse reference
            # outputs per (task, config, seed); candidates still cannot predict inputs (secret mixed in).
            seeds=tuple(range(1, self.config.seeds + 1)),
            policy=self.policy, timing=timing or self.config.timing,
            coverage=self.config.coverage and self.mode == "cuda",
            max_output_bytes=self.config.max_output_bytes, cache_dir=str(self.cache_dir),
            torch_extensions_dir=str(extensions_dir_for(solution, self.cache_dir)) if inline else None,
            unseen_nonce=secrets.randbits(40),  # unseen input sets of this job alone (`EvalJob.unseen_nonce`)
        )

    def _run_in_worker(self, task: Task, solution: Solution, build: BuildResult | None,
                       start: _Start, timing: TimingConfig | None = None,
                       on_proceed: Callable[[], TimingConfig | None] | None = None,
                       on_checked: Callable[[], None] | None = None,
                       on_result: Callable[[], None] | None = None) -> EvalResult:
        from cudaperf.execute.sandbox import StageTimeouts

        timeouts = StageTimeouts.from_overrides(self.config.deadlines_s(gpu=self.mode == "cuda"))
        message = job_message(self._job(task, solution, timing), self.secret)
        index = getattr(self._bound, "worker", None)
        if index is None:
            reply = self._workers.run(message, timeouts, on_proceed, on_checked, on_result)
        else:
            reply = self._workers.run_on(index, message, timeouts, on_proceed, on_checked, on_result)
        start.durations.update(reply.durations_s or {})
        return _from_worker(start, reply, read_payload(reply.payload), build)

    # -- many evaluations ------------------------------------------------------------------------
    def evaluate_many(self, pairs: Iterable[tuple[Task, Solution]], store=None, progress: bool = False,
                      deadline_s: float | None = None) -> Iterator[EvalResult]:
        """Evaluate pairs; builds overlap with GPU work; results stream out (and into `store`) as they
        finish. Pairs already in `store` are skipped (resume). A candidate rejected by the static verdict
        is never built; a fault while finishing, storing or showing one result becomes a HARNESS_ERROR
        row for that candidate (stored), and the batch goes on. `deadline_s`: no evaluation starts after
        that many seconds; the pairs not started yield nothing and are not stored (a resume runs them).
        `pairs` is read as it arrives, by a thread of its own: an iterable that hands its pairs over time
        (the RL rollout's answers as the policy finishes each) has each one queued, its build started, on
        arrival, and results come out before it ends; the batch ends when it has ended and every pair it
        gave has its result. An exception raised by the iterable is raised here once the pairs it gave
        before are done."""
        stop_at = None if deadline_s is None else time.monotonic() + deadline_s
        done = store.done() if store is not None else set()
        fresh: Iterable[tuple[Task, Solution]] = (
            (t, s) for t, s in pairs if (t.task_id, s.solution_id) not in done)
        total = None  # an iterable's size is not known before it ends
        if isinstance(pairs, (list, tuple)):
            fresh = list(fresh)
            total = len(fresh)
        jobs = TaskQueue()
        results: queue.Queue = queue.Queue()
        n_threads = self._workers.size if self._workers is not None else 1  # one per worker
        bound = self._task_affinity()  # thread i on worker i, preferring the task that worker ran last
        threads = [threading.Thread(target=self._drain, args=(jobs, results, stop_at, i if bound else None),
                                    daemon=True) for i in range(n_threads)]
        feed = _Feed(iter(fresh), self._queue_one, jobs, results)
        feeder = threading.Thread(target=feed.run, daemon=True, name="cudaperf-eval-feed")
        feeder.start()  # builds submitted as pairs arrive: the CPU pool runs ahead of the GPUs
        for th in threads:
            th.start()
        try:
            with ProgressBar(progress, total) as advance:
                for result in feed.results():
                    if result is not None:  # None: a pair left unstarted at the deadline
                        yield deliver(result, store, advance)
        finally:
            jobs.close()  # a consumer that leaves early lets the drain threads end with the queue
        for th in threads:
            th.join()
        if feed.error is not None:
            raise feed.error

    def _task_affinity(self) -> bool:
        return (self._rl is not None and self._rl.settings.task_affinity and self._workers is not None
                and self._workers.size > 1)

    def _queue_one(self, task: Task, sol: Solution, jobs: TaskQueue) -> EvalResult | None:
        """Queue one pair for the drain threads with its build submitted; or its result, when the static
        verdict decided it (never built) or the harness failed on it."""
        try:
            start = self._static(task, sol)
            if start.rejection is not None and self.config.static_gate_first:
                return _with_total(start.rejection, start.durations["static"])
            jobs.put((task, sol, start, self._submit_build(sol)))
            return None
        except Exception as exc:  # noqa: BLE001 - a harness fault must not lose the pair: record it
            return harness_row(EvalResult(task.task_id, sol.solution_id, Outcome.HARNESS_ERROR), "queueing",
                               exc)

    def _drain(self, jobs: TaskQueue, results: queue.Queue, stop_at: float | None = None,
               worker: int | None = None) -> None:
        """Finish queued pairs, oldest first, until none is left; with `worker` (`RlSettings.task_affinity`)
        every job on that worker, taking first the pairs of the task it ran last (its referee holds that
        task's references, its session the task's timing references). Every pair taken puts exactly one
        item in `results` (its row, or None when the deadline left it unstarted): the caller waits for as
        many as it queued, so a fault here becomes the pair's HARNESS_ERROR row rather than a batch that
        never ends."""
        self._bound.worker = worker
        try:
            while (item := jobs.take(self._last_task.get(worker))) is not None:
                if worker is not None:
                    self._last_task[worker] = item[0].task_id
                results.put(self._finish_queued(item, stop_at))
        finally:
            self._bound.worker = None

    def _finish_queued(self, item: tuple, stop_at: float | None) -> EvalResult | None:
        """One queued pair's row (None: left unstarted at the deadline); never raises (see `_drain`)."""
        task, sol, start, submitted = item
        try:
            if stop_at is not None and time.monotonic() > stop_at:
                submitted.cancel()
                return None
            return self._finish_safely(task, sol, start, submitted)
        except Exception as exc:  # noqa: BLE001 - see `_drain`
            return harness_row(start.result(Outcome.HARNESS_ERROR, "harness", ""), "draining", exc)

    def _finish_safely(self, task: Task, sol: Solution, start: _Start, submitted: _Submitted) -> EvalResult:
        """`_finish`, with a harness fault turned into the pair's HARNESS_ERROR row, and the wall time of
        the whole evaluation (build wait included) as `stage_durations_s["total"]`."""
        t0 = time.perf_counter()
        finish = self._rl.finish if self._rl is not None else self._finish
        try:
            result = finish(task, sol, start, submitted)
        except Exception as exc:  # noqa: BLE001 - a harness fault must not lose the pair: record it
            result = harness_row(start.result(Outcome.HARNESS_ERROR, "harness", ""), "finishing", exc)
        return _with_total(result, time.perf_counter() - t0 + result.stage_durations_s.get("static", 0.0))


class TaskQueue:
    """A batch's queued pairs: `put` one; `take(task_id)` the oldest pair of that task (a batch thread
    bound to a worker, `RlSettings.task_affinity`), else the oldest of any, waiting while the queue is
    empty and open; None once it is empty and `close`d (no more pairs will come)."""

    def __init__(self) -> None:
        self._items: list[tuple] = []
        self._state = threading.Condition()
        self._closed = False

    def put(self, item: tuple) -> None:
        with self._state:
            self._items.append(item)
            self._state.notify()

    def close(self) -> None:
        with self._state:
            self._closed = True
            self._state.notify_all()

    def take(self, task_id: str | None) -> tuple | None:
        with self._state:
            self._state.wait_for(lambda: self._items or self._closed)
            if not self._items:
                return None
            at = next((i for i, item in enumerate(self._items) if item[0].task_id == task_id), 0)
            return self._items.pop(at)


_FED = object()
"""`_Feed`'s mark in the results queue: every pair has been read from the iterable."""


class _Feed:
    """Reads a batch's pairs as they arrive (`run`, in a thread of its own): each queued for the drain
    threads with its build submitted, or its decided result (`queue_one`'s) put straight into `results`;
    then closes the queue. `results()` yields every pair's row (or None, unstarted at the deadline) until
    the last pair read has one. Every pair read puts exactly one item in `results` (see `_drain`)."""

    def __init__(self, pairs: Iterator[tuple[Task, Solution]], queue_one: Callable[..., EvalResult | None],
                 jobs: "TaskQueue", results: queue.Queue) -> None:
        self.pairs, self.queue_one, self.jobs, self.out = pairs, queue_one, jobs, results
        self.read = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for task, sol in self.pairs:
                decided = self.queue_one(task, sol, self.jobs)
                self.read += 1  # after: a pair `queue_one` raised on has no row to wait for
                if decided is not None:
                    self.out.put(decided)
        except BaseException as exc:  # noqa: BLE001 - raised in the consumer's thread (`evaluate_many`)
            self.error = exc
        finally:
            self.jobs.close()
            self.out.put(_FED)

    def results(self) -> Iterator[EvalResult | None]:
        got, fed = 0, False
        while not fed or got < self.read:
            item = self.out.get()
            if item is _FED:
                fed = True
            else:
                got += 1
                yield item


def deliver(result: EvalResult, store, advance: Callable[[EvalResult], None]) -> EvalResult:
    """Store one result and advance the progress bar; a failure of either becomes the pair's HARNESS_ERROR
    row, stored in its place (a resume evaluates it again). For every batch entry point (this module's
    `Evaluator.evaluate_many`, the Ray pool's)."""
    for what, step in (("storing", store.append if store is not None else None), ("progress", advance)):
        if step is None:
            continue
        try:
            step(result)
        except Exception as exc:  # noqa: BLE001 - one result must not end the batch
            result = harness_row(result, what, exc)
            store_quietly(store, result)
    return result


def harness_row(result: EvalResult, during: str, exc: BaseException) -> EvalResult:
    """The HARNESS_ERROR row of a pair whose result could not be finished, stored or shown: the ids,
    timestamp and durations kept, the rest dropped (it may be what failed), the error and the outcome
    it replaces in the message."""
    was = f" (the result was {result.outcome.value})" if result.outcome is not Outcome.HARNESS_ERROR else ""
    message = f"{during} the result failed{was}: {type(exc).__name__}: {exc}"[:2000]
    return EvalResult(task_id=result.task_id, solution_id=result.solution_id, outcome=Outcome.HARNESS_ERROR,
                      stage="harness", message=message, created_at=result.created_at or _now(),
                      stage_durations_s=_finite_durations(result.stage_durations_s))


def store_quietly(store, result: EvalResult) -> bool:
    """Append `result` to `store` (if any); False, with a line on stderr, when even that fails."""
    if store is None:
        return True
    try:
        store.append(result)
        return True
    except Exception as exc:  # noqa: BLE001 - nothing else can be done for this row: say so, go on
        print(f"cudaperf: could not store {result.task_id}/{result.solution_id}: {exc!r}", file=sys.stderr)
        return False


def _with_total(result: EvalResult, seconds: float) -> EvalResult:
    return dataclasses.replace(result, stage_durations_s={**result.stage_durations_s, "total": seconds})


def _finite_durations(durations: Any) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in dict(durations).items()}
    except (TypeError, ValueError):
        return {}


SELF_CHECK_ID = "self-check"
SELF_CHECK_WRAPPER = """

# cudaperf self-check: the task's own reference is the candidate.
class ModelNew(Model):
    pass
"""


def self_check_solution(task: Task) -> Solution:
    """The task's own reference as its candidate: the task's source with `class ModelNew(Model)` added,
    so the candidate builds, seeds and randomises as the reference does (`cudaperf eval --self-check`)."""
    return Solution(solution_id=f"{SELF_CHECK_ID}/{task.task_id}", source=task.source + SELF_CHECK_WRAPPER,
                    format=SolutionFormat.PYTORCH, path=task.path)


def self_check_config(**overrides: Any) -> EvalConfig:
    """The configuration of a self-check: everything as in a real evaluation (derived configurations,
    correctness, timing) except the source policy and the torch-op monitor (the candidate IS torch code:
    `Policy(allow_torch_ops=True)`, `static_policy=False`), coverage (no kernels of its own) and
    structural analysis (no CUDA); timing against eager only unless `timing` says otherwise."""
    settings: dict[str, Any] = {"policy": Policy(allow_torch_ops=True), "static_policy": False,
                                "coverage": False, "analyze": False,
                                "timing": TimingConfig(baselines=("eager",))}
    return EvalConfig(**{**settings, **overrides})


def decide_outcome(worker_outcome: Outcome | None, message: str,
                   correctness: tuple[ConfigCorrectness, ...],
                   flags: tuple[Flag, ...]) -> tuple[Outcome, str]:
    """The final outcome: a fault reported by the worker wins; then error flags; then correctness."""
    if worker_outcome is not None and worker_outcome is not Outcome.CORRECT:
        return worker_outcome, message
    errors = [f for f in flags if f.severity is Severity.ERROR]
    policy = [f for f in errors if is_violation(f.code)]
    if policy:
        return Outcome.POLICY_VIOLATION, "; ".join(f"{f.code}: {f.message}" for f in policy)
    if not correctness:
        return Outcome.HARNESS_ERROR, message or "the worker returned no correctness result"
    wrong = [c for c in correctness if not c.correct]
    if wrong or errors:
        parts = [f"{c.config}: {c.message}" for c in wrong] + [f"{f.code}: {f.message}" for f in errors]
        return Outcome.INCORRECT, "; ".join(parts)
    return Outcome.CORRECT, message


@dataclass(frozen=True)
class _Start:
    """What every result of one evaluation carries, fixed as it starts. `result` is the one builder of
    its `EvalResult`, whichever stage ends the evaluation."""

    task_id: str
    solution_id: str
    created_at: str
    static_flags: tuple[Flag, ...]
    durations: dict[str, float]  # stage -> seconds, filled in as the stages run
    rejection: EvalResult | None = None  # the static verdict's result, when it rejects the candidate

    def result(self, outcome: Outcome, stage: str, message: str, *, more_flags: tuple[Flag, ...] = (),
               **fields: Any) -> EvalResult:
        return EvalResult(task_id=self.task_id, solution_id=self.solution_id, outcome=outcome, stage=stage,
                          message=message, flags=self.static_flags + more_flags,
                          stage_durations_s=self.durations, created_at=self.created_at, **fields)


def _static_rejection(start: _Start, task: Task, solution: Solution) -> EvalResult | None:
    """The result of a candidate the static verdict rejects (stage "static"), or None: a syntax error, then
    the policy's ERROR flags (cheating), then a missing entry point (empty file, no ModelNew)."""
    from cudaperf.anticheat.entry_point import entry_point_problem

    syntax = next((f for f in start.static_flags if f.code == "syntax_error"), None)
    if syntax is not None:
        return start.result(Outcome.SYNTAX_ERROR, "static", syntax.message)
    errors = [f for f in start.static_flags if f.severity is Severity.ERROR]
    if errors:
        return start.result(Outcome.POLICY_VIOLATION, "static", _static_message(errors))
    missing = entry_point_problem(solution.source, task)
    if missing:
        return start.result(Outcome.INVALID_SOLUTION, "static", missing)
    return None


def _static_message(errors: list[Flag]) -> str:
    return "; ".join(f"line {f.line}: {f.message}" if f.line else f.message for f in errors)


def _from_worker(start: _Start, reply: Any, payload: EvalPayload, build: BuildResult | None) -> EvalResult:
    """The result of an evaluation that reached the worker. `reply` is the sandbox's `WorkerReply`: its
    outcome covers faults the payload cannot report (timeouts, crashes); a payload that did not parse
    carries its own HARNESS_ERROR (`jobs.read_payload`)."""
    worker_flags = payload.flags + tuple(reply.flags or ())
    worker_outcome = reply.outcome if reply.outcome is not None else payload.outcome
    outcome, message = decide_outcome(worker_outcome, reply.message or payload.message, payload.correctness,
                                      start.static_flags + worker_flags)
    timings = _with_extra_baselines(payload.timings, payload.extra_baselines)
    return start.result(
        outcome, reply.stage, message, more_flags=worker_flags, build=build, logs=reply.logs or "",
        correctness=payload.correctness, timings=timings,
        speedup_vs_eager=geomean(t.speedup_vs_eager for t in timings),
        speedup_vs_compile=geomean(t.speedup_vs_compile for t in timings),
        speedups=speedups_by_baseline(timings),
        coverage=payload.coverage, kernel_time_ms=payload.kernel_time_ms, environment=payload.environment,
    )


NATIVE_TIMING_NOTE = ("its host code is native (a load_inline extension, or a C entry point): its timings "
                      "were measured in its own process, where native code could change them; the referee "
                      "verifies correctness, not timings")
NATIVE_HOST_FORMATS = frozenset({SolutionFormat.INLINE, SolutionFormat.CUDA_C})


def with_native_timing_note(solution: Solution, result: EvalResult) -> EvalResult:
    """A timed result of a candidate with native host code (`load_inline`, or a C task's entry point) with
    `timing_unverified` (INFO) said: a reward can gate on it (`RewardConfig.gate_flag_codes`) where
    candidates are not trusted (dev/LOG.md, open questions)."""
    if solution.format not in NATIVE_HOST_FORMATS or not result.timings:
        return result
    return dataclasses.replace(result, flags=result.flags + (Flag("timing_unverified", NATIVE_TIMING_NOTE,
                                                                  Severity.INFO),))


def with_cached_baselines(result: EvalResult, cached: dict[str, CachedBaselines]) -> EvalResult:
    """`result` with baselines timed earlier in its configurations' timings (the RL mode's cache,
    `eval_modes.BaselineCache`) and its speedups computed again from them."""
    timings = fill_timings(result.timings, cached)
    return dataclasses.replace(
        result, timings=timings, speedup_vs_eager=geomean(t.speedup_vs_eager for t in timings),
        speedup_vs_compile=geomean(t.speedup_vs_compile for t in timings),
        speedups=speedups_by_baseline(timings))


def _with_extra_baselines(timings: tuple[ConfigTiming, ...],
                          extra: dict[str, dict[str, Timing]]) -> tuple[ConfigTiming, ...]:
    """Baselines the worker reported beside the timings (C tasks: serial_c, naive_cuda) moved into
    `ConfigTiming.baselines`."""
    out = []
    for t in timings:
        more = {name: timing for name, timing in (extra.get(t.config) or {}).items() if timing is not None}
        out.append(dataclasses.replace(t, baselines={**t.baselines, **more}) if more else t)
    return tuple(out)


def speedups_by_baseline(timings: tuple[ConfigTiming, ...]) -> dict[str, float]:
    """Each baseline's speedup, the geometric mean over the configurations that timed it."""
    names = {"eager", "compile"} | {n for t in timings for n in t.baselines}
    means = {n: geomean(t.speedup(n) for t in timings) for n in sorted(names)}
    return {n: v for n, v in means.items() if v is not None}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ProgressBar:
    """A rich progress bar (or nothing), advanced once per finished result: `with ProgressBar(...) as
    advance: advance(result)`. `describe(result)` is the text beside the bar (default: the pair and its
    outcome); `label` names the batch; `total` None: a batch whose size is not known in advance."""

    def __init__(self, enabled: bool, total: int | None, label: str = "eval",
                 describe: Callable[[EvalResult], str] | None = None):
        self.enabled, self.total, self.label, self._bar = enabled, total, label, None
        self.describe = describe or (lambda r: f"{r.task_id}/{r.solution_id}: {r.outcome.value}")

    def __enter__(self) -> Callable[[EvalResult], None]:
        if not self.enabled:
            return lambda result: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._bar = Progress(TextColumn(f"[bold]{self.label}"), BarColumn(), MofNCompleteColumn(),
                             TimeRemainingColumn(), TextColumn("{task.description}"))
        self._bar.start()
        tid = self._bar.add_task("", total=self.total)
        return lambda result: self._bar.update(tid, advance=1, description=self.describe(result))

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


class _Submitted(NamedTuple):
    """What `Evaluator._submit_build` started for one solution: its build and its structural analysis
    (each None when it does not apply)."""

    build: Future | None
    analysis: Future | None

    def cancel(self) -> None:
        for future in (self.build, self.analysis):
            if future is not None:
                future.cancel()


def _analyzer() -> tuple[Callable[..., Any] | None, str]:
    """(`analyze_source`, ""), or (None, why) without the `analysis` extra (tree-sitter)."""
    try:
        from cudaperf.analysis import analyze_source
    except ImportError as exc:
        return None, str(exc)
    return analyze_source, ""


def _analysis_result(future: Future | None) -> Any:
    """The pool's analysis report, or None (none started, or it failed: the caller analyses here)."""
    if future is None:
        return None
    try:
        return future.result()
    except Exception:  # noqa: BLE001 - a broken pool or a crash there: analysed again in this thread
        return None
