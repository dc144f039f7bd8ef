"""Timing of a candidate and its baselines, interleaved, inside the GPU worker.

Covers `bench_interleaved` (the contract: `dict[str, Timing]`) and `bench_interleaved_report` (the same run
with everything it noticed), `summarize` (median, IQR, min, mean of raw samples), `compile_baseline` (the
torch.compile baseline: static shapes, no on-device autotuning, no threads) and the sizing of the flush
(`default_l2_flush_bytes`,
`lead_flush_bytes`, `lead_sized_flush_bytes`). The protocol, per timed call (Triton's do_bench, with the
hacks of docs/evaluation.md in mind):

1. the lead (`cudaperf.lead`, one persistent kernel): write a buffer of at least 2x the L2 size, so no call
   finds its inputs in L2 left by the previous one, then read 2x L2 of it back so L2 holds clean lines.
   The write is sized to last `lead_us` (default 200 µs; `lead_flush_bytes`): while the GPU works, the
   host records the start event and runs the function's host path (Python, allocation, launch), so the
   sample starts with the function's first kernel queued, not with the GPU waiting for the host;
2. record a start event on the stream current when timing began;
3. call the function;
4. `torch.cuda.synchronize()`: a FULL device synchronisation, so work the function left on a side stream
   or another device queue is finished before the end event (hack #4: an end event on the current stream
   alone fires before side-stream work is done);
5. record the end event on the same stream, synchronise, read the host clock.

Consequence, on purpose: every sample includes the synchronisation latency and the end event's submission
(~10 µs on an H200), identical for the candidate and the baselines. The report measures it with an empty
function under the same protocol (`BenchReport.overhead`) so it can be shown beside the times; Timing values
are NOT corrected for it (docs/evaluation.md, measured pitfalls). Other defences: functions run interleaved
in a shuffled order each round (CUDA-L1), input sets rotate round-robin, and on a sample of rounds the
contents of another input set are copied into the tensors about to be used, so a result cached by pointer,
shape or call count is wrong and `check` catches it (hacks #3, #15). A function can tell those rounds apart
(an input's version counter moves when contents are copied in), so the functions named in `silent_checks`
(the candidate) also have their output checked, after the call, on a second random sample of the other
rounds, on the contents they ran on: rounds the function cannot tell from the unchecked ones, so skipping
work in enough of them to move a median (over half) is caught but with a chance under 2^-SILENT_CHECKS_MIN
(hack #14). Outputs kept by input contents (a memo: right every time on rotated sets, whether it reads the
inputs whole or samples them) are met by unseen rounds: `unseen_sets` are input sets no function has been
given (held anywhere, or drawn by a function at their round), each brought to the device and copied into a
rotated set's tensors for exactly one timed round, every output re-checked against it (check index
`len(input_sets) + j`). A memo misses there and computes, so a function in `silent_checks` whose time
relative to `anchor` in the same round is, in each of its unseen rounds (`UNSEEN_QUORUM`; or in all but one
with their median past `UNSEEN_STRONG_SLOWDOWN`), over `UNSEEN_SLOWDOWN_LIMIT` times its median ratio in the
other rounds is timed from its unseen rounds alone and flagged (`unseen_inputs_slower`, WARNING: its timing
is corrected, not thrown away; `BenchReport.unseen_slowdown` holds the median over its unseen rounds of that
relative ratio, judged or not). A per-call host clock brackets each event pair and a sample whose event time
exceeds its host time is counted as a clock violation (hack #7). A function given as `Disposed(fn, dispose,
settle)` has every output handed to `dispose` once its sample is taken and its re-check done, before the
next call of any function; its `settle()` runs before the next call of a function that is not `Disposed`
(nor the empty one), and before the run returns or raises, once for all the disposals since it last ran. So
a caller can overwrite a baseline's outputs (the right answers) after each call and finish the work common
to them (the freed memory's overwrite, the wait for the device) once before the candidate's code runs again,
not after each baseline call. Both run outside every timed window; their time is left out of the round
estimate (the same number of rounds) and out of the loop's host total (`clock_consistent` as tight), and
reported (`BenchReport.dispose_ms`, `settles`).

How long the lead is, per function (`lead_launches`): a lead shorter than a function's host path leaves
the GPU idle inside its samples (the sample then holds host time, and a slower CPU makes the function look
slower: torch.compile's wrapper, dynamo guards and launches came to ~0.1 ms more than the lead in one of
two H200 runs and the compile baseline's cross-run figure was 35%, eager's 5%; dev/LOG.md). So the
untimed warm-up measures each function's host path (the host clock from just before `fn(inputs)` to its
return), and each timed call of that function queues as many lead launches as cover 1.5x its p90
(`LEAD_MARGIN`), at most `MAX_LEAD_LAUNCHES`; a timed sample whose host path still outlasted its lead
(a "host-bound sample") raises that function's count for the rest of the run. The same rule for every
function, candidate and baselines alike: each sample starts with the function's work queued, never
with the GPU waiting for the host; the launches, the host paths (median, p90), the host-bound samples
and the lead's GPU time are in the report. The garbage collector is paused during the timed rounds (as
`timeit` does), so a collection cannot land inside a host path. The legacy baseline protocol
(`host_timing`, A/B runs only) keeps one launch and the collector on.

Cut short (`SlowCut`, the RL mode's): where one function's median over the untimed estimate rounds (each
a call of every function under the same lead and events, one lead launch each, the leads not yet sized)
is past a floor and a ratio to its anchor's, those rounds are the samples and nothing more runs: no
warm-up, no re-check, no unseen round (`BenchReport.cut_slow` says so). The function cut short is
recorded as that slow, so it gains nothing by it.

CPU fallback: when the inputs live on the CPU (or `device="cpu"`), each call is timed with
`time.perf_counter_ns` and nothing is flushed. It exists so the tests and CPU mode can run the same code;
it is never used for reported GPU numbers.

Not covered: correctness (correctness.py; `check` is the caller's), speed-of-light (sol.py), a memo whose gain
is under `UNSEEN_SLOWDOWN_LIMIT` (it stays unflagged and keeps that gain), one that holds the unseen sets'
outputs before their rounds (native code reading held sets from this process's memory, or drawing a set itself
from what the caller's drawing function holds; the caller draws them per job, `EvalJob.unseen_nonce`, so no
earlier job saw them), an output updated from a kept one where only part of the inputs changed (every unseen
set is drawn whole, so no part is kept); and work a function queues on a stream that does not wait for the
timing stream: such work can run during the lead, before the start event, and be partly missing from the
sample. No lead design prevents it (dev/LOG.md, evaluation: timing); such calls are refused elsewhere, as
errors: the static rule `stream_created` and the profiler's stream check, which counts kernels and copies on
any stream but the current one (anticheat.coverage).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import random
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from cudaperf.correctness import clone_inputs, flatten_tensors, inputs_mutated
from cudaperf.host_timing import LEGACY, baseline_protocol
from cudaperf.lead import Lead
from cudaperf.types import Flag, Severity, Timing

_now_ns = time.perf_counter_ns  # bound at import: a candidate replacing time.perf_counter_ns later
# cannot change the harness's clock (the replacement is also flagged by anticheat.runtime)
OVERHEAD_NAME = "<empty>"  # the empty function that measures the protocol's own cost
DEFAULT_L2_BYTES = 50 * 1024 * 1024  # when the device reports no L2 size (an H200 reports 60 MiB)
DEFAULT_LEAD_US = 200.0  # how long the pre-call write keeps the GPU busy (module docstring, step 1)
LEAD_MEMORY_FRACTION = 1 / 64  # the lead's buffer never takes more of the device's memory than this
ESTIMATE_ROUNDS = 3
LEAD_MARGIN = 1.5  # the leads cover this many times a function's p90 host path
MAX_LEAD_LAUNCHES = 8  # at most this many lead launches before one call (8 x 200 µs on an H200)
# Unseen rounds (module docstring): a function in `silent_checks` more than this many times slower, relative
# to the anchor in the same round, on unseen contents than on the rotated ones, in at least this share of
# its unseen rounds (all of them), is timed from its unseen rounds alone. Every round rather than their
# median: on the 2-core CPU the median of five honest rounds passed 1.25 in 4 of 96 configurations, four
# of five rounds in 2 of 96 (a 2 µs matrix product: 9 of 60 runs), all five in 1 of 60 runs of that
# product; a memo is slower in every unseen round (dev/LOG.md). A memo gaining less than the limit, or
# not much more (noise can bring one of its rounds under it), keeps its gain.
UNSEEN_SLOWDOWN_LIMIT = 1.25
UNSEEN_QUORUM = 1.0
# ... or past the limit in every unseen round but one, with the median of them past this: one round's
# anchor sample disturbed (5.16 ms against its 0.7 ms median, the CPU under load) spared a 5.45x memo. The
# honest medians recorded stayed under it (CPU: at most 1.41 over 144 configurations; H100, RL mode with
# the sets held on the host: at most 1.86 over 72).
UNSEEN_STRONG_SLOWDOWN = 2.5
UNSEEN_MIN_ROUNDS = 3  # fewer unseen rounds than this (a short run): no slowdown is judged
UNSEEN_LAYOUT = "every unseen input set needs the layout (shapes, dtypes) of input_sets[0]"
# An unseen input set: its contents (any device), or a function drawing them, called at its round alone
UnseenSet = list | Callable[[], list]
# A function whose host path per call exceeds its measured (GPU) time this many times over, behind a lead
# lengthened for it, is flagged: work its host does inside the lead is in no sample (`host_path_hidden`).
HOST_HIDDEN_RATIO = 2.0

Fn = Callable[[list], object]
Check = Callable[[str, int, object], bool]


class Disposed(NamedTuple):
    """A function to time whose every output goes to `dispose(output)` after its clock stopped and its
    re-check (if any) is done, before the next call of any function; `settle()` (if given) runs before
    the next call of a function that is not `Disposed`, and at the end, after one or more disposals
    (module docstring). `Disposed` functions sharing one `settle` (equal callables) settle together. The
    bench calls `fn` itself inside the timed window: the wrapper adds no work there."""

    fn: Fn
    dispose: Callable[[object], None]
    settle: Callable[[], None] | None = None

Hold = Callable[[], AbstractContextManager[Any]]


class FunctionFailed(Exception):
    """A timed function raised; `name` says which, `error` is the original exception (for classification)."""

    def __init__(self, name: str, error: BaseException):
        super().__init__(f"{name}: {type(error).__name__}: {error}")
        self.name, self.error = name, error


@dataclass(frozen=True)
class SlowCut:
    """When the bench stops after its estimate rounds (`bench_interleaved_report(slow_cut=...)`): `name`'s
    median sample over those rounds is at least `floor_ms` and at least `ratio` times `anchor`'s. Every
    function is then timed from those rounds alone (`ESTIMATE_ROUNDS` samples each, the same protocol,
    in a fixed order, no output re-checked) and the report says why (`BenchReport.cut_slow`). For a
    caller whose reward gives no more for the rounds past that point (the RL mode, `eval_modes`): a
    function cut short is recorded slow, so nothing is gained by being cut (module docstring)."""

    name: str
    anchor: str
    ratio: float
    floor_ms: float

    def __post_init__(self) -> None:
        if not (self.ratio > 1 and self.floor_ms >= 0):
            raise ValueError(f"SlowCut: ratio={self.ratio} must be above 1 and floor_ms={self.floor_ms} "
                             "at least 0")


@dataclass(frozen=True)
class BenchReport:
    """Everything one interleaved run measured and noticed."""

    timings: dict[str, Timing]
    overhead: Timing | None  # the empty function under the same protocol (sync + event latency)
    device: str
    rounds: int
    warmup_rounds: int
    l2_flush_bytes: int
    host_total_ms: float  # perf_counter around the whole timed loop, less the time spent disposing
    event_total_ms: float  # sum of every timed sample
    checks: dict[str, int] = field(default_factory=dict)  # outputs re-checked, per function
    check_failures: dict[str, int] = field(default_factory=dict)
    input_mutations: dict[str, int] = field(default_factory=dict)  # seen on checked calls
    clock_violations: dict[str, int] = field(default_factory=dict)  # samples with event > host time
    stream_changes: dict[str, int] = field(default_factory=dict)  # calls that left another stream current
    lead_us: float = 0.0  # what the flush was sized to last (0: sized by hand, or no flush)
    lead_kind: str = ""  # "persistent" (cudaperf.lead), "memset" (its fallback) or "" (no flush, CPU)
    lead_median_ms: dict[str, float] = field(default_factory=dict)  # the lead's own median per function
    # How long each function's lead was and whether it covered the host path (module docstring):
    lead_launches: dict[str, int] = field(default_factory=dict)  # per call, at the end of the run
    lead_launch_ms: float = 0.0  # one launch's median GPU time in the warm-up (0: no lead)
    warmup_host_path_p90_ms: dict[str, float] = field(default_factory=dict)  # what set the launches
    host_path_median_ms: dict[str, float] = field(default_factory=dict)  # fn(inputs) on the host clock
    host_path_p90_ms: dict[str, float] = field(default_factory=dict)
    host_bound_samples: dict[str, int] = field(default_factory=dict)  # host path > the sample's lead
    dispose_ms: float = 0.0  # wall time in `Disposed.dispose` and `.settle` calls (outside the samples)
    disposals: int = 0  # `Disposed.dispose` calls, all of the run
    settles: int = 0  # `Disposed.settle` calls
    unseen_rounds: tuple[int, ...] = ()  # the timed rounds (sample indices) on unseen input sets
    # per function in `silent_checks`: the median of its unseen rounds' ratios to the anchor relative to the
    # others' (`unseen_relative`); where the quorum of them is past `UNSEEN_SLOWDOWN_LIMIT`, `timings`
    # holds the unseen rounds' samples alone and `all_rounds_median_ms` the median it replaced
    unseen_slowdown: dict[str, float] = field(default_factory=dict)
    all_rounds_median_ms: dict[str, float] = field(default_factory=dict)
    cut_slow: dict[str, str] = field(default_factory=dict)  # function -> why the run stopped after its
    # estimate rounds (`SlowCut`); empty: it ran its rounds

    def flags_for(self, name: str, config: str | None = None) -> tuple[Flag, ...]:
        """The problems this run saw for one function, as flags (ERROR: the timing cannot be trusted)."""
        found = [
            ("timed_output_mismatch", self.check_failures, "re-checked outputs were wrong during timing"),
            ("timed_input_mutation", self.input_mutations, "inputs were modified during timing"),
            ("timer_inconsistent", self.clock_violations, "event time exceeded the host clock"),
            ("stream_changed", self.stream_changes, "calls left a different CUDA stream current"),
        ]
        errors = tuple(Flag(code, f"{name}: {counts[name]} {text}", Severity.ERROR, config)
                       for code, counts, text in found if counts.get(name))
        hidden = self.host_path_hidden(name, config)
        unseen = self.unseen_slower(name, config)
        cut = (Flag("timing_cut_slow", self.cut_slow[name], Severity.INFO, config) if name in self.cut_slow
               else None)
        return errors + tuple(f for f in (hidden, unseen, cut) if f is not None)

    def unseen_slower(self, name: str, config: str | None = None) -> Flag | None:
        """A WARNING when `name` was timed from its unseen rounds alone (module docstring)."""
        if name not in self.all_rounds_median_ms:
            return None
        return Flag("unseen_inputs_slower", f"{name}: {self.unseen_slowdown[name]:.2f}x slower (median) on "
                    f"input sets it had not been given before than on the rotated ones (relative to the same "
                    f"rounds' anchor; over {UNSEEN_SLOWDOWN_LIMIT}x in every one of those rounds, or in all "
                    f"but one with a median over {UNSEEN_STRONG_SLOWDOWN}x), as outputs kept by input "
                    f"contents would be: timed from those "
                    f"{len(self.unseen_rounds)} rounds alone, "
                    f"{self.timings[name].median_ms:.4g} ms, not {self.all_rounds_median_ms[name]:.4g} ms",
                    Severity.WARNING, config)

    def host_path_hidden(self, name: str, config: str | None = None) -> Flag | None:
        """A WARNING when `name`'s host path per call is over `HOST_HIDDEN_RATIO` times its measured time
        and its lead was lengthened to cover it: the samples are GPU time, so host-side work done inside
        the lead (Python, a CPU computation) is in none of them; said plainly, not penalised."""
        host, timing = self.host_path_median_ms.get(name), self.timings.get(name)
        if host is None or timing is None or self.lead_launches.get(name, 0) < 2:
            return None
        measured = max(timing.median_ms, 1e-9)
        if host <= HOST_HIDDEN_RATIO * measured:
            return None
        return Flag("host_path_hidden", f"{name}: its host path takes {host:.3f} ms per call (median), "
                    f"{host / measured:.1f}x its measured time of {timing.median_ms:.3f} ms; the time is the "
                    f"GPU's, behind a lead of {self.lead_launches[name]} launches, so work on the host "
                    "inside that lead is not in it", Severity.WARNING, config)

    @property
    def overhead_ms(self) -> float | None:
        """The empty function's median: the protocol's own cost inside every sample."""
        return self.overhead.median_ms if self.overhead is not None else None

    @property
    def clock_consistent(self) -> bool:
        """The summed event times fit inside the host time of the whole loop (else a timer was tampered)."""
        return self.event_total_ms <= self.host_total_ms * 1.001 + 0.01


def summarize(samples_ms: Sequence[float], host_ms_per_call: float | None = None) -> Timing:
    """Median, interquartile range, min and mean of raw samples (milliseconds)."""
    if not samples_ms:
        raise ValueError("summarize needs at least one sample")
    ordered = sorted(samples_ms)
    one = len(ordered) == 1
    q1, _, q3 = (ordered[0],) * 3 if one else statistics.quantiles(ordered, n=4, method="inclusive")
    return Timing(median_ms=statistics.median(ordered), iqr_ms=q3 - q1, min_ms=ordered[0],
                  mean_ms=statistics.fmean(ordered), n_samples=len(ordered),
                  host_ms_per_call=host_ms_per_call, samples_ms=tuple(samples_ms))


# Inductor settings of the stable baseline protocol (`compile_baseline`), applied to its compiles only.
STABLE_INDUCTOR_OPTIONS: dict[str, Any] = {
    "deterministic": True,  # reductions: one heuristic configuration, no on-device tuning of it
    "triton.autotune_pointwise": False,  # pointwise kernels: the heuristic configuration, not the fastest
    "autotune_local_cache": False,  # no configuration chosen by an earlier run on this machine
}


def compile_baseline(model: Callable, first_run_hold: Hold | None = None, **options: Any) -> Callable:
    """`torch.compile(model, **options)` with Inductor compiling in this process (compile_threads = 1),
    under the stable baseline protocol unless `CUDAPERF_BASELINE_PROTOCOL=legacy` (`host_timing`).

    The stable protocol (issue 18: torch.compile's time of the same 67 dataset tasks differed by a median
    46% between two H200 leases, eager's by 6%):
    - static shapes, `dynamic=False` unless the caller says otherwise: every configuration's shapes get
      their own graph and kernels. With torch's default (`dynamic=None`) the second shape seen recompiles
      the graph with dynamic shapes, so the order in which configurations are compiled decided which
      kernels were timed;
    - no on-device benchmarking (`STABLE_INDUCTOR_OPTIONS`): at a kernel's first run Inductor times several
      Triton configurations and keeps the fastest (and caches the choice on the machine), and a few percent
      of noise there picks different kernels on different leases. `deterministic` fixes reductions to one
      heuristic configuration; `triton.autotune_pointwise=False` does the same for pointwise kernels (the
      deterministic mode still lets them be tuned).
    The cost, said wherever the baseline is reported: this is Inductor's default-mode code with heuristic
    launch configurations, not its best tuned code, so the baseline can be slower than a tuned compile
    (the first compile is faster: nothing is benchmarked). Options a torch build lacks are left out.

    Why in-process compiles: with its default worker pool, Inductor finishes compiles (a recompile for a
    new input set, say) on background threads and starts a `subproc_worker_timer` thread at any time,
    including inside a candidate's watched window, where it would be blamed on the candidate (seen on the
    H200). For the same reason tqdm's monitor thread is switched off: a progress bar inside the compile
    started a `tqdm_monitor` thread on the H200 (tqdm documents `monitor_interval = 0` for this).

    `first_run_hold` (a context-manager factory): the model is compiled as one graph (`fullgraph=True`: a
    graph break raises while tracing, before anything runs) by Inductor, the CPU work outside the hold,
    and each compiled graph's first run (where Triton autotunes, on the GPU, under the legacy protocol)
    inside it, synchronised before it is left. The dataset measurement holds its GPU lock only there, not
    for the seconds of CPU compile. Dynamo traces with fake tensors and Inductor compiles without
    launching kernels, except at the process's first GPU compile, when Inductor sets itself up on GPU
    tensors: that compile is held whole (tests/gpu checks both with the profiler)."""
    try:
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
    except (ImportError, AttributeError):  # a torch without Inductor: torch.compile reports it itself
        pass
    try:
        import tqdm.std

        tqdm.std.tqdm.monitor_interval = 0
    except ImportError:  # no tqdm, no monitor thread
        pass
    inductor_options = None
    if baseline_protocol() != LEGACY:
        options.setdefault("dynamic", False)
        inductor_options = stable_inductor_options()
    if first_run_hold is None:
        return torch.compile(model, options=inductor_options, **options)
    backend = _inductor_holding_first_run(first_run_hold, options.get("dynamic"), inductor_options)
    return torch.compile(model, backend=backend, fullgraph=True, **options)


def stable_inductor_options() -> dict[str, Any]:
    """`STABLE_INDUCTOR_OPTIONS` less the ones this torch's Inductor does not know."""
    try:
        from torch._inductor import config as inductor_config
    except ImportError:
        return {}
    known = inductor_config.get_config_copy()
    return {k: v for k, v in STABLE_INDUCTOR_OPTIONS.items() if k in known}


def _inductor_holding_first_run(hold: Hold, dynamic: bool | None,
                                inductor_options: dict[str, Any] | None = None) -> Callable:
    """What `torch.compile(backend="inductor", options=inductor_options)` builds (default mode), with each
    compiled graph's first run inside `hold`: torch's own wrapper class, so Dynamo treats it as Inductor.
    Built on call, so a torch without that (private) class fails here, not at import."""

    class InductorHoldingFirstRun(torch._TorchCompileInductorWrapper):
        def __call__(self, model_: Any, inputs_: Any, **kwargs: Any) -> Callable:
            if not _needs_inductor_set_up(inputs_):
                return _first_call_held(super().__call__(model_, inputs_, **kwargs), hold)
            with hold():  # the process's first GPU compile: Inductor's one-time set-up uses GPU tensors
                compiled = super().__call__(model_, inputs_, **kwargs)
                torch.cuda.synchronize()
            _INDUCTOR_SET_UP_ON_GPU.append(True)
            return _first_call_held(compiled, hold)

    return InductorHoldingFirstRun(None, inductor_options, dynamic)


# Inductor's pattern matcher sets itself up once per process, at the first compile, by tracing its patterns
# on example tensors of the GPU (`fx_passes/*._init`, functools.cache'd): 24 host-to-device and 24
# device-to-device copies outside any hold on the H200 (torch 2.11). That first compile is held whole.
_INDUCTOR_SET_UP_ON_GPU: list[bool] = []


def _needs_inductor_set_up(example_inputs: Any) -> bool:
    """True for the process's first compile with a CUDA tensor among its example inputs."""
    if _INDUCTOR_SET_UP_ON_GPU:
        return False
    return any(getattr(getattr(x, "device", None), "type", None) == "cuda" for x in example_inputs)


def _first_call_held(fn: Callable, hold: Hold) -> Callable:
    first = [True]

    def call(*args: Any) -> Any:
        if not first[0]:
            return fn(*args)
        first[0] = False
        with hold():
            out = fn(*args)
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()  # nothing of the first run left on the GPU once the hold ends
        return out

    if getattr(fn, "_boxed_call", False):  # Dynamo's calling convention for the compiled graph
        call._boxed_call = True  # type: ignore[attr-defined]
    return call


def default_l2_flush_bytes(device: str | torch.device) -> int:
    """2x the device's L2 (so one write evicts everything); 0 on CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or DEFAULT_L2_BYTES
    return 2 * int(l2)


def lead_flush_bytes(l2_flush_bytes: int, l2_flush_us: float, lead_us: float, cap_bytes: int) -> int:
    """The pre-call write's size: `l2_flush_bytes` (2x L2) at least, scaled so it lasts `lead_us` at the
    rate measured for that write (`l2_flush_us`), at most `cap_bytes`; whole MiB."""
    if l2_flush_bytes <= 0:
        return 0
    wanted = l2_flush_bytes * max(lead_us, 0.0) / max(l2_flush_us, 1e-3)
    mib = 1 << 20
    return max(l2_flush_bytes, min(math.ceil(wanted / mib) * mib, cap_bytes))


@functools.cache
def lead_sized_flush_bytes(device: str, lead_us: float = DEFAULT_LEAD_US) -> int:
    """`lead_flush_bytes` for a CUDA device, with the lead kernel's 2x L2 write timed there (median of 5,
    after 3 untimed); once per process, device and lead. The write lasts `lead_us`; the lead's clean
    read of 2x L2 comes on top (~25 µs on an H200)."""
    base = default_l2_flush_bytes(device)
    if base == 0 or lead_us <= 0:
        return base
    lead = Lead(torch.device(device), base)  # the write alone; the clean read adds ~2x L2 / bandwidth
    times_us = []
    for i in range(8):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        lead()
        end.record()
        end.synchronize()
        if i >= 3:
            times_us.append(start.elapsed_time(end) * 1e3)
    del lead
    total = torch.cuda.get_device_properties(device).total_memory
    return lead_flush_bytes(base, statistics.median(times_us), lead_us, int(total * LEAD_MEMORY_FRACTION))


def lead_launches(host_path_p90_ms: float, launch_ms: float, margin: float = LEAD_MARGIN,
                  cap: int = MAX_LEAD_LAUNCHES) -> int:
    """Lead launches to queue before one call so the lead outlasts the call's host path: enough launches
    of `launch_ms` (one launch's GPU time) to cover `margin` x `host_path_p90_ms`, at least 1, at most
    `cap`; 0 when there is no lead (`launch_ms` <= 0)."""
    if launch_ms <= 0:
        return 0
    wanted = math.ceil(margin * max(host_path_p90_ms, 0.0) / launch_ms)
    return max(1, min(cap, wanted))


def quantile(values: Sequence[float], q: float) -> float:
    """The `q` quantile of `values` (nearest rank, the higher one; `values` not empty)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# --------------------------------------------------------------------------------------------------
# Clocks: one timed call each


class _Call(NamedTuple):
    """One timed call: the output, the sample (start to end event), the host clock around it all, the
    lead's own duration (its events; every launch of it), whether the call left another stream current,
    and the function's host path (the host clock from just before `fn(inputs)` to its return)."""

    out: object
    event_ms: float
    host_ms: float
    lead_ms: float
    stream_changed: bool
    fn_host_ms: float


class _CpuClock:
    """Test aid: perf_counter around the call, no flush. Never used for reported GPU numbers."""

    device = "cpu"
    flush_bytes = 0
    lead_us = 0.0
    lead_kind = ""

    def time_call(self, fn: Fn, inputs: list, leads: int = 1) -> _Call:
        start = _now_ns()
        out = fn(inputs)
        elapsed_ms = (_now_ns() - start) / 1e6
        return _Call(out, elapsed_ms, elapsed_ms, 0.0, False, elapsed_ms)


class _CudaClock:
    """The protocol of the module docstring: flush, start event, call, device sync, end event."""

    def __init__(self, device: torch.device, flush_bytes: int, lead_us: float = 0.0):
        self.device = str(device)
        self.lead_us = lead_us
        self.stream = torch.cuda.current_stream(device)
        self.lead = (Lead(device, flush_bytes, default_l2_flush_bytes(device), exit_together=True)
                     if flush_bytes else None)
        self.flush_bytes = self.lead.flush_bytes if self.lead else 0  # whole chunks
        self.lead_kind = self.lead.kind if self.lead else ""

    def time_call(self, fn: Fn, inputs: list, leads: int = 1) -> _Call:
        lead, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        host_start = _now_ns()
        lead.record(self.stream)
        if self.lead is not None:
            for _ in range(max(leads, 1)):
                self.lead()  # queued ahead of the start event (module docstring, step 1; cudaperf.lead)
        start.record(self.stream)
        fn_start = _now_ns()
        out = fn(inputs)
        fn_host_ms = (_now_ns() - fn_start) / 1e6
        torch.cuda.synchronize(self.stream.device)  # every stream of the device, not just ours (hack #4)
        end.record(self.stream)
        end.synchronize()
        host_ms = (_now_ns() - host_start) / 1e6
        stream_changed = torch.cuda.current_stream(self.stream.device) != self.stream
        if stream_changed:
            torch.cuda.set_stream(self.stream)
        return _Call(out, start.elapsed_time(end), host_ms, lead.elapsed_time(start), stream_changed,
                     fn_host_ms)


def _make_clock(device: torch.device, flush_bytes: int | None, lead_us: float) -> _CpuClock | _CudaClock:
    if device.type != "cuda":
        return _CpuClock()
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if flush_bytes is not None:
        return _CudaClock(device, flush_bytes)
    return _CudaClock(device, lead_sized_flush_bytes(str(device), lead_us), lead_us)


def _infer_device(input_sets: Sequence[Sequence[Any]]) -> torch.device:
    tensors = [t for inputs in input_sets for t in flatten_tensors(list(inputs))]
    return tensors[0].device if tensors else torch.device("cpu")


# --------------------------------------------------------------------------------------------------
# The interleaved run


def bench_interleaved(
    fns: dict[str, Fn | Disposed], input_sets: list[list], *, budget_ms: float = 1000.0,
    warmup_ms: float = 100.0, l2_flush_bytes: int | None = None, check: Check | None = None, **options: Any,
) -> dict[str, Timing]:
    """Time every function of `fns` on rotating `input_sets`, interleaved; see the module docstring.
    `options` go to `bench_interleaved_report`."""
    return bench_interleaved_report(fns, input_sets, budget_ms=budget_ms, warmup_ms=warmup_ms,
                                    l2_flush_bytes=l2_flush_bytes, check=check, **options).timings


def bench_interleaved_report(
    fns: dict[str, Fn | Disposed],
    input_sets: list[list],
    *,
    budget_ms: float = 1000.0,
    warmup_ms: float = 100.0,
    l2_flush_bytes: int | None = None,
    lead_us: float = DEFAULT_LEAD_US,
    check: Check | None = None,
    device: str | torch.device | None = None,
    min_reps: int = 10,
    max_reps: int = 1000,
    check_fraction: float = 0.1,
    measure_overhead: bool = True,
    seed: int = 0,
    silent_checks: frozenset[str] = frozenset(),
    unseen_sets: Sequence[UnseenSet] = (),
    anchor: str | None = None,
    slow_cut: SlowCut | None = None,
) -> BenchReport:
    """Time `fns` (name -> fn(inputs), or a `Disposed` one) over `input_sets`.

    `budget_ms` is the timed budget PER FUNCTION (so the whole run takes about budget x len(fns)): the
    number of rounds is budget / (estimated round time / len(fns)), clamped to [min_reps, max_reps]; a
    slow function gets the same number of samples as a fast one, so the run takes longer than the budget
    when their times differ a lot. `warmup_ms` likewise sizes the untimed warm-up rounds. `l2_flush_bytes`:
    None = 2x L2 or more, sized so the write lasts `lead_us` (`lead_sized_flush_bytes`); 0 = no flush; a
    number = exactly that. `check(name, input_index, output) -> bool` re-checks outputs on a
    `check_fraction` sample of rounds (at least one per input set); the functions in `silent_checks` have
    their output re-checked on a second sample of the other rounds too (`SILENT_FRACTION` of them, at
    least `SILENT_CHECKS_MIN`), on the contents the round ran on (its own set's). `unseen_sets` (same
    layout as `input_sets[0]`, any device, or functions drawing such a set, called at its round) each get
    one timed round of their own (check index `len(input_sets) + j`), as many as the rounds after the
    first `len(input_sets)` allow; `anchor`: the function the unseen rounds' slowdown is judged against
    (None: the raw samples); `slow_cut`: stop after the estimate rounds when its function is that much
    slower than its anchor there (`SlowCut`). Raises
    `FunctionFailed` when a function raises (the caller classifies `.error`).
    """
    if not input_sets or not fns:
        raise ValueError("bench_interleaved needs at least one function and one input set")
    run = _Run(fns, input_sets, check, _make_clock(torch.device(device) if device else
                                                      _infer_device(input_sets), l2_flush_bytes, lead_us),
               random.Random(seed), measure_overhead, adapt_leads=baseline_protocol() != LEGACY,
               silent_checks=silent_checks, unseen_sets=unseen_sets)
    try:
        round_ms = run.estimate_round_ms()
        cut = run.cut_reason(slow_cut)
        if cut:
            run.adopt_estimate()
            return run.report(ESTIMATE_ROUNDS, 0, anchor, cut_slow={slow_cut.name: cut})
        warmup_rounds = _clamp(math.ceil(warmup_ms * len(fns) / round_ms), 1, max_reps)
        run.warm_up(warmup_rounds)
        per_fn_ms = (round_ms + run.set_lead_launches()) / len(fns)
        rounds = _clamp(int(budget_ms / per_fn_ms), min_reps, max_reps)
        unseen = _unseen_rounds(rounds, len(input_sets), len(run.unseen), run.rng)
        checked = _check_rounds(rounds, len(input_sets), check_fraction, run.rng, unseen.keys()) if check \
            else set()
        silent = _silent_rounds(rounds, checked | unseen.keys(), run.rng) if run.silent_checks else set()
        with run.collector_paused():
            run.timed(rounds, checked, silent, unseen)
    finally:
        run.settle()  # whatever runs after the bench, the candidate's code included, finds nothing owed
    return run.report(rounds, warmup_rounds, anchor)


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def _check_rounds(rounds: int, n_sets: int, fraction: float, rng: random.Random,
                  taken: Collection[int] = ()) -> set[int]:
    """Rounds whose outputs are re-checked on the rotated sets: the first round on each input set, and a
    random sample of `fraction` of the rounds (at least one per set) drawn from the later ones not `taken`
    (the unseen rounds): contents a function has been given before are re-checked as often in a short run
    with unseen rounds as without them."""
    later = [r for r in range(n_sets, rounds) if r not in taken]
    chosen = set(range(min(n_sets, rounds)))
    chosen |= set(rng.sample(later, min(len(later), max(n_sets, math.ceil(fraction * rounds)))))
    return chosen


# The fewest rounds a function in `silent_checks` is re-checked in beyond the sampled ones (where there are
# that many): a function skipping its work in over half the rounds passes them all with a chance < 2^-4.
# And the share of the other rounds it is re-checked in: moving a median takes skipping over half of them,
# so a small share catches it all the same (1,000 rounds: 2^-18), at a fifth of the cost of 10% (a
# re-check is a bytewise comparison: on the CPU, 10% cost the default mode 10% of its evaluations/min).
SILENT_CHECKS_MIN = 4
SILENT_FRACTION = 0.02


def _unseen_rounds(rounds: int, n_sets: int, n_unseen: int, rng: random.Random) -> dict[int, int]:
    """round -> unseen set: one random round each among those after the first `n_sets` (each rotated
    set's first round is a checked one), as many sets as those rounds allow."""
    later = range(min(n_sets, rounds), rounds)
    return dict(zip(rng.sample(later, min(n_unseen, len(later))), range(n_unseen), strict=False))


def _silent_rounds(rounds: int, checked: set[int], rng: random.Random) -> set[int]:
    """A random sample of the rounds that are not `checked` (nor unseen): `SILENT_FRACTION` of them, at
    least `SILENT_CHECKS_MIN`."""
    plain = [r for r in range(rounds) if r not in checked]
    wanted = max(SILENT_CHECKS_MIN, math.ceil(SILENT_FRACTION * len(plain)))
    return set(rng.sample(plain, min(len(plain), wanted)))


class _Run:
    """State of one interleaved run: samples per function, counters, the clock."""

    def __init__(self, fns, input_sets, check, clock, rng, measure_overhead, adapt_leads=True,
                 silent_checks: frozenset[str] = frozenset(), unseen_sets: Sequence[UnseenSet] = ()):
        self.fns = {name: fn.fn if isinstance(fn, Disposed) else fn for name, fn in fns.items()}
        self.disposers = {name: fn.dispose for name, fn in fns.items() if isinstance(fn, Disposed)}
        self.settlers = {name: fn.settle for name, fn in fns.items()
                         if isinstance(fn, Disposed) and fn.settle is not None}
        self.unsettled: list[Callable[[], None]] = []  # settles owed by the disposals since the last one
        self.disposals = self.settles = 0
        if measure_overhead:
            self.fns[OVERHEAD_NAME] = lambda inputs: None
        self.input_sets, self.check, self.clock, self.rng = input_sets, check, clock, rng
        # also re-checked in a sample of the plain rounds (only where there is a check)
        self.silent_checks = silent_checks if check else frozenset()
        if not all(callable(s) or _same_layout(s, input_sets[0]) for s in unseen_sets):
            raise ValueError(UNSEEN_LAYOUT)
        self.unseen = list(unseen_sets)
        self.unseen_rounds: list[int] = []
        self.stable = adapt_leads  # the stable baseline protocol (host_timing): leads adapt, no collector
        self.adapt_leads = adapt_leads and bool(clock.lead_kind)  # ... where there is a lead to lengthen
        self.samples = {name: [] for name in self.fns}
        self.host = {name: [] for name in self.fns}
        self.leads = {name: [] for name in self.fns}
        self.fn_host = {name: [] for name in self.fns}  # timed samples' host paths
        self.warm_fn_host = {name: [] for name in self.fns}  # untimed calls' host paths
        self.warm_leads: list[float] = []  # untimed calls' lead GPU times (one launch each)
        self.launches = dict.fromkeys(self.fns, 1)
        self.launch_ms = 0.0
        self.counts = {key: dict.fromkeys(self.fns, 0) for key in
                       ("checks", "check_failures", "input_mutations", "clock_violations", "stream_changes",
                        "host_bound_samples")}
        self.host_total_ms = 0.0
        self.estimate_calls: dict[str, list[_Call]] = {name: [] for name in self.fns}  # their outputs dropped
        self.estimate_host_ms = 0.0  # the estimate rounds' host time, less their disposals
        self.dispose_ns = 0  # in `done_with`: left out of the round estimate and the loop's host total
        self.sources: list[int] = []  # checked rounds' contents sources still to use (`_pick_source`)

    def call(self, name: str, inputs: list) -> _Call:
        if name not in self.disposers and name != OVERHEAD_NAME:
            self.settle()  # what the disposals owe is done before such a function (the candidate) runs
        try:
            timed = self.clock.time_call(self.fns[name], inputs, self.launches[name])
        except Exception as error:  # re-raised with the function's name, for classification
            raise FunctionFailed(name, error) from error
        self.counts["stream_changes"][name] += timed.stream_changed
        return timed

    def done_with(self, name: str, timed: _Call) -> None:
        """The call's output to its function's `Disposed.dispose` (its sample is taken, its re-check done)."""
        dispose = self.disposers.get(name)
        if dispose is not None:
            began = _now_ns()
            dispose(timed.out)
            self.dispose_ns += _now_ns() - began
            self.disposals += 1
            settle = self.settlers.get(name)
            if settle is not None and settle not in self.unsettled:  # equal: a bound method made twice
                self.unsettled.append(settle)

    def settle(self) -> None:
        """Every `Disposed.settle` owed since the last one, once each (timed as the disposals are)."""
        if not self.unsettled:
            return
        began = _now_ns()
        owed, self.unsettled = self.unsettled, []
        for settle in owed:
            settle()
        self.dispose_ns += _now_ns() - began
        self.settles += len(owed)

    def untimed(self, name: str, inputs: list) -> _Call:
        """A warm-up call: its host path and its lead's GPU time feed `set_lead_launches`; returned without
        its output."""
        timed = self.call(name, inputs)
        self.done_with(name, timed)
        self.warm_fn_host[name].append(timed.fn_host_ms)
        self.warm_leads.append(timed.lead_ms / max(self.launches[name], 1))
        return timed._replace(out=None)

    def set_lead_launches(self) -> float:
        """Each function's lead launches from its warm-up host paths (`lead_launches`); returns what the
        added launches cost per round (ms), for sizing the timed rounds."""
        if not self.adapt_leads or not self.warm_leads:
            return 0.0
        self.launch_ms = statistics.median(self.warm_leads)
        for name, host in self.warm_fn_host.items():
            if host:
                self.launches[name] = lead_launches(quantile(host, 0.9), self.launch_ms)
        return sum(n - 1 for n in self.launches.values()) * self.launch_ms

    @contextlib.contextmanager
    def collector_paused(self) -> Iterator[None]:
        """The timed rounds without garbage collections inside them (their garbage waits for the end: a
        full collection first would cost tens of ms with Inductor's objects on the heap); legacy: as is."""
        if not self.stable or not gc.isenabled():
            yield
            return
        gc.disable()
        try:
            yield
        finally:
            gc.enable()

    def estimate_round_ms(self) -> float:
        """One untimed call per function (first-call effects), then the median of a few host-timed rounds
        (less their disposals: the number of rounds is the same with `Disposed` functions as without)."""
        for name in self.fns:
            self.done_with(name, self.call(name, self.input_sets[0]))
        per_round = []
        for r in range(ESTIMATE_ROUNDS):
            start, disposing = _now_ns(), self.dispose_ns
            inputs = self.input_sets[r % len(self.input_sets)]
            for name in self.fns:
                self.estimate_calls[name].append(self.untimed(name, inputs))
            per_round.append((_now_ns() - start - (self.dispose_ns - disposing)) / 1e6)
        self.estimate_host_ms = sum(per_round)
        return max(statistics.median(per_round), 1e-3)

    def cut_reason(self, cut: SlowCut | None) -> str:
        """Why the run stops after its estimate rounds (`SlowCut`), or "" where it does not."""
        if cut is None or not self.estimate_calls.get(cut.name) or not self.estimate_calls.get(cut.anchor):
            return ""
        mine = statistics.median(c.event_ms for c in self.estimate_calls[cut.name])
        theirs = max(statistics.median(c.event_ms for c in self.estimate_calls[cut.anchor]), 1e-9)
        if mine < cut.floor_ms or mine < cut.ratio * theirs:
            return ""
        return (f"{cut.name}: {mine:.4g} ms a call (median of the {ESTIMATE_ROUNDS} estimate rounds), "
                f"{mine / theirs:.1f}x {cut.anchor}'s {theirs:.4g} ms, past {cut.ratio:g}x and "
                f"{cut.floor_ms:g} ms: every function timed from those rounds alone, no output re-checked")

    def adopt_estimate(self) -> None:
        """The estimate rounds' calls as the run's samples (`SlowCut`), their host time as the loop's."""
        for name, calls in self.estimate_calls.items():
            for timed in calls:
                self.record(name, timed)
        self.host_total_ms = self.estimate_host_ms

    def warm_up(self, rounds: int) -> None:
        for r in range(rounds):
            for name in self.rng.sample(list(self.fns), len(self.fns)):
                self.untimed(name, self.input_sets[r % len(self.input_sets)])

    def timed(self, rounds: int, check_rounds: set[int], silent_rounds: set[int] = frozenset(),
              unseen_rounds: dict[int, int] | None = None) -> None:
        start, disposing = _now_ns(), self.dispose_ns
        for r in range(rounds):
            index = r % len(self.input_sets)
            if unseen_rounds and r in unseen_rounds:
                self.unseen_round(index, unseen_rounds[r])
                self.unseen_rounds.append(r)
            elif r in check_rounds:
                self.checked_round(index)
            else:
                self.plain_round(index, r in silent_rounds)
        # without the disposals: `clock_consistent` bounds the samples by the loop's own host time
        self.host_total_ms = (_now_ns() - start - (self.dispose_ns - disposing)) / 1e6

    def record(self, name: str, timed: _Call) -> None:
        self.samples[name].append(timed.event_ms)
        self.host[name].append(timed.host_ms)
        self.leads[name].append(timed.lead_ms)
        self.fn_host[name].append(timed.fn_host_ms)
        # 0.01 ms of slack: event and host clocks have different resolutions
        self.counts["clock_violations"][name] += timed.event_ms > timed.host_ms + 0.01
        if self.clock.lead_kind and timed.fn_host_ms > timed.lead_ms:
            self.counts["host_bound_samples"][name] += 1
            if self.adapt_leads and self.launch_ms > 0:  # the lead fell short: longer from now on
                wanted = lead_launches(timed.fn_host_ms, self.launch_ms)
                self.launches[name] = max(self.launches[name], wanted)

    def plain_round(self, index: int, silent: bool = False) -> None:
        """A round on set `index` as it is; `silent`: the outputs of `silent_checks` re-checked after."""
        for name in self.rng.sample(list(self.fns), len(self.fns)):
            timed = self.call(name, self.input_sets[index])
            self.record(name, timed)
            if silent and name in self.silent_checks:
                self._verify_output(name, index, timed.out)
            self.done_with(name, timed)

    def checked_round(self, index: int) -> None:
        """A round on set `index`'s tensors holding set `source`'s contents; every output re-checked."""
        source = self._pick_source(index)
        self._round_holding(index, self.input_sets[source], source)

    def unseen_round(self, index: int, j: int) -> None:
        """A round on set `index`'s tensors holding unseen set `j`'s contents (drawn now where the set is a
        function), every output re-checked against it (index `len(input_sets) + j`) where there is a check.
        The contents are brought to the devices of the set's tensors for the round, so the comparisons
        after each call stay on the device (one more input set held there while the round runs)."""
        working = self.input_sets[index]
        contents = self.unseen[j]() if callable(self.unseen[j]) else self.unseen[j]
        if not _same_layout(contents, working):
            raise ValueError(UNSEEN_LAYOUT)
        pairs = zip(flatten_tensors(list(contents)), flatten_tensors(list(working)), strict=True)
        self._round_holding(index, [h.to(w.device) for h, w in pairs], len(self.input_sets) + j)

    def _round_holding(self, index: int, contents: list, check_index: int) -> None:
        """A round on set `index`'s tensors with `contents` copied in (and put back after), every output
        re-checked against `check_index` and the inputs compared with `contents` after each call."""
        working = self.input_sets[index]
        backup = clone_inputs(working) if contents is not working else None
        _copy_contents(working, contents)
        for name in self.rng.sample(list(self.fns), len(self.fns)):
            timed = self.call(name, working)
            self.record(name, timed)
            if self.check is not None:
                self._verify(name, check_index, timed.out, working, contents)
            self.done_with(name, timed)
            del timed
        if backup is not None:
            _copy_contents(working, backup)

    def _pick_source(self, index: int) -> int:
        """Another set of the same layout whose contents the checked round runs on: drawn from a shuffled
        deck of every set, so each set's contents are re-checked within the first rounds that can use
        them (a random choice each time could leave a set's answer never checked in a short run)."""
        others = [j for j in range(len(self.input_sets))
                  if j != index and _same_layout(self.input_sets[j], self.input_sets[index])]
        if not others:
            return index
        if not any(j in others for j in self.sources):  # a fresh deck holds every set, so one of `others`
            self.sources = self.rng.sample(range(len(self.input_sets)), len(self.input_sets))
        source = next(j for j in self.sources if j in others)
        self.sources.remove(source)
        return source

    def _verify(self, name: str, check_index: int, out: object, working: list, contents: list) -> None:
        if name == OVERHEAD_NAME:
            return
        self._verify_output(name, check_index, out)
        if inputs_mutated(contents, working):  # both on the working set's devices (`unseen_round`)
            self.counts["input_mutations"][name] += 1
            _copy_contents(working, contents)  # so the next function is judged fairly

    def _verify_output(self, name: str, source: int, out: object) -> None:
        self.counts["checks"][name] += 1
        if not self.check(name, source, out):
            self.counts["check_failures"][name] += 1

    def report(self, rounds: int, warmup_rounds: int, anchor: str | None = None,
               cut_slow: dict[str, str] | None = None) -> BenchReport:
        timings = {name: summarize(self.samples[name], statistics.fmean(self.host[name]))
                   for name in self.fns if name != OVERHEAD_NAME}
        relative = {name: ratios for name in self.silent_checks if name in self.fns
                    if (ratios := self.unseen_relative(name, anchor))}
        slowdown = {name: statistics.median(ratios) for name, ratios in relative.items()}
        replaced = {name: timings[name].median_ms for name, ratios in relative.items()
                    if _unseen_slower(ratios)}
        for name in replaced:
            timings[name] = summarize([self.samples[name][r] for r in self.unseen_rounds],
                                      statistics.fmean(self.host[name][r] for r in self.unseen_rounds))
        overhead = (summarize(self.samples[OVERHEAD_NAME], statistics.fmean(self.host[OVERHEAD_NAME]))
                    if OVERHEAD_NAME in self.fns else None)
        return BenchReport(
            timings=timings, overhead=overhead, device=self.clock.device, rounds=rounds,
            warmup_rounds=warmup_rounds, l2_flush_bytes=self.clock.flush_bytes, lead_us=self.clock.lead_us,
            host_total_ms=self.host_total_ms, event_total_ms=sum(sum(s) for s in self.samples.values()),
            lead_kind=self.clock.lead_kind,
            lead_median_ms={name: statistics.median(v) for name, v in self.leads.items() if v},
            lead_launches=dict(self.launches) if self.clock.lead_kind else dict.fromkeys(self.fns, 0),
            lead_launch_ms=self.launch_ms or (statistics.median(self.warm_leads) if self.warm_leads else 0.0),
            warmup_host_path_p90_ms={n: quantile(v, 0.9) for n, v in self.warm_fn_host.items() if v},
            host_path_median_ms={n: statistics.median(v) for n, v in self.fn_host.items() if v},
            host_path_p90_ms={n: quantile(v, 0.9) for n, v in self.fn_host.items() if v},
            dispose_ms=self.dispose_ns / 1e6, disposals=self.disposals, settles=self.settles,
            unseen_rounds=tuple(self.unseen_rounds), unseen_slowdown=slowdown, all_rounds_median_ms=replaced,
            cut_slow=dict(cut_slow or {}),
            **{key: _without_overhead(counts) for key, counts in self.counts.items()},
        )

    def unseen_relative(self, name: str, anchor: str | None) -> list[float]:
        """Per unseen round, `name`'s sample over `anchor`'s in the same round (raw samples without an
        anchor), divided by the median of that ratio over the other rounds; empty when there are fewer than
        `UNSEEN_MIN_ROUNDS` unseen rounds or no other round."""
        unseen = set(self.unseen_rounds)
        if len(unseen) < UNSEEN_MIN_ROUNDS or len(unseen) >= len(self.samples[name]):
            return []
        base = self.samples.get(anchor) if anchor is not None and anchor != name else None
        ratios = [s / max(base[r], 1e-9) if base is not None else s for r, s in enumerate(self.samples[name])]
        seen = max(statistics.median(x for r, x in enumerate(ratios) if r not in unseen), 1e-12)
        return [ratios[r] / seen for r in self.unseen_rounds]


def _unseen_slower(ratios: list[float]) -> bool:
    """Whether unseen rounds' relative ratios judge a function slower there: past `UNSEEN_SLOWDOWN_LIMIT`
    in `UNSEEN_QUORUM` of them, or in all but one with their median past `UNSEEN_STRONG_SLOWDOWN`."""
    over = sum(r > UNSEEN_SLOWDOWN_LIMIT for r in ratios)
    return over >= UNSEEN_QUORUM * len(ratios) or (
        over >= len(ratios) - 1 and statistics.median(ratios) > UNSEEN_STRONG_SLOWDOWN)


def _without_overhead(counts: dict[str, int]) -> dict[str, int]:
    return {name: n for name, n in counts.items() if name != OVERHEAD_NAME}


def _same_layout(a: list, b: list) -> bool:
    ta, tb = flatten_tensors(list(a)), flatten_tensors(list(b))
    if len(ta) != len(tb):
        return False
    return all(x.shape == y.shape and x.dtype == y.dtype for x, y in zip(ta, tb, strict=True))


def _copy_contents(dst: list, src: list) -> None:
    """Copy the tensor values of `src` into `dst`'s tensors (same pointers, other contents)."""
    for d, s in zip(flatten_tensors(list(dst)), flatten_tensors(list(src)), strict=True):
        if d.data_ptr() != s.data_ptr():
            d.copy_(s)
