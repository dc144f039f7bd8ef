"""Where the workers' time went: the job profiles a profiled run wrote (`CUDAPERF_PROFILE_JOBS`, see
`cudaperf.execute.job_profile`; `eval_modes.py --profile-dir DIR` writes one folder per run), summed per
folder, as Markdown tables: the functions with the most time of their own, and the project's functions with
the most time under them (per job, so runs of different sizes compare).

    python benchmarks/profile_summary.py DIR [--top 25] > summary.md
"""

from __future__ import annotations

import argparse
import pstats
import sys
from pathlib import Path


def folders(root: Path) -> list[Path]:
    """`root`'s sub-folders holding profiles, or `root` itself when the profiles are directly in it."""
    subs = sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob("*.prof")))
    return subs or [root]


def combined(folder: Path) -> tuple[pstats.Stats | None, int]:
    files = sorted(folder.glob("*.prof"))
    if not files:
        return None, 0
    stats = pstats.Stats(str(files[0]))
    for f in files[1:]:
        stats.add(str(f))
    return stats, len(files)


def _name(func: tuple[str, int, str]) -> str:
    path, line, name = func
    short = path.split("/src/", 1)[-1] if "/src/" in path else Path(path).name
    return f"{name} ({short}:{line})" if line else name


def table(stats: pstats.Stats, jobs: int, top: int) -> list[str]:
    rows = stats.stats  # type: ignore[attr-defined]  # {func: (cc, nc, tottime, cumtime, callers)}
    lines = ["| own time, ms/job | calls/job | function |", "|---|---|---|"]
    for func, (_, nc, tt, _, _) in sorted(rows.items(), key=lambda kv: -kv[1][2])[:top]:
        lines.append(f"| {1000 * tt / jobs:.2f} | {nc / jobs:.1f} | {_name(func)} |")
    ours = [(f, v) for f, v in rows.items() if "/cudaperf/" in f[0]]
    lines += ["", "| under it, ms/job | calls/job | project function |", "|---|---|---|"]
    for func, (_, nc, _, ct, _) in sorted(ours, key=lambda kv: -kv[1][3])[:top]:
        lines.append(f"| {1000 * ct / jobs:.2f} | {nc / jobs:.1f} | {_name(func)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"profile_summary: {args.root} is not a folder", file=sys.stderr)
        return 2
    for folder in folders(args.root):
        stats, jobs = combined(folder)
        if stats is None:
            print(f"## {folder.name}: no profiles\n")
            continue
        total = stats.total_tt  # type: ignore[attr-defined]
        print(f"## {folder.name}: {jobs} jobs, {1000 * total / jobs:.1f} ms of profiled time per job\n")
        print("\n".join(table(stats, jobs, args.top)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
