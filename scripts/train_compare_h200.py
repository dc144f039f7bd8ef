"""The before/after comparison the lead runs on the H200 after `scripts/train_h200.py` (issue 23, item 6):
the base SmolLM2-135M-Instruct, the SFT model and the RL model on held-out tasks of the training families
and on the held-out (test) families, through the agent loop with real kernel evaluation, over three seeds.

    python3 scripts/train_h200.py --out "$OUT/train"              # until it prints "done"
    python3 scripts/train_compare_h200.py --out "$OUT/compare"    # until it prints "done"

Models default to `--work`'s `sft/final` and `rl/final` (what train_h200.py leaves under /tmp on the
same warm machine) and `--base` (smollm2); a model directory that is missing is left out with a note. One call
starts no round after --max-minutes (default 8.5, so a 10-minute call holds it); runs and their
trajectories stay under --work/compare between calls, complete (model, set, seed) runs are skipped and
a partial one continues from its last turn. By default every (set, seed) run of a model goes through one
agent loop side by side (`CompareConfig.batch_seeds`): one generate call per round for all of them.
Each call copies comparison.md / comparison.json and every run's figures.json to --out and prints the table
(mean ± std (min–max) over the seeds done so far) and a `RESULT compare` line.

`--kinds` and `--families` narrow every set (e.g. to the families RL trained on, where a set round-robin
over all families holds few of their tasks); `--min-headroom X` to the tasks the dataset's measurements
show X or more room over their baseline on (`datasets.measure.headroom`).

Prints: per model and task set, first-turn and best-of-turns correct rate, fast_1 (and counting only
speedups whose 95% lower bound clears 1.0x), geometric-mean
speedup (solved tasks; all tasks with unsolved = 1), mean structural score, anti-cheat flagged share.

Not covered: training (train_h200.py), plots (`cudaperf report --html` over a run's trajectories.jsonl).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from cudaperf.agent.backends.base import GENERATION_CACHES
    from cudaperf.agent.backends.decoding_attention import DECODING_ATTENTION

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "runs")) / "compare")
    p.add_argument("--work", type=Path, default=Path("/tmp/cudaperf_train"))
    p.add_argument("--name", default="compare",
                   help="the comparison's folder under --work: another name keeps a comparison of other sets "
                        "or settings apart from an earlier one (a folder resumes only its own settings)")
    p.add_argument("--max-minutes", type=float, default=8.5, help="start no round after this")
    p.add_argument("--models", nargs="*", default=None,
                   help="NAME=SPEC entries (default: base=smollm2, sft=WORK/sft/final, rl=WORK/rl/final)")
    p.add_argument("--sets", nargs="+", default=["heldout", "test"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--turns", type=int, default=2)
    p.add_argument("--limit-tasks", type=int, default=8, help="tasks per set, round-robin over families")
    p.add_argument("--kinds", nargs="*", default=[],
                   help="only tasks of these kinds (pytorch, c; empty: both)")
    p.add_argument("--families", nargs="*", default=[],
                   help="only tasks of these families (empty: all), e.g. the ones RL trained on")
    p.add_argument("--min-headroom", type=float, default=0.0,
                   help="only tasks the --measurements show this much room over the baseline or more "
                        "(CompareConfig.min_headroom; 0: every task)")
    p.add_argument("--measurements", default="benchmarks/dataset_measure",
                   help="the dataset measurements --min-headroom reads")
    p.add_argument("--max-new-tokens", type=int, default=1536)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--eval-mode", default="rl", choices=("rl", "default"))
    p.add_argument("--generation-cache", default="dynamic", choices=GENERATION_CACHES,
                   help="KV cache of the local models' generate (CompareConfig.generation_cache)")
    p.add_argument("--generation-attention", default="no_cudnn", choices=DECODING_ATTENTION,
                   help="attention kernels of the local models' generate "
                   "(CompareConfig.generation_attention)")
    p.add_argument("--base", default="smollm2", help="the base model's spec ('hf:DIR': a tiny smoke model; "
                   "'none': leave it out, when its runs were measured in an earlier lease)")
    p.add_argument("--profile-decoding", action="store_true",
                   help="time and profile each model's first generate call (CompareConfig.profile_decoding)")
    p.add_argument("--separate-seeds", action="store_true",
                   help="one agent loop per (set, seed) run instead of all of a model's runs side by side "
                   "(CompareConfig.batch_seeds; batching is what makes the default fit one call)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="run here on the CPU (models from train_h200.py --cpu-smoke; pure-PyTorch answers "
                   "judged by the CPU worker)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    os.environ.setdefault("CUDAPERF_CACHE_DIR", str(args.work / "cache"))  # the converted model, builds
    from cudaperf.train.compare import COMPARISON_MD, run_compare
    from cudaperf.train.compare_table import HEADLINE_FIGURES

    models = args.models if args.models is not None else _default_models(args)
    if not models:
        print("no model to compare (train first: scripts/train_h200.py)", file=sys.stderr)
        return 2
    config = compare_config(args, models)
    report = run_compare(config)
    _copy_out(Path(config.output_dir), args.out)
    print((Path(config.output_dir) / COMPARISON_MD).read_text(), end="")
    print(f"{report.runs_done} runs complete ({report.runs_skipped} from earlier calls), "
          f"{report.runs_unfinished} unfinished; {(time.monotonic() - started) / 60:.1f} min this call")
    print("RESULT compare " + json.dumps({
        "runs_done": report.runs_done, "runs_unfinished": report.runs_unfinished,
        "table": {f"{m}/{s}": {k: (row[k]["mean"], row[k]["std"]) for k in HEADLINE_FIGURES}
                  for m, by_set in report.table.items() for s, row in by_set.items()}}), flush=True)
    print("done" if report.finished else "not finished: call the same command again (it resumes from /tmp)")
    return 0


def compare_config(args: argparse.Namespace, models: list[str]) -> Any:
    """The `CompareConfig` the arguments ask for (its own checks refuse a bad kind or set)."""
    from cudaperf.train.compare import CompareConfig

    return CompareConfig(
        models=tuple(models), sets=tuple(args.sets), output_dir=str(args.work / args.name),
        seeds=tuple(args.seeds), turns=args.turns, limit_tasks=args.limit_tasks,
        kinds=tuple(args.kinds), families=tuple(args.families), min_headroom=args.min_headroom,
        measurements=args.measurements if args.min_headroom else "",
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, eval_mode=args.eval_mode,
        max_minutes=args.max_minutes, device="cpu" if args.cpu_smoke else "cuda",
        batch_seeds=not args.separate_seeds, generation_cache=args.generation_cache,
        generation_attention=args.generation_attention,
        profile_decoding=args.profile_decoding,
        eval_device="cpu" if args.cpu_smoke else "cuda", allow_torch_ops=args.cpu_smoke)


def _default_models(args: argparse.Namespace) -> list[str]:
    models = [f"base={args.base}"] if args.base != "none" else []
    for name in ("sft", "rl"):
        final = args.work / name / "final"
        if (final / "config.json").is_file():
            models.append(f"{name}={final}")
        else:
            print(f"note: {final} is missing: {name} left out", file=sys.stderr)
    return models


def _copy_out(work: Path, out: Path) -> None:
    """The table and each run's figures (small) to --out; trajectories stay under --work."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("comparison.md", "comparison.json", "compare_config.json"):
        if (work / name).is_file():
            shutil.copy(work / name, out / name)
    runs = {str(p.parent.relative_to(work)): json.loads(p.read_text())
            for p in work.glob("*/*/*/figures.json")}
    (out / "runs.json").write_text(json.dumps(runs, indent=1) + "\n")
    for probe in work.glob("*/decoding_probe.txt"):  # each model's first generate call
        shutil.copy(probe, out / f"{probe.parent.name}-decoding_probe.txt")


if __name__ == "__main__":
    sys.exit(main())
