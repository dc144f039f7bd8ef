"""The options of one `cudaperf dataset measure` run (one field per CLI flag) and the measuring runners
by name.

Not covered: the CLI flags themselves (`cudaperf.commands.dataset_cmd`), what the options drive
(runner.py, pool.py, task_measurement.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

# `MeasureOptions.runner` by name; any other value is a dotted path "module:Class" to a class with the
# `pool.Runner` protocol (the CPU tests inject a fake runner that way).
RUNNERS: dict[str, str] = {"gpu": "cudaperf.datasets.measure.task_measurement:GpuRunner"}
# Before any task of a kind finished in this run, the dispatcher assumes these durations (seconds, one
# worker): PyTorch tasks pay three torch.compile baselines, C tasks the serial reference on the CPU.
DEFAULT_TASK_S = {"pytorch": 25.0, "c": 10.0}
EXPECTED_MARGIN = 1.2  # a task is dispatched only if its expected duration times this fits the budget


@dataclass(frozen=True)
class MeasureOptions:
    """What `measure` runs and how (the CLI flags map one to one)."""

    out_dir: Path
    seed: int = 0  # generator seed of the task index (the same as `dataset build --seed`)
    kinds: tuple[str, ...] = ("pytorch", "c")  # task kinds to measure
    families: tuple[str, ...] = ()  # families to measure (empty: all)
    limit: int = 0  # at most this many tasks per family (0: all), like `dataset build --limit`
    max_tasks: int = 0  # at most this many tasks measured in this run (0: no limit)
    shard: tuple[int, int] = (0, 1)  # (i, n): the tasks whose id hashes to i mod n (see shard_of)
    time_budget_s: float = 0.0  # stop dispatching so the run ends within this (0: no budget)
    grace_s: float = 20.0  # after the budget, a task still running this long is killed (kept unfinished)
    assumed_task_s: float = 0.0  # a task's duration before one finished in this run (0: DEFAULT_TASK_S)
    assumed_startup_s: float = 30.0  # a new child's start (torch import, CUDA context) before its first task
    task_timeout_s: float = 420.0  # one task longer than this: its child is killed, the culprits fail
    workers: int = 0  # GPUs used, one child each (0: every visible GPU)
    per_gpu: int = 1  # children per GPU; >1 overlaps CPU work and untimed GPU work (GpuLock), never timing
    budget_ms: float = 30.0  # timed budget per callable in each interleaved run
    warmup_ms: float = 10.0  # warm-up budget per callable
    min_reps: int = 5  # samples per callable at least (slow callables get this many)
    max_reps: int = 200  # samples per callable at most
    seeds: tuple[int, ...] = (0, 1)  # correctness seeds per configuration (timing rotates their inputs)
    l2_flush: bool = True  # write 2x L2 before every timed call
    compile_baseline: bool = True  # time torch.compile(reference) on PyTorch tasks
    # At most this many implementations per task, the baseline one first (0: all). For baseline A/B runs
    # (scripts/baseline_repeatability.sh): more tasks in the same minutes. A task measured so is recorded
    # with those implementations only, so a later full run measures the rest.
    impls_per_task: int = 0
    serial_budget_ms: float = 300.0  # serial-C timing: repeat until this much time is spent (1 to 5 calls)
    retry_failed: bool = False  # measure again keys whose child died or timed out
    retry_incorrect: bool = False  # measure again keys whose implementation was found wrong
    retime_before_lead: bool = False  # measure again keys timed before the lead (`timed_before_the_lead`)
    retime_before_priority: bool = False  # ... and those timed before it (`timed_before_priority`)
    # Off by default: on the H200 A/B (benchmarks/results/2026-12-04-session12/call2-repeatability) the
    # two together made two runs of the same 40 tasks agree less (implementations 6.0% vs 2.7%) and slower.
    raise_priority: bool = False  # timing threads at a raised priority (task_measurement.raised_priority)
    compile_first_run_exclusive: bool = False  # torch.compile's first run (Triton autotunes) holds the GPU
    resume_from: tuple[Path, ...] = ()  # more directories whose measurements*.jsonl[.gz] count as done
    max_attempts: int = 3  # deaths of one task that blame no key before its remaining keys are given up
    max_tasks_per_child: int = 150  # a child is replaced after this many tasks (bounded memory growth)
    features: bool = True  # compute static features in a background thread of the parent
    runner: str = "gpu"  # a name of RUNNERS ("gpu": task_measurement.py) or "module:Class"
    test_hooks: tuple[tuple[str, str], ...] = ()  # tests only; GPU runner: ("illegal_address_on", impl id)
    progress: bool = True

    def __post_init__(self) -> None:
        i, n = self.shard
        if not (n >= 1 and 0 <= i < n):
            raise ValueError(f"shard {i}/{n}: need 0 <= i < n (e.g. --shard 0/4)")
        if self.runner not in RUNNERS and ":" not in self.runner:
            raise ValueError(f"runner {self.runner!r}: one of {sorted(RUNNERS)} or a path module:Class")
        if not self.seeds:
            raise ValueError("seeds: at least one correctness seed")
        if self.per_gpu < 1 or self.max_attempts < 1:
            raise ValueError("per_gpu and max_attempts must be >= 1")
        if self.impls_per_task < 0:
            raise ValueError("impls_per_task: 0 (all) or a positive number")

    def assumed_s(self, kind: str) -> float:
        """A task's duration before one of its kind finished in this run (`assumed_task_s`, else
        `DEFAULT_TASK_S`)."""
        return self.assumed_task_s or DEFAULT_TASK_S[kind]

    def first_task_s(self, kind: str) -> float:
        """What the dispatcher expects a run's first task of this kind to need, its measuring process's
        start included: a budget shorter than that for the first queued task measures nothing."""
        return self.assumed_startup_s + EXPECTED_MARGIN * self.assumed_s(kind)

    @property
    def hooks(self) -> dict[str, str]:
        return dict(self.test_hooks)


Impl = TypeVar("Impl")


def measured_implementations(impls: Sequence[Impl], limit: int) -> list[Impl]:
    """The implementations a run measures of a task's `impls` (`MeasureOptions.impls_per_task`): all
    when `limit` is 0, else the baseline one (`.baseline`, the naive port) and the first others, `limit`
    in all, in the registry's order."""
    if limit <= 0:
        return list(impls)
    ordered = [i for i in impls if getattr(i, "baseline", False)] + \
              [i for i in impls if not getattr(i, "baseline", False)]
    return ordered[:limit]
