"""The in-worker recipe for C→CUDA tasks: one job (a C task and a candidate entry function) to its payload.

Stages (heartbeats), after the shared setup of `execute.session`:
- setup (`load_task`): the CTask from `Task.spec` (`ctask.from_task`); a missing or malformed declaration
  is the task's fault: HARNESS_ERROR;
- reference: per configuration x seed, inputs from `ctask.make_inputs` with the derived seed, and the
  serial C reference run on the CPU (`cref`); kept across jobs in host memory by `C_REFERENCES`;
- import: the candidate module inside the candidate scope, then its entry function: a callable named like
  the C entry point that takes the C parameter names (else INVALID_SOLUTION);
- correctness: per configuration x seed, two calls, each on fresh device copies of the inputs with the
  `out` arrays pre-filled with a fill pattern (0xFF bytes: NaN / -1, then 0x5A bytes): an element the
  candidate never writes keeps a pattern and fails at least one call whatever the reference holds there;
  `in` arrays are compared with the pristine copy afterwards (mutation: ERROR flag `input_mutated`);
  outputs are compared with the task's tolerance (integers exactly); the runtime op monitor watches for
  torch compute ops, as for PyTorch tasks;
- timing: the candidate and the naive CUDA port (`Task.spec`, see `ctask.to_task`) interleaved by
  `cudaperf.timing` on rotated input sets with outputs re-checked, then the serial C time on the CPU
  (median of repeats; cached with the reference, so later candidates of the task reuse it);
- coverage: the share of GPU time in the candidate's own kernels (`Session.coverage_of`).

Timing detail (why): every timed function gets its own output buffers, and `inout` arrays are restored
from the input set inside each timed call (a device copy, the same for every timed function). Without it,
calls after the first see their own results (an in-place sort would be timed sorting sorted keys, which a
candidate can detect and skip) and could not be re-checked. The restore's time is measured alongside as
`inout_restore`, so readers can subtract it.

Payload (`jobs.EvalPayload`): `timings[*].eager` / `.compiled` stay None (they are PyTorch baselines); the
C baselines are in `extra_baselines = {config: {"serial_c", "naive_cuda", "inout_restore": Timing}}` (a
baseline that did not run is absent, with a flag saying why), which the evaluator moves into
`ConfigTiming.baselines`. Which run: the names among ("serial_c", "naive_cuda") in `timing.baselines`;
both when the list names neither (the PyTorch default); none when it is empty.

With a referee (the sandbox's default; `REFEREED_STAGES`): no C reference is computed before the
outputs are shipped. Stages: import, correctness (`run_and_ship`: both calls per configuration and seed,
each output shipped with the names of `in` arrays the call changed); the verdict is the referee's (no
claim here: it would cost a second serial C run per job); timing re-checks against the candidate's own
first outputs, which the referee found correct (a timing-only seed's reference is computed after
shipping), and the serial C time comes from a reference whose outputs are zeroed as soon as it exists.
The timing stage's host work (the serial C references of timing-only and unseen seeds, their inputs with
them) is done before the worker asks for its turn on the GPU (`prepare_timing`), up to
`PREPARED_HOST_BYTES`; the correctness seeds' inputs stay on the device from the correctness stage.

Not covered: what every task kind shares (`execute.session`), PyTorch tasks (`torch_session.py`), which
recipe runs a job (`dispatch.py`), process isolation and deadlines (the sandbox). The C reference is
trusted code run in the worker (cref.py): a task with a wrong length expression can crash the worker
(outcome CRASH).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import numpy as np
import torch

from cudaperf.correctness import (
    Comparison,
    clone_inputs,
    degenerate_flags,
    mutated_positions,
    poison_allocator,
)
from cudaperf.execute.memory_plan import Footprint, unseen_sets_allowed
from cudaperf.execute.session import CANDIDATE, Session, Stop, summarize_correctness
from cudaperf.jobs import EvalPayload, timed_baselines
from cudaperf.sol import estimate, min_bytes, speed_flags
from cudaperf.tasks import cref
from cudaperf.tasks.ctask import (
    C_TYPES,
    NAIVE_CUDA,
    CConfig,
    CParam,
    CTask,
    CTaskError,
    ParamKind,
    array_lengths,
    baseline_source,
    from_task,
    make_inputs,
    validate,
)
from cudaperf.timing import BenchReport, summarize
from cudaperf.types import ConfigCorrectness, ConfigTiming, Flag, Outcome, Severity, TaskKind, Timing, to_dict

SERIAL_C = "serial_c"  # the C reference on the CPU (its time: the serial baseline)
RESTORE = "inout_restore"  # the inout restore alone, timed with the others (see the module docstring)
FILL_BYTES = (0xFF, 0x5A)  # out-array fill per call: 0xFF.. is NaN / -1, 0x5A.. a finite, unlikely value
SERIAL_C_REPEATS = (3, 30)  # least and most timed calls of the serial reference per configuration
HOST_REFERENCE_CACHE_BYTES = 4 << 30
# What a refereed job's timing stage draws on the host before it asks for the GPU (`CSession.prepare_timing`)
# is at most a 32nd of the machine's memory, from 2 to 8 GiB (`prepared_host_bytes`); the rest is drawn in
# the stage, after the go-ahead, inside the RL mode's exclusive turn. Why not a flat 2 GiB: a gemv task's
# largest configuration (8192 x 8192 doubles) needs 3 GiB for its 6 timing-only and unseen sets under RL's
# one correctness seed (2 timing-only, and 4 unseen: `memory_plan.UNSEEN_HOST_BYTES`), so three of its
# serial C references (each a 512 MB draw and a serial product: ~2 s on the 2-core CPU), and every set of
# the configuration after it, ran inside the turn; gemv answers held it 2.8 s (median) against ~0.8 s for
# the other families in session 44's RL run (dev/LOG.md). With 8 workers on a 128-GiB host, 4 GiB each is
# 32 GiB at most.
PREPARED_HOST_SHARE = 32
PREPARED_HOST_MIN_BYTES, PREPARED_HOST_MAX_BYTES = 2 << 30, 8 << 30


def prepared_host_bytes(physical_bytes: int | None = None) -> int:
    """The host budget of `prepare_timing` for a machine with `physical_bytes` of memory (None: this one's,
    or the least budget where the system does not say)."""
    if physical_bytes is None:
        try:
            physical_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (OSError, ValueError):
            physical_bytes = 0
    return min(max(physical_bytes // PREPARED_HOST_SHARE, PREPARED_HOST_MIN_BYTES), PREPARED_HOST_MAX_BYTES)


PREPARED_HOST_BYTES = prepared_host_bytes()
# At most this many threads compute those references (`prepare_threads`): each is a numpy draw and a ctypes
# call, both of which release the GIL. One job's references of a 16.8M-element configuration took 6.1 s
# one after another on the 2-core CPU, 3.5 s on two threads (dev/LOG.md, session 38).
PREPARE_THREADS_MAX = 4
NAIVE_MODULES_KEPT = 32


# --------------------------------------------------------------------------------------------------
# References kept across jobs (host memory)


@dataclass
class CReference:
    """One (configuration, seed): scalars and pristine in/inout arrays, the C outputs, the C call's time.
    Arrays are read-only numpy arrays; `serial_c` is filled when the configuration is timed."""

    values: dict[str, Any]
    outputs: dict[str, np.ndarray]
    reference_ms: float
    nbytes: int
    serial_c: Timing | None = None


class CReferenceCache:
    """References of recent (task, configuration, seed) keys, least recently used evicted past a budget.

    Why across jobs: the evaluator sends every candidate of a task with the same public seeds, and the
    serial C runs (seconds on large configurations, more when timed) are the costliest host step. Why no
    fingerprint (session.py's device cache has one): these arrays live in pageable host memory that GPU
    kernels cannot write, and they are read-only, so a stray write raises instead of corrupting a verdict.
    """

    def __init__(self, budget_bytes: int = HOST_REFERENCE_CACHE_BYTES):
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple, CReference] = OrderedDict()

    def get(self, key: tuple) -> CReference | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: tuple, entry: CReference) -> None:
        self._entries[key] = entry
        while len(self._entries) > 1 and sum(e.nbytes for e in self._entries.values()) > self.budget_bytes:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


C_REFERENCES = CReferenceCache()
# With a referee: references for timing only (the serial C time and its call time), outputs zeroed at once.
C_TIMING_REFERENCES = CReferenceCache()
_NAIVE_MODULES: OrderedDict[str, ModuleType] = OrderedDict()  # naive ports by source hash (trusted code)


# --------------------------------------------------------------------------------------------------
# The recipe


def run_c_job(message: dict, report: Callable[[str], None]) -> EvalPayload:
    """Evaluate one C->CUDA job (the wire form, `jobs.job_message`) and return its payload (see the module
    docstring). Never raises.

    `report(stage)` is the heartbeat. The secret is popped from `message` before any candidate code runs."""
    return CSession(report).run(message)


@dataclass(frozen=True)
class _OnDevice:
    """One (configuration, seed) on the job's device: scalars, pristine in/inout arrays, expected outputs."""

    scalars: dict[str, Any]
    arrays: dict[str, torch.Tensor]
    expected: tuple[torch.Tensor, ...]  # in the order of `CTask.outputs`


class CSession(Session):
    """State of one C job; each method is one step of the recipe (the rest is `Session`'s)."""

    # No construct stage: a C candidate is a function, not a module with weights.
    STAGES = (("reference", "compute_references"), ("import", "import_candidate"),
              ("correctness", "check_correctness"))
    # With a referee (referee.py): no C reference in this process before the outputs are shipped; the
    # verdict is the referee's alone (no claim: it would cost a second serial C run per job), and timing
    # re-checks the candidate against its own first outputs, which the referee found correct.
    REFEREED_STAGES = (("import", "import_candidate"), ("correctness", "run_and_ship"))
    CUTS_SLOW = True  # its worker re-checks its timing outputs itself and ships none

    def __init__(self, report: Callable[[str], None]):
        super().__init__(report)
        self.ctask: CTask | None = None
        self.entry_fn: Callable | None = None
        self.wanted: set[str] = set()
        self.naive: Callable | None | bool = False  # False: not looked up yet; None: unavailable
        self.naive_why = ""  # why the naive port is unavailable
        self.on_device: dict[tuple[str, int], _OnDevice] = {}
        self.kept: dict[tuple[str, int], tuple[torch.Tensor, ...]] = {}  # first-call outputs (referee)
        self.extra_expected: dict[tuple[str, int], tuple[torch.Tensor, ...]] = {}  # timing-only seeds
        # computed before the go-ahead (`prepare_timing`), by (config, seed)
        self.prepared_references: dict[tuple[str, int], CReference] = {}

    # -- stages ----------------------------------------------------------------------------------
    def load_task(self) -> None:
        self.ctask = _declared_ctask(self.job.task)
        digest = hashlib.sha256(json.dumps(to_dict(self.ctask), sort_keys=True).encode()).hexdigest()
        self.task_key = (self.ctask.task_id, digest)
        self.timed_names = self.ctask.timed_names
        self.wanted = wanted_baselines(self.job.timing.baselines)
        if self.shipper is not None:
            self.STAGES = self.REFEREED_STAGES

    def narrow_timing(self, asked: Any) -> None:
        super().narrow_timing(asked)
        self.wanted = wanted_baselines(self.job.timing.baselines)

    def compute_references(self) -> None:
        for config in self.ctask.configs:
            for seed in self.seeds:
                self.reference(config, seed)

    def import_candidate(self) -> None:
        module = self.import_module()
        names = tuple(p.name for p in self.ctask.params)
        fn, problem = self.candidate(lambda: entry_function(module, self.ctask.entry, names), "import")
        if problem:
            raise Stop(Outcome.INVALID_SOLUTION, problem)
        self.entry_fn = fn

    def check_correctness(self) -> None:
        for config in self.ctask.configs:
            self.correctness.append(self.correctness_for(config))
            self.drop_device(config)
            self.release()

    def prepare_timing(self) -> None:
        """With a referee, the host's share of the timing stage before the worker asks for the GPU
        (`Session.prepare_and_ask`): for each timed configuration in order, the reference the serial C
        baseline is timed on (kept across jobs, `timing_reference`), then the serial C references of the
        timing-only and unseen seeds (inputs and outputs on the host) that fit in `PREPARED_HOST_BYTES`
        (`prepared_keys`), computed on up to `prepare_threads` threads; what does not fit is computed in
        the stage. The correctness seeds' inputs are on the device already (`run_and_ship` keeps them
        for timing). Nothing reaches the device here, and the serial C baseline is timed in the stage.
        Without a referee the whole job already holds the GPU: nothing is done ahead."""
        if self.shipper is None:
            return
        if SERIAL_C in self.wanted:
            for name in self.timed_names:
                self.timing_reference(self.ctask.config(name), self.timing_seeds[0])
        self.prepare_references(self.prepared_keys())

    def prepare_references(self, keys: list[tuple[str, int]], threads: int | None = None) -> None:
        """The references of `keys` into `prepared_references`, on `threads` threads (None:
        `prepare_threads`). A failure is raised once every thread ended, with the references that were
        computed kept, so `scrub` zeroes them too."""
        if keys:  # the reference's library once, before threads could each build it
            cref.build_reference(self.ctask, cache_dir=self.job.cache_dir)
        with ThreadPoolExecutor(threads or prepare_threads(len(keys)), thread_name_prefix="prepare") as pool:
            futures = {key: pool.submit(compute_reference, self.ctask, self.ctask.config(key[0]), key[1],
                                        self.job.cache_dir) for key in keys}
        failures = [f.exception() for f in futures.values() if f.exception() is not None]
        self.prepared_references.update({k: f.result() for k, f in futures.items() if f.exception() is None})
        if failures:
            raise failures[0]

    def prepared_keys(self) -> list[tuple[str, int]]:
        """What `prepare_timing` computes: (configuration, seed) of each reference, the timing-only and
        unseen seeds of each timed configuration in order, each that fits what is left of
        `PREPARED_HOST_BYTES` (one that does not is computed in the stage; a later, smaller one may still
        fit)."""
        keys: list[tuple[str, int]] = []
        held = 0
        for name in self.timed_names:
            config = self.ctask.config(name)
            fp = self.set_footprint(config)
            unseen = self.unseen_seeds[:self.unseen_count(config)]
            size = fp.input_bytes + fp.output_bytes
            for seed in (*[s for s in self.timing_seeds if s not in self.seeds], *unseen):
                if held + size <= PREPARED_HOST_BYTES:
                    held += size
                    keys.append((name, seed))
        return keys

    def time_configs(self) -> None:
        for name in self.timed_names:
            config = self.ctask.config(name)
            self.timings.append(self.time_config(config))
            self.drop_device(config)
            self.drop_prepared(config)
            self.release()

    def drop_prepared(self, config: CConfig | None = None) -> None:
        """What `prepare_timing` computed for `config` (every configuration: None) and the stage left
        unused, its outputs zeroed."""
        for key in [k for k in self.prepared_references if config is None or k[0] == config.name]:
            zero_outputs(self.prepared_references.pop(key))

    def unseen_count(self, config: CConfig) -> int:
        """How many unseen input sets `config` gets (`unseen_sets_allowed` for its sets, `set_footprint`):
        the one count `prepare_timing` and `unseen_sets` both follow."""
        return unseen_sets_allowed(self.job.timing.unseen_sets, self.set_footprint(config), None)

    def set_footprint(self, config: CConfig) -> Footprint:
        """One input set's bytes (the `in` and `inout` arrays) and its outputs' bytes, from the task's
        declared lengths."""
        lengths = array_lengths(self.ctask, config)
        sizes = {p.name: lengths[p.name] * np.dtype(C_TYPES[p.ctype]).itemsize for p in self.ctask.arrays}
        return Footprint(input_bytes=sum(sizes[n] for n in self.input_names),
                         output_bytes=sum(sizes[p.name] for p in self.ctask.outputs))

    def measure_coverage(self) -> None:
        """Coverage on the first timed configuration (`Session.coverage_of`)."""
        config = self.ctask.config(self.timed_names[0])
        args = self.call_arguments(self.device_data(config, self.seeds[0]), FILL_BYTES[0])
        self.coverage_of(lambda: self.candidate(
            lambda: self.call_entry(args, config.name, monitored=False), self.call_name, config.name),
            config.name)

    # -- the reference ---------------------------------------------------------------------------
    def reference(self, config: CConfig, seed: int) -> CReference:
        """The cached C reference of (config, seed), computed on a miss (a failure is the task's)."""
        key = (*self.task_key, config.name, seed)
        entry = C_REFERENCES.get(key)
        if entry is None:
            entry = compute_reference(self.ctask, config, seed, self.job.cache_dir)
            C_REFERENCES.put(key, entry)
        return entry

    def device_data(self, config: CConfig, seed: int) -> _OnDevice:
        key = (config.name, seed)
        if key not in self.on_device:
            if self.shipper is not None:  # inputs only: the outputs are the referee's business
                values, expected = self.host_inputs(config, seed), ()
            else:
                entry = self.reference(config, seed)
                values = entry.values
                expected = tuple(to_device(entry.outputs[p.name], self.device) for p in self.ctask.outputs)
            scalars = {p.name: values[p.name] for p in self.ctask.params if not p.is_array}
            arrays = {name: to_device(values[name], self.device) for name in self.input_names}
            self.on_device[key] = _OnDevice(scalars, arrays, expected)
        return self.on_device[key]

    def host_inputs(self, config: CConfig, seed: int) -> dict[str, Any]:
        """(config, seed)'s scalars and arrays on the host: those of its reference as `prepare_timing`
        computed it (its outputs are taken later, `expected_of`), or drawn now."""
        entry = self.prepared_references.get((config.name, seed))
        return entry.values if entry is not None else make_inputs(self.ctask, config, seed)

    def host_reference(self, config: CConfig, seed: int) -> CReference:
        """(config, seed)'s serial C reference, not kept: as `prepare_timing` computed it, or now."""
        entry = self.prepared_references.pop((config.name, seed), None)
        return entry if entry is not None else compute_reference(self.ctask, config, seed, self.job.cache_dir)

    def expected_of(self, config: CConfig, seed: int) -> tuple[torch.Tensor, ...]:
        """What timing re-checks against: the reference outputs, or with a referee the candidate's own
        first outputs on a correctness seed (the referee found them correct, or timing would not run)
        and, for a timing-only seed, the serial C reference computed now (after shipping; not kept)."""
        if self.shipper is None:
            return self.device_data(config, seed).expected
        index = self.seeds.index(seed) if seed in self.seeds else None
        if index is not None and (config.name, index) in self.kept:
            return self.kept[(config.name, index)]
        key = (config.name, seed)
        if key not in self.extra_expected:
            entry = self.host_reference(config, seed)
            self.extra_expected[key] = tuple(to_device(entry.outputs[p.name], self.device)
                                             for p in self.ctask.outputs)
            zero_outputs(entry)
        return self.extra_expected[key]

    def run_and_ship(self) -> None:
        """Every configuration and seed, both fill patterns, every output shipped to the referee as it
        comes (with the names of `in` arrays the call changed); then the referee's word on timing."""
        from cudaperf.execute.outputs import Key

        for config in self.ctask.configs:
            for i, seed in enumerate(self.seeds):
                data = self.device_data(config, seed)
                for k, fill_byte in enumerate(FILL_BYTES):
                    outs, mutated = self.run_candidate(config, data, fill_byte)
                    self.shipper.ship(Key(config.name, i, k + 1), {"output": outs, "mutated": mutated})
                    if k == 0:
                        self.kept[(config.name, i)] = outs
            self.release()
        self.proceed = bool(self.shipper.done().get("proceed"))

    def scrub(self) -> None:
        for values in [*self.kept.values(), *self.extra_expected.values()]:
            for t in values:
                t.view(torch.uint8).zero_()
        self.kept.clear()
        self.extra_expected.clear()
        self.drop_prepared()
        super().scrub()

    def drop_device(self, config: CConfig) -> None:
        self.on_device = {k: v for k, v in self.on_device.items() if k[0] != config.name}

    @property
    def input_names(self) -> tuple[str, ...]:
        """The arrays the harness fills with data (`in` and `inout`), in parameter order."""
        return tuple(p.name for p in self.ctask.params if p.kind in (ParamKind.IN, ParamKind.INOUT))

    @property
    def call_name(self) -> str:
        return f"{self.ctask.entry}()"

    # -- the candidate ---------------------------------------------------------------------------
    def call_arguments(self, data: _OnDevice, fill_byte: int) -> dict[str, Any]:
        """Keyword arguments for one call: scalars, fresh copies of the in/inout arrays, filled outs."""
        outs = {p.name: filled(self.length(p, data), p.ctype, self.device, fill_byte)
                for p in self.ctask.params if p.kind is ParamKind.OUT}
        return {**data.scalars, **clone_inputs(data.arrays), **outs}

    def length(self, param: CParam, data: _OnDevice) -> int:
        return array_lengths(self.ctask, CConfig("", data.scalars))[param.name]

    def call_entry(self, args: dict[str, Any], config: str, monitored: bool = True) -> None:
        """The entry function on `args`, in the caller's candidate window; its return value is ignored."""
        with torch.no_grad():
            if not monitored:
                self.alive.append(self.entry_fn(**args))
                return
            monitor = self.guards.op_monitor()
            with monitor:
                self.alive.append(self.entry_fn(**args))
        self.flags += [replace(f, config=f.config or config) for f in monitor.flags()]

    def run_candidate(self, config: CConfig, data: _OnDevice, fill_byte: int) -> tuple[tuple, str]:
        """One call on fresh arguments into a poisoned allocator: (outputs, mutation message or '')."""
        args = self.call_arguments(data, fill_byte)
        poison_allocator(self.device)  # scratch from torch.empty starts as NaN too (hack #1)
        self.candidate(lambda: self.call_entry(args, config.name), self.call_name, config.name)
        changed = [name for name in self.input_names if self.ctask.param(name).kind is ParamKind.IN
                   and mutated_positions(data.arrays[name], args[name])]
        message = f"the candidate modified its input array(s) {', '.join(changed)}" if changed else ""
        return tuple(args[p.name] for p in self.ctask.outputs), message

    # -- correctness -----------------------------------------------------------------------------
    def correctness_for(self, config: CConfig) -> ConfigCorrectness:
        results: list[tuple[str, Comparison]] = []
        outputs, references = [], []
        for i, seed in enumerate(self.seeds):
            data = self.device_data(config, seed)
            for k, fill_byte in enumerate(FILL_BYTES):
                outs, mutated = self.run_candidate(config, data, fill_byte)
                label = f"seed {self.job.seeds[i]}, call {k + 1}"
                results += self.judge(outs, data.expected, mutated, fill_byte, label, config)
                if k == 0:
                    outputs.append(tuple(comparable(t) for t in outs))
            references.append(tuple(comparable(t) for t in data.expected))
        self.flags += degenerate_flags(outputs, references, self.inputs_differ(config), config=config.name)
        return summarize_correctness(config.name, results, len(self.seeds))

    def judge(self, outs: tuple, expected: tuple, mutated: str, fill_byte: int, label: str,
              config: CConfig) -> list[tuple[str, Comparison]]:
        tol = self.ctask.tolerance_for(config)
        results = []
        for param, out, ref in zip(self.ctask.outputs, outs, expected, strict=True):
            result = self.compare_output(comparable(out), comparable(ref), tol, path=f"`{param.name}`")
            self.flags += [replace(f, config=config.name) for f in result.flags]
            unwritten = still_filled(out, fill_byte) if not result.ok and param.kind is ParamKind.OUT else 0
            if unwritten:
                result = replace(result, message=f"{result.message}; {unwritten} element(s) still hold the "
                                 f"harness's fill pattern 0x{fill_byte:02X} bytes (never written)")
            results.append((label, result))
        if mutated:
            self.flags.append(Flag("input_mutated", mutated, Severity.ERROR, config.name))
            results.append((label, Comparison(ok=False, message=mutated)))
        return results

    def inputs_differ(self, config: CConfig) -> bool:
        arrays = [self.reference(config, seed).values for seed in self.seeds]
        names = self.input_names
        return any(not np.array_equal(arrays[0][n], other[n]) for other in arrays[1:] for n in names)

    # -- timing ----------------------------------------------------------------------------------
    def time_config(self, config: CConfig) -> ConfigTiming:
        data = [self.device_data(config, seed) for seed in self.timing_seeds]
        input_sets = [[d.arrays[name] for name in self.input_names] for d in data]
        expected = [tuple(comparable(t) for t in self.expected_of(config, s)) for s in self.timing_seeds]
        unseen, unseen_expected = self.unseen_sets(config)
        expected += unseen_expected
        tol = self.ctask.tolerance_for(config)
        fns = {CANDIDATE: self.timed(self.entry_fn, data[0], scoped=True)}
        naive = self.naive_entry(config.name)
        if naive is not None:
            fns[NAIVE_CUDA] = self.timed(naive, data[0], scoped=False)
        if any(p.kind is ParamKind.INOUT for p in self.ctask.params):
            fns[RESTORE] = self.timed(None, data[0], scoped=False)

        def check(name: str, index: int, out: Any) -> bool:
            if name == RESTORE:
                return True
            return self.compare_output(tuple(comparable(t) for t in out), expected[index], tol).ok

        bench = self.bench(fns, input_sets, check, config.name, unseen, anchor=NAIVE_CUDA)
        return self.summarize_c(config, data[0], bench)

    def unseen_sets(self, config: CConfig) -> tuple[list[list], list[tuple]]:
        """`config`'s unseen input sets (`EvalJob.unseen_seeds`; as many as `unseen_sets_allowed` gives for
        its sets, `set_footprint`): their `in` arrays on the host, their serial C reference outputs on the
        device, computed in the stage or before it (`prepare_timing`) and never cached (the seeds are this
        job's alone); with a referee the reference's own arrays are zeroed at once, as for any timing-only
        seed."""
        count = self.unseen_count(config)
        self.note_unseen_count(count, config.name)
        sets, expected = [], []
        for seed in self.unseen_seeds[:count]:
            entry = self.host_reference(config, seed)
            sets.append([host_view(entry.values[name]) for name in self.input_names])
            expected.append(tuple(comparable(to_device(entry.outputs[p.name], self.device))
                                  for p in self.ctask.outputs))
            if self.shipper is not None:
                zero_outputs(entry)
        return sets, expected

    def timed(self, fn: Callable | None, data: _OnDevice, scoped: bool) -> Callable[[list], Any]:
        """fn(inputs) for the bench: restores inout arrays into its own buffers, calls `fn` (None: only the
        restore) on the set's in arrays and its buffers, returns the buffers (re-checked by the bench)."""
        buffers = {p.name: filled(self.length(p, data), p.ctype, self.device, FILL_BYTES[0])
                   for p in self.ctask.outputs}
        names = self.input_names

        def run(inputs: list) -> Any:
            args = dict(data.scalars)
            for name, tensor in zip(names, inputs, strict=True):
                if name in buffers:
                    buffers[name].copy_(tensor)  # inout: restored inside the timed call (module docstring)
                else:
                    args[name] = tensor
            args.update(buffers)
            if fn is None:
                return None
            if scoped:
                with self.scope():
                    fn(**args)
            else:
                fn(**args)
            return tuple(buffers[p.name] for p in self.ctask.outputs)

        return run

    def naive_entry(self, config: str) -> Callable | None:
        """The naive CUDA port's entry function (looked up once per job), or None with a flag saying why."""
        if self.naive is False:
            self.naive = self._load_naive()
        if self.naive is None and NAIVE_CUDA in self.wanted:
            self.flags.append(Flag("naive_cuda_unavailable", self.naive_why, Severity.INFO, config))
        return self.naive

    def _load_naive(self) -> Callable | None:
        source = baseline_source(self.job.task, NAIVE_CUDA)
        self.naive_why = ("not requested" if NAIVE_CUDA not in self.wanted
                          else "the task carries no naive CUDA port (Task.spec)" if not source
                          else "CPU mode: the port's kernels need a GPU" if self.device.type != "cuda"
                          else "")
        if self.naive_why:
            return None
        try:
            return getattr(naive_module(source), self.ctask.entry)
        except Exception as exc:  # noqa: BLE001 - a broken baseline costs the baseline, not the verdict
            self.naive_why = f"the naive port did not load: {type(exc).__name__}: {exc}"[:500]
            return None

    def serial_c(self, config: CConfig, seed: int) -> Timing:
        """Median of repeated serial C calls on the CPU (perf_counter around each call; inputs restored
        between calls by `cref`), computed once per (task, config, seed) and cached with the reference."""
        entry = self.reference(config, seed) if self.shipper is None else self.timing_reference(config, seed)
        if entry.serial_c is None:
            start = time.perf_counter()
            low, high = SERIAL_C_REPEATS
            repeats = max(low, min(high, math.ceil(float(self.job.timing.budget_ms) /
                                                   max(entry.reference_ms, 1e-3))))
            run = cref.run_reference(self.ctask, config, seed, repeats=repeats, cache_dir=self.job.cache_dir,
                                     values=fresh_values(self.ctask, config, entry),
                                     scrub=self.shipper is not None)
            if not run.ok or not run.samples_ms:
                raise RuntimeError(f"timing the serial C reference ({config.name}) failed: {run.message}")
            if self.shipper is not None:
                for array in run.outputs.values():
                    array.fill(0)
            entry.serial_c = summarize(run.samples_ms)
            self.add_duration(SERIAL_C, time.perf_counter() - start)
        return entry.serial_c

    def timing_reference(self, config: CConfig, seed: int) -> CReference:
        """With a referee: the reference's inputs, call time and serial C time, its outputs zeroed at once
        (kept across jobs for the serial C time only)."""
        key = (*self.task_key, config.name, seed)
        entry = C_TIMING_REFERENCES.get(key)
        if entry is None:
            entry = compute_reference(self.ctask, config, seed, self.job.cache_dir)
            zero_outputs(entry)
            C_TIMING_REFERENCES.put(key, entry)
        return entry

    def summarize_c(self, config: CConfig, data: _OnDevice, bench: BenchReport) -> ConfigTiming:
        name = config.name
        self.timing_flags(bench, name, baselines=[k for k in bench.check_failures if k != CANDIDATE])
        extra = {k: t for k, t in bench.timings.items() if k in (NAIVE_CUDA, RESTORE)}
        if SERIAL_C in self.wanted:
            extra[SERIAL_C] = self.serial_c(config, self.timing_seeds[0])
        if RESTORE in extra:
            restore_ms = extra[RESTORE].median_ms
            self.flags.append(Flag("timing_includes_inout_restore", "every timed call includes restoring "
                                   f"the inout arrays ({restore_ms:.4g} ms alone)", Severity.INFO, name))
        self.extra_baselines[name] = extra
        candidate = bench.timings[CANDIDATE]
        expected = self.expected_of(config, self.timing_seeds[0])
        bytes_moved = min_bytes(list(data.arrays.values()), list(expected))
        sol = estimate(bytes_moved, None, None, self.device)
        naive = bench.timings.get(NAIVE_CUDA)
        self.flags += speed_flags(candidate.median_ms, naive.median_ms if naive else None, sol, config=name)
        return ConfigTiming(config=name, candidate=candidate, eager=None, compiled=None,
                            speed_of_light_ms=sol.floor_ms, bytes_moved=bytes_moved, flops=None,
                            **self.protocol_fields(bench))

    # -- end -------------------------------------------------------------------------------------
    def drop_handles(self) -> None:
        self.entry_fn = None
        self.on_device.clear()


# --------------------------------------------------------------------------------------------------
# Helpers (each testable without a GPU)


def _declared_ctask(task: Any) -> CTask:
    """The CTask of a C `Task` record, or a HARNESS_ERROR stop naming what is wrong with it."""
    try:
        ctask = from_task(task)
    except CTaskError as exc:
        raise Stop(Outcome.HARNESS_ERROR, f"setup: {exc}") from None
    problems = validate(ctask)
    if problems:
        raise Stop(Outcome.HARNESS_ERROR, f"setup: the C task {ctask.task_id} is malformed: "
                   + "; ".join(problems))
    return ctask


def wanted_baselines(listed: Sequence[str]) -> set[str]:
    """The C baselines to time: those named in `listed` (`TimingConfig.baselines`); both when the list
    names neither (the PyTorch default ("eager", "compile")); none when the list is empty
    (`jobs.timed_baselines`)."""
    return set(timed_baselines(TaskKind.C, tuple(listed)))


def entry_function(module: Any, entry: str, names: tuple[str, ...]) -> tuple[Callable | None, str]:
    """(the entry function, '') or (None, why it is not usable). Runs inside the candidate scope: it
    touches candidate objects (attribute lookup, signature)."""
    fn = getattr(module, entry, None)
    if fn is None or not callable(fn):
        return None, (f"the solution defines no function `{entry}` (the C entry point's name, taking "
                      f"{', '.join(names)})")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn, ""  # no signature to check: the call itself will tell
    try:
        signature.bind(**dict.fromkeys(names))
    except TypeError as exc:
        return None, (f"`{entry}{signature}` cannot take the C parameters by name ({', '.join(names)}): "
                      f"{exc}")
    return fn, ""


def prepare_threads(references: int) -> int:
    """Threads for `references` prepared references: at most `PREPARE_THREADS_MAX` and the CPUs this
    process may use (never the one kept for serial timing, `host_timing.keep_off_timing_cpus`), at least
    one. The pool's even share of CPUs (`cpu_share`) is for torch's OpenMP threads, which spin after each
    parallel region; these threads end with the references, and workers rarely prepare at once."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = 1
    return max(1, min(references, PREPARE_THREADS_MAX, cpus))


def compute_reference(ctask: CTask, config: CConfig, seed: int, cache_dir: str | None) -> CReference:
    """Inputs for (config, seed) and the serial C outputs on them (read-only arrays). The working copy the
    reference wrote into is zeroed (`scrub`): only the returned arrays hold its outputs, so a refereed
    worker that zeroes those (`zero_outputs`) keeps no right answer in freed memory."""
    values = make_inputs(ctask, config, seed)
    work = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in values.items()}
    start = time.perf_counter()
    run = cref.run_reference(ctask, config, seed, values=work, cache_dir=cache_dir, scrub=True)
    elapsed_ms = (time.perf_counter() - start) * 1e3
    if not run.ok:
        raise RuntimeError(f"the serial C reference failed ({config.name}): {run.message}")
    kept = {p.name: values[p.name] for p in ctask.params if p.kind is not ParamKind.OUT}
    arrays = [v for v in (*kept.values(), *run.outputs.values()) if isinstance(v, np.ndarray)]
    for array in arrays:
        array.flags.writeable = False
    return CReference(kept, dict(run.outputs), elapsed_ms, nbytes=sum(a.nbytes for a in arrays))


def zero_outputs(entry: CReference) -> None:
    """Overwrite a reference's output arrays (read-only by design, made writable for this alone)."""
    for array in entry.outputs.values():
        array.flags.writeable = True
        array.fill(0)
        array.flags.writeable = False


def fresh_values(ctask: CTask, config: CConfig, entry: CReference) -> dict[str, Any]:
    """Writable copies of a reference's inputs, plus zeroed out arrays: what `cref.call` takes."""
    lengths = array_lengths(ctask, config)
    values = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in entry.values.items()}
    for p in ctask.params:
        if p.kind is ParamKind.OUT:
            values[p.name] = np.zeros(lengths[p.name], dtype=C_TYPES[p.ctype])
    return values


def torch_dtype(ctype: str) -> torch.dtype:
    return getattr(torch, C_TYPES[ctype])


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A device copy of a (read-only) numpy array: always a copy, so writes to it never reach the cache."""
    return host_view(array).to(device, copy=True)


def host_view(array: np.ndarray) -> torch.Tensor:
    """A tensor over a (read-only) numpy array's memory, without a copy: for contents that are only read,
    as an unseen set's are (the bench copies them into the working set at its round, `timing`), or copied
    at once (`to_device`). A copy of a 512 MB set took 0.25 s on the 2-core CPU, inside the turn."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns about read-only arrays: none written here
        return torch.from_numpy(array)


def filled(length: int, ctype: str, device: torch.device, fill_byte: int) -> torch.Tensor:
    """A 1-D array of the C type with every byte set to `fill_byte` (the unwritten-output sentinel)."""
    tensor = torch.empty(length, dtype=torch_dtype(ctype), device=device)
    tensor.view(torch.uint8).fill_(fill_byte)
    return tensor


def still_filled(tensor: torch.Tensor, fill_byte: int) -> int:
    """How many elements still have every byte equal to `fill_byte`."""
    if tensor.numel() == 0:
        return 0
    raw = tensor.reshape(-1).view(torch.uint8).reshape(tensor.numel(), tensor.element_size())
    return int((raw == fill_byte).all(dim=1).sum())


def comparable(tensor: torch.Tensor) -> torch.Tensor:
    """`unsigned int` arrays reinterpreted as int32 (bitwise the same; exact comparison kernels for
    uint32 are missing from some torch CUDA builds); other dtypes as they are."""
    return tensor.view(torch.int32) if tensor.dtype == torch.uint32 else tensor


def naive_module(source: str) -> ModuleType:
    """The naive port's module, executed once per source per worker (trusted, generated code; run
    outside the candidate scope, so its first call may compile and write the NVRTC cache)."""
    from cudaperf.tasks.task_module import exec_task_source

    key = hashlib.sha256(source.encode()).hexdigest()
    module = _NAIVE_MODULES.get(key)
    if module is None:
        module = exec_task_source(source, module_name=f"cudaperf_naive_{key[:12]}",
                                  filename=f"<naive CUDA port {key[:12]}>", keep=False)
        _NAIVE_MODULES[key] = module
        while len(_NAIVE_MODULES) > NAIVE_MODULES_KEPT:
            _NAIVE_MODULES.popitem(last=False)
    _NAIVE_MODULES.move_to_end(key)
    return module
