"""`cudaperf analyze FILE`: structural features of every kernel in a solution, as JSON or feedback text.

Covers: reading the file (fast-format or load_inline Python, or a plain .cu), `--size n=4096` bindings,
a launch given as `--block/--grid/--smem`, `--no-compile` / `--no-sass` for speed, JSON (the
`AnalysisReport`, feedback included) or the feedback text alone. Not covered: profiling (`ncu.py`).
"""

from __future__ import annotations

import argparse
import json
import sys

from cudaperf.analysis.validation import evaluate_spec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="solution .py (fast or load_inline format) or a .cu file")
    parser.add_argument("--kind", choices=("auto", "fast", "inline", "cuda"), default="auto",
                        help="solution format; auto detects it (default)")
    parser.add_argument("--arch", default="sm_90",
                        help="target architecture for ptxas and occupancy (sm_75..sm_90)")
    parser.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                        help="bind a symbol in loop bounds and guards, e.g. --size n=1048576 (repeatable)")
    parser.add_argument("--block",
                        help="block shape X[,Y[,Z]] for every kernel (default: from the source, else 256)")
    parser.add_argument("--grid", help="grid shape X[,Y[,Z]]")
    parser.add_argument("--smem", type=int, default=0, help="dynamic shared memory per block, bytes")
    parser.add_argument("--no-compile", action="store_true",
                        help="skip NVRTC/ptxas (no registers, no occupancy)")
    parser.add_argument("--no-sass", action="store_true", help="skip the SASS disassembly (faster)")
    parser.add_argument("--format", choices=("json", "text"), default="json",
                        help="json: features + feedback (default); text: the feedback only")


def _shape(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    return tuple(int(x) for x in text.replace("x", ",").split(",") if x.strip())


def _sizes(pairs: list[str]) -> dict[str, float]:
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if not name or not value:
            raise ValueError(f"--size expects NAME=VALUE, got {pair!r}")
        out[name.strip()] = float(evaluate_spec(value, out))  # plain arithmetic: 1<<20, 4096*4096
    return out


def run(args: argparse.Namespace) -> int:
    from cudaperf.analysis.analyze import analyze_source, render_feedback

    try:
        with open(args.file, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        sizes = _sizes(args.size)
        block, grid = _shape(args.block), _shape(args.grid)
    except (OSError, ValueError, SyntaxError, NameError, TypeError) as exc:
        print(f"cudaperf analyze: {exc}", file=sys.stderr)
        return 2
    launch = None
    if block or grid or args.smem:
        launch = {"block": block, "grid": grid, "smem_bytes": args.smem}
    kind = args.kind if args.kind != "auto" or not args.file.endswith((".cu", ".cuh")) else "cuda"
    report = analyze_source(text, kind=kind, arch=args.arch, launch=launch, sizes=sizes,
                            compile=not args.no_compile, sass=not args.no_sass)
    if args.format == "text":
        print(render_feedback(report))
    else:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    return 0
