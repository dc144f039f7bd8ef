"""Cross-run repeatability of the dataset measurement: the keys two measurement files (or folders of
shards) both timed, and how far apart their medians and baselines are.

    python3 scripts/compare_dataset_runs.py RUN_A RUN_B [--only-keys-in RUN_C RUN_D ...]

For each field (the implementation's `median_ms`, then the baselines `eager_ms`, `compile_ms`, `naive_ms`,
`serial_c_ms`, once per task and configuration), over the keys timed in both: how many, the median and p90 of
|B/A - 1|, overall and by A's size (< 50 µs, 50-500 µs, >= 500 µs). Both runs' rows should come from the same
sources (compare `source_hash`); rows of a key that differ in source are skipped and counted. With
--only-keys-in, only the keys every named run also timed are compared (so that two pairs of runs are compared
on the same keys).

Then the diagnostics, where the rows carry them (`diagnostics`; rows measured before them print a line
saying so), to tell the hypotheses apart:
- per GPU-timed function (implementations, eager, torch.compile, the naive port): the cross-run figure
  beside each run's share of host-bound samples (the function's host path outlasted the lead: the sample
  holds host time, `cudaperf.timing`), its median lead launches, and the figure on the keys host-bound in
  neither run (under 10% of the samples). A figure that falls on those keys says the host was the cause;
- serial C: the cross-run figure beside the calibration's ratio B/A (the fixed C workload timed before each
  round on the same CPU, `datasets/measure/serial.py`), the baseline normalised by it (a diagnostic: the
  rows keep the raw time), the share of keys that moved the same way as the calibration, and each run's
  steal share (time the hypervisor gave to others); per run, the calibration's medians and its time on the
  reserved CPU over the time just before on an unpinned one (is the reserved CPU the slow one?).

Not covered: which run is right (neither is a reference), significance tests.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaperf.datasets.jsonl import read_jsonl, read_records

FIELDS = ("median_ms", "eager_ms", "compile_ms", "naive_ms", "serial_c_ms")
SIZES_MS = ((0.0, 0.05, "< 50 µs"), (0.05, 0.5, "50-500 µs"), (0.5, float("inf"), ">= 500 µs"))


def timed_rows(source: Path) -> dict[tuple, dict]:
    """The last timed row per key of a file or a folder of shards."""
    records = read_jsonl(source)[0] if source.is_file() else read_records([source])[0]
    return {(r["task_id"], r["config"], r["impl_id"]): r for r in records
            if r.get("record") == "row" and r.get("median_ms")}


def only_keys_in(rows: dict[tuple, dict], others: list[dict[tuple, dict]]) -> dict[tuple, dict]:
    """`rows` less the keys some run in `others` did not time."""
    return {k: r for k, r in rows.items() if all(k in o for o in others)}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def differences(a: dict[tuple, dict], b: dict[tuple, dict], field: str,
                low_ms: float = 0.0, high_ms: float = float("inf")) -> list[float]:
    """|B/A - 1| of `field` over the keys both timed with the same source, A's value in [low, high). A
    baseline is the same in every row of its (task, configuration): counted once there."""
    seen: set[tuple] = set()
    out = []
    for k in sorted(a.keys() & b.keys()):
        if field != "median_ms" and k[:2] in seen:
            continue
        if (a[k].get("source_hash") == b[k].get("source_hash") and a[k].get(field) and b[k].get(field)
                and low_ms <= a[k][field] < high_ms):
            seen.add(k[:2])
            out.append(abs(b[k][field] / a[k][field] - 1))
    return out


def report(a: dict[tuple, dict], b: dict[tuple, dict]) -> list[str]:
    common = a.keys() & b.keys()
    changed = sum(a[k].get("source_hash") != b[k].get("source_hash") for k in common)
    lines = [f"{len(common)} keys timed in both ({changed} skipped: different sources)",
             "| field | sizes (A) | keys | median abs diff | p90 |", "|---|---|---|---|---|"]
    for field in FIELDS:
        for low, high, label in ((0.0, float("inf"), "all"), *SIZES_MS):
            d = differences(a, b, field, low, high)
            if d:
                lines.append(f"| {field} | {label} | {len(d)} | {_quantile(d, 0.5):.1%} "
                             f"| {_quantile(d, 0.9):.1%} |")
    return lines


HOST_BOUND_SHARE = 0.1  # a key is host-bound in a run when more than this share of its samples were
GPU_TIMED = (("median_ms", ""), ("eager_ms", "eager_"), ("compile_ms", "compile_"), ("naive_ms", "naive_"))


def pairs(a: dict[tuple, dict], b: dict[tuple, dict], field: str) -> list[tuple[dict, dict]]:
    """The (A row, B row) pairs of `field` over the keys both timed with the same source; a baseline once
    per task and configuration (as in `differences`)."""
    seen: set[tuple] = set()
    out = []
    for k in sorted(a.keys() & b.keys()):
        if field != "median_ms" and k[:2] in seen:
            continue
        if a[k].get("source_hash") == b[k].get("source_hash") and a[k].get(field) and b[k].get(field):
            seen.add(k[:2])
            out.append((a[k], b[k]))
    return out


def host_bound_share(row: dict, prefix: str) -> float | None:
    """The share of a function's samples that were host-bound in this row (None: not recorded)."""
    bound, rounds = row.get(f"{prefix}host_bound_samples"), row.get("rounds")
    return bound / rounds if bound is not None and rounds else None


def _median(values: list[float]) -> str:
    return f"{_quantile(values, 0.5):.1%}" if values else "-"


def _share(rows: list[dict], prefix: str) -> str:
    shares = [x for x in (host_bound_share(r, prefix) for r in rows) if x is not None]
    return f"{sum(shares) / len(shares):.1%}" if shares else "-"


def _launches(rows: list[dict], prefix: str) -> str:
    values = [r[f"{prefix}lead_launches"] for r in rows if r.get(f"{prefix}lead_launches") is not None]
    return f"{_quantile(values, 0.5)}" if values else "-"


def host_bound_lines(a: dict[tuple, dict], b: dict[tuple, dict]) -> list[str]:
    """Per GPU-timed function: the cross-run figure, each run's host-bound share and median launches, and
    the figure on the keys host-bound in neither run."""
    lines = ["| field | keys | median abs diff | host-bound samples A | B | lead launches A | B "
             "| keys host-bound in neither | their median abs diff |",
             "|---|---|---|---|---|---|---|---|---|"]
    for field, prefix in GPU_TIMED:
        both = pairs(a, b, field)
        if not both:
            continue
        diffs = [abs(rb[field] / ra[field] - 1) for ra, rb in both]
        calm = [abs(rb[field] / ra[field] - 1) for ra, rb in both
                if all((host_bound_share(r, prefix) or 0.0) <= HOST_BOUND_SHARE for r in (ra, rb))]
        rows_a, rows_b = [ra for ra, _ in both], [rb for _, rb in both]
        lines.append(f"| {field} | {len(both)} | {_median(diffs)} | {_share(rows_a, prefix)} "
                     f"| {_share(rows_b, prefix)} | {_launches(rows_a, prefix)} "
                     f"| {_launches(rows_b, prefix)} | {len(calm)} | {_median(calm)} |")
    return lines


def _ratio_range(ratios: list[float]) -> str:
    if not ratios:
        return "-"
    return f"{_quantile(ratios, 0.5):.3f} ({_quantile(ratios, 0.1):.3f}-{_quantile(ratios, 0.9):.3f})"


def _ratio(ra: dict, rb: dict, field: str) -> float | None:
    return rb[field] / ra[field] if ra.get(field) and rb.get(field) else None


def serial_lines(a: dict[tuple, dict], b: dict[tuple, dict]) -> list[str]:
    """Serial C: raw and calibration-normalised cross-run figures, the calibration ratio B/A, the share of
    keys that moved the same way as the compute calibration, the steal shares."""
    both = [(ra, rb) for ra, rb in pairs(a, b, "serial_c_ms")
            if ra.get("serial_c_calibration_ms") and rb.get("serial_c_calibration_ms")]
    if not both:
        return ["serial C: no calibration in these rows"]
    raw = [abs(rb["serial_c_ms"] / ra["serial_c_ms"] - 1) for ra, rb in both]
    ratios, normalised = {}, {}
    for part, field in (("compute", "serial_c_calibration_ms"), ("memory", "serial_c_calibration_mem_ms")):
        by_key = [(ra["serial_c_ms"], rb["serial_c_ms"], _ratio(ra, rb, field)) for ra, rb in both]
        ratios[part] = [r for _, _, r in by_key if r]
        normalised[part] = [abs(sb / sa / r - 1) for sa, sb, r in by_key if r]
    same_way = sum((rb["serial_c_ms"] > ra["serial_c_ms"]) == (_ratio(ra, rb, "serial_c_calibration_ms") > 1)
                   for ra, rb in both)
    steal = [[r["serial_c_steal_share"] for r in rows if r.get("serial_c_steal_share") is not None]
             for rows in ([ra for ra, _ in both], [rb for _, rb in both])]
    rounds = [rb.get("serial_c_rounds") or 1 for _, rb in both]
    return ["| serial C | keys | median abs diff | calibration B/A compute (p10-p90) | memory "
            "| normalised by compute | by memory | keys moving with the calibration | steal A | steal B "
            "| rounds (median) |", "|---|---|---|---|---|---|---|---|---|---|---|",
            f"| serial_c_ms | {len(both)} | {_median(raw)} | {_ratio_range(ratios['compute'])} "
            f"| {_ratio_range(ratios['memory'])} | {_median(normalised['compute'])} "
            f"| {_median(normalised['memory'])} | {same_way}/{len(both)} "
            f"| {_mean(steal[0])} | {_mean(steal[1])} | {_quantile(rounds, 0.5)} |"]


def serial_run_lines(a: dict[tuple, dict], b: dict[tuple, dict]) -> list[str]:
    """Per run: the calibration's median (compute, memory), its time on the reserved CPU over the time just
    before on an unpinned one (> 1: the reserved CPU is the slower), the CPUs the rounds ran on."""
    lines = ["| run | C keys | calibration compute ms | memory ms | reserved / unpinned | CPUs |",
             "|---|---|---|---|---|---|"]
    for name, rows in (("A", a), ("B", b)):
        serial = [r for r in {k[:2]: r for k, r in rows.items()}.values() if r.get("serial_c_calibration_ms")]
        if not serial:
            continue
        med = {f: _quantile([r[f] for r in serial if r.get(f)], 0.5) if any(r.get(f) for r in serial)
               else None for f in ("serial_c_calibration_ms", "serial_c_calibration_mem_ms")}
        free = [r["serial_c_calibration_ms"] / r["serial_c_calibration_free_ms"] for r in serial
                if r.get("serial_c_calibration_free_ms")]
        cpus = sorted({c for r in serial for c in r.get("serial_c_cpus") or ()})
        lines.append(f"| {name} | {len(serial)} | {_num(med['serial_c_calibration_ms'])} "
                     f"| {_num(med['serial_c_calibration_mem_ms'])} "
                     f"| {_ratio_range(free)} | {','.join(map(str, cpus)) or 'not pinned'} |")
    return lines


def _num(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def _mean(values: list[float]) -> str:
    return f"{sum(values) / len(values):.2%}" if values else "-"


def diagnostics(a: dict[tuple, dict], b: dict[tuple, dict]) -> list[str]:
    """The host-bound and calibration tables (module docstring), or a line saying the rows lack them."""
    if not any("host_bound_samples" in r for r in a.values()):
        return ["no host-path diagnostics in these rows (measured before they were recorded)"]
    return [*host_bound_lines(a, b), "", *serial_lines(a, b), "", *serial_run_lines(a, b)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--only-keys-in", type=Path, nargs="*", default=[],
                        help="compare only the keys these runs timed too")
    args = parser.parse_args(argv)
    others = [timed_rows(p) for p in args.only_keys_in]
    a, b = (only_keys_in(timed_rows(p), others) for p in (args.run_a, args.run_b))
    print("\n".join([*report(a, b), "", *diagnostics(a, b)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
