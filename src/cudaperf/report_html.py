"""One self-contained HTML page for evaluation results and refinement trajectories (`cudaperf report --html`).

Covers: reading results JSONL (`EvalResult` lines) and trajectory JSONL (one turn per line) from any mix of
files; for results, the summary, fast_p and outcome tables of `cudaperf.report` with a fast_p bar chart
and a speedup histogram; for trajectories, fast_p of the best kernel so far per turn, the best speedup and
the mean reward per turn, a table of trajectories, and each trajectory turn by turn: the kernel, its diff
from the previous turn's kernel, the feedback, the reward, the reply and the prompt. Charts are inline
SVG drawn here (a few dozen lines; no plotting dependency), styles and script are inline: the file opens
offline, from disk, with nothing fetched. The script only sorts tables, filters and folds trajectories;
the page reads fully without it. It marks `<html data-report-ready="1">` once it ran, and records any
script error in `data-js-error`, so a headless browser can check it.

Training runs (`cudaperf train sft|rl` output directories, or their `metrics.jsonl`) get training curves
over optimiser steps: the rollouts' reward and each unified-reward component, correct rates (all turns,
first turn, best of turns), the geometric-mean speedup, the share of turns flagged by anti-cheat in all
and per flagged kind (every kind named in a table), tokens per turn, the time split of each step into
generation, evaluation and the optimiser (the trainer's step time less the rollout), and the trainer's
loss (SFT's eval loss too). The keys read are those `cudaperf.train` writes (`ROLLOUT_KEYS`).

A trajectory line is a JSON object with the keys `task_id`, `sample`, `turn` and `response` (plus `prompt`,
`code`, `result` (an `EvalResult` dict), `reward`, `feedback`, and optionally `speedup`, `baseline`,
`finish_reason`, `prompt_tokens`, `completion_tokens`, `durations_s`); any other line is read as an
`EvalResult`. Lines that are neither are counted and named on the page, never fatal. A directory (its
metrics.jsonl, or its one *metrics.jsonl) or a file whose name ends in metrics.jsonl (`rl_metrics.jsonl`)
is a training run: one JSON record per line with `kind` and `step`; a folder with no such file is named on
the page as unreadable, not drawn.

Not covered: computing fast_p and tables (`cudaperf.report`), writing trajectories (`cudaperf.agent`),
images (a PNG needs a browser or matplotlib; the page is the artefact).
"""

from __future__ import annotations

import difflib
import html
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cudaperf.report import (
    BASELINES,
    FAST_P_THRESHOLDS,
    Table,
    fast_p,
    report_tables,
    speedup,
    speedup_histogram,
)
from cudaperf.types import EvalResult, Outcome, from_dict

TURN_KEYS = ("task_id", "sample", "turn", "response")  # a JSON line with all of these is a trajectory turn
TURN_FAST_P = (0.0, 1.0, 1.5)  # thresholds drawn per turn (0 = correct at all)
MAX_TRAJECTORIES = 200  # trajectories drawn turn by turn; the table lists all of them


# -- inputs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnView:
    """One turn of a trajectory, as read from its JSON line."""

    task_id: str
    sample: int
    turn: int
    response: str
    code: str | None
    result: EvalResult | None
    reward: float | None
    feedback: str
    speedup: float | None  # the line's own `speedup` (over `baseline`), else eager speedup if correct
    baseline: str
    prompt: tuple[tuple[str, str], ...]  # (role, content)
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None
    durations_s: tuple[tuple[str, float], ...]

    @property
    def correct(self) -> bool:
        return self.result is not None and self.result.correct

    @property
    def outcome(self) -> str:
        return self.result.outcome.value if self.result is not None else "no result"


@dataclass(frozen=True)
class TrajectoryView:
    task_id: str
    sample: int
    turns: tuple[TurnView, ...]

    def best(self, upto: int | None = None) -> TurnView | None:
        """The best turn among turns 0..upto: correct first, then speedup, then reward, then earlier."""
        turns = [t for t in self.turns if upto is None or t.turn <= upto]
        return max(turns, key=_rank, default=None)


def _rank(t: TurnView) -> tuple:
    return (t.correct, t.speedup is not None, t.speedup or 0.0, t.reward or 0.0, -t.turn)


@dataclass(frozen=True)
class TrainingRun:
    """The metric records of one training run (metrics.jsonl), in file order."""

    name: str
    records: tuple[dict, ...]

    def of_kind(self, kind: str) -> dict[int, dict]:
        """step -> the last record of `kind` at that step (a resumed run rewrites steps: the last wins)."""
        out: dict[int, dict] = {}
        for r in self.records:
            if r.get("kind") == kind and isinstance(r.get("step"), int):
                out[r["step"]] = {**out.get(r["step"], {}), **r}
        return dict(sorted(out.items()))


@dataclass(frozen=True)
class ReportInputs:
    results: tuple[EvalResult, ...] = ()
    turns: tuple[TurnView, ...] = ()
    bad_lines: tuple[str, ...] = ()  # "file:line" of lines that were neither
    sources: tuple[str, ...] = ()
    training: tuple[TrainingRun, ...] = ()


METRICS_FILE = "metrics.jsonl"


def is_training_metrics(path: Path) -> bool:
    """A run directory, or a file named metrics.jsonl or ending so (`rl_metrics.jsonl`, as a copied run's
    records are often named beside other runs')."""
    return path.is_dir() or path.name.endswith(METRICS_FILE)


def metrics_file(path: Path) -> Path:
    """The records of the run at `path`: the file itself, or a directory's metrics.jsonl, else its one
    file named *metrics.jsonl (a run's folder as results keep it); else the metrics.jsonl that is not
    there (read as no lines, and named unreadable)."""
    if not path.is_dir():
        return path
    own = path / METRICS_FILE
    others = sorted(path.glob(f"*{METRICS_FILE}"))
    return others[0] if not own.is_file() and len(others) == 1 else own


def read_training_run(path: str | Path) -> tuple[TrainingRun, list[str]]:
    """A training run from its directory or its metrics file (`metrics_file`); also the unreadable lines
    ("file:line"), and "DIR: no metrics.jsonl" when there are no records to read."""
    path = Path(path)
    file = metrics_file(path)
    name = (file.parent.name if file.name == METRICS_FILE or path.is_dir() else file.stem) or str(file)
    records, bad = [], []
    lines = file.read_bytes().split(b"\n") if file.is_file() else []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if isinstance(record, dict) and "kind" in record:
            records.append(_speedup_defined(record))
        else:
            bad.append(f"{file.name}:{number}")
    if not file.is_file():
        bad.append(f"{path.name}: no {METRICS_FILE}")
    return TrainingRun(name, tuple(records)), bad


def _speedup_defined(record: dict) -> dict:
    """A rollout record with no correct turn has no speedup geomean: the trainer wrote 0.0 for it before
    it wrote None, and 0.0 would be drawn as a 0x step."""
    kind, correct, speedup = record.get("kind"), record.get("correct_rate"), record.get("speedup_geomean")
    zero = kind == "rollout" and correct == 0 and speedup == 0
    return {**record, "speedup_geomean": None} if zero else record


def read_inputs(paths: Iterable[str | Path]) -> ReportInputs:
    results: list[EvalResult] = []
    turns: list[TurnView] = []
    bad: list[str] = []
    sources = []
    training: list[TrainingRun] = []
    for path in map(Path, paths):
        sources.append(str(path))
        if is_training_metrics(path):
            run, unreadable = read_training_run(path)
            training += [run] if metrics_file(path).is_file() else []  # a run with no step yet is drawn
            bad += unreadable
            continue
        for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
            if not raw.strip():
                continue
            item = parse_line(raw)
            if isinstance(item, TurnView):
                turns.append(item)
            elif isinstance(item, EvalResult):
                results.append(item)
            else:
                bad.append(f"{path.name}:{number}")
    return ReportInputs(tuple(results), tuple(turns), tuple(bad), tuple(sources), tuple(training))


def parse_line(raw: bytes | str) -> TurnView | EvalResult | None:
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            return None
        if all(k in data for k in TURN_KEYS):
            return turn_from_dict(data)
        result = from_dict(EvalResult, data)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return result if isinstance(result.task_id, str) and isinstance(result.solution_id, str) else None


def turn_from_dict(data: dict) -> TurnView:
    result = from_dict(EvalResult, data["result"]) if isinstance(data.get("result"), dict) else None
    own = data.get("speedup")
    if own is None and result is not None and result.correct:
        own = result.speedup_vs_eager
    prompt = tuple((str(m.get("role", "")), str(m.get("content", "")))
                   for m in data.get("prompt") or () if isinstance(m, dict))
    durations = data.get("durations_s") or {}
    return TurnView(
        task_id=str(data["task_id"]), sample=int(data["sample"]), turn=int(data["turn"]),
        response=str(data["response"]), code=data.get("code"), result=result,
        reward=finite_number(data.get("reward")), feedback=str(data.get("feedback") or ""),
        speedup=finite_number(own), baseline=str(data.get("baseline") or "eager"), prompt=prompt,
        finish_reason=str(data.get("finish_reason") or ""), prompt_tokens=data.get("prompt_tokens"),
        completion_tokens=data.get("completion_tokens"),
        durations_s=tuple((str(k), float(v)) for k, v in durations.items() if finite_number(v) is not None),
    )


def finite_number(value) -> float | None:
    """A record's value as a float; None for anything else (text, a bool, NaN, an infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def group_turns(turns: Iterable[TurnView]) -> list[TrajectoryView]:
    """Turns grouped by (task, sample) in turn order; a re-written turn (a resumed run) wins."""
    by_key: dict[tuple[str, int], dict[int, TurnView]] = {}
    for t in turns:
        by_key.setdefault((t.task_id, t.sample), {})[t.turn] = t
    return [TrajectoryView(task, sample, tuple(v for _, v in sorted(found.items())))
            for (task, sample), found in sorted(by_key.items())]


# -- per-turn figures --------------------------------------------------------------------------------


def turns_axis(trajectories: Sequence[TrajectoryView]) -> list[int]:
    return list(range(1 + max((t.turn for tr in trajectories for t in tr.turns), default=-1)))


def best_so_far_fast_p(trajectories: Sequence[TrajectoryView], p: float) -> list[float]:
    """Per turn t: share of trajectories whose best kernel among turns 0..t is correct with speedup > p
    (p = 0: correct at all). A trajectory that stopped early keeps its best for the later turns."""
    if not trajectories:
        return []
    out = []
    for t in turns_axis(trajectories):
        hits = 0
        for tr in trajectories:
            best = tr.best(upto=t)
            if best is not None and best.correct and (p == 0 or (best.speedup or 0.0) > p):
                hits += 1
        out.append(hits / len(trajectories))
    return out


def best_speedup_per_turn(trajectories: Sequence[TrajectoryView]) -> list[float | None]:
    """Per turn: geometric mean of the best-so-far speedups of the trajectories correct and timed by then."""
    out: list[float | None] = []
    for t in turns_axis(trajectories):
        values = [b.speedup for tr in trajectories if (b := tr.best(upto=t)) is not None
                  and b.correct and b.speedup]
        out.append(math.exp(sum(map(math.log, values)) / len(values)) if values else None)
    return out


def mean_reward_per_turn(trajectories: Sequence[TrajectoryView]) -> list[float | None]:
    """Per turn: mean reward of the turns that exist and carry a reward."""
    out: list[float | None] = []
    for t in turns_axis(trajectories):
        values = [x.reward for tr in trajectories for x in tr.turns if x.turn == t and x.reward is not None]
        out.append(sum(values) / len(values) if values else None)
    return out


# -- SVG charts --------------------------------------------------------------------------------------

PALETTE = ("#3b6fb6", "#e07b39", "#4a9a5b", "#b04a8c", "#7a6a3a", "#c0392b", "#16a0a0", "#7f7f7f")
W, H, LEFT, BOTTOM, TOP = 560, 240, 48, 36, 28  # px; the plot area is inside these margins


def nice_range(values: Iterable[float], y_max: float | None = None,
               counts: bool = False) -> tuple[float, float]:
    """(low, high) of a y axis: from min(0, values) to `y_max` or the peak rounded up to 1, 2, 2.5 or 5 times
    a power of ten (a multiple of 4 for counts, so the five grid lines fall on whole numbers)."""
    values = list(values)
    low = min([0.0, *values])
    peak = y_max if y_max is not None else max([0.0, *values])
    if counts:
        return low, float(4 * math.ceil(max(peak, 1.0) / 4))
    if peak <= 0:
        return low, 1.0
    scale = 10 ** math.floor(math.log10(peak))
    return low, next(m * scale for m in (1, 2, 2.5, 5, 10) if m * scale >= peak - 1e-12)


def _frame(title: str, y_range: tuple[float, float], y_label) -> list[str]:
    parts = [(f'<svg class="chart" viewBox="0 0 {W} {H}" '
              f'width="{W}" height="{H}" role="img" aria-label="{_e(title)}">'),
             f'<text x="{W / 2}" y="16" text-anchor="middle" class="ctitle">{_e(title)}</text>']
    low, high = y_range
    for k in range(5):
        value = low + (high - low) * k / 4
        y = _y(value, y_range)
        parts.append(f'<line x1="{LEFT}" x2="{W - 8}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{_e(y_label(value))}</text>')
    return parts


def _y(value: float, y_range: tuple[float, float]) -> float:
    low, high = y_range
    return H - BOTTOM - (H - BOTTOM - TOP) * ((value - low) / (high - low) if high > low else 0)


def _legend(names: Sequence[str]) -> list[str]:
    return [f'<rect x="{LEFT + 8 + 120 * i}" y="{TOP - 6}" width="10" height="10" '
            f'fill="{PALETTE[i % len(PALETTE)]}"/>'
            f'<text x="{LEFT + 22 + 120 * i}" y="{TOP + 3}">{_e(n)}</text>' for i, n in enumerate(names)]


def bar_chart(title: str, categories: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]],
              y_max: float | None = None, y_label=lambda v: f"{v:g}", counts: bool = False) -> str:
    """Grouped bars; each bar carries `data-series`, `data-category` and `data-value` (for tests)."""
    y_range = nice_range((v for _, vs in series for v in vs if v is not None), y_max, counts)
    parts = _frame(title, y_range, y_label) + (_legend([n for n, _ in series]) if len(series) > 1 else [])
    slot = (W - 8 - LEFT) / max(1, len(categories))
    width = slot * 0.8 / max(1, len(series))
    for c, category in enumerate(categories):
        x0 = LEFT + slot * c + slot * 0.1
        for s, (name, values) in enumerate(series):
            value = values[c]
            if value is None:
                continue
            y, base = sorted((_y(value, y_range), _y(0.0, y_range)))
            parts.append(f'<rect x="{x0 + s * width:.1f}" y="{y:.1f}" width="{width - 1:.1f}" '
                         f'height="{base - y:.1f}" fill="{PALETTE[s % len(PALETTE)]}" '
                         f'data-series="{_e(name)}" data-category="{_e(category)}" data-value="{value:.6g}">'
                         f'<title>{_e(name)} {_e(category)}: {_e(y_label(value))}</title></rect>')
        parts.append(f'<text x="{x0 + slot * 0.4:.1f}" y="{H - BOTTOM + 14}" text-anchor="middle">'
                     f'{_e(category)}</text>')
    return "".join(parts) + "</svg>"


def line_chart(title: str, x_labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]],
               y_max: float | None = None, y_label=lambda v: f"{v:g}", max_labels: int = 12) -> str:
    """Lines with a dot per point; each dot carries `data-series`, `data-x` and `data-value`. At most
    about `max_labels` x labels are written (every k-th), so long runs stay legible."""
    y_range = nice_range((v for _, vs in series for v in vs if v is not None), y_max)
    parts = _frame(title, y_range, y_label) + _legend([n for n, _ in series])
    step = (W - LEFT - 60) / max(1, len(x_labels) - 1)  # room for the last label's half
    xs = [LEFT + 20 + step * i for i in range(len(x_labels))]
    every = max(1, math.ceil(len(x_labels) / max_labels))
    for i, label in enumerate(x_labels):
        if i % every == 0 or i == len(x_labels) - 1:
            parts.append(f'<text x="{xs[i]:.1f}" y="{H - BOTTOM + 14}" text-anchor="middle">'
                         f'{_e(label)}</text>')
    for s, (name, values) in enumerate(series):
        color = PALETTE[s % len(PALETTE)]
        points = [(xs[i], _y(v, y_range), v) for i, v in enumerate(values) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for (x, y, v), label in zip(points, [x_labels[i] for i, v in enumerate(values) if v is not None]):
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}" data-series="{_e(name)}" '
                         f'data-x="{_e(label)}" data-value="{v:.6g}"><title>{_e(name)} at {_e(label)}: '
                         f'{_e(y_label(v))}</title></circle>')
    return "".join(parts) + "</svg>"


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%"


# -- HTML pieces -------------------------------------------------------------------------------------


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def table_html(table: Table, css_class: str = "sortable") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in table.headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    return (f'<table class="{css_class}"><caption>{_e(table.title)}</caption><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def results_section(results: Sequence[EvalResult]) -> str:
    if not results:
        return ""
    fast = [(f"vs {b}", [fast_p(results, p, b) for p in FAST_P_THRESHOLDS]) for b in BASELINES]
    charts = [bar_chart("fast_p: share of all results correct with speedup > p",
                        [f"p={p:g}" for p in FAST_P_THRESHOLDS], fast, 1.0, _pct)]
    for baseline in BASELINES:
        if any(r.correct and speedup(r, baseline) is not None for r in results):
            bins = speedup_histogram(results, baseline)
            labels = [f"<{b.hi:.2g}" if b.lo == 0 else (f"≥{b.lo:.2g}" if math.isinf(b.hi) else f"{b.lo:.2g}")
                      for b in bins]
            charts.append(bar_chart(f"speedup vs {baseline} (correct results per log bin)", labels,
                                    [("results", [b.count for b in bins])], y_label=lambda v: f"{v:.0f}",
                                    counts=True))
    tables = "".join(table_html(t) for t in report_tables(results) if not t.preformatted)
    return (f'<section id="results"><h2>Evaluation results ({len(results)})</h2>'
            f'<div class="charts">{"".join(charts)}</div>{tables}</section>')


def trajectories_section(trajectories: Sequence[TrajectoryView], max_detailed: int) -> str:
    if not trajectories:
        return ""
    x = [f"turn {t}" for t in turns_axis(trajectories)]
    fast = [(f"fast_{p:g}" if p else "correct", best_so_far_fast_p(trajectories, p)) for p in TURN_FAST_P]
    charts = [
        line_chart("best kernel so far: share of trajectories", x, fast, 1.0, _pct),
        line_chart("best speedup so far (geomean over correct trajectories)", x,
                   [("speedup", best_speedup_per_turn(trajectories))], y_label=lambda v: f"{v:.2f}x"),
        line_chart("mean reward per turn", x, [("reward", mean_reward_per_turn(trajectories))],
                   y_label=lambda v: f"{v:.2f}"),
    ]
    shown = trajectories[:max_detailed]
    # The trajectory with the best kernel is drawn open: the page shows one turn-by-turn story at a glance.
    showcase = max(shown, key=lambda tr: _rank(tr.best()) if tr.turns else (), default=None)
    more = (f'<p class="note">{len(trajectories) - len(shown)} more trajectories are in the table but not '
            f"drawn turn by turn (limit {max_detailed}).</p>" if len(shown) < len(trajectories) else "")
    controls = ('<div class="controls"><input id="filter" type="search" placeholder="filter by task">'
                '<button type="button" id="open-all">open all</button>'
                '<button type="button" id="close-all">close all</button></div>')
    return (f'<section id="trajectories"><h2>Trajectories ({len(trajectories)})</h2>'
            f'<div class="charts">{"".join(charts)}</div>{trajectory_table(trajectories)}{controls}'
            f'{"".join(trajectory_html(t, opened=t is showcase) for t in shown)}{more}</section>')


def _chip(t: TurnView) -> str:
    reward = "-" if t.reward is None else f"{t.reward:.2f}"
    return f'<span class="chip {_outcome_class(t)}" title="{_e(t.outcome)}">{t.turn}: {reward}</span>'


def _outcome_class(t: TurnView) -> str:
    if t.result is None:
        return "none"
    if t.correct:
        return "ok"
    return "wrong" if t.result.outcome is Outcome.INCORRECT else "fail"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def trajectory_table(trajectories: Sequence[TrajectoryView]) -> str:
    rows = []
    for tr in trajectories:
        best = tr.best()
        rows.append(
            f'<tr><td><a href="#{_anchor(tr)}">{_e(tr.task_id)}</a></td><td>{tr.sample}</td>'
            f"<td>{len(tr.turns)}</td><td>{best.turn if best else '-'}</td>"
            f"<td>{_e(best.outcome if best else '-')}</td><td>{_x(best.speedup if best else None)}</td>"
            f'<td>{"".join(_chip(t) for t in tr.turns)}</td></tr>')
    head = "".join(f"<th>{h}</th>" for h in ("task", "sample", "turns", "best turn", "best outcome",
                                              "best speedup", "turn: reward"))
    return (f'<table class="sortable" id="trajectory-table"><caption>Trajectories (best turn: correct first, '
            f"then speedup)</caption><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _anchor(tr: TrajectoryView) -> str:
    return "traj-" + "".join(c if c.isalnum() else "-" for c in tr.task_id) + f"-{tr.sample}"


def trajectory_html(tr: TrajectoryView, opened: bool = False) -> str:
    previous: str | None = None
    turns = []
    for t in tr.turns:
        turns.append(turn_html(t, previous))
        previous = t.code if t.code is not None else previous
    best = tr.best()
    summary = (f"{_e(tr.task_id)} · sample {tr.sample} · {len(tr.turns)} turns · best: "
               f"{_e(best.outcome if best else '-')} {_x(best.speedup if best else None)}")
    return (f'<details class="trajectory" id="{_anchor(tr)}" data-task="{_e(tr.task_id)}"{" open" * opened}>'
            f"<summary>{summary}</summary>{''.join(turns)}</details>")


def turn_html(t: TurnView, previous_code: str | None) -> str:
    reward = "-" if t.reward is None else f"{t.reward:.3f}"
    facts = [f"outcome <b>{_e(t.outcome)}</b>", f"reward <b>{reward}</b>",
             f"speedup vs {_e(t.baseline)} <b>{_x(t.speedup)}</b>"]
    if t.prompt_tokens is not None or t.completion_tokens is not None:
        facts.append(f"tokens {t.prompt_tokens or 0} in / {t.completion_tokens or 0} out")
    if t.finish_reason:
        facts.append(f"finish {_e(t.finish_reason)}")
    if t.durations_s:
        facts.append(" · ".join(f"{_e(k)} {v:.2f} s" for k, v in t.durations_s))
    message = f'<p class="msg">{_e(t.result.message[:600])}</p>' if t.result and t.result.message else ""
    prompt = "".join(f'<div class="role">{_e(role)}</div><pre>{_e(content)}</pre>'
                     for role, content in t.prompt)
    return (f'<div class="turn {_outcome_class(t)}"><h4>turn {t.turn}</h4><p class="facts">'
            f"{' · '.join(facts)}</p>{message}"
            f'<div class="pair"><div><h5>kernel</h5>{_code(t.code)}</div>'
            f"<div><h5>diff from the previous turn</h5>{diff_html(previous_code, t.code)}</div></div>"
            f"<h5>feedback</h5><pre class=\"feedback\">{_e(t.feedback or '(none)')}</pre>"
            f"<details><summary>model reply ({len(t.response)} chars)</summary><pre>{_e(t.response)}</pre>"
            f"</details><details><summary>prompt ({len(t.prompt)} messages)</summary>{prompt}</details>"
            "</div>")


def _code(code: str | None) -> str:
    if code is None:
        return '<p class="note">no code was extracted from the reply</p>'
    return f'<pre class="code">{_e(code)}</pre>'


def diff_html(before: str | None, after: str | None) -> str:
    """A unified diff as a <pre> with one span per line (class add, del or hunk)."""
    if after is None:
        return '<p class="note">no kernel this turn</p>'
    if before is None:
        return '<p class="note">first kernel of the trajectory</p>'
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), "previous", "this turn",
                                      lineterm="", n=2))
    if not lines:
        return '<p class="note">unchanged</p>'
    spans = []
    for line in lines[2:]:  # the two file-name lines add nothing here
        css = {"@": "hunk", "+": "add", "-": "del"}.get(line[:1], "")
        spans.append(f'<span class="{css}">{_e(line)}</span>')
    return f'<pre class="diff">{"".join(spans)}</pre>'  # spans are blocks: no newlines


# -- training curves ---------------------------------------------------------------------------------

# Keys of the "rollout" records `cudaperf.train` writes per RL step (`train.rollout.rollout_stats`).
ROLLOUT_KEYS = ("score_mean", "sample_reward_mean", "gate_mean", "speedup_term_mean",
                "structural_term_mean", "ranker_term_mean", "correct_rate", "first_turn_correct_rate",
                "best_of_turns_correct_rate", "speedup_geomean", "hack_rate", "turns",
                "prompt_tokens_per_turn", "completion_tokens_per_turn", "generate_s", "evaluate_s",
                "rollout_s", "turns_per_min")
FLAG_KINDS_SHOWN = 4  # per-kind flag curves drawn (the largest); the table names every kind


def flag_kinds(rollouts: dict[int, dict]) -> dict[str, int]:
    """Anti-cheat violation code -> turns flagged with it over the run (`hack_<code>` counts per step)."""
    totals: dict[str, int] = {}
    for r in rollouts.values():
        for key, value in r.items():
            counted = key not in ("hack_rate", "hack_kinds") and finite_number(value) is not None
            if key.startswith("hack_") and counted:
                totals[key[5:]] = totals.get(key[5:], 0) + int(value)
    return dict(sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])))


def optimizer_seconds(rollouts: dict[int, dict], train: dict[int, dict]) -> list[float | None]:
    """Per rollout step: the trainer's step times from it to the next rollout's step (a batch serves
    `num_iterations` optimiser steps, the later ones without a rollout of their own) less the rollout's
    time; None when a time is missing."""
    out: list[float | None] = []
    steps = list(rollouts)
    for step, end in zip(steps, [*steps[1:], None], strict=True):
        served = [s for s in train if s >= step and (end is None or s < end)] or [step]
        times = [t for s in served if (t := finite_number(train.get(s, {}).get("step_s"))) is not None]
        rollout_s = finite_number(rollouts[step].get("rollout_s"))
        if rollout_s is None or len(times) < len(served):
            out.append(None)
        else:
            out.append(max(0.0, sum(times) - rollout_s))
    return out


def _series(rows: dict[int, dict], key: str, scale: float = 1.0) -> list[float | None]:
    return [None if (v := finite_number(r.get(key))) is None else v * scale for r in rows.values()]


def _step_count(rollouts: dict[int, dict], losses: dict[int, dict]) -> str:
    """"N steps", or "N optimiser steps, M rollouts" where a rollout serves several optimiser steps."""
    if rollouts and len(losses) > len(rollouts):
        return f"{len(losses)} optimiser steps, {len(rollouts)} rollouts"
    return f"{len(rollouts) or len(losses)} steps"


def training_section(run: TrainingRun, index: int = 0) -> str:
    """Training curves of one run over optimiser steps (see the module docstring)."""
    rollouts, train = run.of_kind("rollout"), run.of_kind("train")
    losses = {k: v for k, v in train.items() if "loss" in v or "eval_loss" in v}
    charts: list[str] = []
    if losses:
        x = [str(k) for k in losses]
        charts.append(line_chart("training loss per step", x, [
            (name, _series(losses, name)) for name in ("loss", "eval_loss")
            if any(finite_number(r.get(name)) is not None for r in losses.values())]))
    if rollouts:
        charts += _rollout_charts(rollouts, train)
    if not charts:
        charts.append('<p class="note">No step was logged yet.</p>')
    kinds = flag_kinds(rollouts)
    table = _flag_table(kinds, rollouts) + (_rollout_table(rollouts, train) if rollouts else "")
    return (f'<section class="training" id="training-{index}" data-run="{_e(run.name)}">'
            f'<h2>Training run {_e(run.name)} ({_step_count(rollouts, losses)})</h2>'
            f'<div class="charts">{"".join(charts)}</div>{table}</section>')


def _rollout_charts(rollouts: dict[int, dict], train: dict[int, dict]) -> list[str]:
    x = [str(k) for k in rollouts]
    kinds = flag_kinds(rollouts)
    turns = [finite_number(r.get("turns")) or 0.0 for r in rollouts.values()]
    per_kind = [(kind, [(finite_number(r.get(f"hack_{kind}")) or 0.0) / n if n else None
                        for r, n in zip(rollouts.values(), turns, strict=True)])
                for kind in list(kinds)[:FLAG_KINDS_SHOWN]]
    return [
        line_chart("reward per step (mean over turns / samples)", x,
                   [("turn score", _series(rollouts, "score_mean")),
                    ("sample reward", _series(rollouts, "sample_reward_mean"))],
                   y_label=lambda v: f"{v:.2f}"),
        line_chart("reward components per step (mean over turns)", x,
                   [(name, _series(rollouts, f"{name}_mean")) for name in
                    ("gate", "speedup_term", "structural_term", "ranker_term")],
                   y_label=lambda v: f"{v:.2f}"),
        line_chart("correct rate per step", x,
                   [("all turns", _series(rollouts, "correct_rate")),
                    ("first turn", _series(rollouts, "first_turn_correct_rate")),
                    ("best of turns", _series(rollouts, "best_of_turns_correct_rate"))], 1.0, _pct),
        line_chart("geomean speedup of correct turns", x, [("speedup", _series(rollouts, "speedup_geomean"))],
                   y_label=lambda v: f"{v:.2f}x"),
        line_chart("anti-cheat: share of turns flagged", x,
                   [("any violation", _series(rollouts, "hack_rate")), *per_kind], None, _pct),
        line_chart("tokens per turn", x, [("prompt", _series(rollouts, "prompt_tokens_per_turn")),
                                          ("reply", _series(rollouts, "completion_tokens_per_turn"))],
                   y_label=lambda v: f"{v:.0f}"),
        line_chart("time per step", x, [("generation", _series(rollouts, "generate_s")),
                                        ("evaluation", _series(rollouts, "evaluate_s")),
                                        ("optimiser", optimizer_seconds(rollouts, train))], y_label=_seconds),
        line_chart("rollout throughput", x, [("turns/min", _series(rollouts, "turns_per_min"))],
                   y_label=lambda v: f"{v:.0f}"),
    ]


def _seconds(v: float) -> str:
    return f"{v:.1f} s"


def _flag_table(kinds: dict[str, int], rollouts: dict[int, dict]) -> str:
    if not rollouts:
        return ""
    turns = sum(finite_number(r.get("turns")) or 0.0 for r in rollouts.values())
    rows = [[kind, count, f"{100 * count / turns:.1f}%" if turns else "-"] for kind, count in kinds.items()]
    if not rows:
        return f'<p class="note flags">No turn was flagged by anti-cheat in {turns:.0f} turns.</p>'
    return table_html(Table("anti-cheat flags over the run, by kind", ("kind", "turns flagged", "share"),
                            tuple(tuple(map(str, r)) for r in rows)))


def _rollout_table(rollouts: dict[int, dict], train: dict[int, dict]) -> str:
    optimiser = optimizer_seconds(rollouts, train)
    rows = []
    for (step, r), opt in zip(rollouts.items(), optimiser, strict=True):
        def num(key, fmt="{:.3f}", scale=1.0):
            v = finite_number(r.get(key))
            return "-" if v is None else fmt.format(v * scale)
        rows.append((str(step), num("score_mean"), num("correct_rate", "{:.1f}%", 100),
                     num("first_turn_correct_rate", "{:.1f}%", 100),
                     num("best_of_turns_correct_rate", "{:.1f}%", 100), num("speedup_geomean", "{:.2f}x"),
                     num("hack_rate", "{:.1f}%", 100), num("completion_tokens_per_turn", "{:.0f}"),
                     num("generate_s", "{:.1f}"), num("evaluate_s", "{:.1f}"),
                     "-" if opt is None else f"{opt:.1f}", num("turns_per_min", "{:.1f}")))
    head = ("step", "score", "correct", "first turn", "best of turns", "geomean x", "flagged", "reply tok",
            "generate s", "evaluate s", "optimiser s", "turns/min")
    return table_html(Table("per step", head, tuple(rows)))


# -- the page ----------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1400px;padding:0 16px 48px;color:#222}
h1{font-size:22px}h2{border-bottom:2px solid #ddd;padding-bottom:4px}h4{margin:4px 0}h5{margin:8px 0 2px}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{background:#fafafa;border:1px solid #e4e4e4}
.chart text{font-size:11px;fill:#444}.chart .ctitle{font-size:13px;fill:#222}.grid{stroke:#e2e2e2}
table{border-collapse:collapse;margin:14px 0}caption{text-align:left;font-weight:600;padding:4px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}
table.sortable th{cursor:pointer}
pre{background:#f7f7f7;border:1px solid #e6e6e6;padding:6px;overflow:auto;max-height:420px;
font:12px/1.35 ui-monospace,monospace;white-space:pre}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:10px}.pair>div{min-width:0}
.diff .add{background:#e3f6e3;display:block}.diff .del{background:#fbe3e3;display:block}
.diff .hunk{color:#6a5acd;display:block}.diff span{display:block;min-height:1.35em}
.trajectory{border:1px solid #ccc;margin:8px 0;padding:4px 10px}
.trajectory>summary{cursor:pointer;font-weight:600}
.turn{border-left:4px solid #999;margin:10px 0;padding-left:10px}.turn.ok{border-color:#3c9a4f}
.turn.wrong{border-color:#e0a030}.turn.fail{border-color:#c84040}
.chip{display:inline-block;border-radius:3px;padding:0 5px;margin:1px;font-size:12px;color:#fff;
background:#999}
.chip.ok{background:#3c9a4f}.chip.wrong{background:#e0a030}.chip.fail{background:#c84040}
.note{color:#666;font-style:italic}.facts{color:#333}.msg{color:#8a3b12}
.role{font-weight:600;margin-top:6px}.controls{margin:8px 0}.controls input{padding:3px 6px;width:260px}
.controls button{margin-left:6px}.bad{color:#a33}
"""

# Sorting, filtering and folding only; any error is recorded on <html> for headless checks.
SCRIPT = """
(function(){
var root=document.documentElement;
window.addEventListener('error',function(e){root.setAttribute('data-js-error',String(e.message));});
function cellValue(td){var t=td.textContent.trim();var n=parseFloat(t.replace(/[x%]$/,''));
 return (t!=='-'&&!isNaN(n)&&/^[-0-9.]/.test(t))?n:t.toLowerCase();}
document.querySelectorAll('table.sortable').forEach(function(table){
 table.querySelectorAll('th').forEach(function(th,col){th.addEventListener('click',function(){
  var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
  var dir=th.getAttribute('data-dir')==='asc'?-1:1;th.setAttribute('data-dir',dir>0?'asc':'desc');
  rows.sort(function(a,b){var x=cellValue(a.cells[col]),y=cellValue(b.cells[col]);
   if(typeof x!==typeof y){x=String(x);y=String(y);}return x<y?-dir:x>y?dir:0;});
  rows.forEach(function(r){body.appendChild(r);});});});});
var filter=document.getElementById('filter');
if(filter){filter.addEventListener('input',function(){var q=filter.value.toLowerCase();
 document.querySelectorAll('details.trajectory').forEach(function(d){
  d.style.display=d.getAttribute('data-task').toLowerCase().indexOf(q)>=0?'':'none';});});}
function fold(open){document.querySelectorAll('details.trajectory').forEach(function(d){d.open=open;});}
var o=document.getElementById('open-all'),c=document.getElementById('close-all');
if(o){o.addEventListener('click',function(){fold(true);});}
if(c){c.addEventListener('click',function(){fold(false);});}
root.setAttribute('data-trajectories',String(document.querySelectorAll('details.trajectory').length));
root.setAttribute('data-training-runs',String(document.querySelectorAll('section.training').length));
root.setAttribute('data-report-ready','1');
})();
"""


def render_html(inputs: ReportInputs, title: str = "cudaperf report",
                max_trajectories: int = MAX_TRAJECTORIES) -> str:
    trajectories = group_turns(inputs.turns)
    body = ("".join(training_section(run, i) for i, run in enumerate(inputs.training))
            + results_section(inputs.results) + trajectories_section(trajectories, max_trajectories))
    if not body:
        body = '<p class="note">No results and no trajectories in the input, and no training run.</p>'
    bad = (f'<p class="bad">Skipped {len(inputs.bad_lines)} unreadable lines: '
           f"{_e(', '.join(inputs.bad_lines[:20]))}</p>" if inputs.bad_lines else "")
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sources = ", ".join(inputs.sources) or "-"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>'
            f'<body><h1>{_e(title)}</h1><p class="note">Written {made} from {_e(sources)}.</p>{bad}{body}'
            f"<script>{SCRIPT}</script></body></html>")


def write_html(path: str | Path, inputs: ReportInputs, title: str = "cudaperf report",
               max_trajectories: int = MAX_TRAJECTORIES) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(inputs, title, max_trajectories), encoding="utf-8")
    return path
