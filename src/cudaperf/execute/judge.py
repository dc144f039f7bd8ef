"""Judging a candidate's outputs against reference outputs: what the referee does, and what a worker does
to make its own claim (or its verdict, when it runs without a referee).

Covers the part both task kinds share (`Judge`): the bookkeeping of one job's outputs, keyed by
(configuration, seed index, run): each received once and only for the job's own keys, compared as it
arrives; a configuration's degenerate-output flags once all its outputs are in; derived configurations
whose reference fails on the device dropped with an INFO flag (not the candidate's fault), a declared one's
failure a `ReferenceFailed` (the task's fault: HARNESS_ERROR); and the `Verdict`. Also `ReferenceStore`,
the references kept across jobs: everything in the referee, only what holds no output (models, compiled
baselines, FLOP counts) in a worker that has a referee (see `ReferenceStore.end_job`).

The kinds: `torch_judge.TorchJudge` (the task's `Model`) and `c_judge.CJudge` (the serial C reference).

Not covered: getting outputs here (`outputs.py`, the referee's loop in `referee.py`), running candidates
(the sessions), what the parent makes of a verdict (`referee.apply_verdict`).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from cudaperf.correctness import Comparison
from cudaperf.execute.outputs import Key, Malformed
from cudaperf.types import ConfigCorrectness, Flag, Severity

RUNS = (1, 2)  # each (configuration, seed) is run twice (see the sessions for why)


class ReferenceFailed(Exception):
    """The reference itself failed on one configuration (the task's fault, or the device's)."""

    def __init__(self, config: str, message: str):
        super().__init__(f"the reference fails on configuration {config}: {message}")
        self.config, self.message = config, message


@dataclass(frozen=True)
class Verdict:
    """The correctness of one job's candidate, per configuration, with the flags judging raised.

    `dropped`: derived configurations left out because their reference fails on this device.
    `deterministic`: per configuration, whether the reference gave the same outputs twice (None: not
    checked), so that a disagreement with a worker's claim can be told from noise.
    `sol`: per timed configuration, the speed-of-light figures of `sol.estimate` and the reference's own
    time (PyTorch tasks in the referee only)."""

    correctness: tuple[ConfigCorrectness, ...] = ()
    flags: tuple[Flag, ...] = ()
    dropped: tuple[str, ...] = ()
    deterministic: dict[str, bool | None] = field(default_factory=dict)
    sol: dict[str, dict[str, float | None]] = field(default_factory=dict)

    @property
    def all_correct(self) -> bool:
        return all(c.correct for c in self.correctness) and not any(
            f.severity is Severity.ERROR for f in self.flags)


class Spent:
    """Milliseconds spent per named part of the work (the referee's, per job: returned with its verdict
    as `referee_ms`, instrumentation only). `with spent("compare"): ...` adds the block's wall time;
    `count(name)` counts events beside them (`rounded` gives both, counts under `<name>_count`)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.ms[name] = self.ms.get(name, 0.0) + 1e3 * seconds

    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def rounded(self) -> dict[str, float]:
        return {**{k: round(v, 3) for k, v in self.ms.items()},
                **{f"{k}_count": float(v) for k, v in self.counts.items()}}


class Judge:
    """One job's judging; subclasses give `configs`, `is_derived`, `reference_for`, `compare_item` and
    `degenerate`. `seeds` are the job's seeds with the secret mixed in, `public_seeds` their labels.
    `spent` (a `Spent`) times references computed, comparisons and degenerate checks."""

    def __init__(self, seeds: tuple[int, ...], public_seeds: tuple[int, ...]):
        self.seeds, self.public_seeds = seeds, public_seeds
        self.spent = Spent()
        self.results: dict[str, list[tuple[str, Comparison]]] = {}
        self.firsts: dict[str, dict[int, Any]] = {}
        self.received: set[Key] = set()
        self.flags: list[Flag] = []
        self.dropped: dict[str, str] = {}
        self.finished: set[str] = set()
        self.sol: dict[str, dict[str, float | None]] = {}

    # -- what a kind gives -------------------------------------------------------------------------
    def config_names(self) -> tuple[str, ...]:
        raise NotImplementedError

    def is_derived(self, config: str) -> bool:
        raise NotImplementedError

    def reference_for(self, config: str, seed: int) -> Any:
        """The reference of (config, seed), computed on a miss; raises ReferenceFailed."""
        raise NotImplementedError

    def compare_item(self, config: str, seed_index: int, run: int, item: dict) -> Comparison:
        raise NotImplementedError

    def degenerate(self, config: str, outputs: list[Any]) -> list[Flag]:
        raise NotImplementedError

    def deterministic(self, config: str) -> bool | None:
        return None

    def first_of(self, output: Any) -> Any:
        """What of a first-run output is kept until its configuration is complete (degenerate checks)."""
        return output

    def output_limit(self, key: Key) -> int:
        """Bytes a right answer for `key` needs at most (shipped output and inputs after the call)."""
        raise NotImplementedError

    # -- references --------------------------------------------------------------------------------
    def reference(self, config: str, seed_index: int) -> Any:
        """The reference for a key; a derived configuration that fails is dropped (ReferenceFailed is
        raised either way, so the caller skips it); a declared one's failure propagates."""
        try:
            return self.reference_for(config, self.seeds[seed_index])
        except ReferenceFailed as failed:
            if self.is_derived(config):
                self.drop(config, failed.message)
            raise

    def drop(self, config: str, why: str) -> None:
        if config not in self.dropped:
            self.dropped[config] = why
            self.flags.append(Flag("derived_config_dropped", f"the derived configuration {config} is left "
                                   f"out: its reference fails on this device ({why[:300]})", Severity.INFO,
                                   config))

    def reference_ok(self, config: str) -> tuple[bool, str]:
        """Whether the reference runs on every seed of `config` (asked when the candidate fails there)."""
        self.check_config(config)
        try:
            for index in range(len(self.seeds)):
                self.reference(config, index)
        except ReferenceFailed as failed:
            return False, failed.message
        return True, ""

    def prepare(self) -> None:
        """Every reference of the job now (the referee, before any output arrives); ReferenceFailed of a
        declared configuration propagates."""
        for config in self.config_names():
            for index in range(len(self.seeds)):
                try:
                    self.reference(config, index)
                except ReferenceFailed:
                    if not self.is_derived(config):
                        raise
                    break

    # -- outputs -----------------------------------------------------------------------------------
    def check_key(self, key: Key) -> None:
        self.check_config(key.config)
        if not 0 <= key.seed_index < len(self.seeds) or key.run not in RUNS:
            raise Malformed(f"an output key outside the job: {key}")
        if key in self.received:
            raise Malformed(f"the output {key} was sent twice")

    def check_config(self, config: str) -> None:
        if config not in self.config_names():
            raise Malformed(f"an output of a configuration the job does not have: {config[:100]!r}")

    def add(self, key: Key, item: dict) -> None:
        """Judge one output item (`{"output", "inputs_after", "mutated"}`) now. Raises Malformed for a key
        outside the job or sent twice; ReferenceFailed for a declared configuration's failing reference."""
        self.check_key(key)
        self.received.add(key)
        if key.config in self.dropped:
            return
        try:
            with self.spent("compare"):
                result = self.compare_item(key.config, key.seed_index, key.run, item)
        except ReferenceFailed:
            if self.is_derived(key.config):
                return
            raise
        label = f"seed {self.public_seeds[key.seed_index]}, {'first' if key.run == 1 else 'second'} run"
        self.results.setdefault(key.config, []).append((label, result))
        if key.run == 1:
            self.firsts.setdefault(key.config, {})[key.seed_index] = self.first_of(item.get("output"))
        if self.complete(key.config):
            self.finish_config(key.config)

    def complete(self, config: str) -> bool:
        return all(Key(config, i, r) in self.received for i in range(len(self.seeds)) for r in RUNS)

    def finish_config(self, config: str) -> None:
        if config in self.finished:
            return
        self.finished.add(config)
        firsts = self.firsts.pop(config, {})
        if len(firsts) == len(self.seeds) and config not in self.dropped:
            with self.spent("degenerate"):
                self.flags += self.degenerate(config, [firsts[i] for i in range(len(self.seeds))])

    def verdict(self) -> Verdict:
        """The verdict on what arrived; a key that never arrived fails its configuration."""
        correctness = []
        for config in self.config_names():
            if config in self.dropped:
                continue
            results = list(self.results.get(config, []))
            missing = [(i, r) for i in range(len(self.seeds)) for r in RUNS
                       if Key(config, i, r) not in self.received]
            results += [(f"seed {self.public_seeds[i]}, {'first' if r == 1 else 'second'} run",
                         Comparison(ok=False, message="no output of the candidate was received"))
                        for i, r in missing]
            self.finish_config(config)
            correctness.append(summarize_correctness(config, results, len(self.seeds)))
        determinism = {c: self.deterministic(c) for c in self.config_names() if c not in self.dropped}
        return Verdict(tuple(correctness), tuple(unique_flags(self.flags)), tuple(self.dropped), determinism,
                       dict(self.sol))


def summarize_correctness(config: str, results: list[tuple[str, Comparison]],
                          seeds: int) -> ConfigCorrectness:
    """One configuration's verdict from its labelled comparisons: correct when every one passed; the
    largest errors; the first failure's label and message."""
    failed = [(label, r) for label, r in results if not r.ok]
    comparisons = [r for _, r in results]
    return ConfigCorrectness(
        config=config, correct=not failed, seeds=seeds,
        max_abs_error=_largest(comparisons, "max_abs_error"),
        max_rel_error=_largest(comparisons, "max_rel_error"),
        mismatch_fraction=_largest(comparisons, "mismatch_fraction"),
        message=f"{failed[0][0]}: {failed[0][1].message}" if failed else "",
    )


def _largest(comparisons: list[Comparison], attr: str) -> float | None:
    return max((getattr(c, attr) for c in comparisons if getattr(c, attr) is not None), default=None)


def unique_flags(flags: Iterable[Flag]) -> list[Flag]:
    """The flags without repeats of the same (code, configuration, message), in first-seen order."""
    seen: set[tuple] = set()
    out = []
    for flag in flags:
        key = (flag.code, flag.config, flag.message)
        if key not in seen:
            seen.add(key)
            out.append(flag)
    return out


# --------------------------------------------------------------------------------------------------
# References kept across jobs


class ReferenceStore:
    """References by key, least recently used evicted past a byte budget, plus task modules by source.

    Entries are objects with `nbytes` and, when `fingerprinted`, a `fingerprint()` re-checked on every hit
    (in a worker, candidate kernels of earlier jobs share the memory: a stray write into a cached tensor
    must not corrupt later verdicts; the referee runs no candidate code and skips it). `keep_outputs=False`
    (a worker with a referee): `end_job` scrubs and drops every entry's outputs and inputs, so what a later
    job's candidate could find in this process holds no reference output."""

    def __init__(self, budget_bytes: Callable[[], int], *, fingerprinted: bool, keep_outputs: bool = True):
        self.budget_bytes = budget_bytes
        self.fingerprinted = fingerprinted
        self.keep_outputs = keep_outputs
        self._entries: OrderedDict[tuple, Any] = OrderedDict()
        self._modules: OrderedDict[str, Any] = OrderedDict()

    def get(self, key: tuple) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self.fingerprinted and entry.fingerprint() != entry.fingerprint_at_put:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def put(self, key: tuple, entry: Any) -> None:
        if self.fingerprinted:
            entry.fingerprint_at_put = entry.fingerprint()
        self._entries[key] = entry
        budget = self.budget_bytes()
        while len(self._entries) > 1 and sum(e.nbytes for e in self._entries.values()) > budget:
            self._entries.popitem(last=False)

    def refresh(self, key: tuple, entry: Any) -> None:
        """Re-take an entry's fingerprint after the harness itself changed it (outputs recomputed)."""
        if self.fingerprinted:
            entry.fingerprint_at_put = entry.fingerprint()

    def module(self, source: str, load: Callable[[], Any]) -> Any:
        """The task module of `source` (trusted code), loaded once per source."""
        digest = hashlib.sha256(source.encode()).hexdigest()
        if digest not in self._modules:
            self._modules[digest] = load()
            while len(self._modules) > 64:
                self._modules.popitem(last=False)
        self._modules.move_to_end(digest)
        return self._modules[digest]

    def entries(self) -> Iterable[Any]:
        return list(self._entries.values())

    def sizes(self) -> list[tuple[tuple, int]]:
        """(key, bytes) of every entry, least recently used first (for `memory_plan.to_evict`)."""
        return [(k, e.nbytes) for k, e in self._entries.items()]

    def evict(self, keys: Iterable[tuple]) -> int:
        """Drop the entries of `keys` (those present); the bytes they held."""
        return sum(self._entries.pop(k).nbytes for k in keys if k in self._entries)

    def end_job(self) -> None:
        """Unless outputs are kept: scrub (overwrite) and drop every entry's outputs and inputs."""
        if self.keep_outputs:
            return
        for key, entry in list(self._entries.items()):
            entry.forget_outputs()
            self.refresh(key, entry)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._modules.clear()
