"""The in-worker recipe for PyTorch tasks: one job (a task module and a `ModelNew` candidate) to its payload.

Stages (heartbeats), after the shared setup of `execute.session`:
- setup (`load_task`): the task module loaded (trusted code);
- reference: inputs per configuration x seed, created on the device (an input made on the host and copied
  would time the copy's placement, not the kernel's), the reference model built after
  `torch.manual_seed(seed)`, its outputs; kept across jobs by `REFERENCES` (see there why);
- import: the candidate module, inside the candidate scope (as is every call into candidate code);
- construct: `ModelNew(*init_inputs)` after the same seed as the reference, so the weights match;
- correctness: per configuration x seed, the candidate runs before and after a reference re-run (hack #1),
  each time on cloned inputs checked for mutation afterwards (#2) with the caching allocator poisoned
  beforehand (#1); outputs compared scale-aware; degenerate outputs flagged (#12);
- timing: candidate, eager and torch.compile baselines interleaved on rotated, re-checked inputs
  (`cudaperf.timing`), then speed-of-light (`cudaperf.sol`);
- coverage: share of GPU time in the candidate's own kernels (`Session.coverage_of`).

Hack numbers name the fixtures in tests/adversarial/ (`hack_NN_*.py`).

Not covered: what every task kind shares (the stage wrapper, candidate windows, failure classification,
the bench, cleanup and the payload: `execute.session`), C->CUDA tasks (`c_session.py`), which recipe runs
a job (`dispatch.py`).
"""

from __future__ import annotations

import hashlib
import inspect
import time
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
)
from cudaperf.execute.session import CANDIDATE, Session, Stop, summarize_correctness, synchronize
from cudaperf.jobs import EvalPayload
from cudaperf.sol import count_flops, dominant_dtype, estimate, min_bytes, speed_flags
from cudaperf.timing import BenchReport, compile_baseline
from cudaperf.types import ConfigCorrectness, ConfigTiming, Flag, InputConfig, Outcome, Severity

REFERENCE_CACHE_FRACTION = 0.25  # of device memory held by cached references across jobs
CPU_REFERENCE_CACHE_BYTES = 2 << 30


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

    def __init__(self, report: Callable[[str], None]):
        super().__init__(report)
        self.model_new: type | None = None
        self.built: dict[tuple[str, int], torch.nn.Module] = {}
        self.verified: dict[tuple, Reference] = {}  # references fingerprint-checked during this job
        self.timing_outputs: dict[tuple[str, int], Any] = {}  # seed-0 model on other seeds' inputs

    # -- stages ----------------------------------------------------------------------------------
    def load_task(self) -> None:
        from cudaperf.tasks import timed_configs
        from cudaperf.tasks.runtime import load_module

        self.module = load_module(self.job.task)
        self.task_key = (self.job.task.task_id, hashlib.sha256(self.job.task.source.encode()).hexdigest())
        self.timed_names = timed_configs(self.job.task)

    def compute_references(self) -> None:
        for config in self.job.task.configs:
            for seed in self.seeds:
                self.reference(config, seed)

    def import_candidate(self) -> None:
        module = self.import_module()
        model_new = getattr(module, "ModelNew", None)
        if not (isinstance(model_new, type) and issubclass(model_new, torch.nn.Module)):
            raise Stop(Outcome.INVALID_SOLUTION, "the solution defines no class ModelNew(torch.nn.Module)")
        self.model_new = model_new

    def construct_first(self) -> None:
        config, seed = self.job.task.configs[0], self.seeds[0]
        self.built[(config.name, seed)] = self.construct(config, seed)

    def check_correctness(self) -> None:
        for config in self.job.task.configs:
            self.correctness.append(self.correctness_for(config))
            self.release()

    def time_configs(self) -> None:
        by_name = {c.name: c for c in self.job.task.configs}
        for name in self.timed_names:
            self.timings.append(self.time_config(by_name[name]))
            self.release()

    def measure_coverage(self) -> None:
        """Coverage on the first timed configuration (`Session.coverage_of`)."""
        config = {c.name: c for c in self.job.task.configs}[self.timed_names[0]]
        seed = self.seeds[0]
        entry, model = self.reference(config, seed), self.construct(config, seed)
        inputs = clone_inputs(entry.inputs)
        self.coverage_of(lambda: self.candidate(
            lambda: self.forward(model, inputs, None, False), "forward", config.name), config.name)

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
        synchronize(self.device)
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
        synchronize(self.device)
        same = compare(again, entry.outputs, None, overrides=self.job.task.tolerances)
        if not same.ok:
            self.flags.append(Flag("task_nondeterministic", "the reference gives different outputs for the "
                                   f"same inputs ({same.message})", Severity.WARNING, config))
        del again, work

    # -- the candidate ---------------------------------------------------------------------------
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
            raise Stop(Outcome.OUTPUT_TOO_LARGE, f"forward ({config}): the output has {size} bytes, more "
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
            outputs.append(first)
            references.append(entry.outputs)
            inputs.append(entry.inputs)
        differ = any(inputs_mutated(inputs[0], other) for other in inputs[1:])
        self.flags += degenerate_flags(outputs, references, differ, config=config.name)
        return summarize_correctness(config.name, results, len(self.seeds))

    def _judge(self, out: Any, entry: Reference, mutated: str, label: str, config: str) -> list:
        result = compare(out, entry.outputs, None, overrides=self.job.task.tolerances)
        self.flags += [replace(f, config=config) for f in result.flags]
        if mutated:
            self.flags.append(Flag("input_mutated", mutated, Severity.ERROR, config))
            result = replace(result, ok=False, message=f"{mutated}; {result.message}".rstrip("; "))
        return [(label, result)]

    # -- timing ----------------------------------------------------------------------------------
    def time_config(self, config: InputConfig) -> ConfigTiming:
        seeds = self.timing_seeds
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
        if seed == self.timing_seeds[0]:
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
        wanted = set(self.job.timing.baselines)
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
                synchronize(self.device)
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
        self.timing_flags(bench, name, baselines=("eager", "compile"))
        timings = bench.timings
        sol, flops, bytes_moved = self.speed_of_light(entry)
        fastest_baseline_ms = min((t.median_ms for k, t in timings.items() if k != CANDIDATE), default=None)
        self.flags += speed_flags(timings[CANDIDATE].median_ms, fastest_baseline_ms, sol, config=name)
        return ConfigTiming(config=name, candidate=timings[CANDIDATE], eager=timings.get("eager"),
                            compiled=timings.get("compile"), speed_of_light_ms=sol.floor_ms,
                            bytes_moved=bytes_moved, flops=flops, overhead_ms=bench.overhead_ms,
                            lead_us=bench.lead_us, lead_kind=bench.lead_kind)

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
        raise Stop(Outcome.INVALID_SOLUTION, f"ModelNew{signature} cannot take the task's constructor "
                   f"arguments ({len(init_inputs)} positional): {exc}") from None


