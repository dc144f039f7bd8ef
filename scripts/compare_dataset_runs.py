"""Cross-run repeatability of the dataset measurement: the keys two measurement files (or folders of
shards) both timed, and how far apart their medians and baselines are.

    python3 scripts/compare_dataset_runs.py RUN_A RUN_B [--only-keys-in RUN_C RUN_D ...]

For each field (the implementation's `median_ms`, then the baselines `eager_ms`, `compile_ms`, `naive_ms`,
`serial_c_ms`, once per task and configuration), over the keys timed in both: how many, the median and p90 of
|B/A - 1|, overall and by A's size (< 50 µs, 50-500 µs, >= 500 µs). Both runs' rows should come from the same
sources (compare `source_hash`); rows of a key that differ in source are skipped and counted. With
--only-keys-in, only the keys every named run also timed are compared (so that two pairs of runs are compared
on the same keys).

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--only-keys-in", type=Path, nargs="*", default=[],
                        help="compare only the keys these runs timed too")
    args = parser.parse_args(argv)
    others = [timed_rows(p) for p in args.only_keys_in]
    a, b = (only_keys_in(timed_rows(p), others) for p in (args.run_a, args.run_b))
    print("\n".join(report(a, b)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
