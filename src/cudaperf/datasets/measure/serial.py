"""The serial-C baseline of the dataset measurement: timed in short rounds spread over a configuration's
measurement, each round beside a fixed calibration workload on the same CPU.

Why: on the H200 the serial-C baseline of the same keys differed by a median 24-27% between two runs of
one call, and within a pair of runs most keys moved the same way by 25-45% (dev/LOG.md): a shift of the
whole run (the VM's CPU speed, a neighbour), not per-call noise. So each configuration's serial C is
timed in up to `SERIAL_ROUNDS` rounds at different moments of its measurement (before the checks, after
them, after the GPU timing; `CTaskMeasure.serial_round` at each), the baseline is the median of the
rounds' medians, and every round first times a calibration workload: the same compiled C (built like
every serial reference, `cref.build_reference`, so the same binary wherever the compiler is the same)
on the same reserved CPU, inside the same `isolated_host_timing` block. Its time, the CPUs the rounds ran
on, the hypervisor's steal share (`host_timing.steal_ticks`) and the calibration's compute part timed
just before the block, unpinned (`free_calibration_ms`: is the reserved CPU the slow one?) are stored
beside the baseline (`SerialBaseline.fields`): two runs whose calibration differs by 30% ran on CPUs 30%
apart, whatever the baseline did. The rows keep the raw time as the baseline (the comparison script shows
a calibration-normalised figure beside it, as a diagnostic only).

The calibration has two parts: `compute` (a dependent multiply-add chain over an L1-resident array: the
core's clock) and `memory` (a streaming scaled copy of 32 MiB arrays: the memory path, which other
tenants share). Under the legacy baseline protocol (`host_timing`, A/B runs only) there is one round,
as before, still calibrated.

Not covered: why a CPU is slower (frequency, SMT twin, neighbour: the figures only show that it is), the
evaluator's serial-C timing (`execute.c_session`), correcting the baseline by the calibration.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cudaperf.host_timing import LEGACY, baseline_protocol, steal_ticks
from cudaperf.tasks import cref
from cudaperf.tasks.ctask import CParam, CTask, ParamKind
from cudaperf.types import Tolerance

SERIAL_MAX_REPS = 5  # calls per round at most
SERIAL_ROUNDS = 3  # rounds per configuration (stable protocol)
SPREAD_LIMIT = 2.0  # no further round once the serial calls have taken this many x the budget
COMPUTE_N, COMPUTE_REPS = 4096, 64  # 262,144 dependent steps: ~0.7 ms at 3 GHz
MEMORY_N = 8 << 20  # floats per array: 32 MiB in, 32 MiB out, beyond most last-level caches

CALIBRATION_SOURCE = r"""
/* The serial-C baseline's calibration (cudaperf.datasets.measure.serial): fixed work, timed beside it. */
void cudaperf_calibrate_compute(const float* x, float* y, int n, int reps)
{
    float a = 0.0f;
    for (int r = 0; r < reps; ++r)
        for (int i = 0; i < n; ++i)
            a = a * 0.5f + x[i];  /* each step waits for the last: the core's clock, not its width */
    y[0] = a;
}

void cudaperf_calibrate_memory(const float* x, float* y, int n, int reps)
{
    for (int r = 0; r < reps; ++r)
        for (int i = 0; i < n; ++i)
            y[i] = x[i] * 1.5f + (float)r;
}
"""


@dataclass(frozen=True)
class SerialRound:
    """One round: the calibration's two parts, the baseline's calls, where and with how much steal."""

    calibration_ms: float | None  # None: the calibration did not build here
    calibration_mem_ms: float | None
    samples_ms: tuple[float, ...]
    cpus: tuple[int, ...]  # the reserved CPUs it ran on (empty: not pinned)
    steal_ticks: int
    total_ticks: int
    calibration_free_ms: float | None = None  # the compute part just before, where the scheduler put it

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)


@dataclass
class SerialBaseline:
    """The rounds of one configuration's serial-C baseline."""

    budget_ms: float
    rounds: list[SerialRound] = field(default_factory=list)

    @property
    def wanted_rounds(self) -> int:
        return 1 if baseline_protocol() == LEGACY else SERIAL_ROUNDS

    @property
    def round_budget_ms(self) -> float:
        return self.budget_ms / self.wanted_rounds

    def wants_round(self) -> bool:
        """Another round is due: fewer than `wanted_rounds` so far, and the calls so far took less than
        `SPREAD_LIMIT` x the budget (a 1.5 s call is timed once, not three times)."""
        spent = sum(sum(r.samples_ms) for r in self.rounds)
        return len(self.rounds) < self.wanted_rounds and (not self.rounds or
                                                          spent < SPREAD_LIMIT * self.budget_ms)

    @property
    def median_ms(self) -> float | None:
        """The baseline: the median of the rounds' medians (None before any round)."""
        return statistics.median(r.median_ms for r in self.rounds) if self.rounds else None

    def fields(self) -> dict[str, Any]:
        """The row fields (None everywhere before any round)."""
        if not self.rounds:
            return {"serial_c_ms": None, "serial_c_reps": None, **dict.fromkeys(DIAGNOSTIC_FIELDS)}
        steal, total = (sum(getattr(r, k) for r in self.rounds) for k in ("steal_ticks", "total_ticks"))
        return {
            "serial_c_ms": self.median_ms, "serial_c_reps": sum(len(r.samples_ms) for r in self.rounds),
            "serial_c_rounds": len(self.rounds), "serial_c_round_ms": [r.median_ms for r in self.rounds],
            "serial_c_calibration_ms": _median([r.calibration_ms for r in self.rounds]),
            "serial_c_calibration_mem_ms": _median([r.calibration_mem_ms for r in self.rounds]),
            "serial_c_calibration_free_ms": _median([r.calibration_free_ms for r in self.rounds]),
            "serial_c_cpus": sorted({c for r in self.rounds for c in r.cpus}),
            "serial_c_steal_share": steal / total if total else None,
        }


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


DIAGNOSTIC_FIELDS = ("serial_c_rounds", "serial_c_round_ms", "serial_c_calibration_ms",
                     "serial_c_calibration_mem_ms", "serial_c_calibration_free_ms", "serial_c_cpus",
                     "serial_c_steal_share")


def time_serial(call: Callable[[dict[str, Any]], None], values: dict[str, Any],
                budget_ms: float, max_reps: int = SERIAL_MAX_REPS) -> list[float]:
    """Wall-clock samples (ms) of `call` on fresh copies of `values` until `budget_ms` is spent (1 to
    `max_reps` calls): one round of the serial-C baseline (benchmarks/serial_priority.py times the same
    loop)."""
    samples: list[float] = []
    while len(samples) < max_reps and (not samples or sum(samples) < budget_ms):
        fresh = cref.copy_values(values)
        start = time.perf_counter()
        call(fresh)
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def _task(entry: str) -> CTask:
    params = (CParam("x", "float", ParamKind.IN, "n"), CParam("y", "float", ParamKind.OUT, "n"),
              CParam("n", "int", ParamKind.SCALAR), CParam("reps", "int", ParamKind.SCALAR))
    return CTask("cudaperf_calibration", "calibration", entry, CALIBRATION_SOURCE, params, {}, (),
                 Tolerance(0.0, 0.0))


class Calibration:
    """The calibration library and its arrays (built and touched once per process: `calibration()`)."""

    def __init__(self, build: cref.CRefBuild) -> None:
        self.compute_task = _task("cudaperf_calibrate_compute")
        self.memory_task = _task("cudaperf_calibrate_memory")
        self.build = build
        self.small = {"x": np.linspace(0.0, 1.0, COMPUTE_N, dtype=np.float32),
                      "y": np.zeros(COMPUTE_N, dtype=np.float32), "n": COMPUTE_N, "reps": COMPUTE_REPS}
        self.large = {"x": np.ones(MEMORY_N, dtype=np.float32), "y": np.ones(MEMORY_N, dtype=np.float32),
                      "n": MEMORY_N, "reps": 1}  # ones, not zeros: every page touched here, not when timed
        self.run()  # the first calls fault in the library's pages

    def run(self) -> tuple[float, float]:
        """(compute ms, memory ms): one call of each part."""
        times = []
        for task, values in ((self.compute_task, self.small), (self.memory_task, self.large)):
            start = time.perf_counter()
            cref.call(task, self.build, values)
            times.append((time.perf_counter() - start) * 1e3)
        return times[0], times[1]


@functools.cache
def calibration() -> Calibration | None:
    """The process's calibration; None when it does not build (then the rounds carry no calibration)."""
    build = cref.build_reference(_task("cudaperf_calibrate_compute"))
    return Calibration(build) if build.ok else None


def free_calibration_ms() -> float | None:
    """The calibration's compute part on whatever CPU the scheduler gives the caller: called just before a
    round's `isolated_host_timing` block, it says whether the reserved CPU is slower than the others
    (on the H200's VM, serial C pinned to the highest vCPU ran a median 1.28x the unpinned time)."""
    calibrated = calibration()
    return calibrated.run()[0] if calibrated is not None else None


def timed_round(call: Callable[[dict[str, Any]], None], values: dict[str, Any], budget_ms: float,
                cpus: tuple[int, ...], free_ms: float | None = None) -> SerialRound:
    """One round inside the caller's `isolated_host_timing` block (on `cpus`): the calibration, then the
    baseline's calls, with the steal ticks of those CPUs (all CPUs when not pinned) around both.
    `free_ms`: `free_calibration_ms()` from just before the block, kept beside them."""
    steal0, total0 = steal_ticks(cpus or None)
    calibrated = calibration()
    compute_ms, memory_ms = calibrated.run() if calibrated is not None else (None, None)
    samples = time_serial(call, values, budget_ms)
    steal1, total1 = steal_ticks(cpus or None)
    return SerialRound(compute_ms, memory_ms, tuple(samples), cpus, steal1 - steal0, total1 - total0,
                       free_ms)
