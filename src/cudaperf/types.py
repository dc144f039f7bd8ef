"""Shared vocabulary of cudaperf: frozen records and enums that every stage returns.

Covers: tasks and their input configurations, solutions, build results and ptxas resource usage,
per-configuration correctness and timing, flags raised by the anti-cheat and sanity checks, the final
`EvalResult`, structural `KernelFeatures` and the `RewardBreakdown`. Every record round-trips through
plain JSON (`to_dict` / `from_dict`), so results can be streamed to JSONL and read back.

Not covered: behaviour. This module imports neither torch nor CUDA and holds no logic beyond
serialisation, so it loads anywhere (CPU CI, trainer processes, Ray actors).

Units are in field names: `_ms` milliseconds, `_s` seconds, `_bytes` bytes.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


class Outcome(str, enum.Enum):
    """What happened to one evaluation, most specific first. Failures are values, never exceptions."""

    CORRECT = "correct"  # ran on every configuration and matched the reference
    INCORRECT = "incorrect"  # ran, but some output did not match (or was degenerate)
    SYNTAX_ERROR = "syntax_error"  # the solution file does not parse as Python
    INVALID_SOLUTION = "invalid_solution"  # no ModelNew, wrong constructor, wrong return type...
    POLICY_VIOLATION = "policy_violation"  # static or runtime anti-cheat rule broken
    COMPILE_ERROR = "compile_error"  # NVRTC / nvcc / load_inline failed
    RUNTIME_ERROR = "runtime_error"  # a Python exception while constructing or running the candidate
    CUDA_ERROR = "cuda_error"  # illegal address, misaligned access, launch failure...
    OUT_OF_MEMORY = "out_of_memory"  # GPU (or host) memory exhausted
    TIMEOUT = "timeout"  # a stage ran past its deadline (infinite loop, deadlock)
    CRASH = "crash"  # the worker process died (segfault, abort, killed)
    OUTPUT_TOO_LARGE = "output_too_large"  # the output exceeds the size allowed for the task
    SKIPPED = "skipped"  # a stage could not run here (e.g. no GPU); `message` says why
    HARNESS_ERROR = "harness_error"  # a fault of cudaperf or of the task itself, not of the candidate

    @property
    def ran(self) -> bool:
        return self in (Outcome.CORRECT, Outcome.INCORRECT)


class TaskKind(str, enum.Enum):
    PYTORCH = "pytorch"  # replace a PyTorch Model (KernelBench format)
    C = "c"  # parallelise a serial C function


class SolutionFormat(str, enum.Enum):
    FAST = "fast"  # CUDA compiled by NVRTC through cuda-core (cudaperf.cuda helper)
    INLINE = "inline"  # torch.utils.cpp_extension.load_inline (KernelBench compatibility)
    PYTORCH = "pytorch"  # no CUDA at all (only allowed when the policy permits torch ops)
    CUDA_C = "cuda_c"  # a plain .cu exposing a C entry point (C->CUDA tasks)


class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"  # reported, not penalised by the evaluator
    ERROR = "error"  # makes the evaluation fail (outcome becomes POLICY_VIOLATION or INCORRECT)


@dataclass(frozen=True)
class Flag:
    """Something a check noticed. `code` is a stable snake_case identifier (e.g. `impossible_speed`)."""

    code: str
    message: str
    severity: Severity = Severity.WARNING
    config: str | None = None  # the input configuration it concerns, if any
    line: int | None = None  # source line, for static findings


@dataclass(frozen=True)
class InputConfig:
    """One input configuration of a task: a name and the keyword arguments given to `get_inputs`.

    A configuration derived by the loader (`cudaperf.tasks.derived_configs`) also re-binds module-level
    integer constants of the task's source, is checked for correctness only, and may randomise the models'
    parameters; a declared one leaves those fields at their defaults."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    module_values: dict[str, Any] = field(default_factory=dict)  # task source re-run with these sizes
    timed: bool = True  # False: correctness only (derived configurations)
    randomize_parameters: bool = False  # parameters of both models set to the same random values


@dataclass(frozen=True)
class Tolerance:
    """allclose-style bounds, applied scale-aware to floating outputs (see correctness.py).
    `int_atol`: how many units an integer output may differ from the reference, absolute; 0 (the
    default) keeps integers exact. Only a task that says so sets it, e.g. 8-bit image outputs rounded
    from float arithmetic whose contraction differs between the host compiler and the GPU."""

    atol: float
    rtol: float
    int_atol: int = 0


@dataclass(frozen=True)
class Task:
    """A problem to solve. `source` is the text of the problem module (trusted code)."""

    task_id: str
    kind: TaskKind
    source: str
    configs: tuple[InputConfig, ...]
    path: str | None = None
    family: str | None = None
    tolerances: dict[str, Tolerance] = field(default_factory=dict)  # dtype name -> override
    allow_tf32: bool = False
    description: str = ""
    spec: dict[str, Any] = field(default_factory=dict)  # kind-specific declaration (C tasks: the CTask)
    notes: tuple[str, ...] = ()  # what the loader wants a reader to know (e.g. no derived configuration)


@dataclass(frozen=True)
class Solution:
    """A candidate answer to a task, as text."""

    solution_id: str
    source: str
    format: SolutionFormat
    path: str | None = None


@dataclass(frozen=True)
class ResourceUsage:
    """ptxas resource usage for one kernel entry point."""

    kernel: str
    arch: str
    registers: int
    smem_static_bytes: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0
    cmem_bytes: int = 0


@dataclass(frozen=True)
class BuildResult:
    """Outcome of turning a solution's CUDA into binaries (all CUDA units of one solution)."""

    ok: bool
    outcome: Outcome  # CORRECT means "built"; COMPILE_ERROR / SYNTAX_ERROR / SKIPPED otherwise
    format: SolutionFormat
    resources: tuple[ResourceUsage, ...] = ()
    log: str = ""  # compiler output, truncated
    duration_s: float = 0.0
    cache_hits: int = 0
    units: int = 0  # CUDA sources found and built
    message: str = ""


@dataclass(frozen=True)
class ConfigCorrectness:
    """Correctness of one input configuration over all its seeds."""

    config: str
    correct: bool
    seeds: int
    max_abs_error: float | None = None
    max_rel_error: float | None = None  # scale-aware: |d| / (atol + rtol*|ref|) max, <= 1 passes
    mismatch_fraction: float | None = None
    message: str = ""


@dataclass(frozen=True)
class Timing:
    """A summary of raw timing samples of one callable, in milliseconds."""

    median_ms: float
    iqr_ms: float  # interquartile range of the samples
    min_ms: float
    mean_ms: float
    n_samples: int
    host_ms_per_call: float | None = None  # wall-clock cross-check (synchronised), per call
    samples_ms: tuple[float, ...] = ()

    @property
    def spread(self) -> float:
        """IQR relative to the median."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else float("inf")


@dataclass(frozen=True)
class ConfigTiming:
    """Candidate and baselines timed interleaved on one configuration."""

    config: str
    candidate: Timing
    eager: Timing | None = None
    compiled: Timing | None = None
    baselines: dict[str, Timing] = field(default_factory=dict)  # other baselines (C tasks: serial_c,
    # naive_cuda), timed in the same run
    speed_of_light_ms: float | None = None  # the floor: max(bytes/bandwidth, flops/peak)
    bytes_moved: float | None = None
    flops: float | None = None
    overhead_ms: float | None = None  # an empty function's median in the same run: the protocol's own cost
    # (device synchronise, end event), inside every sample of every callable and not subtracted (timing.py)
    lead_us: float = 0.0  # how long the GPU was kept busy before each start event (timing.py, step 1)
    lead_kind: str = ""  # "persistent" (cudaperf.lead: write, then a clean read) or "memset" (its fallback)
    rounds: int = 0  # timed rounds of the interleaved bench (each function called once per round)
    dispose_ms: float = 0.0  # wall time of the bench's disposals, outside every sample (a refereed worker's
    # baseline outputs overwritten, their freed memory scrubbed, the device synchronised: timing.Disposed)
    unseen_slowdown: float | None = None  # the candidate on input sets it had not been given, relative to the
    # anchor, over the other rounds (timing.py, unseen rounds); past the limit `candidate` is from those alone

    @property
    def speedup_vs_eager(self) -> float | None:
        return self.eager.median_ms / self.candidate.median_ms if self.eager else None

    @property
    def speedup_vs_compile(self) -> float | None:
        return self.compiled.median_ms / self.candidate.median_ms if self.compiled else None

    def baseline_timing(self, baseline: str) -> Timing | None:
        """Any baseline's timing by name ('eager', 'compile', or a key of `baselines`)."""
        return {"eager": self.eager, "compile": self.compiled, **self.baselines}.get(baseline)

    def speedup(self, baseline: str) -> float | None:
        """Speedup against any baseline by name ('eager', 'compile', or a key of `baselines`)."""
        timing = self.baseline_timing(baseline)
        return (timing.median_ms / self.candidate.median_ms if timing and self.candidate.median_ms > 0
                else None)


@dataclass(frozen=True)
class EvalResult:
    """Everything known about one (task, solution) evaluation. Written as one JSONL line."""

    task_id: str
    solution_id: str
    outcome: Outcome
    message: str = ""
    stage: str = ""  # the stage that decided the outcome (build, static, import, correctness, timing...)
    correctness: tuple[ConfigCorrectness, ...] = ()
    timings: tuple[ConfigTiming, ...] = ()
    speedup_vs_eager: float | None = None  # geometric mean over timed configurations
    speedup_vs_compile: float | None = None
    speedups: dict[str, float] = field(default_factory=dict)  # geometric mean per baseline name
    coverage: float | None = None  # share of GPU time in the candidate's own kernels
    kernel_time_ms: dict[str, float] = field(default_factory=dict)  # GPU time per own kernel (profiler)
    build: BuildResult | None = None
    features: tuple[KernelFeatures, ...] = ()  # structural analysis (static; dynamic when profiled)
    flags: tuple[Flag, ...] = ()
    logs: str = ""  # candidate stdout/stderr and tracebacks, truncated
    stage_durations_s: dict[str, float] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)  # gpu, driver, torch, cuda versions
    created_at: str = ""

    @property
    def correct(self) -> bool:
        return self.outcome is Outcome.CORRECT


# --------------------------------------------------------------------------------------------------
# Structural analysis (issue: structural analysis and reward)


class CoalescingClass(str, enum.Enum):
    BROADCAST = "broadcast"
    COALESCED = "coalesced"
    STRIDED = "strided"  # constant stride c > 1 elements
    UNCOALESCED = "uncoalesced"  # symbolic stride along threadIdx.x
    UNKNOWN = "unknown"  # indirect or not analysable


@dataclass(frozen=True)
class MemoryAccess:
    line: int
    text: str
    space: str  # "global" | "shared"
    kind: str  # "load" | "store" | "atomic"
    coalescing: CoalescingClass | None = None
    stride_elements: int | None = None
    bank_conflict_degree: int | None = None  # shared memory only: 1 = none, 32 = worst
    vector_width: int = 1
    window: int = 1  # a per-thread window's requests that share their sectors (L1 serves them); 1 = none


@dataclass(frozen=True)
class Occupancy:
    arch: str
    block_size: int
    active_blocks_per_sm: int
    occupancy: float  # active warps / max warps per SM, in [0, 1]
    limiting_factors: tuple[str, ...] = ()  # "warps", "blocks", "registers", "shared_memory", "barriers"


@dataclass(frozen=True)
class KernelFeatures:
    """Static (and optionally dynamic) features of one kernel."""

    kernel: str
    resources: ResourceUsage | None = None
    occupancy: Occupancy | None = None
    accesses: tuple[MemoryAccess, ...] = ()
    barriers: int = 0
    divergent_barriers: tuple[int, ...] = ()  # lines of barriers under thread-dependent conditions
    redundant_barriers: tuple[int, ...] = ()
    atomics: int = 0
    vectorized_accesses: int = 0
    sass: dict[str, int] = field(default_factory=dict)  # feature -> count (ldg128, local, hmma, ...)
    flops_estimate: float | None = None
    bytes_estimate: float | None = None
    arithmetic_intensity: float | None = None
    roofline_regime: str | None = None  # "memory" | "compute"
    dynamic: dict[str, float] = field(default_factory=dict)  # ncu metrics when measured
    static: dict[str, float] = field(default_factory=dict)  # further static facts (padding, footprint...)
    diagnostics: tuple[str, ...] = ()


@dataclass(frozen=True)
class RewardBreakdown:
    total: float
    gate: float  # 0 or 1 (correctness gate)
    speedup_term: float = 0.0
    structural_term: float = 0.0
    ranker_term: float = 0.0
    details: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------
# Serialisation


# JSON has no NaN or infinities; records carry them (an all-NaN output's max error, an infinite ratio).
# They travel as these strings, and `from_dict` turns them back into floats wherever a float is expected.
NON_FINITE_JSON: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def to_dict(record: Any) -> Any:
    """A JSON-ready copy of a record (enums become their values, tuples lists, NaN and infinities the
    strings "NaN", "Infinity" and "-Infinity")."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: to_dict(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, enum.Enum):
        return record.value
    if isinstance(record, (list, tuple)):
        return [to_dict(x) for x in record]
    if isinstance(record, dict):
        return {str(k): to_dict(v) for k, v in record.items()}
    if isinstance(record, float) and not math.isfinite(record):
        return "NaN" if math.isnan(record) else ("Infinity" if record > 0 else "-Infinity")
    return record


def from_dict(cls: type[T], data: Any) -> T:
    """Inverse of `to_dict` for the records of this module (nested records, enums, tuples, optionals)."""
    return _convert(cls, data)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _convert(tp: Any, data: Any) -> Any:
    if data is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(args[0], data) if len(args) == 1 else data
    if origin is tuple:
        (inner, *_rest) = typing.get_args(tp) or (Any,)
        return tuple(_convert(inner, x) for x in data)
    if origin is dict:
        _k, v = typing.get_args(tp)
        return {k: _convert(v, x) for k, x in data.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if tp is float and isinstance(data, str) and data in NON_FINITE_JSON:
        return NON_FINITE_JSON[data]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        return tp(**{k: _convert(hints[k], v) for k, v in data.items() if k in names})
    return data
