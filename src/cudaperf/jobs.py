"""The records that cross the pipe between the evaluator and a sandboxed worker: the job and its payload.

Covers: `TimingConfig` (the one home of the timing defaults: `EvalConfig.timing` and `EvalJob.timing` are
this record), which baselines a job times (`timed_baselines`) and how the parent's go-ahead may narrow its
timing (`narrowed_timing`), `EvalJob` (what the evaluator asks a worker to do with one task and one
candidate), `EvalPayload` (what the worker's evaluation handler sends back), their wire form, and
`ProfileJob` (what the dynamic stage hands the process Nsight Compute profiles, `execute.profile_target`).
The wire is plain JSON (`types.to_dict` / `types.from_dict`), never pickle: the parent must not run code
the child chose. `job_message` / `read_job` add and remove the secret, which travels beside the record, not
in it (see `read_job` for why); `read_payload` turns whatever came back into a payload, a malformed one
included.

Not covered: how the job is carried (the sandbox's framing, nonces and deadlines: `execute.sandbox`), what
the worker does with it (`execute.session` and the recipes beside it), the final outcome
(`evaluate.decide_outcome`). This module imports neither torch nor CUDA, so the evaluator, trainers and
tests can build jobs without them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from cudaperf.anticheat.policy import Policy
from cudaperf.types import (
    ConfigCorrectness,
    ConfigTiming,
    Flag,
    Outcome,
    Solution,
    Task,
    TaskKind,
    Timing,
    from_dict,
    to_dict,
)

# The stages a worker reports as heartbeats, in order; the parent applies a deadline to each
# (`execute.sandbox.StageTimeouts`). A C task has no `construct` stage (its candidate is a function);
# `timing_prep` (the timing's host work, then the go-ahead) is reported only with a referee.
STAGES = ("setup", "reference", "import", "construct", "correctness", "timing_prep", "timing", "coverage")


@dataclass(frozen=True)
class TimingConfig:
    """How the worker times a correct candidate against its baselines (`cudaperf.timing`)."""

    enabled: bool = True
    """Time the candidate and the baselines (off: correctness only, e.g. for RL rollouts on a budget)."""
    budget_ms: float = 100.0
    """Time budget per callable and configuration; repetitions are sized from it (Triton do_bench style)."""
    warmup_ms: float = 25.0
    """Warm-up budget per callable and configuration, excluded from the samples."""
    baselines: tuple[str, ...] = ("eager", "compile")
    """Baselines timed live on the same GPU, interleaved with the candidate. C tasks time the names among
    ("serial_c", "naive_cuda") listed here, and both when the list names neither (`c_session`)."""
    input_sets: int = 3
    """Distinct input sets rotated during timing (defeats caching on data pointers)."""
    unseen_sets: int = 5
    """Input sets drawn for timing alone, each given to the functions in one timed round only (a PyTorch
    task's drawn on the device at that round, a C task's held on the host until then): outputs kept by
    input contents miss there (`timing`, unseen rounds). 0: none."""
    overhead: bool = True
    """Time an empty function under the same protocol in every round, reported as `overhead_ms` beside the
    times (never subtracted). Off: one call fewer per round and `overhead_ms` None (the RL mode's ranking
    budget, `eval_modes`)."""
    slow_cut_ratio: float = 0.0
    """C tasks: time a candidate from the bench's estimate rounds alone when its median there is at least
    this many times the anchor's (the naive CUDA port) and at least `slow_cut_floor_ms` (`timing.SlowCut`;
    flag `timing_cut_slow`). 0: never (the default mode). The RL mode's anchored candidates get
    `RlSettings.slow_cut_ratio`. PyTorch tasks are never cut: the referee expects the re-checked outputs of
    every timed configuration, which a cut run has none of."""
    slow_cut_floor_ms: float = 100.0
    """The least median call time (ms) of a candidate cut short (`slow_cut_ratio`)."""

    def __post_init__(self) -> None:
        if self.input_sets < 1:
            raise ValueError(f"TimingConfig.input_sets={self.input_sets}: at least one input set is needed")
        if self.unseen_sets < 0:
            raise ValueError(f"TimingConfig.unseen_sets={self.unseen_sets}: give 0 or more")
        if not (self.slow_cut_ratio == 0 or self.slow_cut_ratio > 1) or self.slow_cut_floor_ms < 0:
            raise ValueError(f"TimingConfig: slow_cut_ratio={self.slow_cut_ratio} must be 0 (off) or above "
                             f"1, and slow_cut_floor_ms={self.slow_cut_floor_ms} at least 0")


TORCH_BASELINES = ("eager", "compile")
C_BASELINES = ("serial_c", "naive_cuda")


def timed_baselines(kind: TaskKind, listed: tuple[str, ...]) -> tuple[str, ...]:
    """The baselines a job of a `kind` task times with `TimingConfig.baselines == listed`: a PyTorch task
    the names among `TORCH_BASELINES`; a C task the names among `C_BASELINES`, both when the list names
    neither (the PyTorch default) and none when it is empty."""
    if kind is TaskKind.C:
        named = tuple(b for b in C_BASELINES if b in listed)
        return named or (C_BASELINES if listed else ())
    return tuple(b for b in TORCH_BASELINES if b in listed)


def narrowed_timing(kind: TaskKind, sent: TimingConfig, asked: Any) -> TimingConfig:
    """The timing a worker uses: `sent` (the job's) narrowed by `asked`, the parent's answer to its "ready"
    as wire data (`to_dict` of a `TimingConfig`; None: as sent). Only narrower: fewer baselines, a smaller
    budget or warm-up, the empty function left out, a slow cut (`slow_cut_ratio` above 1, with its floor:
    it only ends the timing of a candidate far slower than its anchor early); baselines `sent` does not
    time, anything larger and every other field are `sent`'s, and a malformed answer leaves `sent` as it
    is. The worker and the referee both apply this, so the referee holds the timings to what the worker
    was told to time."""
    try:
        want = from_dict(TimingConfig, asked)
        baselines = tuple(str(b) for b in want.baselines)
        budget_ms, warmup_ms = float(want.budget_ms), float(want.warmup_ms)
        cut = (float(want.slow_cut_ratio), float(want.slow_cut_floor_ms))
    except (AttributeError, KeyError, TypeError, ValueError):  # None, or not a timing: as sent
        return sent
    fewer = set(timed_baselines(kind, baselines)) <= set(timed_baselines(kind, sent.baselines))
    cut = cut if cut[0] > 1 else (sent.slow_cut_ratio, sent.slow_cut_floor_ms)  # from_dict checked the floor
    return replace(sent, baselines=baselines if fewer else sent.baselines,
                   budget_ms=budget_ms if 0 < budget_ms < sent.budget_ms else sent.budget_ms,
                   warmup_ms=warmup_ms if 0 <= warmup_ms < sent.warmup_ms else sent.warmup_ms,
                   overhead=sent.overhead and want.overhead is not False,
                   slow_cut_ratio=cut[0], slow_cut_floor_ms=cut[1])


@dataclass(frozen=True)
class EvalJob:
    """One evaluation for a worker: a task, a candidate, and how to judge it."""

    task: Task
    solution: Solution
    device: str = "cpu"
    """"cuda:0" (each GPU worker sees its own GPU as device 0) or "cpu" (tests and CI: pure-torch
    candidates only)."""
    seeds: tuple[int, ...] = (1,)
    """Public seeds, one input draw each per configuration; the worker mixes each with the secret
    (`correctness.derive_seed`), so a candidate cannot predict its inputs from them."""
    policy: Policy = field(default_factory=Policy)
    timing: TimingConfig = field(default_factory=TimingConfig)
    coverage: bool = False
    """Measure the share of GPU time in the candidate's own kernels (GPU workers only)."""
    max_output_bytes: int | None = None
    """Largest output the candidate may return. None: sized by the worker from the device's free memory
    and the task's footprint (`execute.memory_plan`); a number caps that further."""
    cache_dir: str | None = None
    """CUDAPERF_CACHE_DIR for the `cudaperf.cuda` helper (the build pool filled it)."""
    torch_extensions_dir: str | None = None
    """INLINE solutions: where the build pool built the extension (`toolchain.inline.extensions_dir_for`)."""
    unseen_nonce: int = 0
    """Drawn afresh for every job by the evaluator: it moves the unseen input sets' seeds
    (`unseen_seeds`), so no two jobs share them, and outputs a candidate kept in a worker's process-wide
    state during an earlier job never match them (the other seeds repeat, so references can be reused)."""

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("EvalJob.seeds is empty: give at least one public seed")
        if self.unseen_nonce < 0:
            raise ValueError(f"EvalJob.unseen_nonce={self.unseen_nonce}: give 0 or more")

    def timing_seeds(self) -> tuple[int, ...]:
        """Public seeds of the timing input sets: the correctness seeds first (their references exist
        already), then fresh ones above them until there are `timing.input_sets`."""
        wanted = self.timing.input_sets
        extra = tuple(max(self.seeds) + 1 + i for i in range(max(0, wanted - len(self.seeds))))
        return (self.seeds + extra)[:wanted]

    def unseen_seeds(self) -> tuple[int, ...]:
        """Public seeds of the unseen input sets (`TimingConfig.unseen_sets`): above every timing seed, so
        no function is given their inputs before their round. Their re-check index in the timing stage
        (and the referee's) is `timing.input_sets + j`, whatever the memory plan leaves of the rotated
        sets."""
        first = max(self.seeds + self.timing_seeds()) + 1 + self.unseen_nonce * self.timing.unseen_sets
        return tuple(first + j for j in range(self.timing.unseen_sets))


def job_message(job: EvalJob, secret: str) -> dict[str, Any]:
    """The wire form of a job: its record as JSON-ready data plus the secret (hex)."""
    return {**to_dict(job), "secret": secret}


def read_job(message: dict[str, Any]) -> tuple[EvalJob, str]:
    """(the job, the secret) from the wire form. The secret is popped from `message` first, so the dict
    the caller holds no longer contains it once candidate code can run; it is not a field of `EvalJob`,
    so the worker's record of the job never carries it either. Raises on a malformed job."""
    secret = str(message.pop("secret", ""))
    return from_dict(EvalJob, message), secret


@dataclass(frozen=True)
class EvalPayload:
    """What the worker's evaluation handler sends back for one job.

    The verdict fields (`outcome`, `stage`, `message`, `worker_poisoned`) are also what the sandbox reads
    from any handler's payload, and all the child sends when the handler itself failed."""

    outcome: Outcome | None = None
    """A fault that decided the evaluation (RUNTIME_ERROR, CUDA_ERROR, INVALID_SOLUTION...); None when
    the candidate ran and correctness decides (`evaluate.decide_outcome`)."""
    stage: str = ""
    """The stage that decided the outcome, or the last one reached."""
    message: str = ""
    correctness: tuple[ConfigCorrectness, ...] = ()
    timings: tuple[ConfigTiming, ...] = ()
    extra_baselines: dict[str, dict[str, Timing]] = field(default_factory=dict)
    """C tasks: {configuration: {"serial_c" | "naive_cuda" | "inout_restore": Timing}}, timed beside
    `timings`; the evaluator moves them into `ConfigTiming.baselines`."""
    flags: tuple[Flag, ...] = ()
    coverage: float | None = None
    kernel_time_ms: dict[str, float] = field(default_factory=dict)
    """GPU time of each of the candidate's own kernels, from the coverage profiler."""
    environment: dict[str, str] = field(default_factory=dict)
    """torch, cuda, python, device; on a GPU also gpu, capability, driver, memory_bytes."""
    durations_s: dict[str, float] = field(default_factory=dict)
    """Per stage, measured inside the worker."""
    worker_poisoned: bool = False
    """The CUDA context (or the process) is unusable: the pool must replace the worker."""


def read_payload(data: Any) -> EvalPayload:
    """The payload from the wire; one that does not parse is a HARNESS_ERROR payload saying why (the
    handler is ours, so a malformed payload is cudaperf's fault, never the candidate's)."""
    try:
        return from_dict(EvalPayload, data or {})
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        text = f"the worker's payload is malformed: {type(exc).__name__}: {exc}"[:2000]
        return EvalPayload(Outcome.HARNESS_ERROR, "payload", text)


@dataclass(frozen=True)
class ProfileJob:
    """One candidate on one configuration for the process Nsight Compute profiles, written as JSON to a
    file in `temp_dir` (`to_dict`) and read by `execute.profile_target`."""

    task: Task
    solution: Solution
    config: str
    """The configuration's name."""
    temp_dir: str
    """The one directory the profiled process may write (its audit hook's temp root)."""
    calls: int = 1
    """Candidate calls inside the profiler range (after one warm-up call outside it)."""
