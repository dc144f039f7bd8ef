"""Judging a PyTorch task's candidate outputs: the reference model's outputs per (configuration, seed), and
the comparisons, in the referee (or in a worker, for its own claim or when it runs without a referee).

A reference: the configuration's module (`tasks.runtime.load_module`: a derived configuration re-runs the
task's source with its own constants), inputs drawn on the device from the seed (`make_inputs`, exactly as
the worker draws the candidate's), the `Model` built after `torch.manual_seed(seed)` (so its weights are
the candidate's), its parameters randomised when the configuration asks (`randomize_constant_parameters`,
whose values follow from the seed alone, so the worker gives the candidate the same ones), and its outputs
on cloned inputs (`inputs_after` kept when the reference works in place).

Judging one output (`compare_item`): `correctness.compare` under the task's tolerances; inputs the
candidate changed (the worker ships them only then) against the pristine inputs or, for a reference that
works in place, against the reference's own inputs afterwards (ERROR `input_mutated`, hack #2). Once all of
a configuration's outputs are in: degenerate outputs (hack #12) and, where checked, a reference that is not
deterministic (WARNING `task_nondeterministic`). In the referee, `prepare_sol` adds the speed-of-light
figures of every timed configuration and the reference's own time (so a forged baseline time cannot switch
the floor off); `reference_sizes` tells the worker what it needs to plan its memory without computing a
reference (inputs, outputs, weights, the forward's own peak, whether it works in place); `check_timed`
judges an output the worker's timing stage re-checked: the first seed's model (timing uses one model) on
the input set's inputs, drawn from its timing seed, kept with that reference across jobs.

A reference that runs out of device memory is retried once after the caller's `make_room` (the referee
gives back other tasks' references), then raised as `ReferenceOutOfMemory` (the device's limit: SKIPPED).

Not covered: the bookkeeping both kinds share (`judge.py`), C tasks (`c_judge.py`), the candidate itself.
"""

from __future__ import annotations

import hashlib
import math
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
    tensor_bytes,
)
from cudaperf.execute.device_state import forward_bytes, start_peak, synchronize
from cudaperf.execute.judge import Judge, ReferenceFailed, ReferenceStore
from cudaperf.jobs import EvalJob
from cudaperf.types import Flag, InputConfig, Severity

REFERENCE_CACHE_FRACTION = 0.25  # of device memory held by a referee's cached references across jobs
CPU_REFERENCE_CACHE_BYTES = 2 << 30
SCRUB_VALUE = float("nan")  # what a worker writes over its references before dropping them
FINGERPRINT_CHUNK_BYTES = 256 << 20  # summed per chunk: a uint8 -> int64 sum materialises an 8x copy


class ReferenceOutOfMemory(ReferenceFailed):
    """A reference ran out of device memory (after room was made, where the caller can make it): what
    the device holds, not a fault of the task (the referee reports the job SKIPPED, with why)."""


@dataclass
class TorchReference:
    """One (configuration, seed): the model and constructor arguments, and, while `computed`, the inputs,
    outputs and the inputs after the reference ran (only when it works in place)."""

    model: torch.nn.Module
    init_inputs: list
    inputs: list | None = None
    outputs: Any = None
    inputs_after: list | None = None
    computed: bool = False
    deterministic: bool | None = None
    determinism_message: str = ""
    extra: dict[Any, Any] = field(default_factory=dict)  # flops, sol, the compiled baseline (workers)
    nbytes: int = 0
    fingerprint_at_put: tuple[int, ...] = ()

    def fingerprint(self) -> tuple[int, ...]:
        """An integer sum of the raw bytes of every tensor held (catches stray writes, not collisions)."""
        weights = list(self.model.parameters()) + list(self.model.buffers())
        tensors = flatten_tensors([self.inputs, self.outputs, self.inputs_after, weights])
        return tuple(byte_sum(t) for t in tensors)

    def forget_outputs(self) -> None:
        """Overwrite the outputs and inputs, then drop them (the model and the extras stay)."""
        scrub([self.outputs, self.inputs_after, self.inputs])
        self.inputs = self.outputs = self.inputs_after = None
        self.computed = False
        self.nbytes = tensor_bytes(list(self.model.parameters()))


def byte_sum(t: torch.Tensor, chunk_bytes: int = FINGERPRINT_CHUNK_BYTES) -> int:
    """The sum of a tensor's bytes, by chunks: `sum(dtype=int64)` of uint8 casts its input first, so one
    pass over a 8.6 GB input asked for 64 GiB (KernelBench level 1, problem 47)."""
    if not t.numel():
        return 0
    raw = t.contiguous().reshape(-1).view(torch.uint8)
    return sum(int(raw[i:i + chunk_bytes].sum(dtype=torch.int64)) for i in range(0, raw.numel(), chunk_bytes))


def scrub(values: Any) -> None:
    """Overwrite every tensor in `values` in place (NaN for floating tensors, zeros otherwise)."""
    with torch.no_grad():
        for t in flatten_tensors(values):
            if t.numel() and type(t) is torch.Tensor:  # a subclass's fill_ could run its own code
                t.fill_(SCRUB_VALUE) if (t.is_floating_point() or t.is_complex()) else t.zero_()


def sample(value: Any) -> Any:
    """Up to `SAMPLE_ELEMENTS` evenly spaced elements of every tensor in `value` (structure kept): enough
    for the degenerate-output checks (a constant, or the same for every seed), which see outputs and
    references sampled alike."""
    from cudaperf.execute.memory_plan import SAMPLE_ELEMENTS

    if type(value) is torch.Tensor:
        if value.numel() <= SAMPLE_ELEMENTS:
            return value
        flat = value.detach().reshape(-1)
        return flat[::-(-flat.numel() // SAMPLE_ELEMENTS)].clone()
    if type(value) in (list, tuple):
        return type(value)(sample(v) for v in value)
    return value




def cache_budget(device: torch.device) -> int:
    if device.type == "cuda":
        return int(REFERENCE_CACHE_FRACTION * torch.cuda.get_device_properties(device).total_memory)
    return CPU_REFERENCE_CACHE_BYTES


def construct(cls: type, init_inputs: list, device: torch.device) -> torch.nn.Module:
    """`cls(*init_inputs)` with parameters allocated on `device` (the caller seeds torch first, the same
    seed for the reference and the candidate, so their weights match)."""
    with torch.device(device):
        model = cls(*init_inputs)
    return model.to(device)


class TorchJudge(Judge):
    """Judging for one PyTorch job; references through `store` (kept across jobs by the caller)."""

    def __init__(self, job: EvalJob, seeds: tuple[int, ...], device: torch.device, store: ReferenceStore, *,
                 check_determinism: bool, after_compute: Callable[[], None] | None = None,
                 make_room: Callable[[], None] | None = None, timing_seeds: tuple[int, ...] = ()):
        """`after_compute`: called after each reference is computed and stored (the referee gives its
        cached blocks back there, before the next reference's tensors could be carved from them);
        `make_room`: called once when computing a reference runs out of device memory, before the one
        retry (the referee gives back other tasks' references); `timing_seeds`: the job's timing seeds,
        secret mixed in (`check_timed`)."""
        super().__init__(seeds, job.seeds)
        self.timing_seeds = timing_seeds
        self.job, self.task, self.device, self.store = job, job.task, device, store
        self.check_determinism = check_determinism
        self.after_compute, self.make_room = after_compute, make_room
        self.configs = {c.name: c for c in self.task.configs}
        self.task_key = (self.task.task_id, hashlib.sha256(self.task.source.encode()).hexdigest(),
                         str(device), self.task.allow_tf32)
        self.unseen_expected: dict[tuple, Any] = {}  # the unseen sets' expected outputs, this job's alone

    def config_names(self) -> tuple[str, ...]:
        return tuple(self.configs)

    def is_derived(self, config: str) -> bool:
        return not self.configs[config].timed or bool(self.configs[config].module_values)

    # -- references --------------------------------------------------------------------------------
    def module(self, config: InputConfig) -> Any:
        from cudaperf.tasks.runtime import load_module, task_source_for

        return self.store.module(task_source_for(self.task, config), lambda: load_module(self.task, config))

    def model(self, config: InputConfig, seed: int, *, randomized: bool = True) -> tuple[Any, list]:
        """(a fresh reference model built after `seed`, its constructor arguments); its constant
        parameters randomised from the seed when the configuration asks and `randomized`."""
        from cudaperf.tasks.runtime import make_init_inputs, randomize_constant_parameters

        module = self.module(config)
        init_inputs = make_init_inputs(module, config)
        torch.manual_seed(seed)
        model = construct(module.Model, init_inputs, self.device)
        if randomized and config.randomize_parameters:
            randomize_constant_parameters(model, None, seed)
        return model, init_inputs

    def own_key(self, key: Any) -> bool:
        """Whether a store key is of this job's task (its references stay when room is made)."""
        return isinstance(key, tuple) and key[:len(self.task_key)] == self.task_key

    def room_bytes(self) -> int:
        """Free bytes the job would need with its full protocol, worker and referee together
        (`memory_plan.room_bytes`), from its configurations' input sizes on the meta device."""
        from cudaperf.execute.memory_plan import room_bytes
        from cudaperf.tasks.runtime import describe_config
        from cudaperf.timing import default_l2_flush_bytes

        sizes = []
        for config in self.configs.values():
            try:
                info = describe_config(self.module(config), config, run_reference=False)
                sizes.append(0 if info.error else info.input_bytes)
            except Exception:  # noqa: BLE001 - a derived configuration's source may fail: its size unknown
                sizes.append(0)
        timing = self.job.timing
        # the flush's floor (2x L2): the lead-sized one is timed on the device, work the referee avoids
        flush = default_l2_flush_bytes(self.device) if timing.enabled and self.device.type == "cuda" else 0
        return room_bytes(sizes, len(self.seeds), timing.input_sets if timing.enabled else 0, flush,
                          refereed=True)

    def key(self, config: InputConfig, seed: int) -> tuple:
        return (*self.task_key, config.name, repr(sorted(config.params.items())),
                repr(sorted(config.module_values.items())), config.randomize_parameters, seed)

    def reference_for(self, config: str, seed: int) -> TorchReference:
        cfg = self.configs[config]
        key = self.key(cfg, seed)
        entry = self.store.get(key)
        if entry is not None and entry.computed:
            return entry
        try:
            with self.spent("reference"):
                entry = self._compute_with_room(cfg, seed, entry)
        except ReferenceOutOfMemory:
            raise
        except Exception as exc:
            from cudaperf.execute.session import describe

            raise ReferenceFailed(config, describe(exc)) from exc
        self.store.put(key, entry)
        if self.after_compute is not None:
            self.after_compute()
        return entry

    def _compute_with_room(self, config: InputConfig, seed: int,
                           entry: TorchReference | None) -> TorchReference:
        """`_compute`, retried once after `make_room` when it runs out of device memory; out of memory
        again: `ReferenceOutOfMemory` (the device's limit, not the task's fault)."""
        from cudaperf.execute.session import describe

        try:
            return self._compute(config, seed, entry)
        except torch.cuda.OutOfMemoryError as exc:
            first = describe(exc)
        # Out of the handler: the failed forward's tensors went with its traceback.
        if self.make_room is None:
            raise ReferenceOutOfMemory(config.name, first)
        self.make_room()
        try:
            return self._compute(config, seed, entry)
        except torch.cuda.OutOfMemoryError as exc:
            again = describe(exc)
        raise ReferenceOutOfMemory(config.name, f"out of device memory after other tasks' references were "
                                   f"given back: {again}")

    def _compute(self, config: InputConfig, seed: int, entry: TorchReference | None) -> TorchReference:
        from cudaperf.tasks.runtime import make_inputs

        if entry is None:
            entry = TorchReference(*self.model(config, seed))
        inputs = make_inputs(self.module(config), config, seed, self.device)
        work = clone_inputs(inputs)
        before = start_peak(self.device)
        with torch.no_grad():
            outputs = entry.model(*work)
        synchronize(self.device)
        entry.extra["forward_bytes"] = forward_bytes(self.device, before, outputs)
        entry.inputs, entry.outputs, entry.computed = inputs, outputs, True
        entry.inputs_after = work if inputs_mutated(inputs, work) else None
        if self.check_determinism and entry.deterministic is None:
            self._check_determinism(entry)
        entry.nbytes = tensor_bytes(inputs, outputs, entry.inputs_after, list(entry.model.parameters()))
        return entry

    def _check_determinism(self, entry: TorchReference) -> None:
        with torch.no_grad():
            again = entry.model(*clone_inputs(entry.inputs))
        synchronize(self.device)
        same = compare(again, entry.outputs, None, overrides=self.task.tolerances)
        entry.deterministic, entry.determinism_message = same.ok, same.message
        del again

    def output_limit(self, key: Any) -> int:
        entry = self.reference(key.config, key.seed_index)
        return tensor_bytes(entry.outputs, entry.inputs)

    def deterministic(self, config: str) -> bool | None:
        values = [self.store.get(self.key(self.configs[config], s)) for s in self.seeds]
        known = [e.deterministic for e in values if e is not None and e.deterministic is not None]
        return all(known) if known else None

    # -- judging -----------------------------------------------------------------------------------
    def compare_item(self, config: str, seed_index: int, run: int, item: dict) -> Comparison:
        entry = self.reference(config, seed_index)
        result = compare(item.get("output"), entry.outputs, None, overrides=self.task.tolerances)
        self.flags += [replace(f, config=config) for f in result.flags]
        mutated = self.mutation(entry, item.get("inputs_after"))
        if mutated:
            self.flags.append(Flag("input_mutated", mutated, Severity.ERROR, config))
            result = replace(result, ok=False, message=f"{mutated}; {result.message}".rstrip("; "))
        return result

    def mutation(self, entry: TorchReference, inputs_after: Any) -> str:
        """'' when the inputs after the candidate's call are what they should be: untouched (the worker
        then ships none), or as the reference left them when the reference itself works in place."""
        given = entry.inputs if inputs_after is None else inputs_after
        if entry.inputs_after is None:
            paths = mutated_positions(entry.inputs, given)
            return f"the candidate modified {', '.join(paths)}" if paths else ""
        same = compare(list(given) if isinstance(given, (list, tuple)) else given, list(entry.inputs_after),
                       None, overrides=self.task.tolerances)
        return "" if same.ok else f"the inputs after the call differ from the reference's: {same.message}"

    def first_of(self, output: Any) -> Any:
        return sample(output)  # a multi-gigabyte output per seed would otherwise stay on the device

    def degenerate(self, config: str, outputs: list[Any]) -> list[Flag]:
        entries = [self.reference(config, i) for i in range(len(self.seeds))]
        inputs = [e.inputs for e in entries]
        differ = any(inputs_mutated(inputs[0], other) for other in inputs[1:])
        references = [sample(e.outputs) for e in entries]
        flags = list(degenerate_flags(outputs, references, differ, config=config))
        odd = next((e for e in entries if e.deterministic is False), None)
        if odd is not None:
            flags.append(Flag("task_nondeterministic", "the reference gives different outputs for the same "
                              f"inputs ({odd.determinism_message})", Severity.WARNING, config))
        return flags

    # -- what the worker needs instead of references (referee) -------------------------------------
    def reference_sizes(self) -> dict[str, dict[str, int | bool]]:
        """Per configuration whose first seed's reference exists: its bytes (`memory_plan.Footprint`'s
        terms) and whether it works in place (then timing cannot re-check outputs)."""
        sizes: dict[str, dict[str, int | bool]] = {}
        for name, config in self.configs.items():
            entry = self.store.get(self.key(config, self.seeds[0])) if self.seeds else None
            if entry is None or not entry.computed or name in self.dropped:
                continue
            weights = list(entry.model.parameters()) + list(entry.model.buffers())
            sizes[name] = {"input_bytes": tensor_bytes(entry.inputs),
                           "output_bytes": tensor_bytes(entry.outputs), "param_bytes": tensor_bytes(weights),
                           "forward_bytes": int(entry.extra.get("forward_bytes", 0)),
                           "in_place": entry.inputs_after is not None}
        return sizes

    # -- timing's re-checked outputs (referee) -------------------------------------------------------
    def check_timed(self, config: str, input_set: int, output: Any) -> Comparison:
        """An output the worker's timing stage re-checked on `input_set`, against the first seed's model
        on that set's inputs, under the task's tolerances."""
        with self.spent("timed"):
            expected = self.timed_expected(config, input_set)
            return compare(output, expected, None, overrides=self.task.tolerances)

    def timed_expected(self, config: str, input_set: int) -> Any:
        """The first seed's model on the inputs of timing seed `input_set` (its own reference's outputs for
        the first set), kept with the first seed's reference (`extra`, counted in its bytes); an unseen
        set's (`EvalJob.unseen_seeds`: this job's alone) only for this job (`unseen_expected`)."""
        entry = self.reference(config, 0)
        if input_set == 0:
            return entry.outputs
        key = ("timed", self.timing_seeds[input_set])
        if input_set >= self.job.timing.input_sets:
            unseen = (config, *key)
            if unseen not in self.unseen_expected:
                self.unseen_expected[unseen] = self._model_on_seed(entry, config, input_set)
            return self.unseen_expected[unseen]
        if key not in entry.extra:
            entry.extra[key] = self._model_on_seed(entry, config, input_set)
            entry.nbytes += tensor_bytes(entry.extra[key])
        return entry.extra[key]

    def _model_on_seed(self, entry: TorchReference, config: str, input_set: int) -> Any:
        """The first seed's model on a clone of timing seed `input_set`'s inputs."""
        from cudaperf.tasks.runtime import make_inputs

        shared = input_set < len(self.seeds) and self.timing_seeds[input_set] == self.seeds[input_set]
        inputs = (self.reference(config, input_set).inputs if shared
                  else make_inputs(self.module(self.configs[config]), self.configs[config],
                                   self.timing_seeds[input_set], self.device))
        with torch.no_grad():
            out = entry.model(*clone_inputs(inputs))
        synchronize(self.device)
        return out

    # -- speed of light (referee) ------------------------------------------------------------------
    def prepare_sol(self, timed: tuple[str, ...]) -> None:
        """Speed-of-light figures of each timed configuration on the first seed (cached with it)."""
        for config in timed:
            if config in self.dropped or config not in self.configs:
                continue
            entry = self.reference(config, 0)
            if "sol" not in entry.extra:
                with self.spent("sol"):
                    entry.extra["sol"] = self._sol(entry)
            self.sol[config] = entry.extra["sol"]

    def _sol(self, entry: TorchReference) -> dict[str, float | None]:
        from cudaperf.sol import count_flops, dominant_dtype, estimate, min_bytes

        params = list(entry.model.parameters()) + list(entry.model.buffers())
        bytes_moved = min_bytes([entry.inputs, params], entry.outputs)
        cuda = self.device.type == "cuda"
        flops = count_flops(entry.model, clone_inputs(entry.inputs)) if cuda else None
        dtype = dominant_dtype([entry.inputs, entry.outputs])
        sol = estimate(bytes_moved, flops, dtype, self.device)
        return {"floor_ms": sol.floor_ms, "memory_floor_ms": sol.memory_floor_ms,
                "compute_floor_ms": sol.compute_floor_ms, "bandwidth_gbps": sol.bandwidth_gbps,
                "peak_tflops": sol.peak_tflops, "bytes_moved": bytes_moved, "flops": flops,
                "reference_ms": self._reference_ms(entry) if cuda else None}

    def _reference_ms(self, entry: TorchReference, repeats: int = 3) -> float:
        """The reference's best event-timed forward (after one warm-up): whether the floor fits the task
        is decided from this, never from a time the worker reports."""
        inputs = clone_inputs(entry.inputs)
        best = math.inf
        with torch.no_grad():
            entry.model(*inputs)
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                entry.model(*inputs)
                end.record()
                end.synchronize()
                best = min(best, start.elapsed_time(end))
        return best
