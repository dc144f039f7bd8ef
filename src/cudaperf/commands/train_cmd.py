"""`cudaperf train`: supervised warm start and multi-turn RL of a policy (TRL on one node).

  cudaperf train sft [--model smollm2] [--output-dir DIR] [--epochs 3] [--lora] [--dry-run] [...]
  cudaperf train rl --model DIR/final [--output-dir DIR] [--max-turns 2] [--credit turn] [...]
  cudaperf train eval --models base=smollm2 sft=DIR/final rl=DIR/final [--sets heldout test] [...]

Every option is a field of `cudaperf.train.config.SftConfig` / `RlConfig` /
`cudaperf.train.compare.CompareConfig` (its help is the field's docstring); `--config FILE` starts from a
saved configuration (train_config.json, or eval's compare_config.json) and the options given override it.
Starting again with the same --output-dir resumes from the last checkpoint (eval: skips complete runs and
continues partial ones). `sft --dry-run` builds the examples and prints their token-length distribution
without training; `sft --build-examples FILE` builds them into FILE, for `--examples-file` of a run on
another machine. `eval` prints the comparison table (mean ± std over seeds per model and task set).

Exit status: 0 when training finished, 2 for a configuration error (the message says the fix).

Not covered: the training and evaluation themselves (`cudaperf.train.sft`, `.rl`, `.compare`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from cudaperf.train.compare import CompareConfig
    from cudaperf.train.config import RlConfig, SftConfig

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("Not covered")[0].split("\n", 1)[1]
    sub = parser.add_subparsers(dest="train_command", metavar="{sft,rl,eval}")
    for name, cls, text in (("sft", SftConfig, "supervised fine-tuning on the dataset's implementations"),
                            ("rl", RlConfig, "GRPO over multi-turn refinement trajectories"),
                            ("eval", CompareConfig, "before/after evaluation of models over seeds")):
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(_config_class=cls)
        p.add_argument("--config", default=None,
                       help="a saved train_config.json (eval: compare_config.json) to start from")
        if name == "sft":
            p.add_argument("--dry-run", action="store_true",
                           help="build the examples, print their token lengths, do not train")
            p.add_argument("--build-examples", metavar="FILE", default=None,
                           help="build the examples into FILE (for --examples-file of a run elsewhere), "
                                "do not train")
        add_config_options(p, cls)


def add_config_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per dataclass field; the default is None so only options given override."""
    from cudaperf.train.config import field_docs

    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        hint = str(hints[f.name])
        help_text = f"{docs.get(f.name, '')} (default: {_shown(f)})".replace("%", "%%")
        if hints[f.name] is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif "tuple" in hint:
            kind = int if "tuple[int" in hint else str
            parser.add_argument(flag, nargs="*", type=kind, default=None, metavar="X", help=help_text)
        else:
            parser.add_argument(flag, type=hints[f.name], default=None, help=help_text)


def _shown(f: dataclasses.Field) -> str:
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)


def config_from_args(args: argparse.Namespace) -> Any:
    from cudaperf.train.config import from_plain, load_config

    cls = args._config_class
    if args.config and args.train_command == "eval":
        base = json.loads(open(args.config, encoding="utf-8").read())
    else:
        base = dataclasses.asdict(load_config(args.config)) if args.config else {}
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
             if getattr(args, f.name) is not None}
    return from_plain(cls, {**base, **given})


def run(args: argparse.Namespace) -> int:
    from cudaperf.train.config import ConfigError

    if not getattr(args, "train_command", None):
        print("cudaperf train: choose 'sft' or 'rl' (see --help)", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args)
        if args.train_command == "sft" and args.dry_run:
            return _dry_run(config)
        if args.train_command == "sft" and args.build_examples:
            return _build_examples(config, Path(args.build_examples))
        if args.train_command == "sft":
            from cudaperf.train.sft import run_sft

            report = run_sft(config)
        elif args.train_command == "eval":
            return _eval(config)
        else:
            from cudaperf.train.rl import run_rl

            report = run_rl(config)
    except (ConfigError, FileNotFoundError, ValueError) as exc:  # TaskSpecError, BackendSpecError too
        print(f"cudaperf train {args.train_command}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(report), indent=2, default=str))
    return 0


def _dry_run(config: Any) -> int:
    from cudaperf.train.models import load_policy
    from cudaperf.train.sft import examples_by_split

    _, tokenizer = load_policy(config)
    for split, got in examples_by_split(config, tokenizer).items():
        print(f"{split}: {got.tasks} tasks, {len(got.first)} examples kept; {got.lengths.line()}")
        if got.second:
            print(f"{split}: {len(got.second)} second-turn examples kept")
    return 0


def _build_examples(config: Any, path: Path) -> int:
    from cudaperf.train.sft import build_examples_file

    built = build_examples_file(config, path)
    print(f"{built.path}: {built.train_examples} train, {built.val_examples} val examples, fingerprint "
          f"{built.fingerprint}; first turns: {built.first_turn_lengths.line()}")
    return 0


def _eval(config: Any) -> int:
    from cudaperf.train.compare import COMPARISON_MD, run_compare

    report = run_compare(config)
    print((Path(report.output_dir) / COMPARISON_MD).read_text(), end="")
    print(f"{report.runs_done} runs complete ({report.runs_skipped} from earlier calls), "
          f"{report.runs_unfinished} unfinished; {report.output_dir}/comparison.json")
    if report.runs_unfinished:
        print("not finished: run the same command again (complete runs are skipped, partial ones continue)")
    return 0
