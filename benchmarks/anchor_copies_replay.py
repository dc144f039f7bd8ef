"""Replay an RL run's evaluation records (`rl_evaluations.jsonl.gz`) under the RL mode's rule for copies of a
C task's naive port (`eval_modes`, point 7; `cudaperf.anchor_copies`): which correct answers were copies,
which of them the rule would still time, and the timing-stage seconds the others took.

In order of the records' `at_s` (when each result came in), per task: an answer repeating an earlier one
character for character is left out (`agent.shared_answers` gives it the first one's result, on since
session 44); a correct answer is timed unless it is a copy and an earlier correct answer of its task was
timed within `--max-age-s` (any timed pass of a C task times the naive port live under the RL rollouts'
timing). Answers evaluated at once are taken in the order they finished: an approximation of the rule,
under which a copy in flight waits for the first copy's timed pass but not for other answers'. Needs the
dataset's tasks (`datasets.registry`), no GPU.

    python3 benchmarks/anchor_copies_replay.py RUN/train/rl_evaluations.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

from cudaperf.agent.taskset import task_from_generated
from cudaperf.anchor_copies import copies_anchor
from cudaperf.datasets import registry
from cudaperf.types import Solution, SolutionFormat

TIMED_STAGES = ("timing_prep", "timing")


@dataclass
class Replay:
    """Counts and timing-stage seconds (`TIMED_STAGES` summed) over a run's correct answers."""

    correct: int = 0
    repeats: int = 0
    copies: int = 0
    copies_timed: int = 0
    copies_served: int = 0
    # per group (timed, served, repeats): seconds of each of `TIMED_STAGES`, summed
    seconds: dict[str, dict[str, float]] = field(default_factory=lambda: {
        group: dict.fromkeys(TIMED_STAGES, 0.0) for group in ("timed", "served", "repeats")})

    def lines(self) -> list[str]:
        return [f"correct answers: {self.correct}; repeats of an earlier answer (shared): {self.repeats}",
                f"copies of the naive port among the rest: {self.copies}; timed under the rule: "
                f"{self.copies_timed}; given the port's timings: {self.copies_served}",
                *(f"{stage} seconds: " + ", ".join(
                    f"{group} {spent[stage]:.1f}" for group, spent in self.seconds.items())
                  for stage in TIMED_STAGES),
                "(the timing stage holds the GPU alone; timing_prep is the worker's host work before it)"]


def replay(rows: list[dict], max_age_s: float = 600.0) -> Replay:
    index = {g.task_id: g for g in registry.build_index(0)}
    out, seen, timed_at = Replay(), set(), {}
    for row in sorted(rows, key=lambda r: r.get("at_s", 0.0)):
        if row.get("outcome") != "correct" or row["task_id"] not in index:
            continue
        out.correct += 1
        spent = {s: row.get("stage_durations_s", {}).get(s, 0.0) for s in TIMED_STAGES}
        if (row["task_id"], row["source"]) in seen:
            out.repeats += 1
            _add(out.seconds["repeats"], spent)
            continue
        seen.add((row["task_id"], row["source"]))
        task = task_from_generated(index[row["task_id"]])
        copy = copies_anchor(task, Solution(row["solution_id"], row["source"], SolutionFormat.FAST))
        last = timed_at.get(row["task_id"])
        if copy:
            out.copies += 1
        if copy and last is not None and row["at_s"] - last <= max_age_s:
            out.copies_served += 1
            _add(out.seconds["served"], spent)
            continue
        out.copies_timed += copy
        _add(out.seconds["timed"], spent)
        timed_at[row["task_id"]] = row["at_s"]
    return out


def _add(total: dict[str, float], spent: dict[str, float]) -> None:
    for stage, seconds in spent.items():
        total[stage] += seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("evaluations", type=Path, help="an RL run's rl_evaluations.jsonl.gz")
    parser.add_argument("--max-age-s", type=float, default=600.0, help="RlSettings.drift_max_age_s")
    args = parser.parse_args()
    opener = gzip.open if args.evaluations.suffix == ".gz" else open
    with opener(args.evaluations, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    print("\n".join(replay(rows, args.max_age_s).lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
