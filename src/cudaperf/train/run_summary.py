"""Where an RL run's time went, from its records: per rollout batch and in all, the seconds and shares of
generation, evaluation and the optimiser (the trainer's step times from a batch to the next one, less the
rollout: `report_html.optimizer_seconds`), turns per minute, the anti-cheat flags by kind, the optimiser
steps the gradient guard skipped (`train.finite_guard`), what the evaluator's GPU gate did during the
evaluations (the RL mode's records: seconds and shares of each state, `gate_split`); and, from its
evaluation records (`train.monitor.record_evaluations`), the answers' outcomes and their stage times
(summed, median, largest), over every evaluated answer and over the correct ones, the only ones timed.
`cudaperf report RUN_DIR` prints it.

Covered: the records as `cudaperf train rl` writes them (`metrics.jsonl`, `evaluations.jsonl` in the run's
directory) and as results keep them (`rl_metrics.jsonl`, `rl_evaluations.jsonl` or `.jsonl.gz` beside it).
Stage times are each answer's own: answers are evaluated side by side, so their sums exceed the batches'
evaluation seconds, and the waits (`gate_wait`, `plan_wait`, `build_wait`) are time an answer spent
waiting for another's stage; `gate_held` is the time it held the GPU alone (its timing stage and what
runs inside the same turn: the go-ahead's answer, the verdict), which no two answers overlap; `timing_bench`
and `timing_loop` are parts of the timing stage (its benches, and their timed rounds: `Session.bench`).

Not covered: SFT runs (no rollouts: the summary says there are none), drawing the curves (the HTML
report's training section), what each stage does (`docs/evaluation.md`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cudaperf.datasets.jsonl import read_jsonl
from cudaperf.eval_modes import GATE_STATES
from cudaperf.report_html import TrainingRun, finite_number, flag_kinds, optimizer_seconds
from cudaperf.train.finite_guard import GUARD_RECORD
from cudaperf.train.monitor import EVALUATIONS_FILE

WAIT_STAGES = ("build_wait", "gate_wait", "plan_wait")  # an answer waiting for another's stage
HELD_STAGES = ("gate_held",)  # an answer holding the GPU alone (the RL mode's exclusive side of the gate)
PARTS = ("generation", "evaluation", "optimiser")


@dataclass(frozen=True)
class BatchTime:
    """One rollout batch: the optimiser step it was drawn at, its turns, and its seconds in each part
    (None where a record lacks them)."""

    step: int
    turns: int
    generate_s: float | None
    evaluate_s: float | None
    optimiser_s: float | None

    @property
    def complete(self) -> bool:
        return None not in (self.generate_s, self.evaluate_s, self.optimiser_s)


@dataclass(frozen=True)
class TimeSplit:
    """The batches of a run; the totals count the complete batches only, so the shares add up to 1."""

    batches: tuple[BatchTime, ...]
    optimiser_steps: int

    def _complete(self) -> list[BatchTime]:
        return [b for b in self.batches if b.complete]

    def seconds(self) -> dict[str, float]:
        done = self._complete()
        return {"generation": sum(b.generate_s or 0.0 for b in done),
                "evaluation": sum(b.evaluate_s or 0.0 for b in done),
                "optimiser": sum(b.optimiser_s or 0.0 for b in done)}

    def shares(self) -> dict[str, float]:
        seconds = self.seconds()
        total = sum(seconds.values())
        return {part: (s / total if total > 0 else 0.0) for part, s in seconds.items()}

    def turns_per_min(self) -> float | None:
        total_s = sum(self.seconds().values())
        turns = sum(b.turns for b in self._complete())
        return 60.0 * turns / total_s if total_s > 0 else None


def time_split(run: TrainingRun) -> TimeSplit:
    """The run's rollout batches with their generation, evaluation and optimiser seconds."""
    rollouts, train = run.of_kind("rollout"), run.of_kind("train")
    optimiser = optimizer_seconds(rollouts, train) if rollouts else []
    batches = tuple(BatchTime(step, int(finite_number(r.get("turns")) or 0),
                              finite_number(r.get("generate_s")), finite_number(r.get("evaluate_s")), opt)
                    for (step, r), opt in zip(rollouts.items(), optimiser, strict=True))
    steps = [s for s, r in train.items() if finite_number(r.get("step_s")) is not None]
    return TimeSplit(batches, len(steps))


def gate_split(run: TrainingRun) -> dict[str, float]:
    """The seconds the GPU gate spent in each state during the run's evaluations (`gate_<state>_s` of its
    rollout records, summed; empty for a run evaluated without a gate)."""
    totals: dict[str, float] = {}
    for record in run.of_kind("rollout").values():
        for state in GATE_STATES:
            value = finite_number(record.get(f"gate_{state}_s"))
            if value is not None:
                totals[state] = totals.get(state, 0.0) + value
    return totals


def gate_markdown(totals: Mapping[str, float]) -> str:
    """One line: the gate's states during evaluation, seconds and shares ('' without a gate)."""
    total = sum(totals.values())
    if not totals or total <= 0:
        return ""
    parts = [f"{state} {s:.1f} s ({100 * s / total:.0f}%: {GATE_STATES[state]})"
             for state, s in totals.items()]
    return "During the evaluations the GPU gate was " + "; ".join(parts) + ".\n"


@dataclass(frozen=True)
class StageTimes:
    """One stage over the answers that went through it: seconds summed over all of them and over the
    correct ones, the correct ones' median and the largest of all."""

    stage: str
    answers: int
    sum_s: float
    correct_sum_s: float
    correct_median_s: float | None
    max_s: float


@dataclass(frozen=True)
class EvaluationSummary:
    answers: int
    outcomes: dict[str, int]  # outcome -> answers, most first
    stages: tuple[StageTimes, ...]  # in the order the records name them
    unreadable: int  # lines that were not an evaluation record


def summarise_evaluations(records: Iterable[Mapping], unreadable: int = 0) -> EvaluationSummary:
    outcomes: dict[str, int] = {}
    every: dict[str, list[float]] = {}
    correct: dict[str, list[float]] = {}
    answers = 0
    for r in records:
        answers += 1
        outcome = str(r.get("outcome"))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        for stage, value in (r.get("stage_durations_s") or {}).items():
            if (seconds := finite_number(value)) is None or stage == "total":
                continue
            every.setdefault(stage, []).append(seconds)
            if outcome == "correct":
                correct.setdefault(stage, []).append(seconds)
    stages = tuple(StageTimes(stage, len(values), sum(values), sum(correct.get(stage, [])),
                              statistics.median(correct[stage]) if correct.get(stage) else None, max(values))
                   for stage, values in every.items())
    ordered = dict(sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    return EvaluationSummary(answers, ordered, stages, unreadable)


def evaluations_file(run_path: Path) -> Path | None:
    """The evaluation records beside a run: `evaluations.jsonl` in its directory, or the one file there
    named *evaluations.jsonl(.gz); beside a metrics file, the one with its prefix (`rl_metrics.jsonl` ->
    `rl_evaluations.jsonl` or `.jsonl.gz`); None when there is none."""
    if run_path.is_dir():
        own = run_path / EVALUATIONS_FILE
        if own.is_file():
            return own
        found = [p for pattern in (f"*{EVALUATIONS_FILE}", f"*{EVALUATIONS_FILE}.gz")
                 for p in sorted(run_path.glob(pattern))]
        return found[0] if len(found) == 1 else None
    prefix = run_path.name.removesuffix("metrics.jsonl")
    for name in (f"{prefix}{EVALUATIONS_FILE}", f"{prefix}{EVALUATIONS_FILE}.gz"):
        if (run_path.parent / name).is_file():
            return run_path.parent / name
    return None


def read_evaluations(path: Path) -> tuple[list[dict], int]:
    """The records of an evaluations file (gzip when named .gz: `datasets.jsonl.read_jsonl`), and how many
    lines were unreadable or not an evaluation record (a torn last line of a killed run among them)."""
    rows, torn = read_jsonl(path)
    records = [r for r in rows if isinstance(r, dict) and "outcome" in r]
    return records, torn + len(rows) - len(records)


def _s(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def split_markdown(split: TimeSplit, flags: Mapping[str, int]) -> str:
    if not split.batches:
        return "No rollout batches: not an RL run, or one that took no step.\n"
    rows = ["| step | turns | generation s | evaluation s | optimiser s |", "|---|---|---|---|---|"]
    rows += [f"| {b.step} | {b.turns} | {_s(b.generate_s)} | {_s(b.evaluate_s)} | {_s(b.optimiser_s)} |"
             for b in split.batches]
    seconds, shares = split.seconds(), split.shares()
    complete = sum(b.complete for b in split.batches)
    lines = [f"{len(split.batches)} rollout batches, {split.optimiser_steps} optimiser steps; "
             f"over the {complete} complete batches: "
             + ", ".join(f"{part} {seconds[part]:.1f} s ({100 * shares[part]:.0f}%)" for part in PARTS)
             + f"; {_s(split.turns_per_min())} turns/min.", "", *rows, ""]
    named = ", ".join(f"{kind} {n}" for kind, n in flags.items()) or "none"
    lines.append(f"Turns flagged by anti-cheat, by kind: {named}.")
    return "\n".join(lines) + "\n"


def evaluations_markdown(summary: EvaluationSummary) -> str:
    outcomes = ", ".join(f"{name} {n}" for name, n in summary.outcomes.items()) or "none"
    lines = [f"{summary.answers} evaluated answers: {outcomes}."
             + (f" {summary.unreadable} unreadable lines skipped." if summary.unreadable else ""), "",
             "| stage | answers | sum s | sum s (correct) | median s (correct) | max s |",
             "|---|---|---|---|---|---|"]
    for t in summary.stages:
        name = (f"{t.stage} (waiting)" if t.stage in WAIT_STAGES else
                f"{t.stage} (GPU alone)" if t.stage in HELD_STAGES else t.stage)
        lines.append(f"| {name} | {t.answers} | {t.sum_s:.1f} | {t.correct_sum_s:.1f} | "
                     f"{_s(t.correct_median_s, 2)} | {t.max_s:.1f} |")
    return "\n".join(lines) + "\n"


def run_markdown(run: TrainingRun, run_path: Path) -> str:
    """The whole summary of one run: its time split and flags, then its evaluations when recorded."""
    parts = [f"## {run.name}: where the time went", "", split_markdown(time_split(run),
                                                                       flag_kinds(run.of_kind("rollout")))]
    gate = gate_markdown(gate_split(run))
    if gate:
        parts += [gate]
    skipped = sorted(run.of_kind(GUARD_RECORD))
    if skipped:  # finite_guard.gradient_guard's records
        parts += [f"Optimiser steps skipped for a non-finite gradient (weights kept): "
                  f"{', '.join(map(str, skipped))}.", ""]
    found = evaluations_file(run_path)
    if found is not None:
        records, bad = read_evaluations(found)
        summary = summarise_evaluations(records, bad)
        parts += [f"### Evaluations ({found.name})", "", evaluations_markdown(summary)]
    return "\n".join(parts)
