"""Which strategies a model's answers are, per family and turn, from a comparison's trajectories or an RL
run's evaluated answers (`rl_evaluations.jsonl`): what its speed figures come from. An answer names its
strategy on its first line, as the dataset's implementations it learned from do (`\"\"\"<strategy> CUDA
implementation of <task> ...`); an answer without that line counts as "?".

    python3 scripts/answer_strategies.py sft=DIR/sft-trajectories.jsonl.gz rl=DIR/rl-trajectories.jsonl.gz
    python3 scripts/answer_strategies.py rl-training=RUN/train/rl_evaluations.jsonl.gz

Prints, per model: for each family, turn and strategy the answers, the correct ones and their geometric-mean
speedup; then each second turn against its own first ("naive -> vectorized"), counted over the trajectories
whose first answer was correct; for an RL run, each strategy's mean score standardised within its GRPO group
(`group_advantages`: which strategies the run's gradient favoured). Why: session 47's models wrote the C
tasks' baseline shape (`naive`) in about half of their answers, and the strategies that win on the headroom
families almost never (dev/LOG.md), which no correct-rate or speedup row shows.

Not covered: the strategies' measured times (`cudaperf dataset stats`), answers of other formats.
"""

from __future__ import annotations

import argparse
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

FIRST_LINE = re.compile(r'^\s*(?:"""|\'\'\')?\s*([A-Za-z_][\w]*) CUDA implementation of')


def strategy_of(code: str | None) -> str:
    """The strategy an answer names on its first line, or "?"."""
    match = FIRST_LINE.match((code or "").split("\n", 1)[0])
    return match.group(1) if match else "?"


def family_of(task_id: str) -> str:
    """A dataset task id's family (`c_gemv_<hash>` -> gemv)."""
    parts = task_id.split("_")
    return "_".join(parts[1:-1]) or task_id


def read_records(path: Path) -> list[dict]:
    """A JSONL file's records, plain or gzipped (a torn last line of a killed run skipped)."""
    from cudaperf.datasets.jsonl import read_jsonl

    return read_jsonl(path)[0]


SOLUTION_ID = re.compile(r"^(?P<task>.+)/s(?P<sample>\d+)/t(?P<turn>\d+)$")


def read_turns(path: Path) -> list[dict]:
    """A file's answers as trajectory turns. An RL run's `rl_evaluations.jsonl[.gz]` (each answer's
    source, outcome and `solution_id` TASK/sSAMPLE/tTURN) becomes the same shape, its speedup, score and
    step taken from `rl_rollouts.jsonl[.gz]` beside it by task, sample and turn (none where a run met a
    task twice, so that the key names two answers)."""
    records = read_records(path)
    if not records or "solution_id" not in records[0]:
        return records
    turns = [turn for turn in map(_evaluated_turn, records) if turn is not None]
    rollouts = _rollout_rows(path.parent)
    for turn in turns:
        row = rollouts.get((turn["task_id"], turn["sample"], turn["turn"]), {})
        turn.update(speedup=row.get("speedup"), score=row.get("score"), step=row.get("step"))
    return turns


def _evaluated_turn(record: dict) -> dict | None:
    found = SOLUTION_ID.match(record["solution_id"])
    if found is None:
        return None
    return {"task_id": found["task"], "sample": int(found["sample"]), "turn": int(found["turn"]),
            "code": record.get("source"), "result": {"outcome": record.get("outcome")}}


def _rollout_rows(run: Path) -> dict[tuple[str, int, int], dict]:
    seen: Counter = Counter()
    rows = {}
    for name in ("rl_rollouts.jsonl", "rl_rollouts.jsonl.gz"):
        if (run / name).is_file():
            for r in read_records(run / name):
                key = (r["task_id"], int(r["sample"]), int(r["turn"]))
                seen[key] += 1
                rows[key] = r
    return {key: row for key, row in rows.items() if seen[key] == 1}


def group_advantages(turns: Iterable[dict]) -> list[tuple[str, str, int, float]]:
    """(family, strategy, answers, mean standardised score) over an RL run's answers: each answer's own
    score against the mean and standard deviation of its GRPO group's (the same step and task, every
    turn), groups whose scores all agree left out. What GRPO pulls toward, before the discounted returns
    mix later turns in."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for t in turns:
        if t.get("score") is not None and t.get("step") is not None:
            groups[(t["step"], t["task_id"])].append(t)
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    for members in groups.values():
        scores = [m["score"] for m in members]
        mean = sum(scores) / len(scores)
        std = math.sqrt(sum((x - mean) ** 2 for x in scores) / len(scores))
        for m in members if std > 1e-9 else ():
            cells[(family_of(m["task_id"]), strategy_of(m.get("code")))].append((m["score"] - mean) / std)
    return [(*key, len(v), sum(v) / len(v)) for key, v in sorted(cells.items())]


def _correct(turn: dict) -> bool:
    return (turn.get("result") or {}).get("outcome") == "correct"


def strategy_rows(turns: Iterable[dict]) -> list[tuple[str, int, str, int, int, float | None]]:
    """(family, turn, strategy, answers, correct, geometric-mean speedup of the correct ones), sorted."""
    cells: dict[tuple[str, int, str], list[float | None]] = defaultdict(list)
    for t in turns:
        speedup = t.get("speedup") if _correct(t) else None
        cells[(family_of(t["task_id"]), int(t["turn"]), strategy_of(t.get("code")))].append(
            speedup if speedup and speedup > 0 else (0.0 if _correct(t) else None))
    rows = []
    for key in sorted(cells):
        values = cells[key]
        right = [v for v in values if v is not None]
        timed = [v for v in right if v > 0]
        geomean = math.exp(sum(map(math.log, timed)) / len(timed)) if timed else None
        rows.append((*key, len(values), len(right), geomean))
    return rows


def transitions(turns: Iterable[dict]) -> Counter:
    """(family, first strategy, second strategy) over trajectories whose first answer was correct."""
    by_trajectory: dict[tuple[str, int], dict[int, dict]] = defaultdict(dict)
    for t in turns:
        by_trajectory[(t["task_id"], int(t.get("sample", 0)))][int(t["turn"])] = t
    found: Counter = Counter()
    for (task_id, _), turns_of in by_trajectory.items():
        first, second = turns_of.get(0), turns_of.get(1)
        if first is not None and second is not None and _correct(first):
            found[(family_of(task_id), strategy_of(first.get("code")), strategy_of(second.get("code")))] += 1
    return found


def report(name: str, turns: list[dict]) -> str:
    lines = [f"## {name}", "", "| family | turn | strategy | answers | correct | geomean speedup |",
             "| --- | --- | --- | --- | --- | --- |"]
    for family, turn, strategy, answers, right, geomean in strategy_rows(turns):
        shown = f"{geomean:.3f}" if geomean is not None else "-"
        lines.append(f"| {family} | {turn + 1} | {strategy} | {answers} | {right} | {shown} |")
    lines += ["", "| family | first (correct) -> second | trajectories |", "| --- | --- | --- |"]
    for (family, first, second), n in sorted(transitions(turns).items()):
        lines.append(f"| {family} | {first} -> {second} | {n} |")
    pulls = group_advantages(turns)
    if pulls:
        lines += ["", "| family | strategy | answers in varied groups | mean standardised score |",
                  "| --- | --- | --- | --- |"]
        lines += [f"| {family} | {strategy} | {n} | {z:+.2f} |" for family, strategy, n, z in pulls]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+",
                   help="NAME=TRAJECTORIES.jsonl[.gz] or NAME=RUN/rl_evaluations.jsonl[.gz]")
    args = p.parse_args(argv)
    for item in args.models:
        name, _, path = item.partition("=")
        if not path:
            p.error(f"{item!r}: write NAME=PATH")
        if not Path(path).is_file():
            p.error(f"{path}: no such file")
        print(report(name, read_turns(Path(path))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
