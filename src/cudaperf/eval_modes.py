"""Evaluation modes: "default" (the full protocol, one candidate at a time per GPU) and "rl" (the same
checks, scheduled for batches of many candidates: agent turns and RL rollouts).

What the RL mode changes, and only this (`EvalConfig(mode="rl")`, `RlSettings`):
1. Workers: `workers_per_gpu` sandboxed workers (each with its referee) share each GPU, `cpu_workers` in
   CPU mode, instead of one; a batch is drained by one thread per worker.
2. One job per candidate, its GPU use gated. Correctness (static policy, build, correctness on every
   configuration and seed, the runtime guards, the referee's verdict, coverage) runs in several workers
   at once, each job holding the GPU gate *shared*; after the referee's "all correct" answer the worker
   does its timing stage's host work and says it is ready to time, and the parent's answer to that,
   which the worker waits for, is held back until the job holds the gate *exclusively*
   (`execute.sandbox.Worker.run`'s `on_proceed`, `GateTurn`), so nothing else runs on the
   GPUs while a candidate is timed (the timing stage's own checks run as in the default mode). The job
   leaves the gate after the referee's verdict, or, with `RlSettings.release_at_result`, as the worker's
   result comes in (`on_result`). The baselines' plan (point 3) is made at that go-ahead, outside the
   gate, waiting while a carrier of the task is in flight (`plan_wait` in `stage_durations_s`), and it
   travels with the answer: the job is sent with the whole timing and the answer can only narrow it
   (`jobs.narrowed_timing`, which the referee holds the timings to as well), so a candidate whose task
   has a carrier in flight runs its checks meanwhile and waits for the carrier only before timing; with
   `RlSettings.plan_at_go_ahead=False` the plan is made before the job instead. A candidate that is not
   correct is never timed. Without a referee (`EvalConfig.referee=False`) there is
   no go-ahead to hold back, and each candidate takes two passes instead: the check pass with timing off
   (shared), then, if correct, the whole job again with timing on (exclusive); its verdict is the result
   and `environment["rl_check_outcome"]` keeps a differing first one.
3. Baselines timed once per (task, configuration) per run, not per candidate. The first candidate of a
   task to be planned (before its job or its timed pass; with `plan_at_go_ahead`, at its go-ahead) is its
   carrier: its timed pass times every baseline interleaved with it, with the default budget, exactly as
   the default mode does, and `BaselineCache` keeps them. Later candidates of the task
   are anchored: they time themselves and the cheap baseline, the anchor (eager; the naive CUDA port for
   C tasks), interleaved, with the ranking budget (`budget_ms`, `warmup_ms`); the costly baselines
   (torch.compile, serial C) come from the cache into their `ConfigTiming` (`environment["baselines"]`
   says which were live and which cached). So the speedup against the anchor is measured live, as in the
   default mode, and the anchor's drift is watched on every candidate, like with like: the first
   anchored candidate after a carrier sets the task's live reference (its anchor's median per
   configuration, under the ranking budget; its ratio to the carrier's median, the two protocols'
   offset, is recorded in `BaselineCache.anchor_offset`), and each later one's anchor is compared with
   that reference; when the median over the task's configurations of those ratios is past
   `drift_tolerance` on the same side for two anchored candidates in a row (one alone is within the
   ranking budget's spread between candidates: ~10% on small configurations), the task's next timed
   candidate is a carrier again, as is every `drift_every`-th one and the first after
   `drift_max_age_s`; a carrier's fresh medians replace the cached ones and their ratios are recorded
   (`BaselineCache.drift`, and `live_drift` for the anchors). Why not the carrier's own anchor median:
   the anchor timed by the two protocols differs by more than the tolerance on small configurations (on
   the H200, session 20: ratios 0.70 to 1.44; 32 of 47 anchored candidates past it), so about every
   other timed candidate of a task would have carried.
4. The ranking budget: fewer samples per candidate (the bench's minimum is 10 rounds), and no empty
   function timed beside them (`TimingConfig.overhead` off: one call fewer per round, `overhead_ms` None;
   it is shown beside the times, never subtracted, so no figure changes). The 95% confidence interval of a
   median is about +-1.57 IQR / sqrt(n) (`median_ci95_rel`); the benchmark (`benchmarks/eval_modes.py`)
   reports its width per mode.
5. Deadlines: the stages that run candidate code (import, construct, correctness, timing, coverage,
   cleanup) end after a minute or two (`RL_STAGE_TIMEOUTS_S`; on a GPU the correctness stage after 15 s,
   `RL_GPU_STAGE_TIMEOUTS_S`), not the sandbox's minutes, since a batch waits for its slowest candidate
   and a spinning one holds the gate.
6. A C candidate at least `slow_cut_ratio` (10) times slower than the naive port over the bench's estimate
   rounds, and at least `slow_cut_floor_ms` (100 ms) a call, is timed from those rounds alone when it is
   anchored (never a carrier): no warm-up, no further round, no timing re-check (`timing.SlowCut`, INFO
   `timing_cut_slow`). Its speedup is then under 0.1, which every reward preset scores as it scores a
   kernel a few times faster, and what is cut short is recorded that slow, so nothing is gained by it.
7. A C candidate that is its task's naive CUDA port, docstrings aside (`anchor_copies`), is checked as any
   other and takes the port's live timings from the task's last timed pass instead of a timed pass of its
   own (the first copy of a task with none is timed, and its timings become the port's): its speedup
   against the port is 1.0 and the INFO flag `anchor_copy` says so (`RlSettings.anchor_copies`).
Nothing else differs: no check, tolerance, seed or stage is skipped or loosened (a copy of point 7 is the
port's own program, timed once per task rather than once per copy); a candidate that is not correct is
never timed, in either mode.

Covers: `EvalMode`, `RlSettings`, the gate (`GpuGate`, a readers-writer lock with a turnstile so timing is
never starved by a stream of checks), the cache of baselines and its drift records (`BaselineCache`), and
the per-candidate schedule (`RlScheduler.finish`), which the evaluator calls in place of its own finish.

Not covered: the evaluation itself (`cudaperf.evaluate`: the scheduler is handed its `finish` and the
function that writes cached baselines into a result), what runs in a worker (`cudaperf.execute`). One
gate serves every GPU of the evaluator (a timed pass on one GPU pauses the checks on the others: the pool
does not say which GPU a job gets before it runs), and it is the evaluator's own: another process
evaluating on the same GPU is not held off. Workers sharing a GPU each size their memory plan from
the free memory they see, not from a share of it: a task whose footprint is near the GPU's size should be
evaluated with `workers_per_gpu=1`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import math
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from cudaperf import jobs
from cudaperf.anchor_copies import AnchorTimings, anchor_timings, copies_anchor
from cudaperf.jobs import TimingConfig
from cudaperf.stats import geomean
from cudaperf.types import ConfigTiming, EvalResult, Flag, Outcome, Severity, Task, TaskKind, Timing

__all__ = ["BaselineCache", "BaselineDrift", "CachedBaselines", "EvalMode", "GpuGate", "RlScheduler",
           "RlSettings", "TimingPlan", "drift_figures", "fill_timings", "median_ci95_rel", "through_anchor",
           "timed_baselines"]


class EvalMode(str, Enum):
    """How a batch is scheduled (`EvalConfig.mode`); the checks are the same in both."""

    DEFAULT = "default"
    RL = "rl"


RL_STAGE_TIMEOUTS_S: dict[str, float] = {"import": 60.0, "construct": 60.0, "correctness": 60.0,
                                          "timing": 120.0, "coverage": 60.0, "cleanup": 30.0}
"""The RL mode's deadlines of the stages that run candidate code (`RlSettings.stage_timeouts_s`): 50x an
honest candidate's longest correctness stage measured on the H100 (1.2 s), and 3x the longest per-job
correctness stage of the RL-mode benchmarks on the loaded 2-core CPU (20.4 s, a wrong C candidate). On a
GPU, `RL_GPU_STAGE_TIMEOUTS_S` replaces them."""

RL_GPU_STAGE_TIMEOUTS_S: dict[str, float] = {**RL_STAGE_TIMEOUTS_S, "correctness": 15.0}
"""The RL mode's deadlines where candidates run on a GPU (`RlSettings.gpu_stage_timeouts_s`): the
correctness stage gets 15 s, about 4x the longest honest one judged on the GPU (3.9 s, p99 3.2 s, over
601 replies of sessions 32-36's comparisons). At 60 s, five of the sixteen first turns of one RL step
(H100, session 37, all five answers to `scan` tasks; their code was not kept) ran it to the deadline,
and the turn's evaluation took 153 s against 11 s of generation. The other stages keep the CPU's
deadlines: a carrier's timing stage times every baseline of its task (serial C among them) with the
configuration's own budget, and the import stage may build a `load_inline` extension."""


@dataclass(frozen=True)
class RlSettings:
    """The RL mode's scheduling (`EvalConfig.rl`); ignored in the default mode."""

    workers_per_gpu: int = 4
    """Sandboxed workers per GPU. Checks overlap across them; timing never does (the gate)."""
    cpu_workers: int = 2
    """Workers in CPU mode (`EvalConfig.device='cpu'`)."""
    budget_ms: float = 10.0
    """Timing budget per configuration of a candidate timed alone (`TimingConfig.budget_ms`, never more
    than the configuration's); sized for ranking candidates, not for a paper table. Carriers use the
    configuration's own budget."""
    warmup_ms: float = 5.0
    """Warm-up budget per configuration of a candidate timed alone (never more than the configuration's)."""
    drift_every: int = 64
    """Every this many timed candidates of a task, one is a carrier again (every baseline re-timed). Rare:
    the live anchor watches drift on every candidate, and a carrier in another worker than the last one
    compiles the torch.compile baseline again (seconds)."""
    drift_max_age_s: float = 600.0
    """Cached baselines older than this are re-timed by the next timed candidate of their task."""
    live_anchor: bool = True
    """Time the cheap baseline (eager; the naive CUDA port for C tasks) live with every candidate, with
    the ranking budget: its speedup is then measured interleaved, as in the default mode, and its drift
    from the task's live reference (the first anchored candidate's after the carrier) is watched on every
    candidate."""
    drift_tolerance: float = 0.10
    """Live anchors this far from the task's live reference (relative; the median over its
    configurations), on the same side for two anchored candidates in a row, make the task's next timed
    candidate a carrier, so the cached baselines are timed again."""
    task_affinity: bool = False
    """Each of the evaluator's batch threads runs its jobs on one worker and takes first the queued
    candidates of the task that worker ran last (`evaluate.TaskQueue`): its referee then holds that task's
    references and its session the task's timing references (each referee computes a C task's serial-C
    references once; eight workers without affinity each met most tasks cold, session 27). Only the order
    of the jobs changes; every check is the same. Off until measured on a GPU."""
    release_at_result: bool = False
    """Refereed jobs leave the gate when the worker's result is in (`Worker.run`'s `on_result`: its code
    runs no more, its cleanup has waited for what it queued on the device) instead of after the referee's
    verdict, so the verdict, the referee's release of cached device memory and the region's zeroing no
    longer hold the next candidate's exclusive turn. Off until measured on a GPU: the referee's release
    of its cache to the driver then overlaps another candidate's timing (no kernel of its own runs)."""
    plan_at_go_ahead: bool = True
    """Refereed jobs: the baselines' plan (carrier or anchored) is made at the candidate's go-ahead to time
    rather than before its job, and narrows the timing the job was sent with (the carrier's), so a
    candidate whose task has a carrier in flight runs its build and checks meanwhile and waits for the
    carrier only before timing, and a candidate that is not correct never carries. Planned before the
    job instead, every candidate of a task waits for the whole job of the task's carrier in flight, and
    a carrier that fails hands the carry to the next one, so a task's failing candidates run one after
    another, each batch thread that takes one waiting: on the H100 (session 34) a candidate that did not
    even compile waited 300 s for a carrier spinning in its correctness stage (`plan_wait`), and on the
    H200 (session 28) that wait was 34% of a comparison's evaluation time. The cost: every job is sent
    with the carrier's timing, so a C job's host work before timing also computes the serial-C
    baseline's reference (once per worker and task) when it ends up anchored. Throughput with mostly
    correct candidates: on an H100 one cold-task run each, 32.0 evaluations/min planned here against
    29.7 before the job (`benchmarks/results/2026-12-06-s30-h100/call2-eval-modes/`); on the 2-core CPU
    machine no difference (`benchmarks/results/cpu-2026-12-06-s29-planwait/`)."""

    slow_cut_ratio: float = 10.0
    """Anchored C candidates (`TimingConfig.slow_cut_ratio`): timed from the bench's estimate rounds alone
    when at least this many times slower than the naive port there and past `slow_cut_floor_ms`
    (`timing.SlowCut`, INFO flag `timing_cut_slow`). 0: never. Why: every reward preset gives such a
    kernel what it gives one a few times faster (`cudaperf` clips the speedup at 0.5; `kevin` is linear,
    0.008 against 0.05 is 0.04 of reward), while its full timing held the GPU alone for 111 s on the H100
    (session 38: a correct `scan` at 0.008x, ~2.4 s a call). Carriers are never cut: their baselines are
    cached for the task."""
    slow_cut_floor_ms: float = 100.0
    """The least median call time of a candidate cut short: under it the whole timing of a configuration
    costs about a second at most, and microsecond noise can never reach the ratio."""
    anchor_copies: bool = True
    """A C answer whose module is the task's naive CUDA port's program, docstrings aside
    (`anchor_copies.copies_anchor`), takes the port's timings from the last timed pass of its task that
    timed the port (`drift_max_age_s` at most) instead of a timed pass of its own: its correctness is
    checked as any answer's, its speedup against the port is 1.0, and the flag `anchor_copy` (INFO) says
    so. The first such copy of a task with no timings yet is timed, and copies arriving meanwhile wait for
    it; its own measured speedup is kept in `environment["anchor_copy_measured"]` and its timings are the
    port's too. Why: timing the port against itself ranks equal answers by timing noise, and in session 44's
    RL run such copies were 67 of 115 correct answers, their timed passes 100 s of the 163 s of exclusive
    GPU time (dev/LOG.md)."""

    stage_timeouts_s: dict[str, float] = field(default_factory=lambda: dict(RL_STAGE_TIMEOUTS_S))
    """Deadlines, in seconds, of the stages that run candidate code on a CPU (`gpu_stage_timeouts_s` on a
    GPU), in place of the sandbox's defaults (minutes, sized for the full protocol on the largest tasks);
    `EvalConfig.stage_timeouts_s` overrides both. A candidate that runs past one is a TIMEOUT and its worker
    is replaced. Why tighter here: a batch waits for its slowest candidate, and one that spins holds the GPU
    gate shared, so every other candidate's timing waits too: on the H100 (session 34) one spinning C
    candidate held a comparison round for the default 300 s, while honest candidates' whole correctness stage
    took at most 1.2 s (medians 0.3-0.7 s) and their timing stage at most 4.4 s."""

    gpu_stage_timeouts_s: dict[str, float] = field(default_factory=lambda: dict(RL_GPU_STAGE_TIMEOUTS_S))
    """`stage_timeouts_s` for an evaluator whose workers run on a GPU (`EvalConfig.deadlines_s`): tighter
    where a GPU runs an honest candidate's stage in seconds (`RL_GPU_STAGE_TIMEOUTS_S` says why)."""

    def __post_init__(self) -> None:
        bad = [(k, v) for timeouts in (self.stage_timeouts_s, self.gpu_stage_timeouts_s)
               for k, v in timeouts.items() if not v > 0]
        if bad:
            raise ValueError(f"RlSettings: stage_timeouts_s and gpu_stage_timeouts_s must be positive "
                             f"seconds, got {bad}")
        if self.workers_per_gpu < 1 or self.cpu_workers < 1:
            raise ValueError(f"RlSettings: workers_per_gpu={self.workers_per_gpu} and cpu_workers="
                             f"{self.cpu_workers} must be at least 1")
        if not (self.budget_ms > 0 and self.warmup_ms >= 0):
            raise ValueError(f"RlSettings: budget_ms={self.budget_ms} must be > 0 and warmup_ms="
                             f"{self.warmup_ms} >= 0")
        # the cut's rule has one home, the timing it is handed to (raises ValueError)
        TimingConfig(slow_cut_ratio=self.slow_cut_ratio, slow_cut_floor_ms=self.slow_cut_floor_ms)
        if self.drift_every < 1 or not self.drift_max_age_s > 0 or not self.drift_tolerance > 0:
            raise ValueError(f"RlSettings: drift_every={self.drift_every} must be >= 1, drift_max_age_s="
                             f"{self.drift_max_age_s} and drift_tolerance={self.drift_tolerance} > 0")


def median_ci95_rel(timing: Timing | None) -> float | None:
    """Half-width of the ~95% confidence interval of `timing`'s median, relative to it: 1.57 IQR/sqrt(n)
    (McGill, Tukey and Larsen's notch), so a reader can see what a ranking budget resolves."""
    if timing is None or timing.n_samples < 1 or not timing.median_ms > 0:
        return None
    return 1.57 * timing.iqr_ms / math.sqrt(timing.n_samples) / timing.median_ms


# --------------------------------------------------------------------------------------------------
# The gate


GATE_STATES = {"free": "no job on the GPU: builds, host work", "shared": "checks",
               "draining": "checks ending while a timed pass waits", "exclusive": "a timed pass alone",
               "paused": "lent outside the evaluator (generation), checks beside it"}
"""The gate's states, each with what it means in words (`GpuGate`'s docstring)."""


class GpuGate:
    """A readers-writer lock over the GPUs for the threads of one evaluator: checks hold it `shared`
    (several at once), timed passes `exclusive` (alone). Writers first: while a timed pass waits, no new
    check starts (else a stream of checks could hold a timed pass off for ever), and timed passes that
    queue meanwhile run one after another before any check starts again, so the checks in flight are
    drained once per burst of timed passes rather than once per pass (on the H200, session 20, a
    candidate's 0.2 s timed stage waited a median 0.76 s, mostly for other workers' checks to end).
    `paused()` lends the GPUs to someone outside the evaluator (the policy's generation in RL): while
    it is held no timed pass starts, and checks go on beside it, writers first suspended (a timed pass
    waiting then could not run anyway, so holding the checks back would only idle them). It waits for a
    timed pass under way to end, never for checks.
    `wait_s` adds up the time spent waiting, per mode; `state_s` the wall time the gate spent in each of
    its states (`GATE_STATES`: "draining" is checks still running while a timed pass waits, GPU time the
    exclusive side costs; "free" is no job on the GPUs, time spent outside the gate: builds, the parent;
    "paused" is the GPUs lent by `paused()`, checks or none beside it)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._state = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0
        self._pauses = 0
        self.wait_s = {"shared": 0.0, "exclusive": 0.0}
        self._clock = clock
        self.state_s = dict.fromkeys(GATE_STATES, 0.0)
        self._since = clock()

    def _account(self) -> None:
        """Add the time since the last change to the state the gate was in (called under the lock, before
        every change)."""
        now = self._clock()
        if self._writing:
            state = "exclusive"
        elif self._pauses:
            state = "paused"
        elif self._readers:
            state = "draining" if self._writers_waiting else "shared"
        else:
            state = "free"
        self.state_s[state] += now - self._since
        self._since = now

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        start = time.perf_counter()
        with self._state:
            self._state.wait_for(lambda: not self._writing and (self._writers_waiting == 0 or self._pauses))
            self._account()
            self._readers += 1
            self.wait_s["shared"] += time.perf_counter() - start
        try:
            yield
        finally:
            with self._state:
                self._account()
                self._readers -= 1
                if self._readers == 0:
                    self._state.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        start = time.perf_counter()
        with self._state:
            self._account()
            self._writers_waiting += 1
            try:
                self._state.wait_for(lambda: not self._writing and self._readers == 0 and not self._pauses)
            finally:
                self._account()
                self._writers_waiting -= 1
            self._writing = True
            self.wait_s["exclusive"] += time.perf_counter() - start
        try:
            yield
        finally:
            with self._state:
                self._account()
                self._writing = False
                self._state.notify_all()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No timed pass starts while this is held (see the class docstring); re-entrant across threads."""
        with self._state:
            self._state.wait_for(lambda: not self._writing)
            self._account()
            self._pauses += 1
            self._state.notify_all()  # checks held back by a waiting timed pass may start now
        try:
            yield
        finally:
            with self._state:
                self._account()
                self._pauses -= 1
                self._state.notify_all()

    def states(self) -> dict[str, float]:
        """`state_s` up to now."""
        with self._state:
            self._account()
            return dict(self.state_s)

    def turn(self) -> "GateTurn":
        """A job's hold that starts shared and may turn exclusive once (`GateTurn`)."""
        return GateTurn(self)

    @property
    def readers(self) -> int:
        return self._readers

    def describe(self) -> str:
        """Who holds the gate and who waits, in words (a stalled batch's report)."""
        with self._state:
            held = "a timed pass holds it" if self._writing else f"{self._readers} job(s) checking"
            lent = ", lent outside the evaluator (timing paused)" if self._pauses else ""
            return f"GPU gate: {held}{lent}, {self._writers_waiting} waiting to time"

    @property
    def exclusive_held(self) -> bool:
        return self._writing


class GateTurn:
    """One job's hold on a `GpuGate`: `hold()` takes it shared for the job's run; `step_aside()`, called
    when the checks are over (`on_checked`), leaves it for the host work before timing; `upgrade()`, called
    from inside the run when the worker is about to time (`execute.sandbox.Worker.run`'s `on_proceed`),
    leaves the shared side (if still held) and waits for the exclusive one; leaving `hold()` leaves
    whichever side is held.
    The shared side is left before the exclusive one is awaited, so two upgrading jobs never wait on each
    other."""

    def __init__(self, gate: GpuGate):
        self.gate = gate
        self.waited_s = 0.0
        self.held_exclusive_s = 0.0  # how long the job held the GPU alone (`gate_held` in its durations)
        self._leave: Callable[[], None] | None = None  # leaves the side held now

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        self._leave = self._take(self.gate.shared)
        try:
            yield
        finally:
            leave, self._leave = self._leave, None
            leave()

    def upgrade(self) -> None:
        if self._leave is None:
            raise RuntimeError("GateTurn.upgrade outside hold()")
        self._leave()
        leave, since = self._take(self.gate.exclusive), time.perf_counter()

        def leave_exclusive() -> None:
            leave()
            self.held_exclusive_s += time.perf_counter() - since
        self._leave = leave_exclusive

    def step_aside(self) -> None:
        """Leave the side held and hold nothing until `upgrade`: called as the referee's "all correct"
        answer passes (`execute.sandbox.Worker.run`'s `on_checked`), so the worker's host work before timing
        keeps no other job's exclusive turn waiting; and, with `RlSettings.release_at_result`, as the
        worker's result comes in (`on_result`), so the referee's verdict does not either."""
        if self._leave is None:
            raise RuntimeError("GateTurn.step_aside outside hold()")
        self._leave()
        self._leave = lambda: None

    def _take(self, side: Callable[[], contextlib.AbstractContextManager[None]]) -> Callable[[], None]:
        start = time.perf_counter()
        held = side()
        held.__enter__()
        self.waited_s += time.perf_counter() - start
        return lambda: held.__exit__(None, None, None)


# --------------------------------------------------------------------------------------------------
# The cache of baselines


@dataclass(frozen=True)
class CachedBaselines:
    """The baselines of one configuration as a carrier timed them (`ConfigTiming`'s baseline fields)."""

    eager: Timing | None = None
    compiled: Timing | None = None
    baselines: dict[str, Timing] = field(default_factory=dict)

    def medians_ms(self) -> dict[str, float]:
        named = {"eager": self.eager, "compile": self.compiled, **self.baselines}
        return {k: t.median_ms for k, t in named.items() if t is not None}


@dataclass(frozen=True)
class BaselineDrift:
    """One baseline timed again while cached: by a later carrier (`live` False), or as the live anchor of
    a candidate timed with the ranking budget (`live` True); the median it is compared with (`cached_ms`:
    the carrier's, or for a live anchor after the task's first, the live reference: `reference`) and the
    fresh one."""

    task_id: str
    config: str
    baseline: str
    cached_ms: float
    fresh_ms: float
    age_s: float  # how long the cached value had been in use
    live: bool = False
    reference: str = "carrier"  # what `cached_ms` is: "carrier" (its median) or "live" (the live reference)
    carrier_ms: float | None = None  # for a live anchor against the live reference: the carrier's median

    @property
    def ratio(self) -> float:
        return self.fresh_ms / self.cached_ms if self.cached_ms > 0 else float("inf")


@dataclass(frozen=True)
class TimingPlan:
    """How one candidate's timed pass times: as a carrier (every baseline interleaved, the configuration's
    budget) or anchored (only the cheap `anchor` baseline interleaved, the ranking budget; the cache
    supplies the others)."""

    carrier: bool
    timing: TimingConfig
    why: str  # "first", "drift", "drift check", "age", "anchored", "live only", "no baselines requested"
    anchor: str | None = None


ANCHORS = {TaskKind.PYTORCH: "eager", TaskKind.C: "naive_cuda"}  # cheap to time: no compile, on the GPU


def timed_baselines(task: Task, listed: tuple[str, ...]) -> tuple[str, ...]:
    """The baselines a job of `task` with `TimingConfig.baselines == listed` times
    (`jobs.timed_baselines`)."""
    return jobs.timed_baselines(task.kind, listed)


@dataclass
class _Entry:
    by_config: dict[str, CachedBaselines]
    timed_at: float
    carrier_id: str
    uses: int = 0
    stale: bool = False  # the live anchors drifted past the tolerance: the next timed candidate carries
    live_reference: dict[str, float] | None = None  # per configuration: the first anchored candidate's
    # live anchor median after the carrier, what later live anchors are compared with
    last_side: int = 0  # the last anchored candidate's drift: -1 below the tolerance, +1 above, 0 within


class BaselineCache:
    """Baselines per (task, configuration) for one evaluator run. Thread-safe.

    `plan(task, timing)` decides whether the next timed candidate of `task` is a carrier; a carrier's
    `settle(task, solution_id, result)` keeps its baselines (and returns the drift against the values they
    replace), or, for a result without them, lets the next candidate carry. An anchored candidate's
    `observe(task, result, anchor)` sets the task's live reference (the first after a carrier) or
    compares its live anchor with it (drift past `drift_tolerance`, the median over configurations, on
    the same side twice in a row, makes the next timed candidate a carrier); `lookup(task)` gives the
    cached baselines. While a carrier of a task is in flight, `plan` for that task waits for it to settle
    (the timed passes are serialised anyway), so one task is never timed by two carriers at once; the RL
    mode asks before a candidate's job or, with `plan_at_go_ahead`, at its go-ahead to time, holding no
    side of the gate (`_GoAhead`). Keyed
    by task id and a hash of the task's text, configurations and declaration, so two tasks sharing an id
    never share baselines. `drift` keeps the carriers' records, `anchor_offset` the live references'
    against their carriers and `live_drift` the last `LIVE_DRIFT_KEPT` live anchors' against their
    reference."""

    LIVE_DRIFT_KEPT = 10_000

    def __init__(self, settings: RlSettings, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self._clock = clock
        self._lock = threading.Condition()
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._pending: set[tuple[str, str]] = set()  # tasks whose carrier is in flight
        self._plan_waiting: collections.Counter[str] = collections.Counter()  # task id -> plans waiting
        self.drift: list[BaselineDrift] = []
        self.live_drift: collections.deque[BaselineDrift] = collections.deque(maxlen=self.LIVE_DRIFT_KEPT)
        self.anchor_offset: collections.deque[BaselineDrift] = collections.deque(maxlen=self.LIVE_DRIFT_KEPT)

    @staticmethod
    def key(task: Task) -> tuple[str, str]:
        text = json.dumps([task.source, repr(task.configs), task.spec], sort_keys=True, default=str)
        return task.task_id, hashlib.sha256(text.encode()).hexdigest()[:16]

    def plan(self, task: Task, timing: TimingConfig) -> TimingPlan:
        wanted = timed_baselines(task, timing.baselines)
        anchor = ANCHORS.get(task.kind) if self.settings.live_anchor else None
        anchor = anchor if anchor in wanted else None
        ranking = dataclasses.replace(timing, baselines=(anchor,) if anchor else (),
                                      budget_ms=min(self.settings.budget_ms, timing.budget_ms),
                                      warmup_ms=min(self.settings.warmup_ms, timing.warmup_ms),
                                      overhead=False, slow_cut_ratio=self.settings.slow_cut_ratio,
                                      slow_cut_floor_ms=self.settings.slow_cut_floor_ms)
        if not wanted or set(wanted) == {anchor}:  # nothing to cache: every candidate times what it needs
            return TimingPlan(False, ranking, "live only" if wanted else "no baselines requested", anchor)
        key = self.key(task)
        with self._lock:
            self._plan_waiting[task.task_id] += 1
            try:
                self._lock.wait_for(lambda: key not in self._pending)
            finally:
                self._plan_waiting[task.task_id] -= 1
            entry = self._entries.get(key)
            why = ("first" if entry is None
                   else "drift" if entry.stale
                   else "drift check" if entry.uses >= self.settings.drift_every
                   else "age" if self._clock() - entry.timed_at > self.settings.drift_max_age_s
                   else "")
            if why:
                self._pending.add(key)
                return TimingPlan(True, timing, why)
            entry.uses += 1
        return TimingPlan(False, ranking, "anchored", anchor)

    def settle(self, task: Task, solution_id: str, result: EvalResult | None) -> list[BaselineDrift]:
        """A carrier is done: keep its baselines (a correct result with baseline timings; None or anything
        else keeps what was cached, and the next timed candidate carries) and return the drift of each
        baseline it re-timed."""
        key = self.key(task)
        fresh = _baselines_of(result.timings if result is not None else ())
        usable = (result is not None and result.outcome is Outcome.CORRECT
                  and any(c.medians_ms() for c in fresh.values()))
        now = self._clock()
        with self._lock:
            self._pending.discard(key)
            self._lock.notify_all()
            if not usable:
                return []
            old = self._entries.get(key)
            drift = _drift(task.task_id, old.by_config, fresh, now - old.timed_at) if old else []
            self._entries[key] = _Entry(fresh, now, solution_id)
            self.drift.extend(drift)
        return drift

    def observe(self, task: Task, result: EvalResult, anchor: str | None) -> list[BaselineDrift]:
        """An anchored candidate's live anchor, per configuration: the first after a carrier becomes the
        task's live reference (returned against the carrier's median, `reference="carrier"`); a later one
        is compared with that reference, and when the median of its ratios over the configurations is past
        `drift_tolerance` on the same side as the last one's, the task's next timed candidate carries."""
        if anchor is None or result.outcome is not Outcome.CORRECT:
            return []
        now = self._clock()
        with self._lock:
            entry = self._entries.get(self.key(task))
            if entry is None:
                return []
            offset = [d for d in _drift(task.task_id, entry.by_config, _baselines_of(result.timings),
                                        now - entry.timed_at, live=True) if d.baseline == anchor]
            if entry.live_reference is None:
                if offset:  # no configuration with both anchors: the next candidate may set it
                    entry.live_reference = {d.config: d.fresh_ms for d in offset}
                    self.anchor_offset.extend(offset)
                return offset
            drift = [dataclasses.replace(d, cached_ms=entry.live_reference[d.config], reference="live",
                                         carrier_ms=d.cached_ms)
                     for d in offset if d.config in entry.live_reference]
            self.live_drift.extend(drift)
            if drift:
                side = _side(statistics.median(d.ratio for d in drift), self.settings.drift_tolerance)
                entry.stale = entry.stale or (side != 0 and side == entry.last_side)
                entry.last_side = side
        return drift

    def describe(self) -> str:
        """The tasks whose carrier is in flight and the plans waiting for one, in words."""
        with self._lock:
            flying = sorted(task_id for task_id, _ in self._pending)
            waiting = {task_id: n for task_id, n in sorted(self._plan_waiting.items()) if n}
        return (f"carriers in flight: {', '.join(flying) or 'none'}; plans waiting for one: "
                + (", ".join(f"{n} of {task_id}" for task_id, n in waiting.items()) or "none"))

    def lookup(self, task: Task) -> tuple[dict[str, CachedBaselines], str, float] | None:
        """(baselines per configuration, the carrier's solution id, their age in seconds), or None."""
        with self._lock:
            entry = self._entries.get(self.key(task))
            if entry is None:
                return None
            return dict(entry.by_config), entry.carrier_id, self._clock() - entry.timed_at


def _baselines_of(timings: tuple[ConfigTiming, ...]) -> dict[str, CachedBaselines]:
    return {t.config: CachedBaselines(t.eager, t.compiled, dict(t.baselines)) for t in timings}


def _side(ratio: float, tolerance: float) -> int:
    """-1 when `ratio` is below 1 by more than `tolerance`, +1 above it by more, else 0."""
    return 0 if abs(ratio - 1) <= tolerance else (1 if ratio > 1 else -1)


def _drift(task_id: str, old: dict[str, CachedBaselines], fresh: dict[str, CachedBaselines],
           age_s: float, live: bool = False) -> list[BaselineDrift]:
    out = []
    for config, baselines in fresh.items():
        before = old[config].medians_ms() if config in old else {}
        for name, fresh_ms in sorted(baselines.medians_ms().items()):
            if name in before:
                out.append(BaselineDrift(task_id, config, name, before[name], fresh_ms, age_s, live))
    return out


def through_anchor(timings: tuple[ConfigTiming, ...], cached: dict[str, CachedBaselines],
                   anchor: str) -> dict[str, float]:
    """An anchored candidate's speedup against each cached baseline, chained through the anchor: per
    configuration (cached baseline / cached anchor, both the carrier's) x (live anchor / candidate, both
    this pass's), each factor a ratio of two functions timed interleaved; the geometric mean over the
    configurations (`stats.geomean`, as the speedups are aggregated). Recorded beside the speedups
    (which divide the carrier's median by this pass's, across the two protocols:
    `environment["speedups_through_anchor"]`) for `benchmarks/eval_modes.py` to hold both against the
    default mode's."""
    per_baseline: dict[str, list[float]] = collections.defaultdict(list)
    for t in timings:
        carried = cached.get(t.config)
        live = t.eager if anchor == "eager" else t.baselines.get(anchor)
        if carried is None or live is None or not t.candidate.median_ms > 0:
            continue
        medians = carried.medians_ms()
        if not medians.get(anchor, 0) > 0:
            continue
        for name, ms in medians.items():
            if name != anchor and ms > 0:
                per_baseline[name].append(ms / medians[anchor] * live.median_ms / t.candidate.median_ms)
    return {name: mean for name, values in sorted(per_baseline.items())
            if (mean := geomean(values)) is not None}


def fill_timings(timings: tuple[ConfigTiming, ...],
                 cached: dict[str, CachedBaselines]) -> tuple[ConfigTiming, ...]:
    """The candidate's timings with the cached baselines of each configuration; a baseline the job timed
    itself (a C task's inout restore) keeps its own value."""
    out = []
    for t in timings:
        c = cached.get(t.config)
        if c is None:
            out.append(t)
            continue
        out.append(dataclasses.replace(t, eager=t.eager or c.eager, compiled=t.compiled or c.compiled,
                                       baselines={**c.baselines, **t.baselines}))
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# The schedule of one candidate

Hold = Callable[[], contextlib.AbstractContextManager[Any]]
Finish = Callable[..., EvalResult]
"""`Evaluator._finish_with(task, solution, start, submitted, timing, hold, on_proceed=None,
on_checked=None, on_result=None)`: the default recipe from the static verdict on, with the job's timing
replaced, the worker's run held by `hold()`, `on_checked()` called when the referee finds the candidate
correct, `on_proceed()` before the candidate can be timed (what it returns, a `TimingConfig` or None,
narrows the job's timing: `execute.sandbox.Worker.run`) and `on_result()` once the worker's result is
in."""
Fill = Callable[[EvalResult, dict[str, CachedBaselines]], EvalResult]
"""`evaluate.with_cached_baselines`: a result with cached baselines written in and its speedups redone."""


class _GoAhead:
    """One candidate's baselines' plan (`BaselineCache.plan`) and go-ahead to time
    (`execute.sandbox.Worker.run`'s `on_proceed`). The plan is made before the job (`plan_now`) or, when
    it was not, at the go-ahead, where its timing goes to the worker with the answer (the worker and the
    referee take it only where it narrows the job's: `jobs.narrowed_timing`); then the exclusive turn. At
    the go-ahead the plan waits for a carrier of the task in flight while this job holds no side of the
    gate (`step_aside` first; the checks are over by then): that carrier needs the exclusive side to
    finish."""

    def __init__(self, cache: BaselineCache, task: Task, timing: TimingConfig, turn: GateTurn):
        self._cache, self._task, self._timing, self._turn = cache, task, timing, turn
        self.plan: TimingPlan | None = None  # None until planned: a candidate never timed may have none
        self.waited_s = 0.0  # for the plan: a carrier of the task in flight (`plan_wait`)

    def plan_now(self) -> TimingPlan:
        start = time.perf_counter()
        self.plan = self._cache.plan(self._task, self._timing)
        self.waited_s = time.perf_counter() - start
        return self.plan

    def __call__(self) -> TimingConfig | None:
        """The plan if none was made before the job, then the exclusive turn; the timing planned here,
        else None (the job was sent with it)."""
        asked = None
        if self.plan is None:
            self._turn.step_aside()
            asked = self.plan_now().timing
        self._turn.upgrade()
        return asked


class RlScheduler:
    """The RL mode's schedule of one candidate (module docstring, points 2 and 3). `finish` is called by
    the evaluator's batch threads in place of its own finish, from as many threads as there are workers."""

    def __init__(self, finish: Finish, fill: Fill, timing: TimingConfig, settings: RlSettings,
                 clock: Callable[[], float] = time.monotonic, *, one_pass: bool = False):
        self._finish, self._fill, self.timing, self.settings = finish, fill, timing, settings
        self.one_pass = one_pass  # the referee's go-ahead gates the timing stage (module docstring, 2)
        self.gate = GpuGate()
        self.baselines = BaselineCache(settings, clock)
        self.anchors = AnchorTimings(settings.drift_max_age_s, clock)
        self.counts = {"checked": 0, "timed": 0, "carriers": 0, "verdict_changed": 0, "anchor_copies": 0}
        self._count_lock = threading.Lock()

    def finish(self, task: Task, solution: Any, start: Any, submitted: Any) -> EvalResult:
        copy = self._copy_key(task, solution)
        claimed = copy is not None and self.anchors.begin(copy)
        if copy is not None and not claimed:
            copied = self._finish_copy(task, solution, start, submitted, copy)
            if copied is not None:
                return copied  # else the copy timed before left no timings of the anchor: this one is timed
        try:
            result = self._timed(task, solution, start, submitted)
            return self._anchor_seen(task, result, copy is not None)
        finally:
            if claimed:
                self.anchors.release(copy)

    def _timed(self, task: Task, solution: Any, start: Any, submitted: Any) -> EvalResult:
        if self.one_pass and self.timing.enabled:
            return self._finish_once(task, solution, start, submitted)
        return self._finish_twice(task, solution, start, submitted)

    def _copy_key(self, task: Task, solution: Any) -> tuple[str, str] | None:
        """The task's key when `solution` is a copy of its anchor program the timing would time
        (`RlSettings.anchor_copies`, point 7), else None."""
        anchor = ANCHORS.get(task.kind)
        if not (self.settings.anchor_copies and self.timing.enabled
                and anchor in timed_baselines(task, self.timing.baselines) and copies_anchor(task, solution)):
            return None
        return BaselineCache.key(task)

    def _finish_copy(self, task: Task, solution: Any, start: Any, submitted: Any,
                     key: tuple[str, str]) -> EvalResult | None:
        """A copy of the anchor checked with timing off (gate shared), then given the anchor's live timings
        of the task, waited for while another copy's timed pass is in flight; None when it is correct and
        none are left to give (it is then timed)."""
        waits: list[float] = []
        checked = self._finish(task, solution, start, submitted, dataclasses.replace(
            self.timing, enabled=False), self._hold(self.gate.shared, waits))
        self._count("checked")
        if checked.outcome is not Outcome.CORRECT:
            return _noted(checked, {"eval_mode": EvalMode.RL.value}, {"gate_wait": sum(waits)})
        began = time.perf_counter()
        live = self.anchors.wait(key)
        if live is None:
            return None
        self._count("anchor_copies")
        anchor = ANCHORS[task.kind]
        untimed = dataclasses.replace(checked, timings=tuple(
            ConfigTiming(config, candidate=t, baselines={anchor: t})
            for config, t in sorted(live.timings.items())))
        found = self.baselines.lookup(task)
        copied = self._as_copy(untimed, live.timings, live.solution_id, found[0] if found else {})
        notes = {"eval_mode": EvalMode.RL.value, "timing": f"none: the {anchor} program, timed beside "
                 f"{live.solution_id}", "baselines": f"cached from {found[1]}" if found else anchor}
        return _noted(copied, notes, {"gate_wait": sum(waits), "anchor_wait": time.perf_counter() - began})

    def _anchor_seen(self, task: Task, result: EvalResult, copy: bool) -> EvalResult:
        """Keep the anchor's live timings of a timed pass of `task` for its copies; the timed copy itself
        takes them as its own (its measured speedup against the anchor kept in the environment)."""
        anchor = ANCHORS[TaskKind.C]
        copies_possible = self.settings.anchor_copies and task.kind is TaskKind.C
        timings = anchor_timings(result, anchor) if copies_possible else None
        if timings is None:
            return result
        key = BaselineCache.key(task)
        self.anchors.record(key, timings, result.solution_id)
        if not copy:
            return result
        measured = result.speedups.get(anchor)
        found = self.baselines.lookup(task)
        return _noted(self._as_copy(result, timings, result.solution_id, found[0] if found else {}),
                      {"anchor_copy_measured": f"{measured:.4f}" if measured else "none"}, {})

    def _as_copy(self, result: EvalResult, timings: dict[str, Timing], timed_beside: str,
                 cached: dict[str, CachedBaselines]) -> EvalResult:
        """`result` of a copy of the C anchor with the anchor's `timings` as its candidate's, flagged
        `anchor_copy`, the `cached` baselines written in and its speedups redone."""
        copied = dataclasses.replace(result, timings=tuple(
            dataclasses.replace(t, candidate=timings[t.config]) for t in result.timings),
            flags=result.flags + (_copy_flag(ANCHORS[TaskKind.C], timed_beside),))
        return self._fill(copied, cached)

    def _finish_once(self, task: Task, solution: Any, start: Any, submitted: Any) -> EvalResult:
        """One job: correctness with the gate shared, the timing stage (after the referee's go-ahead) with
        it exclusive. The baselines' plan is made before the job (a carrier that turns out wrong then
        times nothing and the task's next timed candidate carries) or, with `plan_at_go_ahead`, at the
        go-ahead (`_GoAhead`): the job is then sent with the whole timing (a carrier's), which the plan
        can only narrow, and a candidate of a task whose carrier is in flight runs its checks meanwhile."""
        turn = self.gate.turn()
        go = _GoAhead(self.baselines, task, self.timing, turn)
        timing = self.timing if self.settings.plan_at_go_ahead else go.plan_now().timing
        result = None
        try:
            result = self._finish(task, solution, start, submitted, timing, turn.hold, go,
                                  turn.step_aside,
                                  turn.step_aside if self.settings.release_at_result else None)
        finally:
            plan = go.plan
            drift = self.baselines.settle(task, solution.solution_id, result) if plan and plan.carrier else []
        self._count("checked")
        waits = {"gate_wait": turn.waited_s, "plan_wait": go.waited_s, "gate_held": turn.held_exclusive_s}
        if plan is None or result.outcome is not Outcome.CORRECT or not result.timings:
            return _noted(result, {"eval_mode": EvalMode.RL.value}, waits)
        self._count("timed")
        notes = {"eval_mode": EvalMode.RL.value, "passes": "one"}
        result = self._with_baselines(task, result, plan, drift, notes)
        notes["timing"] = _timing_note(task, plan)
        return _noted(result, notes, waits)

    def _finish_twice(self, task: Task, solution: Any, start: Any, submitted: Any) -> EvalResult:
        """A check pass with timing off (gate shared), then, for a correct candidate, the timed pass (gate
        exclusive): for evaluators without a referee, whose workers give no go-ahead to wait for."""
        waits: list[float] = []
        held: list[float] = []
        t0 = time.perf_counter()
        checked = self._finish(task, solution, start, submitted, dataclasses.replace(
            self.timing, enabled=False), self._hold(self.gate.shared, waits))
        self._count("checked")
        if checked.outcome is not Outcome.CORRECT or not self.timing.enabled:
            return _noted(checked, {"eval_mode": EvalMode.RL.value}, {"gate_wait": sum(waits)})
        check_s = time.perf_counter() - t0
        plan = self.baselines.plan(task, self.timing)
        timed = None
        try:
            timed = self._finish(task, solution, start, submitted, plan.timing,
                                 self._hold(self.gate.exclusive, waits, held))
        finally:
            drift = self.baselines.settle(task, solution.solution_id, timed) if plan.carrier else []
        self._count("timed")
        notes = {"eval_mode": EvalMode.RL.value}
        if timed.outcome is not checked.outcome:
            self._count("verdict_changed")
            notes["rl_check_outcome"] = checked.outcome.value
        timed = self._with_baselines(task, timed, plan, drift, notes)
        notes["timing"] = _timing_note(task, plan)
        durations = {"check_pass": check_s, "gate_wait": sum(waits), "gate_held": sum(held),
                     "build_wait": checked.stage_durations_s.get("build_wait", 0.0)}
        return _noted(timed, notes, durations)

    def _with_baselines(self, task: Task, timed: EvalResult, plan: TimingPlan, drift: list[BaselineDrift],
                        notes: dict[str, str]) -> EvalResult:
        if plan.carrier:
            self._count("carriers")
            notes["baselines"] = f"timed ({plan.why})"
            if drift:
                notes["baseline_drift"] = json.dumps({f"{d.config}/{d.baseline}": round(d.ratio, 4)
                                                      for d in drift}, sort_keys=True)
            return timed
        if plan.anchor is not None:
            live = self.baselines.observe(task, timed, plan.anchor)
            if live:  # against the carrier for the task's live reference, else against that reference
                ratios = {d.config: round(d.ratio, 4) for d in live}
                key = "anchor_offset" if live[0].reference == "carrier" else "anchor_drift"
                notes[key] = json.dumps(ratios, sort_keys=True)
        found = self.baselines.lookup(task) if plan.why == "anchored" else None
        if found is None or not timed.timings:
            notes["baselines"] = plan.why
            return timed
        cached, carrier, age_s = found
        live_text = f"{plan.anchor} live, " if plan.anchor else ""
        notes["baselines"] = f"{live_text}cached from {carrier} ({age_s:.0f} s old)"
        chained = through_anchor(timed.timings, cached, plan.anchor) if plan.anchor else {}
        if chained:
            notes["speedups_through_anchor"] = json.dumps({k: round(v, 4) for k, v in chained.items()},
                                                          sort_keys=True)
        return self._fill(timed, cached)

    def _hold(self, mode: Callable[[], contextlib.AbstractContextManager[None]], waits: list[float],
              held: list[float] | None = None) -> Hold:
        """`mode` held around a run: the wait for it appended to `waits`, the time holding it to `held`."""
        @contextlib.contextmanager
        def holding() -> Iterator[None]:
            start = time.perf_counter()
            with mode():
                taken = time.perf_counter()
                waits.append(taken - start)
                try:
                    yield
                finally:
                    if held is not None:
                        held.append(time.perf_counter() - taken)
        return holding

    def _count(self, what: str) -> None:
        with self._count_lock:
            self.counts[what] += 1

    def describe(self) -> str:
        """Where the schedule's jobs wait now, in words: the gate and the baselines' carriers."""
        return f"{self.gate.describe()}; {self.baselines.describe()}"

    def report(self) -> dict[str, Any]:
        """What the schedule did so far: passes, carriers, gate waits, drift (carriers' re-timings, the
        live references' offsets from their carriers and the live anchors' drift from their reference,
        each as a count, the median and largest |ratio - 1|, and the records)."""
        out = {**self.counts, "gate_wait_s": dict(self.gate.wait_s), "gate_state_s": self.gate.states()}
        cache = self.baselines
        for name, records in (("drift", list(cache.drift)), ("anchor_offset", list(cache.anchor_offset)),
                              ("live_drift", list(cache.live_drift))):
            rows = [dataclasses.asdict(d) | {"ratio": d.ratio} for d in records]
            out[name] = drift_figures(rows)
        return out


def drift_figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Drift records (as `RlScheduler.report` writes them, each with its "ratio") with their count, the
    median and the largest |ratio - 1|."""
    ratios = sorted(abs(r["ratio"] - 1) for r in records)
    return {"n": len(ratios), "median_abs": ratios[len(ratios) // 2] if ratios else None,
            "max_abs": ratios[-1] if ratios else None, "records": records}


def _copy_flag(anchor: str, timed_beside: str) -> Flag:
    return Flag("anchor_copy", f"the answer is the task's {anchor} program, docstrings aside: its timings "
                f"are that program's, timed live beside {timed_beside}, so its speedup against {anchor} is "
                f"1.0 (eval_modes, point 7)", Severity.INFO)


def _timing_note(task: Task, plan: TimingPlan) -> str:
    """What the timed pass timed: its budget and the baselines a job of `task` times with its list (a C
    job times its own: the list's ("eager", "compile") mean serial C and the naive port)."""
    names = ",".join(timed_baselines(task, plan.timing.baselines))
    return f"{plan.timing.budget_ms:g} ms budget, baselines {names}"


def _noted(result: EvalResult, notes: dict[str, str], durations: dict[str, float]) -> EvalResult:
    return dataclasses.replace(result, environment={**result.environment, **notes},
                               stage_durations_s={**result.stage_durations_s, **durations})
