"""The in-worker recipe for PyTorch tasks: one job (a task module and a `ModelNew` candidate) to its payload.

Stages (heartbeats), after the shared setup of `execute.session`:
- setup (`load_task`): the task module loaded (trusted code), one per distinct source: a derived
  configuration (`tasks.derived_configs`) re-runs the source with its own module-level sizes
  (`tasks.runtime.load_module(task, config)`), which give its inputs and constructor arguments;
- reference: room first (references kept across jobs for other tasks give way, `make_room`), then the
  memory plan (`execute.memory_plan`: the first reference of the largest
  configuration is measured, then references, input sets, the flush, the reference cache and the output
  cap are sized from the device's free memory); then inputs per configuration x seed, created on the
  device (an input made on the host and copied would time the copy's placement, not the kernel's), the
  reference model built after `torch.manual_seed(seed)`, its constant parameters randomised where the
  configuration says so (`InputConfig.randomize_parameters`), its outputs; kept across jobs by
  `REFERENCES` (see there why). A derived configuration whose reference fails here is dropped with an
  INFO flag (the task's limit, not the candidate's fault);
- import: the candidate module, inside the candidate scope (as is every call into candidate code);
- construct: `ModelNew(*init_inputs)` after the same seed as the reference, so the weights match; where
  the reference's constant parameters were randomised, the candidate's twins get the same values before
  its first forward (hack #13: work skipped because LayerNorm's weight is still 1 and its bias 0);
- correctness: per configuration x seed, the candidate runs before and after a reference re-run (hack #1),
  each time on cloned inputs checked for mutation afterwards (#2) with the caching allocator poisoned
  beforehand (#1); outputs compared scale-aware; degenerate outputs flagged (#12);
- timing: candidate, eager and torch.compile baselines interleaved on rotated, re-checked inputs
  (`cudaperf.timing`), then speed-of-light (`cudaperf.sol`); only the timed configurations (a derived
  one never is);
- coverage: share of GPU time in the candidate's own kernels (`Session.coverage_of`).

With a referee (the sandbox's default; `REFEREED_STAGES`) this process computes no reference output and
judges nothing: reference (room, then the memory plan from the sizes the referee reports for its own
references at the sync, `Shipper.sync`; only when it reports none, a reference measured here, its
outputs overwritten and the allocator poisoned before the import), import, construct, correctness (every
configuration and seed run twice with references holding only inputs and models, the outputs shipped to
the referee in batches, `run_and_ship`, and released once shipped; a derived configuration the candidate
fails on is dropped when the referee finds its reference failing too), timing and coverage when the
referee said everything was correct. The payload carries no correctness of its own (the referee's verdict
is the only one; a claim in a refereed payload is a forgery, `verdict_mismatch`). Timing re-checks
outputs through `outputs.TimedOutputs`: the candidate's first re-checked output on each input set goes to
the referee after the configuration's bench; a later one bit for bit that first passes here, one that
differs is compared here with it and goes to the referee too (at most `outputs.KEPT_RECHECKS` per set,
within the bytes the memory plan leaves, `recheck_budget_bytes`; beyond them `timed_recheck_partial`,
INFO); the baselines' are compared here with the candidate's first. The baselines (the reference model
eager and compiled: their outputs are the right answers on the timing input sets, and their temporaries
can hold them too) allocate apart (`execute.baseline_memory`: a private pool of the CUDA caching
allocator, glibc's perturbation on the CPU), in each call, in the compiled baseline's compile and first
call and in the re-check of their outputs, and are `timing.Disposed`: once a call's sample and re-check
are done, outside every timed window, its output is overwritten (NaN, or zeros; a view's whole storage:
`overwrite_baseline_output`); before the candidate's next call (the bench's `Disposed.settle`, once for
the baseline calls since its last call), what those calls freed is overwritten (the pool's free blocks; on
the CPU glibc fills each chunk at its free and its per-thread cache is drained) and the device
synchronised (`settle_baselines`), so no right answer is live, or in a freed block, when the candidate's
code runs next. The mechanism and what its scrubs cost are in the result's environment (`baseline_memory`); a
WARNING `baseline_memory_unscrubbed` when it is not in effect. The speed-of-light figures and flags are
the referee's. At the end every free block of the allocator is overwritten (`scrub`): the cross-job cache
keeps models, inputs and compiled baselines.
The reference re-run between the two candidate runs (hack #1) has no object there: no reference output
exists for an uninitialised output to land on.

An out-of-memory error of the harness's own steps (the plan's measured reference, the references, the
timing) is retried once after every cached reference is given back, with the smallest plan
(`retry_on_oom`, `memory_plan.after_oom`); out of memory again, the job is SKIPPED with why (the device's
memory, not the task's fault). A candidate's own out-of-memory error stays OUT_OF_MEMORY.

Hack numbers name the fixtures in tests/adversarial/ (`hack_NN_*.py`).

Not covered: what every task kind shares (the stage wrapper, candidate windows, failure classification, the
bench, cleanup and the payload: `execute.session`), C->CUDA tasks (`c_session.py`), which recipe runs a job
(`dispatch.py`). With a referee, what the baselines' disposal leaves: a baseline's output exists during its
call and until its overwrite, and what the call freed until the settle before the candidate's next call
(across the other baseline's call when one follows), so native code of the candidate running beside them (a
thread of its own, or work on a stream of its own) can copy them then; what the memory mechanism does not
reach (`execute.baseline_memory`, "Not covered": temporaries freed after the scrub, such as tensors left in
reference cycles; library workspaces kept for reuse, such as cuBLAS's, shared with the candidate's torch
calls; on the CPU other threads' glibc caches); on the CPU the baselines' samples include glibc's fills of
each chunk at malloc and free (slower baselines, so inflated speedups: eager medians 1.1x to 1.5x with
KB-sized temporaries, up to 4.3x with MB-sized ones, measured; the environment's `baseline_memory` says so;
the CPU timings are not the reported GPU figures); on CUDA the baselines' pool keeps their working set
reserved for the timing stage (the memory plan does not count it) and a baseline call cannot take the general
pool's cached blocks, so near the device's memory a baseline can run out (dropped with its flag); the
temporaries of a reference measured here for the memory plan (only when the referee reports no sizes) on the
CPU, where the allocator's poisoning does nothing; an output aliasing an input or a tensor of the model is
left as it is (the candidate has those anyway; a model's tensor reached only through another object, a closure
or a module global is not recognised as the model's, and is overwritten); a Python number, or a tensor of a
subclass (its fill could run its code), is not overwritten. Without a referee the worker holds the reference
outputs throughout (no boundary is claimed there), and the baselines allocate and free as they are.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import time
import types
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
    flatten_tensors,
    inputs_mutated,
    mutated_positions,
    poison_allocator,
    tensor_bytes,
)
from cudaperf.execute.baseline_memory import BaselineMemory
from cudaperf.execute.device_state import forward_bytes, start_peak
from cudaperf.execute.memory_plan import (
    MIN_OUTPUT_CAP_BYTES,
    SAMPLE_ELEMENTS,
    Footprint,
    MemoryPlan,
    Wanted,
    after_oom,
    plan_memory,
    recheck_budget_bytes,
    room_bytes,
    to_evict,
    unseen_device_bytes,
    unseen_sets_allowed,
)
from cudaperf.execute.session import (
    CANDIDATE,
    Session,
    Stop,
    classify_failure,
    summarize_correctness,
    synchronize,
)
from cudaperf.execute.torch_judge import byte_sum, cache_budget, construct, scrub
from cudaperf.jobs import EvalPayload
from cudaperf.sol import count_flops, dominant_dtype, estimate, min_bytes, speed_flags
from cudaperf.timing import (
    BenchReport,
    Check,
    Disposed,
    compile_baseline,
    default_l2_flush_bytes,
    lead_sized_flush_bytes,
)
from cudaperf.types import ConfigCorrectness, ConfigTiming, Flag, InputConfig, Outcome, Severity

FINGERPRINT_CHUNK_BYTES = 256 << 20  # the fingerprint's chunks (`torch_judge.byte_sum`)
_UNCLOSED: list[BaselineMemory] = []  # baselines' pools never destroyed: the job ended in a CUDA fault


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
        if _fingerprint(entry) != entry.fingerprint or not structure_intact(entry):
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def put(self, key: tuple, entry: Reference, budget_bytes: int) -> None:
        """Keep `entry` (evicting the least recently used past the budget); one larger than the whole
        budget is not kept (the memory plan gave the job's memory to the job)."""
        if entry.nbytes > budget_bytes:
            self._entries.pop(key, None)
            return
        entry.fingerprint = _fingerprint(entry)
        entry.extra["structure"] = module_structure(entry.model)
        self._entries[key] = entry
        self.trim(budget_bytes)

    def trim(self, budget_bytes: int) -> None:
        """Evict the least recently used entries until the rest fit in `budget_bytes`."""
        while self._entries and self.nbytes() > budget_bytes:
            self._entries.popitem(last=False)

    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def items(self) -> list[tuple[tuple, Reference]]:
        """(key, entry), least recently used first."""
        return list(self._entries.items())

    def evict(self, keys: list) -> int:
        """Drop these entries; the bytes they held."""
        return sum(self._entries.pop(k).nbytes for k in keys if k in self._entries)

    def clear(self) -> None:
        self._entries.clear()


REFERENCES = ReferenceCache()


def _fingerprint(entry: Reference) -> tuple[int, ...]:
    """An integer sum of the raw bytes of every cached tensor and weight (one pass on the device; catches
    stray writes, not a deliberate collision)."""
    weights = list(entry.model.parameters()) + list(entry.model.buffers())
    tensors = flatten_tensors([entry.inputs, entry.outputs, entry.inputs_after, weights])
    return tuple(_byte_sum(t) for t in tensors)


# Every per-instance hook registry of a torch module: a hook put on a cached reference model runs inside
# every later job's eager baseline (a red team slowed it 6x that way, reaching the cache through
# `typing.sys`), outside the candidate's scope.
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
               "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
               "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
               "_load_state_dict_post_hooks")


def module_structure(model: torch.nn.Module) -> tuple:
    """What a module tree is beyond its tensors: per submodule its class, the names of its callable
    instance attributes (a method replaced on the instance; torch.compile's own marks are flags, not
    callables), its training flag and the keys of its hook registries (a hook added)."""
    return tuple((name, type(m), tuple(sorted(k for k, v in vars(m).items() if callable(v))), m.training,
                  *(tuple(getattr(m, h, {}).keys()) for h in _HOOK_DICTS))
                 for name, m in model.named_modules())


def structure_intact(entry: Reference) -> bool:
    """Whether the cached reference's model is as it was when cached (`module_structure`)."""
    return entry.extra.get("structure") in (None, module_structure(entry.model))


def _byte_sum(t: torch.Tensor) -> int:
    return byte_sum(t, FINGERPRINT_CHUNK_BYTES)


def free_device_bytes(device: torch.device) -> int:
    """Bytes a job can use: the driver's free memory, what torch's allocator holds unused, and what the
    cross-job cache holds (evictable); on the CPU, the kernel's MemAvailable."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        idle = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + idle + REFERENCES.nbytes())
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def describe_free_bytes(device: torch.device) -> str:
    """Where `free_device_bytes` comes from, for the result's environment (what the other processes on the
    device, the referee among them, hold is what the driver does not report free)."""
    if device.type != "cuda":
        return f"host MemAvailable {free_device_bytes(device) / 1e9:.2f} GB"
    free, total = torch.cuda.mem_get_info(device)
    idle = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return (f"driver free {free / 1e9:.2f} of {total / 1e9:.2f} GB, this worker's idle cache "
            f"{idle / 1e9:.2f} GB, its references kept across jobs {REFERENCES.nbytes() / 1e9:.2f} GB")


# --------------------------------------------------------------------------------------------------
# The recipe


def run_torch_job(message: dict, report: Callable[[str], None]) -> EvalPayload:
    """Evaluate one PyTorch job (the wire form, `jobs.job_message`) and return its payload. Never raises.

    `report(stage)` is the heartbeat. The secret is popped from `message` before any candidate code runs."""
    return TorchSession(report).run(message)


class TorchSession(Session):
    """State of one PyTorch job; each method is one step of the recipe (the rest is `Session`'s)."""

    STAGES = (
        ("reference", "compute_references"), ("import", "import_candidate"),
        ("construct", "construct_first"), ("correctness", "check_correctness"),
    )
    # With a referee (referee.py): no reference output is computed in this process (see the docstring).
    REFEREED_STAGES = (
        ("reference", "plan_without_outputs"), ("import", "import_candidate"),
        ("construct", "construct_first"), ("correctness", "run_and_ship"),
    )

    def __init__(self, report: Callable[[str], None]):
        super().__init__(report)
        self.model_new: type | None = None
        self.configs: list[InputConfig] = []  # the job's configurations, less dropped derived ones
        self.modules: dict[str, types.ModuleType] = {}  # the task's module per source (derived sizes)
        self.input_bytes: dict[str, int] = {}  # per configuration, from the meta device (0: unknown)
        self.plan: MemoryPlan | None = None
        self.plan_inputs: tuple[Footprint, Wanted] | None = None  # what the plan was made from
        self.built: dict[tuple[str, int], torch.nn.Module] = {}
        self.verified: dict[tuple, Reference] = {}  # references fingerprint-checked during this job
        self.timing_outputs: dict[tuple[str, int], Any] = {}  # seed-0 model on other seeds' inputs
        # With a referee: "plan" (a reference measured for the plan, when the referee reports no sizes),
        # then "candidate" for the rest of the job (references hold inputs and models only).
        self.phase = "plan"
        self.referee_sizes: dict[str, dict] = {}  # per configuration, from the referee's sync answer
        self.output_bytes_seen: dict[str, int] = {}  # per configuration, the candidate's last output size
        self.peak_allocated_bytes = 0  # the most this process allocated during the job (CUDA only)
        # With a referee: where the baselines allocate, overwritten after each call (`baseline_memory`)
        self.baseline_memory: BaselineMemory | None = None

    # -- stages ----------------------------------------------------------------------------------
    def load_task(self) -> None:
        from cudaperf.tasks import timed_configs
        from cudaperf.tasks.runtime import describe_config

        self.task_key = (self.job.task.task_id, hashlib.sha256(self.job.task.source.encode()).hexdigest())
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)  # the job's peak, not an earlier job's
        self.configs = list(self.job.task.configs)
        self.timed_names = timed_configs(self.job.task)
        declared = self.module_for(self.configs[0])  # a broken task fails here, at setup
        for config in self.configs:  # input shapes on the meta device: no memory, no compute
            module = declared if not config.module_values else self.module_for(config, quiet=True)
            info = describe_config(module, config, run_reference=False) if module else None
            self.input_bytes[config.name] = info.input_bytes if info and not info.error else 0
        if self.shipper is not None:
            self.STAGES = self.REFEREED_STAGES

    def module_for(self, config: InputConfig, quiet: bool = False) -> types.ModuleType | None:
        """The task's module for `config` (its own source, or the source with the configuration's sizes),
        run once per source. `quiet`: None instead of raising (a derived configuration's source)."""
        from cudaperf.tasks.runtime import load_module, task_source_for

        source = task_source_for(self.job.task, config)
        if source not in self.modules:
            try:
                self.modules[source] = load_module(self.job.task, config)
            except Exception:  # the task's own code; the caller decides whose fault
                if not quiet:
                    raise
                return None
        return self.modules[source]

    def compute_references(self) -> None:
        """Room for the job, the memory plan, then the references it allows to keep (all of them, or the
        derived configurations' first seeds only, to learn early which of those run here)."""
        self.make_room()
        self.plan_memory()
        self.retry_on_oom("the references", self.keep_references)

    def keep_references(self) -> None:
        for config in list(self.configs):
            seeds = self.seeds if self.plan.keep_references else self.seeds[:1]
            for seed in seeds:
                if not self.reference_or_drop(config, seed):
                    break
                if not self.plan.keep_references:
                    self.forget(config, seed)

    def import_candidate(self) -> None:
        module = self.import_module()
        model_new = getattr(module, "ModelNew", None)
        if not (isinstance(model_new, type) and issubclass(model_new, torch.nn.Module)):
            raise Stop(Outcome.INVALID_SOLUTION, "the solution defines no class ModelNew(torch.nn.Module)")
        self.model_new = model_new

    def construct_first(self) -> None:
        config, seed = self.configs[0], self.seeds[0]
        self.built[(config.name, seed)] = self.construct(config, seed)

    def check_correctness(self) -> None:
        for config in self.configs:
            self.correctness.append(self.correctness_for(config))
            self.release()

    def time_configs(self) -> None:
        by_name = {c.name: c for c in self.configs}
        for name in self.timed_names:
            self.retry_on_oom(f"timing ({name})", lambda name=name: self.timings.append(
                self.time_config(by_name[name])), between=self.drop_timing_state)
            self.drop_timing_state()

    def drop_timing_state(self) -> None:
        self.timing_outputs.clear()
        self.release()

    def measure_coverage(self) -> None:
        """Coverage on the first timed configuration (`Session.coverage_of`)."""
        config = {c.name: c for c in self.configs}[self.timed_names[0]]
        seed = self.seeds[0]
        entry, model = self.reference(config, seed), self.construct(config, seed)
        inputs = clone_inputs(entry.inputs)
        self.coverage_of(lambda: self.candidate(
            lambda: self.forward(model, inputs, None, False), "forward", config.name), config.name)

    # -- memory ----------------------------------------------------------------------------------
    def make_room(self) -> None:
        """References kept across jobs for other tasks give way to this job before anything of it is
        allocated (`memory_plan.room_bytes` from its inputs' sizes, `memory_plan.to_evict`), and the
        memory they held goes back to the driver: the referee beside this worker computes the job's
        references next (after the sync) and trims its own store the same way."""
        if self.device.type != "cuda":
            return
        timing = self.job.timing
        sizes = [self.input_bytes.get(c.name, 0) for c in self.configs]
        needed = room_bytes(sizes, len(self.seeds), timing.input_sets if timing.enabled else 0,
                            lead_sized_flush_bytes(str(self.device)) if timing.enabled else 0,
                            refereed=self.shipper is not None)
        free, _ = torch.cuda.mem_get_info(self.device)
        idle = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        entries = [(k, e.nbytes, k[:2] == self.task_key) for k, e in REFERENCES.items()]
        evicted = REFERENCES.evict(to_evict(entries, free + idle, needed))
        if evicted or idle > 0:
            torch.cuda.empty_cache()
        if evicted:
            self.environment["memory_room"] = (
                f"gave back {evicted / 1e9:.2f} GB of references kept for other tasks (the job's full "
                f"protocol needs about {needed / 1e9:.2f} GB; {free / 1e9:.2f} GB were free)")

    def give_back(self) -> None:
        """After the harness's own step ran out of device memory: every reference kept for later jobs and
        this job's hold on references and timing outputs go, and the cache with them, before a retry."""
        REFERENCES.clear()
        self.verified.clear()
        self.timing_outputs.clear()
        self.release()
        self.close_baseline_memory()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def retry_on_oom(self, what: str, step: Callable[[], None],
                     between: Callable[[], None] | None = None) -> None:
        """`step`, the harness's own work under the memory plan; out of device memory: everything kept
        for later given back (`give_back`), the plan degraded at once (`memory_plan.after_oom`) and `step`
        once more. Out of memory again, or no smaller plan: SKIPPED with why (the device's memory, not
        the task's fault). A candidate's own out-of-memory error is a Stop, never caught here."""
        try:
            step()
            return
        except torch.cuda.OutOfMemoryError as exc:
            first = _short(exc)
        # Out of the handler: the failed step's tensors went with its traceback.
        if between is not None:
            between()
        smaller = after_oom(self.plan, *self.plan_inputs, what) if self.plan is not None else None
        self.give_back()
        if smaller is None:
            raise Stop(Outcome.SKIPPED, f"{what}: out of device memory with the smallest plan "
                       f"({describe_free_bytes(self.device)}): {first}")
        self.plan = smaller
        self.apply_plan()
        try:
            step()
            return
        except torch.cuda.OutOfMemoryError as exc:
            again = _short(exc)
        raise Stop(Outcome.SKIPPED, f"{what}: out of device memory again after the plan was degraded and "
                   f"every cached reference given back ({describe_free_bytes(self.device)}): {again}")

    def measured_reference(self, config: InputConfig) -> Reference:
        """The plan's measured reference; out of device memory: every cached reference given back and
        one retry, then SKIPPED with why."""
        try:
            return self.reference(config, self.seeds[0])
        except torch.cuda.OutOfMemoryError as exc:
            first = _short(exc)
        self.give_back()
        try:
            return self.reference(config, self.seeds[0])
        except torch.cuda.OutOfMemoryError as exc:
            again = _short(exc)
        raise Stop(Outcome.SKIPPED, f"reference ({config.name}): out of device memory for one reference "
                   f"even after every cached reference was given back ({describe_free_bytes(self.device)}): "
                   f"{again} (first: {first[:300]})")

    def plan_memory(self) -> None:
        """Size the job (`execute.memory_plan`) from the device's free bytes and the footprint of the
        largest configuration, measured on its first real reference (a `meta` forward would give the
        output shapes too, but takes tens of seconds on recurrent models), or with a referee as the
        referee measured it on its own (`referee_footprint`). Refused: SKIPPED, why."""
        free = free_device_bytes(self.device)
        self.environment["memory_free"] = describe_free_bytes(self.device)
        largest = max((c for c in self.configs if c.timed),
                      key=lambda c: self.input_bytes.get(c.name, 0), default=self.configs[0])
        if 2 * self.input_bytes.get(largest.name, 0) > free:  # the inputs and one clone: before allocating
            raise Stop(Outcome.SKIPPED, f"reference ({largest.name}): its inputs alone "
                       f"({self.input_bytes[largest.name] / 1e9:.2f} GB, twice) exceed the "
                       f"{free / 1e9:.2f} GB free on {self.device}")
        footprint = self.referee_footprint(largest)
        if footprint is None:
            entry = self.measured_reference(largest)
            footprint = Footprint(tensor_bytes(entry.inputs), tensor_bytes(entry.outputs),
                                  tensor_bytes(_weights(entry.model)), entry.extra.get("forward_bytes", 0))
        wanted = self.wanted(footprint, largest)
        self.plan_inputs = (footprint, wanted)
        self.plan = plan_memory(free, footprint, wanted)
        self.apply_plan()

    def referee_footprint(self, config: InputConfig) -> Footprint | None:
        """The footprint of `config`'s first reference as the referee reported it at the sync (None
        without a referee, or when it reported none: its references failed, or a C task)."""
        sizes = self.referee_sizes.get(config.name)
        names = ("input_bytes", "output_bytes", "param_bytes", "forward_bytes")
        if not isinstance(sizes, dict) or not all(type(sizes.get(n)) is int for n in names):
            return None
        return Footprint(*(sizes[n] for n in names))

    def wanted(self, footprint: Footprint, largest: InputConfig) -> Wanted:
        """The full protocol's sizes; each configuration's references scaled from the measured one by its
        inputs' size on the meta device."""
        biggest = max(self.input_bytes.get(largest.name, 0), 1)
        timed = set(self.timed_names)
        extra_timing_seeds = max(0, self.job.timing.input_sets - len(self.seeds))
        per_config = [(len(self.seeds) + (extra_timing_seeds if c.name in timed else 0))
                      * footprint.reference_bytes
                      * min(1.0, (self.input_bytes.get(c.name) or biggest) / biggest) for c in self.configs]
        cuda = self.device.type == "cuda"
        timing = self.job.timing.enabled
        return Wanted(
            all_references_bytes=int(sum(per_config)), seeds=len(self.seeds),
            input_sets=self.job.timing.input_sets if timing else 0,
            flush_bytes=lead_sized_flush_bytes(str(self.device)) if cuda and timing else 0,
            min_flush_bytes=default_l2_flush_bytes(self.device) if cuda and timing else 0,
            cache_bytes=cache_budget(self.device), max_output_bytes=self.job.max_output_bytes,
            refereed=self.shipper is not None)

    def apply_plan(self) -> None:
        plan = self.plan
        self.environment["memory_plan"] = plan.summary()
        if not plan.fits:
            raise Stop(Outcome.SKIPPED, f"reference: {plan.refused}")
        self.flags += [Flag("memory_plan_degraded", why, Severity.INFO) for why in plan.degraded]
        if plan.input_sets:
            self.timing_seeds = self.timing_seeds[:plan.input_sets]
        if plan.flush_bytes and plan.flush_bytes < lead_sized_flush_bytes(str(self.device)):
            self.l2_flush_bytes = plan.flush_bytes
        REFERENCES.trim(plan.cache_bytes)
        if self.shipper is not None and self.device.type == "cuda":
            torch.cuda.empty_cache()  # what the trim freed goes to the driver: the referee's items need it

    def cache_budget(self) -> int:
        return self.plan.cache_bytes if self.plan is not None else cache_budget(self.device)

    def note_peak(self) -> None:
        """Fold the allocator's peak since its last reset into the job's (the reference forwards reset
        it to measure themselves)."""
        if self.device.type == "cuda" and not self.poisoned:
            with contextlib.suppress(RuntimeError):
                self.peak_allocated_bytes = max(self.peak_allocated_bytes,
                                                torch.cuda.max_memory_allocated(self.device))

    # -- the reference ---------------------------------------------------------------------------
    def reference_key(self, config: InputConfig, seed: int) -> tuple:
        return (*self.task_key, config.name, repr(sorted(config.params.items())),
                repr(sorted(config.module_values.items())), config.randomize_parameters, seed,
                str(self.device), self.job.task.allow_tf32)

    def reference(self, config: InputConfig, seed: int) -> Reference:
        """The cached reference of (config, seed), computed on a miss."""
        key = self.reference_key(config, seed)
        entry = self.verified.get(key) or REFERENCES.get(key)
        if entry is None:
            entry = self.compute_reference(config, seed)
            entry.extra["structure"] = module_structure(entry.model)  # kept or not (`put` takes it too)
            REFERENCES.put(key, entry, self.cache_budget())
        elif entry.extra.get("pending") and self.phase != "candidate":
            self.complete_reference(key, entry)
        self.verified[key] = entry
        return entry

    def compute_reference(self, config: InputConfig, seed: int) -> Reference:
        from cudaperf.tasks.runtime import make_init_inputs, make_inputs, randomize_constant_parameters

        if self.phase == "candidate":
            return self.pending_reference(config, seed)
        module = self.module_for(config)
        inputs = make_inputs(module, config, seed, self.device)
        init_inputs = make_init_inputs(module, config)
        torch.manual_seed(seed)
        model = construct(module.Model, init_inputs, self.device)
        if config.randomize_parameters:  # before its first forward (the candidate's twins follow)
            randomize_constant_parameters(model, None, seed)
        work = clone_inputs(inputs)
        self.note_peak()  # before the forward's own measurement resets the allocator's peak
        before = start_peak(self.device)
        with torch.no_grad():
            outputs = model(*work)
        synchronize(self.device)
        after = work if inputs_mutated(inputs, work) else None
        entry = Reference(inputs, init_inputs, model, outputs, after,
                          nbytes=tensor_bytes(inputs, outputs, after, _weights(model)))
        entry.extra["forward_bytes"] = forward_bytes(self.device, before, outputs)
        entry.extra["output_bytes"] = tensor_bytes(outputs)  # sizes the poisoned block when outputs are gone
        return entry

    def reference_or_drop(self, config: InputConfig, seed: int) -> bool:
        """The reference of (config, seed); False when it failed on a derived configuration, which is
        then dropped with an INFO flag (the task's limit here, not the candidate's fault). A failure of
        a declared configuration, or one that lost the CUDA context, is the task's HARNESS_ERROR."""
        from cudaperf.tasks.derived_configs import is_derived

        if not is_derived(config):
            self.reference(config, seed)
            return True
        try:
            self.reference(config, seed)
            return True
        except Exception as exc:  # the task's own code, on sizes it did not declare
            if classify_failure(exc, self.device)[1]:
                raise
            why = f"its reference failed on {self.device}: {type(exc).__name__}: {exc}"
            self.drop_config(config, why[:400])
            return False

    def drop_config(self, config: InputConfig, why: str) -> None:
        self.configs = [c for c in self.configs if c.name != config.name]
        sizes = ", ".join(f"{k}={v}" for k, v in {**config.module_values, **config.params}.items())
        self.flags.append(Flag("derived_config_dropped", f"{config.name} ({sizes}) is not checked: {why}",
                               Severity.INFO, config.name))
        self.verified = {k: v for k, v in self.verified.items() if k[2] != config.name}
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # an out-of-memory reference leaves its blocks cached

    def forget(self, config: InputConfig, seed: int) -> None:
        """Drop this job's hold on a reference (the memory plan keeps one at a time)."""
        self.verified.pop(self.reference_key(config, seed), None)

    def rerun_reference(self, entry: Reference, config: str) -> None:
        """The reference again, between the two candidate runs: its freed temporaries are where an
        uninitialised candidate output would land (hack #1). Doubles as a determinism check."""
        work = clone_inputs(entry.inputs)
        with torch.no_grad():
            again = entry.model(*work)
        synchronize(self.device)
        same = compare(again, entry.outputs, None, overrides=self.job.task.tolerances)
        if not same.ok:
            self.flags.append(Flag("task_nondeterministic", "the reference gives different outputs for the "
                                   f"same inputs ({same.message})", Severity.WARNING, config))
        del again, work

    # -- the candidate ---------------------------------------------------------------------------
    def construct(self, config: InputConfig, seed: int) -> torch.nn.Module:
        """ModelNew(*init_inputs) built after the reference's seed (so the weights match); its constant
        parameters get the reference's random values where the configuration randomises them."""
        built = self.built.pop((config.name, seed), None)
        if built is not None:
            return built
        init_inputs = self.reference(config, seed).init_inputs
        _check_constructor(self.model_new, init_inputs)
        torch.manual_seed(seed)  # outside the scope: torch's lazy CUDA seeding walks frames
        model = self.candidate(lambda: construct(self.model_new, init_inputs, self.device), "construct",
                               config.name)
        self.alive.append(model)
        if config.randomize_parameters:
            self.randomize_like_reference(model, config, seed)
        return model

    def randomize_like_reference(self, model: torch.nn.Module, config: InputConfig, seed: int) -> None:
        """The candidate's constant parameters set to the values the reference got: a fresh reference
        model (same seed, so the same constants in the same order) is randomised beside it
        (`tasks.runtime.randomize_constant_parameters` draws from the seed and the position)."""
        from cudaperf.tasks.runtime import randomize_constant_parameters

        module = self.module_for(config)
        init_inputs = self.reference(config, seed).init_inputs
        torch.manual_seed(seed)
        twin = construct(module.Model, init_inputs, self.device)
        unmatched = self.candidate(lambda: randomize_constant_parameters(twin, model, seed), "construct",
                                   config.name)
        if unmatched:
            self.flags.append(Flag("parameters_randomized", f"the reference's constant parameters were "
                                   f"randomised; {unmatched}", Severity.INFO, config.name))

    def forward(self, model: torch.nn.Module, inputs: list, config: str | None, monitored: bool = True):
        """One call of the candidate, under the torch-op monitor unless the policy allows torch ops (then
        it could flag nothing, and its per-op dispatch would only slow the call)."""
        with torch.no_grad():
            if not monitored or not self.job.policy.active("torch_compute_op"):
                return model(*inputs)
            monitor = self.guards.op_monitor()
            with monitor:
                out = model(*inputs)
        self.flags += [replace(f, config=f.config or config) for f in monitor.flags()]
        return out

    def run_candidate(self, model: torch.nn.Module, entry: Reference, config: str) -> tuple[Any, str]:
        """One forward on cloned inputs into a poisoned allocator; returns (output, mutation message)."""
        out, given = self.run_once(model, entry, config)
        return out, self._mutation(entry, given)

    def run_once(self, model: torch.nn.Module, entry: Reference, config: str) -> tuple[Any, list]:
        """One forward on cloned inputs into a poisoned allocator; returns (output, the inputs after)."""
        given = clone_inputs(entry.inputs)
        poison_allocator(self.device, self.expected_output_bytes(entry, config))
        out = self.candidate(lambda: self.forward(model, given, config), "forward", config)
        self.alive.append(out)
        size = tensor_bytes(*[t for t in flatten_tensors(out) if type(t) is torch.Tensor])  # no subclass code
        self.output_bytes_seen[config] = size
        cap = self.output_cap()
        if size > cap:
            raise Stop(Outcome.OUTPUT_TOO_LARGE, f"forward ({config}): the output has {size} bytes, more "
                       f"than the {cap} allowed")
        return out, given

    def expected_output_bytes(self, entry: Reference, config: str) -> int:
        """The size of the block to poison for the output: the reference's output when it is known (with a
        referee it is not, before shipping), else the size of this candidate's last output here, else the
        largest input (the output of most operators)."""
        known = tensor_bytes(entry.outputs) or entry.extra.get("output_bytes", 0)
        referee = self.referee_sizes.get(config)
        known = known or (referee.get("output_bytes") if isinstance(referee, dict) else 0) or 0
        known = known or self.output_bytes_seen.get(config, 0)
        return known or max((tensor_bytes(t) for t in flatten_tensors(entry.inputs)), default=0)

    def output_cap(self) -> int:
        """The memory plan's output cap (the job's own cap when it gave one and no plan exists)."""
        if self.plan is not None and self.plan.fits:
            return self.plan.max_output_bytes
        return self.job.max_output_bytes if self.job.max_output_bytes is not None else 1 << 62

    def _mutation(self, entry: Reference, given: list) -> str:
        """'' when the inputs after the call are what they should be (untouched, or as the reference left
        them when the reference itself works in place)."""
        if entry.inputs_after is None:
            paths = mutated_positions(entry.inputs, given)
            return f"the candidate modified {', '.join(paths)}" if paths else ""
        same = self.compare_output(list(given), list(entry.inputs_after))
        return "" if same.ok else f"the inputs after the call differ from the reference's: {same.message}"

    # -- correctness -----------------------------------------------------------------------------
    def correctness_for(self, config: InputConfig) -> ConfigCorrectness:
        results: list[tuple[str, Comparison]] = []
        outputs, references, inputs = [], [], []
        keep = self.plan is None or self.plan.keep_references
        for i, seed in enumerate(self.seeds):
            entry = self.reference(config, seed)
            model = self.construct(config, seed)
            label = f"seed {self.job.seeds[i]}"
            first, mutated = self.run_candidate(model, entry, config.name)
            results += self._judge(first, entry, mutated, f"{label}, first run", config.name)
            if i == 0:
                self.rerun_reference(entry, config.name)
            second, mutated = self.run_candidate(model, entry, config.name)
            results += self._judge(second, entry, mutated, f"{label}, after the reference", config.name)
            # Whole tensors while references are kept; samples when memory keeps one at a time.
            view = (lambda x: x) if keep else _sample
            outputs.append(view(first))
            references.append(view(entry.outputs))
            inputs.append(view(entry.inputs))
            del first, second, model
            if not keep:
                self.forget(config, seed)
                self.release()
        differ = any(inputs_mutated(inputs[0], other) for other in inputs[1:])
        self.flags += degenerate_flags(outputs, references, differ, config=config.name)
        return summarize_correctness(config.name, results, len(self.seeds))

    def _judge(self, out: Any, entry: Reference, mutated: str, label: str, config: str) -> list:
        result = self.compare_output(out, entry.outputs)
        self.flags += [replace(f, config=config) for f in result.flags]
        if mutated:
            self.flags.append(Flag("input_mutated", mutated, Severity.ERROR, config))
            result = replace(result, ok=False, message=f"{mutated}; {result.message}".rstrip("; "))
        return [(label, result)]

    # -- with a referee ----------------------------------------------------------------------------
    def plan_without_outputs(self) -> None:
        """The memory plan, from the sizes of the referee's references (it answers the sync once they
        exist on the shared device); only if it reports none, from a reference measured here, whose
        outputs are then overwritten and the allocator poisoned before any candidate code is imported."""
        self.make_room()
        sizes = self.shipper.sync().get("references")
        self.referee_sizes = sizes if isinstance(sizes, dict) else {}
        self.plan_memory()
        self.forget_outputs()
        self.phase = "candidate"

    def pending_reference(self, config: InputConfig, seed: int) -> Reference:
        """A reference without outputs (inputs, constructor arguments, the seeded and possibly randomised
        model): what the candidate's runs need; `complete_reference` adds the outputs after shipping."""
        from cudaperf.tasks.runtime import make_init_inputs, make_inputs, randomize_constant_parameters

        module = self.module_for(config)
        inputs = make_inputs(module, config, seed, self.device)
        init_inputs = make_init_inputs(module, config)
        torch.manual_seed(seed)
        model = construct(module.Model, init_inputs, self.device)
        if config.randomize_parameters:
            randomize_constant_parameters(model, None, seed)
        entry = Reference(inputs, init_inputs, model, None, None,
                          nbytes=tensor_bytes(inputs, _weights(model)))
        entry.extra["pending"] = True
        return entry

    def complete_reference(self, key: tuple, entry: Reference) -> None:
        """The outputs of a pending reference (after the candidate's outputs have been shipped)."""
        work = clone_inputs(entry.inputs)
        with torch.no_grad():
            outputs = entry.model(*work)
        synchronize(self.device)
        entry.outputs = outputs
        entry.inputs_after = work if inputs_mutated(entry.inputs, work) else None
        entry.nbytes = tensor_bytes(entry.inputs, outputs, entry.inputs_after, _weights(entry.model))
        entry.extra.pop("pending", None)
        entry.extra["output_bytes"] = tensor_bytes(outputs)
        REFERENCES.put(key, entry, self.cache_budget())

    def forget_outputs(self) -> None:
        """Overwrite, then drop, the outputs of every reference this process holds (the cross-job cache
        keeps models, compiled baselines and inputs), then poison the allocator's free blocks."""
        entries = {id(e): (k, e) for k, e in [*REFERENCES._entries.items(), *self.verified.items()]}
        for key, entry in entries.values():
            if entry.extra.get("pending"):
                continue
            scrub([entry.outputs, entry.inputs_after])
            entry.outputs = entry.inputs_after = None
            entry.extra["pending"] = True
            entry.nbytes = tensor_bytes(entry.inputs, _weights(entry.model))
            entry.fingerprint = _fingerprint(entry)
        scrub(list(self.timing_outputs.values()))
        self.timing_outputs.clear()
        poison_allocator(self.device)

    def run_and_ship(self) -> None:
        """Every configuration and seed, two runs each, every output shipped to the referee as it comes;
        then the referee's word on whether timing is worth it."""
        # Batched outputs stay alive until their message: only while the plan keeps references.
        self.shipper.batch = self.plan is None or self.plan.keep_references
        for config in list(self.configs):
            self.ship_config(config)
        self.proceed = bool(self.shipper.done().get("proceed"))

    def ship_config(self, config: InputConfig) -> None:
        from cudaperf.execute.outputs import Key
        from cudaperf.tasks.derived_configs import is_derived

        all_kept = self.plan is None or self.plan.keep_references
        for i, seed in enumerate(self.seeds):
            entry = self.reference(config, seed)
            try:
                model = self.construct(config, seed)
                for run in (1, 2):
                    out, given = self.run_once(model, entry, config.name)
                    moved = given if mutated_positions(entry.inputs, given) else None
                    self.shipper.ship(Key(config.name, i, run), {"output": out, "inputs_after": moved})
                    del out, given, moved
                del model
                self.release()  # shipped (or queued): the candidate's objects go now, inside the scope
                if not all_kept:  # the memory plan holds one reference at a time
                    self.forget(config, seed)
            except Stop as stop:
                if stop.poisoned or not is_derived(config):
                    raise
                answer = self.shipper.failed(Key(config.name, i, 1))  # the referee tries the reference
                if answer.get("reference_ok", True):
                    raise
                self.drop_config(config, f"its reference failed on {self.device}: {answer.get('why')}"[:400])
                return

    def scrub(self) -> None:
        self.forget_outputs()

    # -- timing ----------------------------------------------------------------------------------
    def time_config(self, config: InputConfig) -> ConfigTiming:
        from cudaperf.execute.outputs import TimedOutputs

        seeds = self.timing_seeds
        entry = self.reference(config, seeds[0])
        refereed = self.shipper is not None
        input_sets, expected = [], []
        for seed in seeds:
            input_sets.append(self.timing_inputs(config, seed))
            if not refereed:  # with a referee no reference output is computed here
                expected.append(self.timing_expected(entry, input_sets[-1], config, seed))
        unseen, unseen_expected = self.unseen_inputs(entry, config, refereed)
        expected += unseen_expected
        model = self.construct(config, seeds[0])
        self.check_reference_structure(entry, config)
        # With a referee every baseline output (a right answer) is overwritten once its call is over
        keep = _storages([input_sets, _held_by(entry.model)]) if refereed else None
        fns = {CANDIDATE: lambda inputs: self._scoped_call(model, inputs),
               **self.baselines(entry, config, keep)}
        # a reference working in place changes the inputs each call
        checked = not self.in_place(config) if refereed else entry.inputs_after is None
        if not checked:
            self.flags.append(Flag("timing_unchecked", "the reference modifies its inputs, so outputs are "
                                   "not re-checked during timing", Severity.INFO, config.name))

        def check(name: str, index: int, out: Any) -> bool:
            return self.compare_output(out, expected[index]).ok

        timed = TimedOutputs(self.compare_output, budget_bytes=self.recheck_budget_bytes(len(unseen)))
        recheck = self.routed_for_baselines(self.wire_indexed(timed.check, len(input_sets))) if refereed \
            else check
        anchor = next((name for name in ("eager", "compile") if name in fns), None)
        bench = self.bench(fns, input_sets, recheck if checked else None, config.name, unseen, anchor)
        self.check_reference_structure(entry, config)  # candidate code ran between the baselines' calls
        if refereed and timed.first:  # after the bench, never during one: the referee judges them
            self.shipper.ship_timed(config.name, timed.to_ship())
            self.flags += _partial_recheck(timed, config.name)
        timed.clear()
        self.note_baseline_memory(config.name)
        return self.summarize_timing(config, entry, bench)

    def check_reference_structure(self, entry: Reference, config: InputConfig) -> None:
        """The reference model the baselines run (checked before and after the bench) is as it was
        cached: a hook, a replaced method or a mode switched on it since (only candidate code ran in
        between) is `harness_tampered`; the entry leaves the cache and the worker is replaced."""
        if structure_intact(entry):
            return
        REFERENCES.evict([k for k, e in REFERENCES.items() if e is entry])
        why = "the reference model was changed (a hook, an instance attribute or its mode) during the job"
        self.flags.append(Flag("harness_tampered", why, Severity.ERROR, config.name))
        raise Stop(Outcome.POLICY_VIOLATION, why, poisoned=True)

    def recheck_budget_bytes(self, unseen: int = 0) -> int:
        """Device bytes the timing stage may hold in later re-checked outputs kept for the referee
        (`memory_plan.recheck_budget_bytes`, less what the unseen input sets take: `unseen_device_bytes`);
        `MIN_OUTPUT_CAP_BYTES` without a plan."""
        plan = self.plan
        if plan is None or not plan.fits or self.plan_inputs is None:
            return MIN_OUTPUT_CAP_BYTES
        fp = self.plan_inputs[0]
        held = unseen_device_bytes(fp, unseen, refereed=self.shipper is not None)
        return max(0, recheck_budget_bytes(plan, fp) - held)

    def unseen_inputs(self, entry: Reference, config: InputConfig, refereed: bool) -> tuple[list, list]:
        """`config`'s unseen input sets (`EvalJob.unseen_seeds`, as many as `unseen_sets_allowed` gives), as
        functions that draw each one on the device at its round (`make_inputs` is deterministic), so no set
        exists before its round; without a referee, each one's expected output too (the seed-0 model on a
        clone, on the device, the set drawn for it and dropped); the referee computes its own from the
        seeds."""
        count = self.unseen_count(config)
        self.note_unseen_count(count, config.name)
        module, sets, expected = self.module_for(config), [], []
        for seed in self.unseen_seeds[:count]:
            if not refereed:
                expected.append(_model_on_clone(entry, _drawn_aside(module, config, seed, self.device)))
            sets.append(functools.partial(self.draw_unseen, module, config, seed))
        return sets, expected

    def draw_unseen(self, module: types.ModuleType, config: InputConfig, seed: int) -> list:
        """One unseen input set, drawn between timed rounds: the trusted functions the candidate replaced
        during the bench are flagged and put back first, so the task's `get_inputs` draws with its own."""
        self.flags += self.guards.put_back(config.name)
        return _drawn_aside(module, config, seed, self.device)

    def unseen_count(self, config: InputConfig) -> int:
        """How many unseen input sets `config` gets: the plan's footprint (the largest configuration's) and
        what it leaves spare, or without a plan the configuration's inputs, outputs taken as large; the
        host's byte bound only where they are drawn there (a CPU device)."""
        wanted, on_host = self.job.timing.unseen_sets, torch.device(self.device).type == "cpu"
        if self.plan is not None and self.plan.fits and self.plan_inputs is not None:
            fp = self.plan_inputs[0]
            spare = recheck_budget_bytes(self.plan, fp)
            return unseen_sets_allowed(wanted, fp, spare, refereed=self.shipper is not None, on_host=on_host)
        size = self.input_bytes.get(config.name) or 1
        fp = Footprint(input_bytes=size, output_bytes=size)
        return unseen_sets_allowed(wanted, fp, None, on_host=on_host)

    def wire_indexed(self, check: Check, rotated: int) -> Check:
        """`check` given the referee's index of an input set: the bench numbers unseen set j
        `rotated + j`, the referee `timing.input_sets + j` (the plan may rotate fewer sets)."""
        offset = self.job.timing.input_sets - rotated
        return lambda name, index, out: check(name, index if index < rotated else index + offset, out)

    def in_place(self, config: InputConfig) -> bool:
        """Whether the referee found `config`'s reference working in place (False when it did not say:
        the referee then judged nothing and timing does not run)."""
        sizes = self.referee_sizes.get(config.name)
        return isinstance(sizes, dict) and sizes.get("in_place") is True

    def timing_inputs(self, config: InputConfig, seed: int) -> list:
        """One timing input set: a clone of the seed's reference inputs where the reference is held anyway
        (the first seed, or every seed while the plan keeps references); otherwise the same inputs drawn
        afresh (`make_inputs` is deterministic), so that no other seed's whole reference (its inputs, and
        its clone during its forward) sits beside the sets: the memory plan's "timing inputs" stage."""
        from cudaperf.tasks.runtime import make_inputs

        if seed == self.timing_seeds[0] or self.plan is None or self.plan.keep_references:
            return clone_inputs(self.reference(config, seed).inputs)
        return make_inputs(self.module_for(config), config, seed, self.device)

    def timing_expected(self, entry: Reference, inputs: list, config: InputConfig, seed: int) -> Any:
        """The seed-0 reference model's output on another seed's inputs `inputs` (timing uses one model),
        computed on a clone: the set stays as drawn."""
        if seed == self.timing_seeds[0]:
            return entry.outputs
        key = (config.name, seed)
        if key not in self.timing_outputs:
            self.timing_outputs[key] = _model_on_clone(entry, inputs)
        return self.timing_outputs[key]

    def _scoped_call(self, model: torch.nn.Module, inputs: list) -> Any:
        # no_grad here, not only around the bench: its exit puts the grad mode back, so a candidate that
        # turns autograd on inside its call cannot leave it on for the baselines' next calls
        with self.scope(), torch.no_grad():
            return model(*inputs)

    def baselines(self, entry: Reference, config: InputConfig,
                  keep: frozenset[int] | None = None) -> dict[str, Callable | Disposed]:
        """The baselines to time. With `keep` (a refereed worker: the storages of the timing inputs and
        of the model's tensors), each call allocates apart (`baseline_memory`) and each is
        `timing.Disposed`: every output overwritten after its call (`overwrite_baseline_output`), what
        the calls freed overwritten and the writes waited for before the candidate's next call
        (`settle_baselines`)."""
        if keep is not None and self.baseline_memory is None:
            self.baseline_memory = BaselineMemory.for_device(self.device)
        wanted = set(self.job.timing.baselines)
        fns: dict[str, Callable | Disposed] = {}
        if "eager" in wanted:
            fns["eager"] = lambda inputs: entry.model(*inputs)
        if "compile" in wanted:
            compiled = self.compiled(entry, config)
            if compiled is not None:
                fns["compile"] = lambda inputs: compiled(*inputs)
        if keep is None:
            return fns
        dispose = lambda out: self.overwrite_baseline_output(out, keep)  # noqa: E731 - one closure for all
        settle = self.settle_baselines  # one settle for both: the bench runs it once per candidate call
        return {name: Disposed(self.baseline_memory.around(fn), dispose, settle) for name, fn in fns.items()}

    def dispose_baseline_output(self, out: Any, keep: frozenset[int]) -> None:
        """A baseline's output and what its call freed overwritten, and the writes waited for: the
        disposal of one call on its own (`overwrite_baseline_output`, then `settle_baselines`)."""
        # through the class and a module function: the GPU tests call this on a stand-in session that has
        # only `device` and `baseline_memory`
        TorchSession.overwrite_baseline_output(self, out, keep)
        settle_baseline_memory(self.device, self.baseline_memory)

    def overwrite_baseline_output(self, out: Any, keep: frozenset[int]) -> None:
        """Overwrite a baseline's output (the reference model's: a right answer on a timing input set) once
        its sample is taken, outside every timed window: each tensor of it (NaN, or zeros; a view's whole
        storage, whose rest is a temporary of the call) but those whose storage is in `keep` (an input's or
        one the model holds, `_held_by`: the bench and the model need them intact, and they are no secret:
        the candidate gets the inputs and the same weights). On CUDA the writes are queued, in stream
        order before anything that reuses the memory; `settle_baselines` waits for them."""
        tensors = [t for t in flatten_tensors(out) if type(t) is torch.Tensor and _storage(t) not in keep]
        _fill_storages_beyond_views(tensors)
        scrub(tensors)

    def settle_baselines(self) -> None:
        """Before the candidate's next call, once for the baseline calls since the last one: what they freed
        overwritten (`BaselineMemory.scrub`) and every write waited for, so that no work the candidate's
        code queues next, on any stream, reads the memory before they land."""
        settle_baseline_memory(self.device, self.baseline_memory)

    def routed_for_baselines(self, check: Callable[[str, int, Any], bool]) -> Callable[[str, int, Any], bool]:
        """`check` (the bench's re-check of an output) with a baseline's re-check routed like its call:
        a copy the comparison makes of the baseline's output (a right answer) is overwritten with the
        call's temporaries, at its disposal right after."""
        memory = self.baseline_memory
        if memory is None:
            return check

        def routed(name: str, index: int, out: Any) -> bool:
            if name == CANDIDATE:
                return check(name, index, out)
            with memory.routed():
                return check(name, index, out)
        return routed

    def note_baseline_memory(self, config: str) -> None:
        """The mechanism and its cost in the result's environment; a WARNING once when it is not in effect
        or a scrub failed (the harness's protection, not the candidate's fault)."""
        memory = self.baseline_memory
        if memory is None:
            return
        self.environment["baseline_memory"] = memory.describe()
        if memory.failure and not any(f.code == "baseline_memory_unscrubbed" for f in self.flags):
            self.flags.append(Flag("baseline_memory_unscrubbed", "what the baselines free during timing is "
                                   f"not overwritten: {memory.failure}", Severity.WARNING, config))

    def close_baseline_memory(self) -> None:
        """The baselines' pool given back; kept as it is after a CUDA fault (its destructor would call
        into a dead context, and the worker is replaced)."""
        memory, self.baseline_memory = self.baseline_memory, None
        if memory is not None and self.poisoned:
            _UNCLOSED.append(memory)
        elif memory is not None:
            memory.close()

    def compiled(self, entry: Reference, config: InputConfig) -> Callable | None:
        """torch.compile(reference), mode default, compiled (and warmed) outside the timing; cached."""
        if "compiled" not in entry.extra:
            start = time.perf_counter()
            memory = self.baseline_memory
            try:
                compiled = compile_baseline(entry.model)
                # The compile and its first call allocate where the baselines do (`baseline_memory`)
                with torch.no_grad(), memory.routed() if memory else contextlib.nullcontext():
                    out = compiled(*clone_inputs(entry.inputs))
                # its first output, a right answer, overwritten at once with what the call freed (the
                # disposal waits for the device, so the compile's own work has ended too)
                self.dispose_baseline_output(out, _storages(_held_by(entry.model)))
                del out
                entry.extra["compiled"] = compiled
            except Exception as exc:  # noqa: BLE001 - the baseline is missing, the evaluation goes on
                entry.extra["compiled"] = f"{type(exc).__name__}: {exc}"[:500]
            self.durations["compile_baseline"] = time.perf_counter() - start
        compiled = entry.extra["compiled"]
        if isinstance(compiled, str):
            self.flags.append(Flag("compile_baseline_failed", compiled, Severity.WARNING, config.name))
            return None
        return compiled

    def summarize_timing(self, config: InputConfig, entry: Reference, bench: BenchReport) -> ConfigTiming:
        name = config.name
        refereed = self.shipper is not None
        self.timing_flags(bench, name, baselines=() if refereed else ("eager", "compile"))
        if refereed:
            self.flags += _baseline_disagreements(bench, name)
        timings = bench.timings
        floor_ms = flops = bytes_moved = None
        if self.shipper is None:  # with a referee, the figures and flags are its own (`apply_verdict`)
            sol, flops, bytes_moved = self.speed_of_light(entry)
            floor_ms = sol.floor_ms
            fastest_baseline_ms = min((t.median_ms for k, t in timings.items() if k != CANDIDATE),
                                      default=None)
            self.flags += speed_flags(timings[CANDIDATE].median_ms, fastest_baseline_ms, sol, config=name)
        return ConfigTiming(config=name, candidate=timings[CANDIDATE], eager=timings.get("eager"),
                            compiled=timings.get("compile"), speed_of_light_ms=floor_ms,
                            bytes_moved=bytes_moved, flops=flops, **self.protocol_fields(bench))

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
    def drop_objects(self) -> None:
        super().drop_objects()
        self.built.clear()

    def drop_handles(self) -> None:
        self.model_new = None

    def cleanup(self) -> None:
        """`Session.cleanup`, then this job's hold on references, inputs and outputs dropped and the
        allocator's cache given back: freed only after the shared cleanup emptied the cache, they would
        stay reserved by this process between jobs, where the referee beside it (same device) cannot use
        them for the next job's references. The cross-job cache (`REFERENCES`) keeps its entries."""
        self.note_peak()
        if self.plan is not None and self.peak_allocated_bytes:
            # The cross-job cache is sized apart from the job's peak (it gets what the job leaves), so
            # what it holds is named beside the estimate, not inside it.
            self.environment["memory_peak"] = (
                f"this worker allocated at most {self.peak_allocated_bytes / 1e9:.2f} GB; the plan's "
                f"estimate {self.plan.needed_bytes / 1e9:.2f} GB ({self.plan.peak_stage}, the referee's "
                f"share included if any) plus references kept for later jobs, "
                f"{REFERENCES.nbytes() / 1e9:.2f} GB at the end (at most "
                f"{self.plan.cache_bytes / 1e9:.2f} GB)")
        super().cleanup()
        self.verified.clear()
        self.timing_outputs.clear()
        self.built.clear()
        self.close_baseline_memory()  # its pool's free segments go back before the cache is emptied
        if self.device.type == "cuda" and not self.poisoned:
            try:
                torch.cuda.empty_cache()
            except Exception as exc:  # noqa: BLE001 - the verdict is already decided: keep it
                why = f"{type(exc).__name__}: {exc}"[:500]
                self.flags.append(Flag("cleanup_failed", why, Severity.WARNING))
                self.poisoned = True


# --------------------------------------------------------------------------------------------------
# Helpers


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return list(model.parameters()) + list(model.buffers())


def _held_by(model: torch.nn.Module) -> list[torch.Tensor]:
    """Every tensor a model holds: its weights, and tensors kept as plain attributes of its modules, as
    they are or in lists, tuples and dicts (a forward may return one as it is: overwriting that output
    would change the model). Not tensors reached through other objects, closures or module globals."""
    attributes = [t for m in model.modules() for t in flatten_tensors(list(vars(m).values()))]
    return _weights(model) + attributes


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _model_on_clone(entry: Reference, inputs: list) -> Any:
    """The reference's model on a clone of `inputs` (which stay as drawn), without autograd."""
    with torch.no_grad():
        return entry.model(*clone_inputs(inputs))


def _drawn_aside(module: types.ModuleType, config: InputConfig, seed: int, device: torch.device) -> list:
    """`make_inputs` with the random generators' state put back after (an unseen set is drawn between timed
    rounds: what a later call draws does not move with it)."""
    from cudaperf.tasks.runtime import make_inputs

    devices = [device] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return make_inputs(module, config, seed, device)


def _storages(values: Any) -> frozenset[int]:
    """The storages of every tensor in `values` (what a baseline's output may alias and must keep)."""
    return frozenset(_storage(t) for t in flatten_tensors(values))


def settle_baseline_memory(device: torch.device, memory: BaselineMemory | None) -> None:
    """What the baseline calls freed overwritten (where `memory` is set), then the device synchronised."""
    if memory is not None:
        memory.scrub()
    synchronize(device)


def _fill_storages_beyond_views(tensors: list[torch.Tensor]) -> None:
    """Fill with 0xFF bytes the whole storage of each tensor that covers less than its storage (a slice
    or a view of a larger temporary): the rest would be freed, later, as it is."""
    for t in tensors:
        if t.untyped_storage().nbytes() > t.numel() * t.element_size():
            t.untyped_storage().fill_(0xFF)


def _partial_recheck(timed: Any, config: str) -> list[Flag]:
    """`timed_recheck_partial` (INFO) when some of the candidate's later re-checked outputs differed from
    its first on their set and were not kept for the referee (`outputs.TimedOutputs`): those were
    compared here with that first output only, within twice the tolerance from the reference."""
    from cudaperf.execute.outputs import KEPT_RECHECKS

    unjudged, differing = timed.unjudged()
    if not unjudged:
        return []
    text = (f"{unjudged} of the candidate's {differing} re-checked outputs that were not bit for bit its "
            "first on their input set were compared only here, with that first output (so within twice the "
            "tolerance from the reference); the referee judged the others (per set the farthest from the "
            f"first and one drawn at random, {KEPT_RECHECKS} at most)")
    return [Flag("timed_recheck_partial", text, Severity.INFO, config)]


def _baseline_disagreements(bench: BenchReport, config: str) -> list[Flag]:
    """With a referee, a baseline's re-checked outputs are compared with the candidate's first output on
    the same input set (`outputs.TimedOutputs`), which the referee judges: a disagreement says the
    baseline is wrong when the referee found that output right (a WARNING: the task's fault), and
    nothing more when it did not (the referee's `timed_output_mismatch` says that)."""
    return [Flag("baseline_output_mismatch", f"the {name} baseline's outputs differed {count} times from "
                 "the candidate's first output on the same input set (which the referee judges)",
                 Severity.WARNING, config)
            for name, count in sorted(bench.check_failures.items()) if name != CANDIDATE and count]




def _sample(value: Any) -> Any:
    """Up to `SAMPLE_ELEMENTS` evenly spaced elements of every tensor in `value` (copies; structure
    kept), for the degenerate-output check when whole outputs of every seed cannot stay in memory."""
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor or value.numel() <= SAMPLE_ELEMENTS:
            return value.detach().clone() if type(value) is torch.Tensor else value
        flat = value.detach().reshape(-1)
        return flat[::-(-flat.numel() // SAMPLE_ELEMENTS)].clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_sample(v) for v in value)
    return value


def _short(exc: BaseException) -> str:
    """An out-of-memory error's first line (its traceback would hold the failed step's tensors)."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:600]


def _check_constructor(cls: type, init_inputs: list) -> None:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return  # no signature to check: construction itself will tell
    try:
        signature.bind(*init_inputs)
    except TypeError as exc:
        raise Stop(Outcome.INVALID_SOLUTION, f"ModelNew{signature} cannot take the task's constructor "
                   f"arguments ({len(init_inputs)} positional): {exc}") from None


