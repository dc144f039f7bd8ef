"""`cudaperf rank train | eval | score`: the offline pairwise ranker from the command line (issue 20).

- `rank train [--out MODEL] [--measure DIR]...`: train the feature ranker on every correct measured row
  and save it with its feature schema and library versions (default: the model shipped in the package).
- `rank eval [--out DIR] [--lm tiny|none|MODEL_DIR]`: every figure (leave-one-group-out, test families,
  length-controlled pairs, gap buckets, Kendall tau, calibration, baselines, the LM ranker beside it,
  pre-filter replay, speed) as `ranker_eval.json` and `ranker_eval.md` under DIR. With `--fresh DIR`
  (repeatable) only the saved model (`--model`, default the shipped one) on the fresh families' measured
  rows, beside the baselines, as `fresh_eval.json` and `fresh_eval.md`.
- `rank score --task TASK FILE... [--config NAME] [--model MODEL] [--explain N] [--json]`: rank candidate
  solution files of one task, best first (mean score over the task's configurations unless --config).
  TASK is a task file (`.py` PyTorch module or `.ctask.json`) or a dataset task id. The candidates'
  host code runs on meta tensors in this process (to read their launches), or with `--sandbox` in a
  sandboxed CPU worker (`cudaperf.execute`): use it for files you did not write.

Not covered: the ranker itself (`cudaperf.ranker`); wiring the score into the reward (the caller passes
`cudaperf.ranker.contract.reward_probability(...)` as `compute_reward(..., ranker_score=...)`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="rank_command", metavar="ACTION", required=True)
    train = sub.add_parser("train", help="train the feature ranker on the measured dataset and save it")
    _data_args(train)
    train.add_argument(
        "--out",
        type=Path,
        default=None,
        help="model file (.json.gz); default: the model shipped in the package",
    )
    ev = sub.add_parser("eval", help="every figure of the ranker beside its baselines")
    _data_args(ev)
    ev.add_argument("--out", type=Path, required=True, help="directory for ranker_eval.json and .md")
    ev.add_argument(
        "--lm", default="tiny", help="LM backend: tiny (from a config), none, or a model directory"
    )
    ev.add_argument("--lm-steps", type=int, default=600, help="LM training steps (batches of pairs)")
    ev.add_argument("--lm-device", default="cpu", help="cpu or cuda")
    ev.add_argument("--families", default="", help="comma-separated families only (a quick run)")
    ev.add_argument(
        "--fresh",
        type=Path,
        action="append",
        default=None,
        help="shards of the fresh families' measurement (repeatable): score the saved model there only",
    )
    ev.add_argument("--model", type=Path, default=None, help="with --fresh: model file (default: shipped)")
    ev.add_argument(
        "--lm-scores",
        type=Path,
        default=None,
        help="lm_scores.json of scripts/ranker_lm_h200.py, shown beside the others on the test families",
    )
    score = sub.add_parser("score", help="rank candidate solution files of one task, best first")
    score.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="candidate solutions (fast format)"
    )
    score.add_argument("--task", required=True, help="task file (.py or .ctask.json) or a dataset task id")
    score.add_argument("--config", default=None, help="one configuration (default: mean over all)")
    score.add_argument("--model", type=Path, default=None, help="model file (default: the shipped one)")
    score.add_argument(
        "--explain", type=int, default=0, metavar="N", help="show the N features that moved each score"
    )
    score.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    score.add_argument(
        "--sandbox",
        action="store_true",
        help="run the candidates' host code in a sandboxed CPU worker (untrusted files)",
    )


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--measure",
        type=Path,
        action="append",
        default=None,
        help="measurement shards directory (repeatable; default benchmarks/dataset_measure)",
    )
    p.add_argument("--cache", type=Path, default=Path(".cache/ranker"), help="feature cache directory")
    p.add_argument("--workers", type=int, default=2, help="processes computing missing features")


def run(args: argparse.Namespace) -> int:
    return {"train": _train, "eval": _eval, "score": _score}[args.rank_command](args)


def _measure_dirs(args) -> tuple[Path, ...]:
    return tuple(args.measure or [Path("benchmarks/dataset_measure")])


def _train(args) -> int:
    from cudaperf.ranker.feature_ranker import FeatureRanker
    from cudaperf.ranker.pairs import make_pairs
    from cudaperf.ranker.store import default_model_path, save_model
    from cudaperf.ranker.table import build_table

    table = build_table(_measure_dirs(args), cache_dir=args.cache, workers=args.workers, progress=True)
    if not len(table):
        print("cudaperf rank train: no correct measured rows found", file=sys.stderr)
        return 2
    model = FeatureRanker.fit(table)
    out = args.out or default_model_path()
    info = {
        "measure_dirs": [str(d) for d in _measure_dirs(args)],
        "rows": len(table),
        "pairs": len(make_pairs(table)),
        "families": sorted(set(table.family)),
    }
    save_model(model, out, info)
    print(f"trained on {len(table)} rows of {len(info['families'])} families; wrote {out}")
    return 0


def _eval(args) -> int:
    if args.fresh:
        return _eval_fresh(args)
    from cudaperf.ranker.lm_ranker import LMRankerConfig
    from cudaperf.ranker.report import EvalOptions, evaluate_all, render_markdown

    options = EvalOptions(
        _measure_dirs(args),
        args.cache,
        args.workers,
        args.lm,
        args.lm_scores,
        LMRankerConfig(steps=args.lm_steps, device=args.lm_device),
        families=tuple(f for f in args.families.split(",") if f),
    )
    results = evaluate_all(options)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ranker_eval.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    (args.out / "ranker_eval.md").write_text(render_markdown(results))
    print(f"wrote {args.out / 'ranker_eval.json'} and {args.out / 'ranker_eval.md'}")
    return 0


def _eval_fresh(args) -> int:
    from cudaperf.ranker.report import evaluate_fresh, render_fresh_markdown

    results = evaluate_fresh(tuple(args.fresh), args.model, args.cache, args.workers)
    if "error" in results:
        print(f"cudaperf rank eval --fresh: {results['error']}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fresh_eval.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    (args.out / "fresh_eval.md").write_text(render_fresh_markdown(results))
    print(f"wrote {args.out / 'fresh_eval.json'} and {args.out / 'fresh_eval.md'}")
    return 0


def _load_task(spec: str):
    from cudaperf.tasks import TaskError, load_task

    if Path(spec).exists():
        try:
            return load_task(spec)
        except TaskError as exc:
            return f"cannot load task {spec}: {exc}"
    from cudaperf.datasets import registry

    found = next((t for t in registry.build_index(0) if t.task_id == spec), None)
    return found if found is not None else f"no task file or dataset task id {spec!r}"


def _score(args) -> int:
    with _pool(args.sandbox) as pool:
        return _score_with(args, pool)


def _pool(sandbox: bool):
    import contextlib

    if not sandbox:
        return contextlib.nullcontext(None)
    from cudaperf.execute import WorkerPool

    return WorkerPool(None, preload=("torch",))


def _score_with(args, pool) -> int:
    import numpy as np

    from cudaperf.ranker.problem import Problem
    from cudaperf.ranker.store import load_model

    loaded = load_model(args.model, pool=pool)
    if loaded.backend is None:
        print(f"cudaperf rank score: {loaded.error}", file=sys.stderr)
        return 2
    for w in loaded.warnings:
        print(f"warning: {w}", file=sys.stderr)
    task = _load_task(args.task)
    if isinstance(task, str):
        print(f"cudaperf rank score: {task}", file=sys.stderr)
        return 2
    problem = Problem.of(task)
    configs = [args.config] if args.config else list(problem.config_names)
    if args.config and args.config not in problem.config_names:
        print(
            f"cudaperf rank score: no configuration {args.config!r} (has {', '.join(problem.config_names)})",
            file=sys.stderr,
        )
        return 2
    sources = [f.read_text() for f in args.files]
    per_config = np.asarray([loaded.backend.score_many(sources, problem, c) for c in configs])
    mean = per_config.mean(axis=0)
    order = np.argsort(-mean, kind="stable")
    for rank, i in enumerate(order, 1):
        why = loaded.backend.explain(sources[i], problem, configs[0], args.explain) if args.explain else []
        _print_row(
            args,
            rank,
            args.files[i],
            float(mean[i]),
            loaded.backend.probability_of_score(mean[i]),
            dict(zip(configs, per_config[:, i].tolist(), strict=True)),
            why,
        )
    return 0


def _print_row(args, rank: int, path: Path, score: float, prob: float, per: dict, why: list) -> None:
    if args.json:
        print(
            json.dumps(
                {
                    "rank": rank,
                    "file": str(path),
                    "score": score,
                    "p_faster_than_typical": prob,
                    "per_config": per,
                    "explain": why,
                }
            )
        )
        return
    configs = " ".join(f"{c}={s:+.2f}" for c, s in per.items())
    print(f"{rank:3d}. {path}  score {score:+.3f}  P(faster than typical) {prob:.2f}  [{configs}]")
    for name, value in why:
        print(f"       {name:28s} {value:+.3f}")
