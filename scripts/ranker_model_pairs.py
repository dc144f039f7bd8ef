"""The ranker on pairs of kernels a model wrote, measured on the H200 (issue 20, item 3's last part).

Reads agent trajectories (JSONL, `agent.trajectory.TurnRecord` rows as the agent loop, the comparison and
the refinement run write them), keeps each answer that passed every correctness check and was timed, and
forms pairs: two different kernels (by text) for the same task and configuration whose candidate medians
differ by at least the dataset pairs' noise floor (`ranker.pairs.NOISE_FLOOR`). An answer written twice
(the same text in two trajectories) counts once, with the median of its medians. For each pair it asks
the shipped feature ranker (or `--model`) which is faster, beside "the longer source wins" and a fair
coin, and prints accuracy per runtime-gap bucket and per task set (`--sets` maps task ids to the set
each run belongs to, from the comparison's runs.json).

Answers ruled anything but CORRECT are left out, except with `--include-flagged-correct`: then an answer
whose correctness checks all passed and whose only fault is a `verdict_mismatch` on its timed
configurations counts too (session 16's comparison: a referee bug, since fixed, ruled every timed C
answer so; the timings themselves are the worker's measurements, taken as for any other answer).

Not covered: the LM ranker (it needs a GPU and its trained head), and whether the tasks were in the
ranker's training (the shipped model trained on the dataset's train families: pairs on held-out tasks of
those families are not out of family; the set column says which pairs are).

    python3 scripts/ranker_model_pairs.py TRAJ.jsonl ... [--sets runs.json] [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import statistics
import sys
from pathlib import Path

MISMATCH = "verdict_mismatch: the worker reports timings of"
BUCKETS = (1.2, 1.5, 2.0)


def usable(row: dict, include_flagged: bool) -> bool:
    """An answer whose candidate timings measure a correct kernel (see the module docstring)."""
    result = row.get("result") or {}
    checks = result.get("correctness") or []
    if not (row.get("code") and result.get("timings") and checks and all(c.get("correct") for c in checks)):
        return False
    if result.get("outcome") == "correct":
        return True
    faults = [m for m in (result.get("message") or "").split("; ") if m]
    return (include_flagged and result.get("outcome") == "policy_violation"
            and all(m.startswith(MISMATCH) for m in faults))


def medians(paths: list[Path], include_flagged: bool) -> dict[tuple[str, str], dict[str, tuple[str, float]]]:
    """(task, config) -> kernel hash -> (its code, the median of its candidate medians in ms)."""
    seen: dict[tuple[str, str], dict[str, list]] = collections.defaultdict(dict)
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if not usable(row, include_flagged):
                continue
            digest = hashlib.sha256(row["code"].encode()).hexdigest()[:12]
            for t in row["result"]["timings"]:
                ms = (t.get("candidate") or {}).get("median_ms")
                if ms and ms > 0:
                    entry = seen[(row["task_id"], t["config"])].setdefault(digest, [row["code"], []])
                    entry[1].append(ms)
    return {key: {h: (code, statistics.median(ms)) for h, (code, ms) in kernels.items()}
            for key, kernels in seen.items()}


def pairs(timed: dict, floor: float) -> list[tuple[str, str, str, str, float]]:
    """(task, config, faster code, slower code, ratio) for every two kernels at least `floor` apart."""
    out = []
    for (task_id, config), kernels in sorted(timed.items()):
        items = sorted(kernels.values(), key=lambda kv: kv[1])
        for i, (fast, fast_ms) in enumerate(items):
            for slow, slow_ms in items[i + 1:]:
                if slow_ms / fast_ms >= floor:
                    out.append((task_id, config, fast, slow, slow_ms / fast_ms))
    return out


def judged(rows: list[tuple[str, str, str, str, float]], ranker, tasks: dict) -> list[dict]:
    """Each pair with the ranker's P(faster one is faster) and the length rule's verdict."""
    out = []
    for task_id, config, fast, slow, ratio in rows:
        p = ranker.compare(fast, slow, tasks[task_id], config)
        out.append({"task": task_id, "config": config, "ratio": ratio, "p_faster": p,
                    "ranker": p > 0.5, "longer": None if len(fast) == len(slow) else len(fast) > len(slow)})
    return out


def summary(rows: list[dict], sets: dict[str, str]) -> dict:
    table: dict[str, dict] = {}
    for name in sorted({sets.get(r["task"], "all") for r in rows} | {"all"}):
        chosen = [r for r in rows if name == "all" or sets.get(r["task"], "all") == name]
        for gap in BUCKETS:
            sub = [r for r in chosen if r["ratio"] >= gap]
            if not sub:
                continue
            table[f"{name} >={gap:g}x"] = {
                "pairs": len(sub), "tasks": len({r["task"] for r in sub}),
                "ranker": sum(r["ranker"] for r in sub) / len(sub),
                # a tie in length is half right, as a coin would be
                "longer_source": sum(1.0 if r["longer"] else 0.5 if r["longer"] is None else 0.0
                                     for r in sub) / len(sub)}
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trajectories", nargs="+", type=Path)
    parser.add_argument("--sets", type=Path, default=None, help="the comparison's runs.json (task -> set)")
    parser.add_argument("--model", default=None, help="a saved feature model (default: the shipped one)")
    parser.add_argument("--include-flagged-correct", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    from cudaperf.agent.taskset import task_from_generated
    from cudaperf.datasets import registry
    from cudaperf.ranker.pairs import NOISE_FLOOR
    from cudaperf.ranker.store import load_model

    timed = medians(args.trajectories, args.include_flagged_correct)
    rows = pairs(timed, NOISE_FLOOR)
    if not rows:
        print("no pairs: no task and configuration has two correct, timed kernels", file=sys.stderr)
        return 1
    wanted = {r[0] for r in rows}
    tasks = {g.task_id: task_from_generated(g) for g in registry.build_index(0) if g.task_id in wanted}
    missing = wanted - tasks.keys()
    if missing:
        print(f"tasks not in the dataset index (seed 0): {sorted(missing)}", file=sys.stderr)
        return 2
    sets = {}
    if args.sets:
        for run in json.loads(args.sets.read_text(encoding="utf-8")).values():
            sets.update({t: run["set"] for t in run.get("tasks", ())})
    verdicts = judged(rows, load_model(args.model).backend, tasks)
    table = summary(verdicts, sets)
    print(f"{len(verdicts)} pairs (noise floor {NOISE_FLOOR:g}x) from {len(timed)} task configurations")
    print("| pairs | n | tasks | ranker | longer source wins |\n| --- | --- | --- | --- | --- |")
    for name, row in table.items():
        print(f"| {name} | {row['pairs']} | {row['tasks']} | {row['ranker']:.1%} "
              f"| {row['longer_source']:.1%} |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "model_pairs.json").write_text(json.dumps(
            {"noise_floor": NOISE_FLOOR, "include_flagged_correct": args.include_flagged_correct,
             "inputs": [str(p) for p in args.trajectories], "summary": table, "pairs": verdicts},
            indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
