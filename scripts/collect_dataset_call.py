"""Files one `scripts/dataset_measure.sh` device call into the repository, before the next call starts
(a fresh machine knows only the committed shards: a call whose rows were not filed first measures the same
keys again).

    python3 scripts/collect_dataset_call.py FILES_AT/b benchmarks/results/<date>-sessionN/callK

From the call's output folder: every `measurements-*.jsonl.gz` goes to the shards folder
(benchmarks/dataset_measure, or --shards); a call killed before it packed its rows leaves
`run/measurements.jsonl`, which is gzipped there under the UTC time of its last record; `measure.log` and
the clock log (`clocks-*.csv.gz`, or a raw `clocks.csv`, gzipped) go to the results folder. An existing
shard is never overwritten. Prints what it filed and the counts of `cudaperf dataset stats`.

Not covered: committing (the caller commits the shards and the results folder together).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaperf.datasets.jsonl import read_jsonl


def _stamp(seconds: float) -> str:
    """A UTC time as the shards and clock logs name it (`date -u +%Y%m%dT%H%M%SZ` in dataset_measure.sh)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))


def last_record_stamp(path: Path) -> str:
    """The UTC time of the file's last record with a time (`t_end` or `t`), as the shards name it."""
    records, _ = read_jsonl(path)
    times = [r.get("t_end") or r.get("t") for r in records]
    return _stamp(max((t for t in times if isinstance(t, (int, float))), default=path.stat().st_mtime))


def _file_new(src: Path, dest: Path, filed: list[str], pack: bool = False) -> None:
    if dest.exists():
        filed.append(f"kept {dest} (already there; {src} not copied)")
        return
    if pack:
        with src.open("rb") as f_in, gzip.open(dest, "wb", compresslevel=9) as f_out:
            shutil.copyfileobj(f_in, f_out)
    else:
        shutil.copy2(src, dest)
    filed.append(f"{src} -> {dest}")


def collect(call_dir: Path, results_dir: Path, shards_dir: Path) -> list[str]:
    """Files the call's outputs; one line per file."""
    if not call_dir.is_dir():
        raise SystemExit(f"no such folder: {call_dir} (pass the call's output folder, e.g. FILES_AT/b)")
    results_dir.mkdir(parents=True, exist_ok=True)
    filed: list[str] = []
    for shard in sorted(call_dir.glob("measurements-*.jsonl.gz")):
        _file_new(shard, shards_dir / shard.name, filed)
    unpacked = call_dir / "run" / "measurements.jsonl"
    if unpacked.is_file() and unpacked.stat().st_size:
        stamp = last_record_stamp(unpacked)
        _file_new(unpacked, shards_dir / f"measurements-{stamp}.jsonl.gz", filed, pack=True)
    if (call_dir / "measure.log").is_file():
        _file_new(call_dir / "measure.log", results_dir / "measure.log", filed)
    for clocks in sorted(call_dir.glob("clocks-*.csv.gz")):
        _file_new(clocks, results_dir / clocks.name, filed)
    raw = call_dir / "clocks.csv"
    if raw.is_file() and raw.stat().st_size:
        _file_new(raw, results_dir / f"clocks-{_stamp(raw.stat().st_mtime)}.csv.gz", filed, pack=True)
    if not any("->" in line and "measurements-" in line for line in filed):
        filed.append(f"no measurement rows in {call_dir}")
    return filed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("call_dir", type=Path, help="the call's output folder (FILES_AT/<OUT name>)")
    parser.add_argument("results_dir", type=Path, help="where measure.log and the clock log go")
    parser.add_argument("--shards", type=Path, default=ROOT / "benchmarks" / "dataset_measure")
    parser.add_argument("--no-stats", action="store_true", help="skip `cudaperf dataset stats` at the end")
    args = parser.parse_args(argv)
    for line in collect(args.call_dir, args.results_dir, args.shards):
        print(line)
    if not args.no_stats:
        out = subprocess.run([sys.executable, "-m", "cudaperf.cli", "dataset", "stats", str(args.shards)],
                             capture_output=True, text=True, check=False)
        print("\n".join(out.stdout.splitlines()[:12]) or out.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
