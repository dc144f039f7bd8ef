"""The comparison's table from the merged trajectories a model-day call brings back
(`$OUT/<call>/compare/<model>-trajectories.jsonl`, a model's `batched_trajectories.jsonl`), complete or
not: a batched comparison writes its run directories and figures only once every trajectory is done, and
those stay on the GPU machine, so a comparison cut by its call's end leaves no table. Trajectory k of a
task is seed k's (`train.compare._batched_runs`); the tasks of each set are resolved here as the
comparison resolved them (same `--tasks`, kinds, families and `--min-headroom`).

    python3 scripts/compare_partial.py sft=DIR/sft-trajectories.jsonl rl=DIR/rl-trajectories.jsonl --tasks 16

(a file may be gzipped, as those committed under benchmarks/results/ are).

Prints what the comparison writes (`train.compare.comparison_sections`: the table, the paired changes over
seeds, which trajectories' outcomes differ between models, those outcomes by task family, the changes over
training seeds where models are named GROUP@seedK), per model and set how many trajectories are done (a
trajectory cut before its last turn counts with the turns it has: its best-of-turns figure can only be
lower than the finished one's), and a `RESULT partial` line of means a model and set.

Not covered: running the comparison (`cudaperf train eval`, `scripts/train_compare_h200.py`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cudaperf.train.compare_table import SeedOutcomes, SeedRuns


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", help="NAME=TRAJECTORIES.jsonl")
    p.add_argument("--tasks", type=int, default=16, help="tasks a set (the comparison's --limit-tasks)")
    p.add_argument("--seeds", type=int, default=3, help="seeds of the comparison (trajectories a task)")
    p.add_argument("--turns", type=int, default=2, help="turns a trajectory")
    p.add_argument("--sets", nargs="+", default=["heldout", "test"],
                   help="the comparison's sets: heldout, val, test, train or NAME=TASK_SPEC")
    p.add_argument("--kinds", nargs="*", default=[], help="task kinds of the comparison (empty: both)")
    p.add_argument("--families", nargs="*", default=[], help="task families of the comparison (empty: all)")
    p.add_argument("--min-headroom", type=float, default=0.0, help="the comparison's --min-headroom")
    p.add_argument("--measurements", default="benchmarks/dataset_measure",
                   help="the dataset measurements --min-headroom reads")
    return p.parse_args(argv)


def partial_runs(args: argparse.Namespace) -> tuple[SeedRuns, list[str], SeedOutcomes, dict[str, str]]:
    """model -> set -> seed -> that seed's figures over the trajectories there are (as
    `train.compare.complete_runs`), one line a run on how many of its trajectories are done, the runs'
    `trajectory_outcomes` (as `train.compare.complete_outcomes`) and the sets' task families (task id ->
    `task_family`)."""
    from cudaperf.agent.trajectory import TrajectoryStore, group
    from cudaperf.train.compare import CompareConfig, resolve_sets
    from cudaperf.train.compare_table import run_figures, task_family, trajectory_outcomes

    config = CompareConfig(limit_tasks=args.tasks, kinds=tuple(args.kinds), families=tuple(args.families),
                           min_headroom=args.min_headroom,
                           measurements=args.measurements if args.min_headroom else "")
    tasks = resolve_sets(config, args.sets)
    sets = {name: [t.task_id for t in found] for name, found in tasks.items()}
    families = {t.task_id: task_family(t) for found in tasks.values() for t in found}
    runs: SeedRuns = {}
    outcomes: SeedOutcomes = {}
    notes = []
    for entry in args.models:
        name, _, path = entry.partition("=")
        records = _load(Path(path), TrajectoryStore)
        for set_name, ids in sets.items():
            for seed in range(args.seeds):
                trajectories = group(r for r in records if r.task_id in ids and r.sample == seed)
                done = sum(1 for tr in trajectories if tr.done or len(tr.turns) >= args.turns)
                notes.append(f"{name} {set_name} seed {seed}: {done} of {len(ids)} trajectories done, "
                             f"{len(trajectories)} begun")
                if trajectories:
                    by_seed = runs.setdefault(name, {}).setdefault(set_name, {})
                    by_seed[seed] = asdict(run_figures(trajectories, ids))
                    outcomes.setdefault(name, {}).setdefault(set_name, {})[seed] = trajectory_outcomes(
                        trajectories)
    return runs, notes, outcomes, families


def _load(path: Path, store: type) -> list:
    """A trajectories file's records; a .gz one (as committed under benchmarks/results/) unpacked first."""
    if path.suffix != ".gz":
        return store(path).load()
    import gzip
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.stem
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        return store(plain).load()


def main(argv: list[str] | None = None) -> int:
    from cudaperf.train.compare import comparison_sections
    from cudaperf.train.compare_table import HEADLINE_FIGURES

    args = parse_args(argv)
    runs, notes, outcomes, families = partial_runs(args)
    sections, markdown = comparison_sections(runs, outcomes, families, args.turns)
    print(markdown)
    print("\n".join(notes))
    for model, by_set in sections["table"].items():  # a line a model and set, for a model-day call's summary
        for set_name, row in by_set.items():
            means = {name: row[name]["mean"] for name in HEADLINE_FIGURES}
            print("RESULT partial " + json.dumps({"model": model, "set": set_name, **means}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
