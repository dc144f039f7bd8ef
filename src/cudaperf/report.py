"""Summaries of many `EvalResult`s: fast_p, outcome counts, the reasons of the results that are not correct,
a speedup histogram and a per-task table.

fast_p follows KernelBench: the share of ALL results (every evaluated (task, solution) pair, failures
included) that are correct AND faster than the baseline by more than p, i.e. speedup > p. Any run has a
speedup > 0, so fast_0 is the correctness rate; a correct result without timing counts toward fast_0
only. Speedups are the per-result geometric means over configurations (`EvalResult.speedup_vs_*`).

Everything is computed into plain `Table`s first, then drawn either as markdown (to commit next to
results) or with rich (for the terminal); the two views always agree.

Not covered: reading results from disk (`cudaperf.results`), plots (a PNG needs matplotlib: not a
dependency), rewards (`cudaperf.reward`).
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cudaperf.types import EvalResult, Outcome, Severity

FAST_P_THRESHOLDS = (0.0, 1.0, 1.2, 1.5, 2.0)
BASELINES = ("eager", "compile")
# Speedup bin edges: powers of sqrt(2) from 1/8 to 8, so 1.0 is an edge and each bin is a ~41% step.
HISTOGRAM_EDGES = tuple(2.0 ** (k / 2) for k in range(-6, 7))


def speedup(result: EvalResult, baseline: str) -> float | None:
    if baseline not in BASELINES:
        raise ValueError(f"baseline {baseline!r}: use one of {BASELINES}")
    return result.speedup_vs_eager if baseline == "eager" else result.speedup_vs_compile


def fast_p(results: Sequence[EvalResult], p: float, baseline: str = "eager") -> float | None:
    """Share of all `results` that are correct with speedup > p over `baseline`; None if no results."""
    if not results:
        return None
    hits = 0
    for r in results:
        s = speedup(r, baseline)
        if r.correct and ((s is not None and s > p) or (s is None and p == 0)):
            hits += 1
    return hits / len(results)


def outcome_counts(results: Iterable[EvalResult]) -> dict[Outcome, int]:
    """Count per outcome, in the order of the `Outcome` enum, zeros left out."""
    counts = Counter(r.outcome for r in results)
    return {o: counts[o] for o in Outcome if counts[o]}


@dataclass(frozen=True)
class HistogramBin:
    lo: float  # inclusive; 0 for the first bin
    hi: float  # exclusive; inf for the last bin
    count: int


def speedup_histogram(results: Iterable[EvalResult], baseline: str = "eager",
                      edges: Sequence[float] = HISTOGRAM_EDGES) -> list[HistogramBin]:
    """Histogram of the speedups of correct, timed results over log-spaced bins [edge_i, edge_i+1)."""
    bounds = [0.0, *edges, math.inf]
    counts = [0] * (len(bounds) - 1)
    for r in results:
        s = speedup(r, baseline)
        if r.correct and s is not None:
            counts[bisect.bisect_right(edges, s)] += 1
    return [HistogramBin(bounds[i], bounds[i + 1], c) for i, c in enumerate(counts)]


def _key(r: EvalResult) -> tuple:
    s = r.speedup_vs_eager
    return (r.correct, r.outcome.ran, s is not None, s or 0.0)


def best_per_task(results: Iterable[EvalResult]) -> list[EvalResult]:
    """One result per task: correct beats incorrect beats not run; then the highest speedup vs eager."""
    best: dict[str, EvalResult] = {}
    for r in results:
        if r.task_id not in best or _key(r) > _key(best[r.task_id]):
            best[r.task_id] = r
    return [best[t] for t in sorted(best)]


# -- tables ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    preformatted: bool = False  # one column of monospace lines (the histogram)


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def _pct(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 1 else f"{value:.2f}"


def candidate_ms(result: EvalResult) -> float | None:
    """Geometric mean of the candidate's median time over its timed configurations."""
    ms = [t.candidate.median_ms for t in result.timings if t.candidate.median_ms > 0]
    return math.exp(sum(map(math.log, ms)) / len(ms)) if ms else None


def _flag_codes(result: EvalResult, limit: int = 3) -> str:
    codes = sorted({f.code for f in result.flags if f.severity is not Severity.INFO})
    more = f" +{len(codes) - limit}" if len(codes) > limit else ""
    return ", ".join(codes[:limit]) + more


def summary_table(results: Sequence[EvalResult]) -> Table:
    gpus = sorted({r.environment.get("gpu", "") for r in results} - {""})
    rows = [
        ("results", str(len(results))),
        ("tasks", str(len({r.task_id for r in results}))),
        ("solution ids", str(len({r.solution_id for r in results}))),
        ("correct", _pct(fast_p(results, 0.0))),
        ("gpu", ", ".join(gpus) or "-"),
    ]
    return Table("Summary", ("", "value"), tuple(rows))


def fast_p_table(results: Sequence[EvalResult]) -> Table:
    rows = tuple((f"fast_{p:g}", *(_pct(fast_p(results, p, b)) for b in BASELINES))
                 for p in FAST_P_THRESHOLDS)
    return Table("fast_p (share of all results correct with speedup > p)",
                 ("p", "vs eager", "vs torch.compile"), rows)


def outcome_table(results: Sequence[EvalResult]) -> Table:
    n = len(results) or 1
    rows = tuple((o.value, str(c), _pct(c / n)) for o, c in outcome_counts(results).items())
    return Table("Outcomes", ("outcome", "count", "share"), rows)


REASON_CHARS = 160
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def reason_of(result: EvalResult) -> str:
    """The first line of a result's message, or its stage when it has none."""
    first = (result.message or "").strip().splitlines()[0:1]
    if first and first[0].strip():
        return first[0].strip()
    return f"(no message; stage {result.stage or '?'})"


def reasons_table(results: Sequence[EvalResult], examples: int = 3) -> Table:
    """One line per reason of the results that are not correct (SKIPPED included): reasons that differ
    only in their numbers share a line, which shows the first one, the count and a few solution ids."""
    groups: dict[tuple[str, str], list[EvalResult]] = {}
    for r in results:
        if not r.correct:
            reason = reason_of(r)
            groups.setdefault((r.outcome.value, _NUMBER.sub("#", reason)), []).append(r)
    rows = []
    for (outcome, _), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        text = reason_of(members[0])
        text = text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."
        ids = ", ".join(f"{m.task_id}/{m.solution_id}" for m in members[:examples])
        more = f" +{len(members) - examples}" if len(members) > examples else ""
        rows.append((outcome, str(len(members)), text, ids + more))
    return Table("Why results are not correct", ("outcome", "count", "reason", "examples"), tuple(rows))


def histogram_table(results: Sequence[EvalResult], baseline: str, width: int = 40) -> Table:
    bins = speedup_histogram(results, baseline)
    peak = max((b.count for b in bins), default=0) or 1
    lines = []
    for b in bins:
        label = f"[{b.lo:5.3g}, {b.hi:5.3g})"
        bar = "#" * round(width * b.count / peak)
        lines.append((f"{label} {b.count:5d} {bar}".rstrip(),))
    return Table(f"Speedup vs {baseline} (correct results, log-spaced bins)", ("speedup",), tuple(lines),
                 preformatted=True)


def per_task_table(results: Sequence[EvalResult]) -> Table:
    n_solutions = Counter(r.task_id for r in results)
    rows = tuple(
        (r.task_id, str(n_solutions[r.task_id]), r.solution_id, r.outcome.value, _x(r.speedup_vs_eager),
         _x(r.speedup_vs_compile), _ms(candidate_ms(r)), _flag_codes(r))
        for r in best_per_task(results))
    return Table("Best solution per task", ("task", "n", "best solution", "outcome", "vs eager",
                                            "vs compile", "cand ms (geo)", "flags"), rows)


def report_tables(results: Sequence[EvalResult]) -> list[Table]:
    tables = [summary_table(results), fast_p_table(results), outcome_table(results)]
    if any(not r.correct for r in results):
        tables.append(reasons_table(results))
    for baseline in BASELINES:
        if any(r.correct and speedup(r, baseline) is not None for r in results):
            tables.append(histogram_table(results, baseline))
    tables.append(per_task_table(results))
    return tables


# -- rendering ---------------------------------------------------------------------------------------


def _markdown(table: Table) -> str:
    if table.preformatted:
        body = "\n".join(row[0] for row in table.rows)
        return f"### {table.title}\n\n```\n{body}\n```\n"

    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"### {table.title}", "", line(table.headers), line("---" for _ in table.headers)]
    out += [line(row) for row in table.rows]
    return "\n".join(out) + "\n"


def render(results: Sequence[EvalResult], title: str = "cudaperf report") -> str:
    """The whole report as markdown (plain text that reads well unrendered too)."""
    if not results:
        return f"## {title}\n\nNo results.\n"
    return f"## {title}\n\n" + "\n".join(_markdown(t) for t in report_tables(results))


def to_rich(table: Table):
    """One `Table` as a rich renderable (a rich Table, or a Panel of monospace lines)."""
    from rich.panel import Panel
    from rich.table import Table as RichTable
    from rich.text import Text

    if table.preformatted:
        return Panel(Text("\n".join(r[0] for r in table.rows)), title=table.title, expand=False)
    rt = RichTable(title=table.title, title_justify="left")
    for h in table.headers:
        rt.add_column(h)
    for row in table.rows:
        rt.add_row(*row)
    return rt


def rich_renderables(results: Sequence[EvalResult]) -> list:
    """The same tables as `render`, as rich renderables for `Console.print`."""
    return [to_rich(t) for t in report_tables(results)] if results else []
