"""The `cudaperf` command line: one subcommand per capability, each in its own module.

Each subcommand module exposes `add_arguments(parser)` and `run(args) -> int`; this file only wires them
together and imports a subcommand's module when that subcommand is used, so `cudaperf --help` is fast and
needs neither torch nor a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help). Adding a command is a leaf change: a module and a row here.
COMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("cudaperf.commands.eval_cmd", "evaluate one solution, or a directory of solutions"),
    "report": ("cudaperf.commands.report_cmd", "fast_p table, speedup histogram and per-task table"),
    "analyze": ("cudaperf.commands.analyze_cmd",
                "structural analysis of a kernel source (features + feedback)"),
    "tasks": ("cudaperf.commands.tasks_cmd", "list and check task files"),
    "dataset": ("cudaperf.commands.dataset_cmd", "build, validate, count and (GPU) measure the task dataset"),
    "optimize": ("cudaperf.commands.optimize_cmd", "a model writes, tests and rewrites kernels (refinement)"),
    "rank": ("cudaperf.commands.rank_cmd",
             "offline pairwise ranker: train, evaluate, score candidate kernels"),
    "train": ("cudaperf.commands.train_cmd",
              "train a policy: supervised warm start (sft), multi-turn RL (rl)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cudaperf", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        _add_arguments(module, p)
    return parser


def _add_arguments(module: str, parser: argparse.ArgumentParser) -> None:
    try:
        importlib.import_module(module).add_arguments(parser)
    except ModuleNotFoundError as exc:  # a command whose module is not installed stays listed
        parser.set_defaults(_missing=str(exc))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    if getattr(args, "_missing", None):
        print(f"cudaperf {args.command}: unavailable ({args._missing})", file=sys.stderr)
        return 2
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
