"""The comparison's figures and tables (issue 23 item 6), apart from running it (`train.compare`): what one
(model, set, sampling seed) run scored (`RunFigures`, `run_figures`), a figure's spread over seeds
(`Spread`), the per-model table (`table_from_runs`, `table_markdown`) and the changes paired over sampling
seeds (`paired_gains`, `gains_markdown`), and which trajectories' outcomes differ between two models on the
same task and sampling seed (`trajectory_outcomes`, `paired_outcomes`, `outcomes_markdown`: aggregate rates
can be equal while the tasks solved differ), and those outcomes counted by task family (`task_family`,
`family_outcomes`, `families_markdown`: a set whose families a model already solves leaves a later model
no room to gain there). `train.compare`'s docstring says what each figure means.

Not covered: running the comparison and reading its run directories (`train.compare`), training seeds
grouped as one policy (`train.training_seeds`).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class RunFigures:
    """What one (model, set, seed) run scored (see the module docstring)."""

    tasks: int
    trajectories: int
    turns: int
    first_turn_correct: float
    best_of_turns_correct: float
    correct_rate: float  # over all turns
    fast_1: float
    fast_1_sure: float  # fast_1 counting only speedups whose 95% lower bound is above 1.0
    first_turn_fast_1_sure: float  # the same from the first turns alone (before any feedback)
    speedup_geomean: float | None  # best kernels of solved tasks
    speedup_geomean_all: float  # every task, unsolved = 1.0
    first_turn_speedup_geomean_all: float  # the same from the first turns alone (before any feedback)
    structural_mean: float | None  # correct turns with a structural score
    flagged_rate: float  # turns with an anti-cheat violation
    no_code_rate: float
    mean_reward: float
    completion_tokens_per_turn: float


FIGURES = ("first_turn_correct", "best_of_turns_correct", "fast_1", "fast_1_sure", "first_turn_fast_1_sure",
           "speedup_geomean",
           "speedup_geomean_all", "first_turn_speedup_geomean_all", "structural_mean", "correct_rate",
           "flagged_rate", "no_code_rate", "mean_reward")
HEADLINE_FIGURES = ("first_turn_correct", "best_of_turns_correct", "fast_1", "fast_1_sure",
                    "speedup_geomean_all")
"""The figures a one-line summary of a comparison shows (the scripts' `RESULT` lines)."""


def run_figures(trajectories: Sequence[Any], task_ids: Sequence[str] | None = None) -> RunFigures:
    """The figures of one run's trajectories (`agent.trajectory.Trajectory`); `task_ids`: the run's
    tasks (a task without any trajectory counts as unsolved)."""
    from cudaperf.agent.summary import best_per_task
    from cudaperf.anticheat.policy import has_violation

    turns = [r for tr in trajectories for r in tr.turns]
    ids = sorted(set(task_ids or ()) | {tr.task_id for tr in trajectories})
    best, first = best_per_task(trajectories), best_per_task(trajectories, first_turn_only=True)
    solved = [b.speedup for b in best.values() if b.correct and b.speedup is not None and b.speedup > 0]
    structural = [r.reward_breakdown.details["structural_score"] for r in turns if r.correct
                  and r.reward_breakdown is not None and "structural_score" in r.reward_breakdown.details]
    return RunFigures(
        tasks=len(ids), trajectories=len(trajectories), turns=len(turns),
        first_turn_correct=_mean([float(tr.turns[0].correct) for tr in trajectories if tr.turns]),
        best_of_turns_correct=_mean([float(any(r.correct for r in tr.turns)) for tr in trajectories]),
        correct_rate=_mean([float(r.correct) for r in turns]),
        fast_1=sum(1 for s in solved if s > 1.0) / max(1, len(ids)),
        fast_1_sure=_sure_share(best, ids), first_turn_fast_1_sure=_sure_share(first, ids),
        speedup_geomean=math.exp(_mean([math.log(s) for s in solved])) if solved else None,
        speedup_geomean_all=_geomean_all(best, ids),
        first_turn_speedup_geomean_all=_geomean_all(first, ids),
        structural_mean=_mean(structural) if structural else None,
        flagged_rate=_mean([float(has_violation(r.result.flags)) for r in turns]),
        no_code_rate=_mean([float(r.code is None) for r in turns]),
        mean_reward=_mean([r.reward for r in turns]),
        completion_tokens_per_turn=_mean([float(r.completion_tokens) for r in turns]))


def _sure_share(best: dict[str, Any], ids: Sequence[str]) -> float:
    """The share of `ids` whose best turn in `best` is correct and surely faster than its baseline (the
    speedup's one-sided 95% bootstrap lower bound above 1.0x)."""
    from cudaperf.speedup_confidence import speedup_interval, surely_faster

    return sum(1 for b in best.values() if b.correct and b.speedup is not None
               and surely_faster(speedup_interval(b.result.timings, b.baseline))) / max(1, len(ids))


def _geomean_all(best: dict[str, Any], ids: Sequence[str]) -> float:
    """The geometric-mean speedup of each task's best turn in `best` over every task of `ids`, a task
    without a correct one counted 1.0 (it keeps its baseline)."""
    logs = [math.log(best[t].speedup) if t in best and best[t].correct and best[t].speedup
            and best[t].speedup > 0 else 0.0 for t in ids]
    return math.exp(_mean(logs)) if logs else 1.0


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True)
class Spread:
    """A figure over seeds: mean, sample standard deviation (0 for one seed), min, max, how many."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    n: int

    def cell(self, pct: bool) -> str:
        if self.mean is None:
            return "-"
        show = (lambda v: f"{100 * v:.1f}%") if pct else (lambda v: f"{v:.3f}")
        if self.n < 2:
            return show(self.mean)
        return f"{show(self.mean)} ± {show(self.std)} ({show(self.min)}–{show(self.max)})"


def spread(values: Sequence[float | None]) -> Spread:
    known = [v for v in values if v is not None]
    if not known:
        return Spread(None, None, None, None, 0)
    std = statistics.stdev(known) if len(known) > 1 else 0.0
    return Spread(statistics.fmean(known), std, min(known), max(known), len(known))




SeedRuns = dict[str, dict[str, dict[int, dict[str, Any]]]]
"""model -> set -> seed -> that run's figures (`RunFigures` as a dict), models in the comparison's order."""


def table_from_runs(runs: SeedRuns) -> dict[str, dict[str, dict[str, Any]]]:
    """model -> set -> `table_row` of its seeds' runs."""
    return {model: {set_name: table_row(sorted(by_seed), [by_seed[k] for k in sorted(by_seed)])
                    for set_name, by_seed in by_set.items() if by_seed}
            for model, by_set in runs.items()}


GAIN_FIGURES = ("first_turn_correct", "best_of_turns_correct", "speedup_geomean_all")
RATIO_FIGURES = {"speedup_geomean_all"}  # compared as later / earlier, not as a difference


def set_names(by_model: dict[str, dict[str, Any]]) -> list[str]:
    """Every set any model of `by_model` (model -> set -> ...) has, sorted."""
    return sorted({s for by_set in by_model.values() for s in by_set})


def later_earlier(names: Sequence[str], policy_of: Callable[[str], str] = str) -> list[tuple[str, str]]:
    """(later, earlier) for every name against every name before it, two that `policy_of` names alike
    (training seeds of one policy) left out."""
    return [(later, earlier) for i, later in enumerate(names) for earlier in names[:i]
            if policy_of(earlier) != policy_of(later)]


def change_cell(row: dict[str, Any]) -> str:
    """A paired change's spread as a cell: a ratio (neutral 1) as it is, a difference in points (pt)."""
    change = Spread(**row["change"])
    return change.cell(pct=False) if row["neutral"] == 1.0 else change.cell(pct=True).replace("%", " pt")


def paired_gains(runs: SeedRuns, policy_of: Callable[[str], str] = str) -> list[dict[str, Any]]:
    """What a model gains, seed by seed on the same tasks and sampling seed: every model against every
    model before it in `runs` (base, SFT, RL), per figure of `GAIN_FIGURES` (a difference; a ratio for the
    geometric-mean speedup), and every model's best-of-turns figures against its first-turn ones
    (`REFINEMENT`: what refinement adds). Each row: set, what, figure, seeds, the spread of
    the seeds' changes and whether every seed's is a gain. The seed spread of such a change is what a
    claimed gain must exceed. Two models that `policy_of` names alike (training seeds of one policy) are
    not compared with each other."""
    rows: list[dict[str, Any]] = []
    models = list(runs)
    for set_name in set_names(runs):
        for later, earlier in later_earlier(models, policy_of):
            rows += _model_gains(set_name, later, earlier, runs[later].get(set_name, {}),
                                 runs[earlier].get(set_name, {}))
        for model in models:
            rows += _refinement_gain(set_name, model, runs[model].get(set_name, {}))
    return rows


def _model_gains(set_name: str, later: str, earlier: str, b: dict[int, dict[str, Any]],
                 a: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for figure in GAIN_FIGURES:
        found = paired_changes(b, a, figure)
        if found is not None:
            seeds, values = found
            rows.append(_gain(set_name, f"{later} vs {earlier}", figure, seeds, values,
                              1.0 if figure in RATIO_FIGURES else 0.0))
    return rows


def paired_changes(b: dict[int, dict[str, Any]], a: dict[int, dict[str, Any]], figure: str
                   ) -> tuple[list[int], list[float]] | None:
    """(sampling seeds, the change in `figure` from `a`'s run to `b`'s on each): the seeds both ran with
    the figure, in order; a ratio for `RATIO_FIGURES`, else a difference. None when there is no such seed,
    or a ratio's side is not positive."""
    seeds = [k for k in sorted(set(a) & set(b))
             if a[k].get(figure) is not None and b[k].get(figure) is not None]
    if not seeds:
        return None
    if figure in RATIO_FIGURES:
        if any(a[k][figure] <= 0 or b[k][figure] <= 0 for k in seeds):
            return None
        return seeds, [b[k][figure] / a[k][figure] for k in seeds]
    return seeds, [b[k][figure] - a[k][figure] for k in seeds]


def _refinement_gain(set_name: str, model: str, by_seed: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """What later turns add, one row per figure of `REFINEMENT` that every seed's run has (runs from before
    the first-turn speed figures lack them)."""
    seeds = sorted(by_seed)
    what = f"{model}: best of turns vs first turn"
    rows = []
    for figure in REFINEMENT if seeds else ():
        values = refinement_changes(by_seed, figure)
        if values is not None:
            rows.append(_gain(set_name, what, figure, seeds, values, 1.0 if figure in RATIO_FIGURES else 0.0))
    return rows


REFINEMENT = {"correct": ("best_of_turns_correct", "first_turn_correct"),
              "fast_1_sure": ("fast_1_sure", "first_turn_fast_1_sure"),
              "speedup_geomean_all": ("speedup_geomean_all", "first_turn_speedup_geomean_all")}
"""What refinement adds, by row figure: (best-of-turns figure, first-turn figure). Both speed rows favour
the later turns by selection alone: the best of more candidates, each timed with noise, is faster on
average even when no later kernel is. The fast_1_sure row counts only speedups surely above 1.0x, so its
share of that is small; the geometric-mean ratio has it in full (a noise floor above 1.0)."""


def refinement_changes(by_seed: dict[int, dict[str, Any]], figure: str) -> list[float] | None:
    """Each seed's best-of-turns `figure` against its first-turn one (seeds in order): a ratio for
    `RATIO_FIGURES`, else a difference; None when a run lacks either figure."""
    later_name, first_name = REFINEMENT[figure]
    seeds = sorted(by_seed)
    later = [by_seed[k].get(later_name) for k in seeds]
    first = [by_seed[k].get(first_name) for k in seeds]
    if not seeds or None in later or None in first:
        return None
    if figure in RATIO_FIGURES:
        return None if any(f <= 0 for f in first) else [b / f for b, f in zip(later, first, strict=True)]
    return [b - f for b, f in zip(later, first, strict=True)]


def _gain(set_name: str, what: str, figure: str, seeds: list[int], values: list[float],
          neutral: float) -> dict[str, Any]:
    return {"set": set_name, "what": what, "figure": figure, "seeds": seeds, "neutral": neutral,
            "change": asdict(spread(values)), "gain_every_seed": all(v > neutral for v in values)}


def gains_markdown(rows: list[dict[str, Any]]) -> str:
    """`paired_gains` as a table: each change's mean ± sample std (min–max) over the seeds."""
    if not rows:
        return ""
    head = ["set", "comparison", "figure", "seeds", "change over seeds", "a gain on every seed"]
    lines = [markdown_row(head), markdown_row(["---"] * len(head))]
    for r in rows:
        lines.append(markdown_row([r["set"], r["what"], r["figure"], len(r["seeds"]), change_cell(r),
                                   "yes" if r["gain_every_seed"] else "no"]))
    return ("\nPaired over seeds (both sides on the same tasks with the same sampling seed): each seed's "
            "change, in percentage points (pt), or as a ratio for the geometric-mean speedup (1 = none).\n\n"
            + "\n".join(lines) + "\n")


def table_row(seeds: Sequence[int], figures: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One model and set of the table: each figure's spread over the seeds' runs (`RunFigures` as dicts)."""
    row: dict[str, Any] = {"seeds": list(seeds), "tasks": figures[0]["tasks"]}
    for name in FIGURES:
        row[name] = asdict(spread([f.get(name) for f in figures]))  # a run from before a figure: None
    return row


PCT = {"first_turn_correct", "best_of_turns_correct", "fast_1", "fast_1_sure", "first_turn_fast_1_sure",
       "correct_rate", "flagged_rate",
       "no_code_rate"}
COLUMNS = (("first_turn_correct", "first-turn correct"), ("best_of_turns_correct", "best-of-turns correct"),
           ("fast_1", "fast_1"), ("fast_1_sure", "fast_1 (95% sure)"),
           ("first_turn_fast_1_sure", "first-turn fast_1 (95% sure)"),
           ("speedup_geomean", "geomean x (solved)"),
           ("speedup_geomean_all", "geomean x (all, unsolved=1)"),
           ("first_turn_speedup_geomean_all", "first-turn geomean x (all)"),
           ("structural_mean", "structural"),
           ("flagged_rate", "anti-cheat flagged"))


def table_markdown(table: dict[str, dict[str, dict[str, Any]]], turns: int) -> str:
    """One row per model and set: mean ± std (min–max) over seeds."""
    head = ["set", "model", "seeds", "tasks", *[label for _, label in COLUMNS]]
    lines = [markdown_row(head), markdown_row(["---"] * len(head))]
    for set_name in set_names(table):
        for model, by_set in table.items():
            row = by_set.get(set_name)
            if row is None:
                continue
            cells = [Spread(**row[name]).cell(name in PCT) for name, _ in COLUMNS]
            lines.append(markdown_row([set_name, model, len(row["seeds"]), row["tasks"], *cells]))
    note = (f"\nBest of {turns} turns; cells: mean ± sample std (min–max) over seeds. fast_1 and geomean: "
            "the best kernel of each task against its baseline (eager for PyTorch tasks, the naive CUDA "
            "port for C tasks unless --baseline says otherwise). fast_1 (95% sure): only kernels whose "
            "speedup's bootstrap lower bound (one-sided 95%, over the timing samples) is above 1.0x.\n")
    return "\n".join(lines) + "\n" + note


def markdown_row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


# --------------------------------------------------------------------------------------------------
# Paired outcomes


SeedOutcomes = dict[str, dict[str, dict[int, dict[str, list]]]]
"""model -> set -> seed -> `trajectory_outcomes` of that run."""


def trajectory_outcomes(trajectories: Sequence[Any]) -> dict[str, list]:
    """'TASK#k' (the task's k-th trajectory of the run, by sample) -> [first turn correct, any turn
    correct, the first reply's sha256 prefix, its speedup, whether it is surely faster (both None unless
    it is correct and timed)]: what `paired_outcomes` compares across models."""
    out: dict[str, list] = {}
    seen: dict[str, int] = {}
    for tr in sorted(trajectories, key=lambda tr: (tr.task_id, tr.sample)):
        if not tr.turns:
            continue
        k = seen[tr.task_id] = seen.get(tr.task_id, -1) + 1
        first = tr.turns[0]
        reply = hashlib.sha256((first.response or "").encode()).hexdigest()[:16]
        out[f"{tr.task_id}#{k}"] = [first.correct, any(r.correct for r in tr.turns), reply, *_timed(first)]
    return out


def _timed(turn: Any) -> tuple[float | None, bool | None]:
    """A correct turn's speedup and whether it is surely faster; (None, None) for any other."""
    from cudaperf.speedup_confidence import speedup_interval, surely_faster

    if not (turn.correct and turn.speedup and turn.speedup > 0):
        return None, None
    return turn.speedup, surely_faster(speedup_interval(turn.result.timings, turn.baseline))


@dataclass(frozen=True)
class PairedOutcomes:
    """Two models' trajectories on the same task and sampling seed, over a set's seeds: how many pairs,
    how many first replies are the same text, and in how many pairs only one of the two is correct (at the
    first turn; at any turn). The same first reply timed in both runs measures the timing's own drift
    between them (another machine, another lease): the largest ratio of its two speedups (1.0 = none)
    and in how many of those pairs one run found it surely faster and the other not; 1.0 and none where
    the two runs shared one evaluation of the reply (one comparison's `share_repeated_answers`)."""

    pairs: int
    same_first_reply: int
    first_later_only: int
    first_earlier_only: int
    best_later_only: int
    best_earlier_only: int
    same_reply_timed: int = 0
    same_reply_ratio_max: float | None = None
    same_reply_sure_differs: int = 0


def paired_outcomes(outcomes: SeedOutcomes, policy_of: Callable[[str], str] = str) -> list[dict[str, Any]]:
    """Every model against every model of another policy before it, per set, summed over the seeds both
    ran: `PairedOutcomes` as a row with the set and the comparison."""
    rows = []
    for set_name in set_names(outcomes):
        for later, earlier in later_earlier(list(outcomes), policy_of):
            pairs = _pairs(outcomes[later].get(set_name, {}), outcomes[earlier].get(set_name, {}))
            if pairs:
                rows.append({"set": set_name, "what": f"{later} vs {earlier}", **asdict(_count(pairs))})
    return rows


def _pairs(later: dict[int, dict[str, list]], earlier: dict[int, dict[str, list]]) -> list[tuple[list, list]]:
    """(later's, earlier's) outcome of every trajectory both ran, seed by seed."""
    return [(later[seed][key], earlier[seed][key]) for seed in sorted(set(later) & set(earlier))
            for key in sorted(set(later[seed]) & set(earlier[seed]))]


def _count(pairs: list[tuple[list, list]]) -> PairedOutcomes:
    # outcomes kept before the speedups were (three entries) count as untimed
    timed = [(b, a) for b, a in pairs if b[2] == a[2] and len(b) > 4 and len(a) > 4
             and b[3] is not None and a[3] is not None]
    return PairedOutcomes(
        pairs=len(pairs), same_first_reply=sum(b[2] == a[2] for b, a in pairs),
        first_later_only=sum(b[0] and not a[0] for b, a in pairs),
        first_earlier_only=sum(a[0] and not b[0] for b, a in pairs),
        best_later_only=sum(b[1] and not a[1] for b, a in pairs),
        best_earlier_only=sum(a[1] and not b[1] for b, a in pairs),
        same_reply_timed=len(timed),
        same_reply_ratio_max=max((max(b[3] / a[3], a[3] / b[3]) for b, a in timed), default=None),
        same_reply_sure_differs=sum(b[4] != a[4] for b, a in timed))


def outcomes_markdown(rows: list[dict[str, Any]]) -> str:
    """`paired_outcomes` as a table ('' without rows)."""
    if not rows:
        return ""
    head = ["set", "comparison", "pairs", "same first reply", "first turn: only later correct",
            "only earlier", "any turn: only later correct", "only earlier",
            "same reply timed in both", "its largest speedup ratio", "surely faster in one only"]
    lines = [markdown_row(head), markdown_row(["---"] * len(head))]
    for r in rows:
        ratio = r.get("same_reply_ratio_max")
        lines.append(markdown_row([r["set"], r["what"], r["pairs"], r["same_first_reply"],
                                   r["first_later_only"], r["first_earlier_only"], r["best_later_only"],
                                   r["best_earlier_only"], r.get("same_reply_timed", 0),
                                   "-" if ratio is None else f"{ratio:.3f}",
                                   r.get("same_reply_sure_differs", 0)]))
    return ("\nPaired outcomes (each task and sampling seed both models ran, summed over seeds): equal rates "
            "can hide tasks one model solves and the other does not. The same first reply timed in both "
            "runs is the timing's own drift between them (none where one comparison evaluated it once for "
            "both).\n\n" + "\n".join(lines) + "\n")


def task_family(task: Any) -> str:
    """'KIND/FAMILY' of a task (`c/conv2d`, `pytorch/softmax`; '-' for a task without a family)."""
    kind = getattr(task.kind, "value", task.kind)
    return f"{kind}/{task.family or '-'}"


def family_outcomes(outcomes: SeedOutcomes, families: dict[str, str]) -> list[dict[str, Any]]:
    """Per set, family (`families`: task id -> `task_family`; '?' for a task it lacks) and model, summed
    over the seeds: how many trajectories, how many correct at the first turn and at any turn. Rows in
    family order, the models in `outcomes`' order; none without `families`."""
    if not families:
        return []
    order = list(outcomes)
    rows = []
    for set_name in set_names(outcomes):
        counts = _family_counts(outcomes, families, set_name)
        for family, model in sorted(counts, key=lambda fm: (fm[0], order.index(fm[1]))):
            n, first, best = counts[family, model]
            rows.append({"set": set_name, "family": family, "model": model, "trajectories": n,
                         "first_turn_correct": first, "any_turn_correct": best})
    return rows


def _family_counts(outcomes: SeedOutcomes, families: dict[str, str],
                   set_name: str) -> dict[tuple[str, str], list[int]]:
    """(family, model) -> [trajectories, first turn correct, any turn correct] in one set, over its seeds."""
    counts: dict[tuple[str, str], list[int]] = {}
    for model, by_set in outcomes.items():
        for by_key in by_set.get(set_name, {}).values():
            for key, (first, best, *_) in by_key.items():
                count = counts.setdefault((families.get(key.rpartition("#")[0], "?"), model), [0, 0, 0])
                count[0] += 1
                count[1] += bool(first)
                count[2] += bool(best)
    return counts


def families_markdown(rows: list[dict[str, Any]]) -> str:
    """`family_outcomes` as a table, a column a model ('' without rows)."""
    if not rows:
        return ""
    models = list(dict.fromkeys(r["model"] for r in rows))
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        cells.setdefault((r["set"], r["family"]), {})[r["model"]] = (
            f"{r['first_turn_correct']} of {r['trajectories']} (any turn {r['any_turn_correct']})")
    head = ["set", "family", *models]
    lines = [markdown_row(head), markdown_row(["---"] * len(head))]
    for (set_name, family), by_model in cells.items():
        lines.append(markdown_row([set_name, family, *(by_model.get(m, "") for m in models)]))
    return ("\nBy family (correct at the first turn of the trajectories run, summed over seeds): where a "
            "model already solves a family, a later one has no room to gain there.\n\n"
            + "\n".join(lines) + "\n")

