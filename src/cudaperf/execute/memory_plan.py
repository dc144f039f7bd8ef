"""How much of the device one evaluation may use, sized from the free memory and the task's own footprint.

Covers the pure sizing function `plan_memory(free_bytes, footprint, wanted) -> MemoryPlan` and its peak
estimate `peak_bytes`. A job holds, besides the candidate: the reference of each (configuration, seed) it
checks (inputs, outputs, weights), the clones each call gets, the allocator poison block (one output's
size), the comparison's temporaries (bounded: `correctness.COMPARE_CHUNK_BYTES`, whatever the output's
size), the timing input sets (each with its expected output; with a referee, the candidate's first
output on the set instead, kept for the referee: `outputs.TimedOutputs` keeps no baseline output),
the L2 flush buffer of the lead (`cudaperf.timing`) and references kept for later jobs of the same task.
The candidate's later re-checked outputs kept for the referee are not in the peak: they get what is left
once the cross-job cache and the referee's timed judging have theirs (`recheck_budget_bytes`).

With a referee on the same device (`Wanted.refereed`, the sandbox's default) the worker does not compare
during correctness: it runs the candidate on references that hold inputs only and ships each output
(`execute.outputs.Shipper`, which copies a strided output to make it contiguous), keeping none once
shipped. The referee's references are on the device
before the worker plans (it waits for them), so they are in `free_bytes` already; what the plan adds for
the referee is what it allocates while the worker ships: one assembled output with the inputs after the
call (`referee.RefereeJob._limit`), its comparison, or its speed-of-light run (inputs, output, forward).
The referee returns that memory to the driver after each message (`referee.Referee._release`).

Fixed limits broke on full-size KernelBench problems (a 6.4 GB ReLU output over a 4 GiB cap; 17 GB pooling
inputs times three seeds, three input sets and their clones over an H200's 141 GB). The plan keeps the
full protocol when it fits, and otherwise degrades, in this order, before it refuses:

1. references are not kept for later jobs (the cross-job cache gets what the job leaves free);
2. references are computed one (configuration, seed) at a time and dropped after use (the check for
   degenerate outputs across seeds then compares samples of the outputs);
3. timing rotates fewer input sets (down to one: the pointer-swap defence then has no second set);
4. the L2 flush buffer shrinks from the lead-sized write to its floor, 2x L2 (the lead then covers less
   of the host's launch path; the flush still evicts L2).

Each step taken is a sentence in `MemoryPlan.degraded` (the worker turns them into INFO flags and an
environment entry); `refused` says why not even the smallest plan fits. The output cap is sized here too:
twice the reference's output (a bigger output has the wrong shape anyway), at least `MIN_OUTPUT_CAP_BYTES`,
at most what the plan leaves free.

Memory held for later jobs gives way to a job that needs it (`room_bytes`, `to_evict`): before a job is
planned, the worker's cross-job reference cache and the referee's store give back entries of other tasks,
least recently used first, until the device's free bytes cover what the job would need with its full
protocol (estimated from its inputs' sizes on the meta device, outputs taken as large as the inputs,
since no reference has run yet); entries of the job's own task stay. What is still missing after that is
the plan's to degrade, and an out-of-memory error of the harness's own steps is retried with less
(`after_oom`).

Not covered: measuring anything (the worker passes the device's free bytes and the footprint it measured:
input sizes on the `meta` device, outputs, weights and the forward's own peak from the first real
reference), C->CUDA tasks (host arrays, sized by their declaration), the candidate's own allocations
beyond one output (a candidate that needs more memory than the reference gets OUT_OF_MEMORY).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace

from cudaperf.correctness import COMPARE_CHUNK_BYTES

# What one comparison (or mutation check) allocates at most, whatever the output's size: it works block by
# block (`correctness._blocks`).
COMPARE_BYTES = COMPARE_CHUNK_BYTES
# The plan uses this share of the free bytes: the allocator's rounding and fragmentation and the CUDA
# libraries' workspaces (cuBLAS, cuDNN) need the rest.
HEADROOM = 0.9
OUTPUT_CAP_FACTOR = 2
MIN_OUTPUT_CAP_BYTES = 256 << 20
GB = 1e9
SAMPLE_ELEMENTS = 1 << 20  # per output, for the degenerate-output check when references are not kept


@dataclass(frozen=True)
class Footprint:
    """Bytes one (configuration, seed) of a task holds on the device: the largest configuration's."""

    input_bytes: int
    output_bytes: int
    param_bytes: int = 0
    forward_bytes: int = 0
    """Transient bytes one forward needs beyond its inputs and outputs (activations, workspaces); 0 when
    unknown."""

    @property
    def reference_bytes(self) -> int:
        """What one kept reference holds: pristine inputs, outputs, the model's weights."""
        return self.input_bytes + self.output_bytes + self.param_bytes


@dataclass(frozen=True)
class Wanted:
    """The full protocol's sizes, before any degradation."""

    all_references_bytes: int
    """What the references of every (configuration, seed) of the job hold together (they are kept for
    the whole job when they fit); at least one `Footprint.reference_bytes`."""
    seeds: int
    """Correctness seeds per configuration: the first outputs of all of them are compared with each other
    (`correctness.degenerate_flags`), so they stay alive together while references are kept."""
    input_sets: int
    """Timing input sets (`TimingConfig.input_sets`); 0 when the job does not time."""
    flush_bytes: int
    """The lead-sized L2 flush (`timing.lead_sized_flush_bytes`); 0 on the CPU."""
    min_flush_bytes: int
    """Its floor: 2x the L2 size (`timing.default_l2_flush_bytes`)."""
    cache_bytes: int
    """Bytes the cross-job reference cache may hold at most."""
    max_output_bytes: int | None = None
    """The caller's output cap (`EvalJob.max_output_bytes`); None: sized here only."""
    refereed: bool = False
    """A referee on the same device judges the outputs (see the module docstring)."""


@dataclass(frozen=True)
class MemoryPlan:
    """What the job may use. `refused` non-empty: nothing fits, the job must not start."""

    keep_references: bool
    """True: every reference stays for the whole job. False: one (configuration, seed) at a time, and the
    degenerate-output check compares samples of the outputs (`SAMPLE_ELEMENTS` each), not whole ones."""
    input_sets: int
    flush_bytes: int
    cache_bytes: int
    max_output_bytes: int
    needed_bytes: int
    """The plan's estimated peak."""
    free_bytes: int
    degraded: tuple[str, ...] = ()
    refused: str = ""
    peak_stage: str = ""
    """The stage whose estimate is the peak (`stage_peaks`)."""

    @property
    def fits(self) -> bool:
        return not self.refused

    def summary(self) -> str:
        """One line for the result's environment."""
        kept = "all" if self.keep_references else "one at a time"
        head = (f"peak {self.needed_bytes / GB:.2f} GB ({self.peak_stage}) of {self.free_bytes / GB:.2f} GB "
                f"free; "
                f"references {kept}, input sets {self.input_sets}, flush {self.flush_bytes >> 20} MiB, "
                f"cache {self.cache_bytes / GB:.2f} GB, output cap {self.max_output_bytes / GB:.2f} GB")
        return head + (f"; refused: {self.refused}" if self.refused else "")


def peak_bytes(fp: Footprint, wanted: Wanted, keep_references: bool, input_sets: int,
               flush_bytes: int) -> int:
    """The estimated peak of a job over its stages (`stage_peaks`)."""
    return max(stage_peaks(fp, wanted, keep_references, input_sets, flush_bytes).values())


def stage_peaks(fp: Footprint, wanted: Wanted, keep_references: bool, input_sets: int,
                flush_bytes: int) -> dict[str, int]:
    """Bytes on the device at the worst moment of each stage; each term is one thing alive then."""
    i, o, f, c = fp.input_bytes, fp.output_bytes, fp.forward_bytes, COMPARE_BYTES
    kept = max(wanted.all_references_bytes, fp.reference_bytes) if keep_references else fp.reference_bytes
    peaks = {"reference": kept + i + f}  # the last reference's forward on a clone of its inputs
    if wanted.refereed:
        peaks.update(_refereed_correctness(fp, wanted, kept))
    else:
        earlier = (wanted.seeds - 1) * o if keep_references else 0  # earlier seeds' first outputs
        # the first run's output alive, then the second run: a clone of the inputs, the poison block, its
        # output, its forward, the comparison (the reference's re-run in between is freed before it)
        peaks["correctness"] = kept + earlier + o + i + 2 * o + f + c
    if input_sets:
        if wanted.refereed:  # clones, and per set a copy of the candidate's first output (for the
            sets = input_sets * (i + o)  # referee; no baseline output is kept: `outputs.TimedOutputs`)
        else:
            sets = input_sets * i + (input_sets - 1) * o  # clones, and each extra set's expected output
        # building the sets (each drawn afresh, not cloned from a reference): the last one's expected
        # output comes from a forward on a clone of it
        peaks["timing inputs"] = kept + sets + i + f
        # the checked round's backup clone, the live outputs of two calls, the re-check's comparison; with
        # a referee the baselines allocate from a pool of their own (`baseline_memory`), which keeps a
        # forward's blocks reserved while the candidate's forward runs
        pool = f if wanted.refereed else 0
        peaks["timing"] = kept + sets + flush_bytes + i + 2 * o + f + c + pool
    return peaks


def _refereed_correctness(fp: Footprint, wanted: Wanted, kept: int) -> dict[str, int]:
    """The worker ships (references hold inputs and weights only, no output is kept once shipped), the
    referee assembles and judges one output beside it."""
    i, o, f, c = fp.input_bytes, fp.output_bytes, fp.forward_bytes, COMPARE_BYTES
    inputs_only = kept * (i + fp.param_bytes) // max(1, fp.reference_bytes)
    # the first run's output, then the second run: a clone of the inputs, the poison block, its output,
    # its forward and the shipper's contiguous copy; the referee's item (output and inputs after) or its
    # speed-of-light run, and its comparison
    referee = i + o + max(c, f)
    return {"shipping": inputs_only + o + i + 3 * o + f + referee}


def plan_memory(free_bytes: int, footprint: Footprint, wanted: Wanted) -> MemoryPlan:
    """The largest plan whose peak fits in `HEADROOM` of `free_bytes`, degrading in the order of the module
    docstring; refused when even one reference, one input set and the floor flush do not fit."""
    usable = int(free_bytes * HEADROOM)
    plan = MemoryPlan(keep_references=True, input_sets=wanted.input_sets,
                      flush_bytes=wanted.flush_bytes, cache_bytes=wanted.cache_bytes,
                      max_output_bytes=0, needed_bytes=0, free_bytes=free_bytes)
    for step in (_keep_one_reference, _fewer_input_sets, _smaller_flush):
        if _peak(footprint, wanted, plan) <= usable:
            break
        plan = step(plan, footprint, wanted, usable)
    peaks = stage_peaks(footprint, wanted, plan.keep_references, plan.input_sets, plan.flush_bytes)
    stage = max(peaks, key=peaks.__getitem__)
    plan = replace(plan, needed_bytes=peaks[stage], peak_stage=stage)
    if plan.needed_bytes > usable:
        return replace(plan, cache_bytes=0, max_output_bytes=0, refused=_refusal(footprint, plan, usable))
    plan = _with_cache(plan, wanted, usable)
    return replace(plan, max_output_bytes=_output_cap(footprint, wanted, usable - plan.needed_bytes))


def _peak(fp: Footprint, wanted: Wanted, plan: MemoryPlan) -> int:
    return peak_bytes(fp, wanted, plan.keep_references, plan.input_sets, plan.flush_bytes)


def _keep_one_reference(plan: MemoryPlan, fp: Footprint, wanted: Wanted, usable: int) -> MemoryPlan:
    if not plan.keep_references or wanted.all_references_bytes <= fp.reference_bytes:
        return plan
    why = (f"references computed one (configuration, seed) at a time, not all kept "
           f"({wanted.all_references_bytes / GB:.2f} GB together; {usable / GB:.2f} GB usable)")
    return replace(plan, keep_references=False, degraded=plan.degraded + (why,))


def _fewer_input_sets(plan: MemoryPlan, fp: Footprint, wanted: Wanted, usable: int) -> MemoryPlan:
    sets = plan.input_sets
    while sets > 1 and peak_bytes(fp, wanted, plan.keep_references, sets, plan.flush_bytes) > usable:
        sets -= 1
    if sets == plan.input_sets:
        return plan
    why = (f"timing rotates {sets} input set(s) instead of {wanted.input_sets} (one set is "
           f"{fp.input_bytes / GB:.2f} GB; {usable / GB:.2f} GB usable)")
    return replace(plan, input_sets=sets, degraded=plan.degraded + (why,))


def _smaller_flush(plan: MemoryPlan, fp: Footprint, wanted: Wanted, usable: int) -> MemoryPlan:
    if plan.flush_bytes <= wanted.min_flush_bytes:
        return plan
    why = (f"the L2 flush buffer is {wanted.min_flush_bytes >> 20} MiB (2x L2) instead of "
           f"{plan.flush_bytes >> 20} MiB: the lead before each timed call is shorter")
    return replace(plan, flush_bytes=wanted.min_flush_bytes, degraded=plan.degraded + (why,))


def _with_cache(plan: MemoryPlan, wanted: Wanted, usable: int) -> MemoryPlan:
    """The cross-job cache gets what the job leaves free, at most what was wanted."""
    cache = max(0, min(wanted.cache_bytes, usable - plan.needed_bytes))
    if cache >= wanted.cache_bytes:
        return replace(plan, cache_bytes=cache)
    why = (f"references kept for later jobs limited to {cache / GB:.2f} GB instead of "
           f"{wanted.cache_bytes / GB:.2f} GB (the job's peak is {plan.needed_bytes / GB:.2f} GB)")
    return replace(plan, cache_bytes=cache, degraded=plan.degraded + (why,))


def _output_cap(fp: Footprint, wanted: Wanted, spare_bytes: int) -> int:
    """Twice the reference output, at least the floor, at most what the plan leaves (plus the one output
    it budgets already), and never above the caller's cap."""
    sized = max(OUTPUT_CAP_FACTOR * fp.output_bytes, MIN_OUTPUT_CAP_BYTES)
    cap = min(sized, max(spare_bytes, 0) + max(fp.output_bytes, MIN_OUTPUT_CAP_BYTES))
    return min(cap, wanted.max_output_bytes) if wanted.max_output_bytes is not None else cap


def _refusal(fp: Footprint, plan: MemoryPlan, usable: int) -> str:
    return (f"the task does not fit in device memory even with one reference, one input set and a "
            f"{plan.flush_bytes >> 20} MiB flush: it needs about {plan.needed_bytes / GB:.2f} GB "
            f"(inputs {fp.input_bytes / GB:.2f} GB, outputs {fp.output_bytes / GB:.2f} GB, weights "
            f"{fp.param_bytes / GB:.2f} GB, forward {fp.forward_bytes / GB:.2f} GB), "
            f"{usable / GB:.2f} GB are usable")


def after_oom(plan: MemoryPlan, fp: Footprint, wanted: Wanted, what: str) -> MemoryPlan | None:
    """The plan to retry with after the harness's own step `what` ran out of memory although the plan fit:
    references one at a time, one input set and the floor flush (every degradation at once: the estimate
    was wrong, so a step-by-step descent would guess again); None when the plan was that small already."""
    smallest = (not plan.keep_references and plan.input_sets <= 1
                and plan.flush_bytes <= wanted.min_flush_bytes)
    if smallest:
        return None
    sets = min(plan.input_sets, 1)
    flush = min(plan.flush_bytes, wanted.min_flush_bytes)
    peaks = stage_peaks(fp, wanted, False, sets, flush)
    stage = max(peaks, key=peaks.__getitem__)
    why = (f"{what} ran out of device memory with the plan's estimate {plan.needed_bytes / GB:.2f} GB; "
           f"retried with references one at a time, {sets} input set(s) and a {flush >> 20} MiB flush")
    return replace(plan, keep_references=False, input_sets=sets, flush_bytes=flush, cache_bytes=0,
                   needed_bytes=peaks[stage], peak_stage=stage, degraded=plan.degraded + (why,))


def referee_timed_bytes(fp: Footprint, input_sets: int) -> int:
    """What the referee allocates while it judges a configuration's timed outputs, after the bench, none
    of it in a stage's peak: its model's output on each timing input set (kept with its reference), and,
    for the set it judges, fresh inputs with their clone, the forward, the assembled output and the
    comparison (`torch_judge.TorchJudge.timed_expected`)."""
    i, o = fp.input_bytes, fp.output_bytes
    return input_sets * o + 2 * i + fp.forward_bytes + o + COMPARE_BYTES


def recheck_budget_bytes(plan: MemoryPlan, fp: Footprint) -> int:
    """Device bytes the timing stage may hold in later re-checked outputs kept for the referee
    (`outputs.TimedOutputs`; its peak counts one output per input set, the first): what the plan leaves
    of the usable bytes once the cross-job cache has its share (with references one at a time it holds
    this job's own beyond the one the peak counts) and the referee its timed judging
    (`referee_timed_bytes`), which run while those copies are held; 0 when nothing is left (the later
    outputs are then compared in the worker only, `timed_recheck_partial`)."""
    spare = int(plan.free_bytes * HEADROOM) - plan.needed_bytes - plan.cache_bytes
    return max(0, spare - referee_timed_bytes(fp, plan.input_sets))


# Host bytes of the unseen input sets of one configuration together, where they are held or drawn on the
# host (`unseen_sets_allowed`): drawing them there costs time as well as memory, and a configuration this
# large is memory-bound more often than not. Sets drawn on the GPU at their round are not bounded by it.
UNSEEN_HOST_BYTES = 2 << 30


def unseen_set_device_bytes(fp: Footprint, refereed: bool) -> int:
    """Device bytes one unseen input set holds until the bench is over (`unseen_sets_allowed`)."""
    return (2 if refereed else 1) * max(fp.output_bytes, 1)


def unseen_sets_allowed(wanted: int, fp: Footprint, spare_bytes: int | None, refereed: bool = False,
                        on_host: bool = True) -> int:
    """How many of `wanted` unseen input sets (`TimingConfig.unseen_sets`) a configuration gets: each adds
    one output on the device (its expected output), with a referee two (the candidate's first output on it,
    kept for the referee, and the referee's own expected output), and the set itself is on the device for
    its round (one set at a time: `unseen_round_device_bytes`), all taken from `spare_bytes` (what the plan
    leaves: `recheck_budget_bytes`; None: no plan, no device limit); `on_host`: the sets are held or drawn
    on the host, together under `UNSEEN_HOST_BYTES`."""
    by_host = UNSEEN_HOST_BYTES // max(fp.input_bytes, 1) if on_host else wanted
    per_set = unseen_set_device_bytes(fp, refereed)
    room = None if spare_bytes is None else max(0, spare_bytes - unseen_round_device_bytes(fp))
    by_device = wanted if room is None else room // per_set
    return max(0, min(wanted, by_host, by_device))


def unseen_round_device_bytes(fp: Footprint) -> int:
    """Device bytes an unseen round holds beyond a checked one: its input set, drawn (or brought) there."""
    return fp.input_bytes


def unseen_device_bytes(fp: Footprint, count: int, refereed: bool) -> int:
    """Device bytes `count` unseen input sets take from what the plan leaves (`unseen_sets_allowed`)."""
    return count * unseen_set_device_bytes(fp, refereed) + (unseen_round_device_bytes(fp) if count else 0)


def room_bytes(input_bytes: Sequence[int], seeds: int, input_sets: int, flush_bytes: int,
               refereed: bool) -> int:
    """Free device bytes a job would need for its full protocol, before any of its references exists:
    `input_bytes` per configuration (meta device), outputs taken as large as the inputs; with a referee,
    its references of every (configuration, seed) too. What other tasks' cached references give way to."""
    largest = max(input_bytes, default=0)
    fp = Footprint(input_bytes=largest, output_bytes=largest)
    references = sum(seeds * 2 * b for b in input_bytes)
    extra_sets = max(0, input_sets - seeds) * 2 * largest
    wanted = Wanted(all_references_bytes=references + extra_sets, seeds=seeds, input_sets=input_sets,
                    flush_bytes=flush_bytes, min_flush_bytes=flush_bytes, cache_bytes=0, refereed=refereed)
    worker = peak_bytes(fp, wanted, True, input_sets, flush_bytes)
    return int(worker / HEADROOM) + (references if refereed else 0)


def to_evict(entries: Sequence[tuple[Hashable, int, bool]], free_bytes: int, needed_bytes: int) -> list:
    """Keys of cached entries to give back so that `free_bytes` reaches `needed_bytes`: `entries` are
    (key, bytes, of the job's own task), least recently used first; only other tasks' entries go, oldest
    first, and only as many as needed (all of them when even that is not enough)."""
    evict, free = [], free_bytes
    for key, nbytes, own in entries:
        if free >= needed_bytes:
            break
        if not own:
            evict.append(key)
            free += nbytes
    return evict
