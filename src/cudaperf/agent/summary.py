"""Figures of a refinement run: per turn, per task, and where the time went.

Per turn t (0-based), over tasks: `solved` is the share of tasks with a correct kernel in turns <= t (any
of the K samples), `fast_p` the share whose best kernel so far is correct with a speedup above p over the
task's baseline (KernelBench's fast_p, taken over the best-so-far kernel of each task, so fast_0 = solved),
`best_speedup` the largest such speedup and `geomean_speedup` their geometric mean over solved tasks; over
the trajectories that made turn t: `attempts` and `correct_rate`.

Time is reported per round (one turn of every active trajectory; in a run that was not resumed, round t
is turn t): its wall time split into prompt building, generation, evaluation and the loop's own work, and
the evaluation's candidate-seconds split into build, correctness and timing (`evaluation_split`: summed
over the round's candidates from the evaluator's stage durations, so they overlap in wall time).

Not covered: running (`loop.py`), HTML pages (`cudaperf.report`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cudaperf.agent.trajectory import Trajectory, TurnRecord, best_turn, rank_key
from cudaperf.stats import geomean
from cudaperf.types import EvalResult

FAST_P = (0.0, 1.0, 1.2, 1.5, 2.0)
CORRECTNESS_STAGES = ("setup", "reference", "import", "construct", "correctness")
TIMING_STAGES = ("timing_prep", "timing", "coverage")


@dataclass(frozen=True)
class TurnMetrics:
    turn: int
    attempts: int  # trajectories that made this turn
    correct_rate: float  # of those attempts
    solved: float  # tasks with a correct kernel in turns <= t
    fast_p: dict[str, float]  # "1.2" -> share of tasks
    best_speedup: float | None
    geomean_speedup: float | None
    mean_reward: float
    prompt_tokens_mean: float
    completion_tokens_mean: float
    extraction: dict[str, int] = field(default_factory=dict)  # extraction outcome -> count
    outcomes: dict[str, int] = field(default_factory=dict)  # evaluation outcome -> count


def turn_metrics(trajectories: Sequence[Trajectory], turns: int | None = None,
                 thresholds: Sequence[float] = FAST_P) -> list[TurnMetrics]:
    """One `TurnMetrics` per turn (see the module docstring); tasks are the distinct task ids."""
    turns = turns or max((len(t.turns) for t in trajectories), default=0)
    task_ids = sorted({t.task_id for t in trajectories})
    return [_metrics(trajectories, task_ids, t, thresholds) for t in range(turns)]


def _metrics(trajectories: Sequence[Trajectory], task_ids: list[str], turn: int,
             thresholds: Sequence[float]) -> TurnMetrics:
    at_turn = [tr.turns[turn] for tr in trajectories if len(tr.turns) > turn]
    best = _best_so_far(trajectories, task_ids, turn)
    speedups = [b.speedup for b in best.values() if b is not None and b.correct and b.speedup is not None]
    n_tasks = max(1, len(task_ids))
    fast = {f"{p:g}": sum(1 for b in best.values() if b is not None and b.correct
                          and (p == 0 or (b.speedup is not None and b.speedup > p))) / n_tasks
            for p in thresholds}
    return TurnMetrics(
        turn=turn, attempts=len(at_turn), correct_rate=_share(r.correct for r in at_turn),
        solved=fast.get("0", 0.0), fast_p=fast, best_speedup=max(speedups) if speedups else None,
        geomean_speedup=geomean(speedups), mean_reward=_mean(r.reward for r in at_turn),
        prompt_tokens_mean=_mean(r.prompt_tokens for r in at_turn),
        completion_tokens_mean=_mean(r.completion_tokens for r in at_turn),
        extraction=_count(r.extraction for r in at_turn),
        outcomes=_count(r.result.outcome.value for r in at_turn))


def _best_so_far(trajectories: Sequence[Trajectory], task_ids: list[str],
                 turn: int) -> dict[str, TurnRecord | None]:
    out: dict[str, TurnRecord | None] = {t: None for t in task_ids}
    for tr in trajectories:
        candidate = best_turn(tr.turns[: turn + 1])
        current = out[tr.task_id]
        if candidate is not None and (current is None or rank_key(candidate) > rank_key(current)):
            out[tr.task_id] = candidate
    return out


def evaluation_split(results: Sequence[EvalResult]) -> dict[str, float]:
    """Candidate-seconds of build (the compile itself), correctness (setup, reference, import, construct,
    correctness stages) and timing (timing_prep, timing, coverage), summed over `results`."""
    def stages(names: Sequence[str]) -> float:
        return sum(r.stage_durations_s.get(n, 0.0) for r in results for n in names)

    return {"build_s": sum(r.build.duration_s for r in results if r.build is not None),
            "correctness_s": stages(CORRECTNESS_STAGES), "timing_s": stages(TIMING_STAGES)}


def best_per_task(trajectories: Sequence[Trajectory], first_turn_only: bool = False) -> dict[str, TurnRecord]:
    """The best turn of each task over all its samples and turns (`first_turn_only`: over the samples'
    first turns alone, what the task had before any feedback)."""
    out: dict[str, TurnRecord] = {}
    for tr in trajectories:
        b = best_turn(tr.turns[:1]) if first_turn_only else tr.best()
        if b is not None and (tr.task_id not in out or rank_key(b) > rank_key(out[tr.task_id])):
            out[tr.task_id] = b
    return out


def write_best_kernels(trajectories: Sequence[Trajectory], directory: Path) -> list[Path]:
    """`<directory>/<task_id>.py` for every task whose best turn has code, with a header comment saying
    which turn it is and how it did."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for task_id, b in sorted(best_per_task(trajectories).items()):
        if not b.code:
            continue
        speed = f", {b.speedup:.3f}x over {b.baseline}" if b.speedup is not None else ""
        header = (f"# cudaperf-task: {task_id}\n# best of the run: sample {b.sample}, turn {b.turn + 1}, "
                  f"{b.result.outcome.value}{speed}, reward {b.reward:.3f}\n")
        path = directory / f"{_safe(task_id)}.py"
        path.write_text(header + b.code)
        written.append(path)
    return written


def summary_dict(trajectories: Sequence[Trajectory], rounds: Sequence = (), turns: int | None = None) -> dict:
    """Everything worth keeping of a run as JSON-ready data: per-turn metrics, per-task best, rounds."""
    best = best_per_task(trajectories)
    return {
        "tasks": len({t.task_id for t in trajectories}), "trajectories": len(trajectories),
        "turns": [_plain(asdict(m)) for m in turn_metrics(trajectories, turns)],
        "best": {k: {"sample": b.sample, "turn": b.turn, "outcome": b.result.outcome.value,
                     "speedup": b.speedup, "baseline": b.baseline, "reward": b.reward}
                 for k, b in best.items()},
        "rounds": [_plain({**asdict(r), "overhead_s": r.overhead_s, "overhead_fraction": r.overhead_fraction})
                   for r in rounds],
    }


def markdown(summary: dict) -> str:
    """The per-turn table and the rounds' time split as markdown."""
    ps = list(summary["turns"][0]["fast_p"]) if summary["turns"] else []
    head = ["turn", "attempts", "correct", *[f"fast_{p}" for p in ps], "best x", "geomean x", "reward",
            "prompt tok", "reply tok"]
    lines = [_row(head), _row(["---"] * len(head))]
    for m in summary["turns"]:
        lines.append(_row([m["turn"] + 1, m["attempts"], _pct(m["correct_rate"]),
                           *[_pct(m["fast_p"][p]) for p in ps], _x(m["best_speedup"]),
                           _x(m["geomean_speedup"]), f"{m['mean_reward']:.3f}",
                           f"{m['prompt_tokens_mean']:.0f}", f"{m['completion_tokens_mean']:.0f}"]))
    if summary.get("rounds"):
        head = ["round", "trajectories", "wall s", "prompts s", "generate s", "evaluate s", "loop s",
                "overhead", "build cs", "correctness cs", "timing cs"]
        lines += ["", _row(head), _row(["---"] * len(head))]
        for r in summary["rounds"]:
            lines.append(_row([r["round"] + 1, r["trajectories"], f"{r['wall_s']:.2f}",
                               f"{r['context_s']:.3f}", f"{r['generate_s']:.2f}", f"{r['evaluate_s']:.2f}",
                               f"{r['loop_s']:.3f}", _pct(r["overhead_fraction"]), f"{r['build_s']:.2f}",
                               f"{r['correctness_s']:.2f}", f"{r['timing_s']:.2f}"]))
        note = "(cs: candidate-seconds, summed over the round's candidates; they overlap in wall time)"
        lines += ["", note]
    return "\n".join(lines) + "\n"


def write_summary(summary: dict, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True, allow_nan=False))
    (directory / "summary.md").write_text(markdown(summary))


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _share(flags) -> float:
    flags = list(flags)
    return sum(flags) / len(flags) if flags else 0.0


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _plain(d: dict) -> dict:
    """NaN and infinities out (JSON has none)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def _safe(task_id: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in task_id)
