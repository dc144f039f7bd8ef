"""Training seeds in the comparison: one policy trained several times with different seeds, compared as
one (issue 23: RL above SFT by more than the seed spread).

A model of the comparison named `GROUP@seedK` is training seed K of the policy GROUP (`rl@seed0`,
`rl@seed1`, ...); any other name is a policy of its own, or, named GROUP beside GROUP@seedK models, one
more model of that policy whose training seed is not named. Figures per training seed are the mean over the
comparison's sampling seeds (each a full run of the same model, `train.compare`), so the spread reported
here is the spread between trained models, not between samples of one.

Covers:
- `training_group`, `seed_groups`: names to groups, in the comparison's order;
- `training_seed_table`: per group with two or more training seeds and per set, every figure's spread
  over its training seeds (each seed's figure the mean over its sampling seeds);
- `training_seed_gains`: every group against every group before it where either has two or more
  training seeds, per figure of `compare.GAIN_FIGURES` (a difference; for the geometric-mean speedup a
  ratio, averaged geometrically over sampling seeds), each training seed's change paired on the same tasks
  and sampling seeds: with the other side a single model, every training seed against it; with both
  seeded, seed K against seed K. Per row, `pairs` is the spread of the change over every (training seed,
  sampling seed) pair, and `beyond_spread` says whether the mean change is larger than both standard
  deviations: the training seeds' and the pairs' (None with fewer than two training seeds). Two training
  seeds that gained alike have a spread of 0, so the training seeds' spread alone would call any such
  gain real however much the sampling seeds disagree; and every seeded group's best-of-turns against its
  first turn (`compare_table.REFINEMENT`'s figures), the same way. Each row also says, for a rate, its
  `room` (the largest mean change possible: 100% less the earlier side's mean, so a set the earlier
  model nearly solves cannot show a gain beyond a wider spread), and `tasks_needed`, an estimate of the
  tasks per run at which its gain would exceed both spreads (the spreads taken to fall with the square
  root of the tasks);
- `training_seeds_markdown`: both as tables.

Not covered: training the seeds (`train_h200.py --seed`, model_day.sh's `SEED`), the per-model table and
the sampling-seed changes (`train.compare_table`).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from cudaperf.train.compare_table import (
    COLUMNS,
    FIGURES,
    GAIN_FIGURES,
    PCT,
    RATIO_FIGURES,
    REFINEMENT,
    SeedRuns,
    Spread,
    change_cell,
    later_earlier,
    markdown_row,
    paired_changes,
    refinement_changes,
    set_names,
    spread,
)

SEED_MARK = re.compile(r"^(?P<group>.+)@seed(?P<seed>\d+)$")

Group = dict[int | None, str]
"""training seed (None: a model named without one) -> model name."""


def training_group(name: str) -> tuple[str, int | None]:
    """('rl', 1) for 'rl@seed1'; (name, None) for a name without a training seed."""
    m = SEED_MARK.match(name)
    return (m["group"], int(m["seed"])) if m else (name, None)


def policy_name(name: str) -> str:
    """The policy a model of the comparison is a training seed of (its own name when it is none)."""
    return training_group(name)[0]


def seed_groups(models: Sequence[str]) -> dict[str, Group]:
    """group -> its models by training seed, groups in the order of their first model."""
    groups: dict[str, Group] = {}
    for name in models:
        group, seed = training_group(name)
        members = groups.setdefault(group if seed is not None else name, {})
        if seed in members:
            raise ValueError(f"models {members[seed]!r} and {name!r} are the same training seed")
        members[seed] = name
    return groups


def _seeded(groups: dict[str, Group]) -> dict[str, Group]:
    return {g: members for g, members in groups.items() if len(members) > 1}


def _seed_mean(by_seed: dict[int, dict[str, Any]], figure: str) -> float | None:
    known = [run[figure] for run in by_seed.values() if run.get(figure) is not None]
    return statistics.fmean(known) if known else None


def training_seed_table(runs: SeedRuns) -> dict[str, dict[str, dict[str, Any]]]:
    """group -> set -> {'training_seeds', and per figure the spread over them}, for seeded groups."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for group, members in _seeded(seed_groups(list(runs))).items():
        for set_name in set_names(runs):
            present = {k: runs[m][set_name] for k, m in members.items() if runs[m].get(set_name)}
            if not present:
                continue
            row: dict[str, Any] = {"training_seeds": sorted(present)}
            for figure in FIGURES:
                row[figure] = asdict(spread([_seed_mean(present[k], figure) for k in sorted(present)]))
            table.setdefault(group, {})[set_name] = row
    return table


def _pairs(later: Group, earlier: Group) -> list[tuple[int | None, str, str]]:
    """(training seed, later model, earlier model) as the module docstring says."""
    if len(earlier) == 1:
        (only,) = earlier.values()
        return [(k, m, only) for k, m in _by_seed(later)]
    if len(later) == 1:
        (only,) = later.values()
        return [(k, only, m) for k, m in _by_seed(earlier)]
    return [(k, m, earlier[k]) for k, m in _by_seed(later) if k in earlier]


def _by_seed(members: Group) -> list[tuple[int | None, str]]:
    """A group's (training seed, model), the unnamed seed first."""
    return sorted(members.items(), key=lambda item: -1 if item[0] is None else item[0])


def _seed_change(pairs: list[float], ratio: bool) -> float:
    """A training seed's change over its sampling seeds: the mean (geometric for a ratio)."""
    return math.exp(statistics.fmean(map(math.log, pairs))) if ratio else statistics.fmean(pairs)


def _row(set_name: str, what: str, figure: str, seeds: list[int | None], per_seed: list[list[float]],
         neutral: float, room: float | None = None, tasks: int | None = None) -> dict[str, Any]:
    """One change's row from each training seed's changes over its sampling seeds (`per_seed`); `room`
    and `tasks` as `_room` and `_tasks` give them."""
    values = [_seed_change(pairs, neutral == 1.0) for pairs in per_seed]
    change = spread(values)
    pairs = spread([v for seed_pairs in per_seed for v in seed_pairs])
    beyond = None if change.n < 2 else (change.mean - neutral) > max(change.std, pairs.std)
    return {"set": set_name, "what": what, "figure": figure, "training_seeds": seeds, "neutral": neutral,
            "change": asdict(change), "pairs": asdict(pairs),
            "gain_every_training_seed": all(v > neutral for v in values), "beyond_spread": beyond,
            "room": room, "tasks": tasks, "tasks_needed": _tasks_needed(change, pairs, neutral, tasks)}


def _room(earlier: list[float], figure: str) -> float | None:
    """The largest mean change a rate can show over the earlier side's values (each at most 1: 100%);
    None for a ratio, which has no ceiling."""
    return None if figure in RATIO_FIGURES or not earlier else statistics.fmean(1.0 - v for v in earlier)


def _tasks(runs: list[dict[str, Any]]) -> int | None:
    """The tasks a run of the change held (the fewest over its runs; None where a run does not say)."""
    counts = [r.get("tasks") for r in runs]
    return None if not counts or None in counts else min(counts)


def _tasks_needed(change: Spread, pairs: Spread, neutral: float, tasks: int | None) -> int | None:
    """An estimate of the tasks a run would need for this mean change to exceed both spreads, were the
    change to hold on more tasks and the spreads to fall with the square root of the tasks (sampling
    noise over independent tasks does; a true difference between training seeds would not): None without
    a gain, a spread or a task count."""
    gain = None if change.mean is None else change.mean - neutral
    widest = max(change.std or 0.0, pairs.std or 0.0)
    if tasks is None or gain is None or gain <= 0 or widest == 0:
        return None
    return math.ceil(tasks * (widest / gain) ** 2)


def _group_gains(runs: SeedRuns, set_name: str, later: str, earlier: str, groups: dict[str, Group]
                 ) -> list[dict[str, Any]]:
    pairs = _pairs(groups[later], groups[earlier])
    rows = []
    for figure in GAIN_FIGURES:
        neutral = 1.0 if figure in RATIO_FIGURES else 0.0
        changes = [(k, b, a, paired_changes(runs[b].get(set_name, {}), runs[a].get(set_name, {}), figure))
                   for k, b, a in pairs]
        kept = [(k, b, a, found) for k, b, a, found in changes if found is not None]
        if kept:
            before = [runs[a][set_name][s][figure] for _, _, a, (seeds, _) in kept for s in seeds]
            ran = [runs[m][set_name][s] for _, b, a, (seeds, _) in kept for m in (b, a) for s in seeds]
            rows.append(_row(set_name, f"{later} vs {earlier}", figure, [k for k, *_ in kept],
                             [found[1] for *_, found in kept], neutral, _room(before, figure), _tasks(ran)))
    return rows


def _refinement(runs: SeedRuns, set_name: str, group: str, members: Group) -> list[dict[str, Any]]:
    """What later turns add per training seed, one row per figure of `REFINEMENT` that every seed's runs
    have: the mean over sampling seeds of each seed's change (a difference; a ratio averaged
    geometrically for `RATIO_FIGURES`)."""
    runs_of = [(k, runs[model].get(set_name, {})) for k, model in _by_seed(members)]
    runs_of = [(k, by_seed) for k, by_seed in runs_of if by_seed]
    rows = []
    what, seeds = f"{group}: best of turns vs first turn", [k for k, _ in runs_of]
    for figure in REFINEMENT if runs_of else ():
        per_seed = [refinement_changes(by_seed, figure) for _, by_seed in runs_of]
        if any(v is None for v in per_seed):
            continue
        first = [run[REFINEMENT[figure][1]] for _, by_seed in runs_of for run in by_seed.values()]
        ran = [run for _, by_seed in runs_of for run in by_seed.values()]
        rows.append(_row(set_name, what, figure, seeds, per_seed, 1.0 if figure in RATIO_FIGURES else 0.0,
                         _room(first, figure), _tasks(ran)))
    return rows


def training_seed_gains(runs: SeedRuns) -> list[dict[str, Any]]:
    """The changes of the module docstring, one row per set, comparison and figure."""
    groups = seed_groups(list(runs))
    names = list(groups)
    rows: list[dict[str, Any]] = []
    for set_name in set_names(runs):
        for later, earlier in later_earlier(names):
            if len(groups[later]) > 1 or len(groups[earlier]) > 1:
                rows += _group_gains(runs, set_name, later, earlier, groups)
        for group, members in _seeded(groups).items():
            rows += _refinement(runs, set_name, group, members)
    return rows


def training_seeds_markdown(table: dict[str, dict[str, dict[str, Any]]], rows: list[dict[str, Any]]) -> str:
    """The seeded groups' figures and their changes, as tables ('' when no group has two seeds)."""
    if not table and not rows:
        return ""
    head = ["set", "policy", "training seeds", *[label for _, label in COLUMNS]]
    lines = [markdown_row(head), markdown_row(["---"] * len(head))]
    for group, by_set in table.items():
        for set_name, row in sorted(by_set.items()):
            cells = [Spread(**row[name]).cell(name in PCT) for name, _ in COLUMNS]
            lines.append(markdown_row([set_name, group, len(row["training_seeds"]), *cells]))
    gains_head = ["set", "comparison", "figure", "training seeds", "change over training seeds",
                  "change over every seed pair", "a gain on every training seed",
                  "mean change beyond both spreads", "room", "tasks a run would need"]
    gains = [markdown_row(gains_head), markdown_row(["---"] * len(gains_head))]
    for r in rows:
        beyond = {True: "yes", False: "no", None: "-"}[r["beyond_spread"]]
        pairs = change_cell({"change": r["pairs"], "neutral": r["neutral"]})
        room = "-" if r.get("room") is None else f"{100 * r['room']:.1f} pt"
        needed = "-" if r.get("tasks_needed") is None else f"~{r['tasks_needed']} (ran {r['tasks']})"
        gains.append(markdown_row([r["set"], r["what"], r["figure"], len(r["training_seeds"]), change_cell(r),
                                   pairs, "yes" if r["gain_every_training_seed"] else "no", beyond, room,
                                   needed]))
    return ("\nOver training seeds (each training seed's figure the mean over its sampling seeds; cells: "
            "mean ± sample std (min–max) over training seeds).\n\n" + "\n".join(lines) + "\n\n"
            "Each training seed's change, paired on the same tasks and sampling seeds (pt: percentage "
            "points; the geometric-mean speedup as a ratio, 1 = none); over every seed pair: one change "
            "a (training seed, sampling seed). Beyond both spreads: the mean change over training seeds "
            "exceeds the standard deviation over training seeds and the one over seed pairs. Room: the "
            "largest mean change a rate could show (100% less the earlier side's rate): no model gains "
            "more on these tasks. Tasks a run would need: an estimate, "
            "for a gain, of the tasks per run at which it would exceed both spreads, were it to hold on "
            "more tasks and the spreads to fall with the square root of the tasks.\n\n"
            + "\n".join(gains) + "\n")


__all__ = ["SEED_MARK", "policy_name", "seed_groups", "training_group", "training_seed_gains",
           "training_seed_table", "training_seeds_markdown"]
