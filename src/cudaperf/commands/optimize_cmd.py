"""`cudaperf optimize`: a model writes kernels for tasks, reads the judge's feedback and rewrites them.

  cudaperf optimize TASK... [--turns N] [--samples K] [--model SPEC] [--target-speedup X] [--out DIR]
                   [--resume] [--device auto|cuda|cpu|none] [--mode default|rl] [--limit N]
                   [more options: --help]

TASK is a task file, a directory, `examples`, `split:test` (the dataset's test split), `split:NAME:DIR` (a
built dataset) or `kernelbench:PATH[:LEVELS]`. Over a task set this is how a model is benchmarked: a
progress bar per finished turn, every turn appended to DIR/trajectories.jsonl as it finishes (so
`--resume` continues an interrupted run), and at the end fast_p per turn (over tasks, each task's best
kernel so far), the best kernel of each task in DIR/best/, and DIR/summary.json + summary.md.

Exit status: 0 when the run finished, 2 for a usage error (no tasks, a bad spec or model, an existing run
without --resume, or a --resume whose settings differ from the run's).

Not covered: the loop itself (`cudaperf.agent.loop`), the model backends (`cudaperf.agent.backends`), the
HTML page (`cudaperf report --html`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Self

# Settings a resumed run must share with the run it continues (the trajectories would not mix otherwise).
RESUME_KEYS = ("model", "samples", "format", "reward", "baseline", "allow_torch_ops")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("Not covered")[0].split("\n", 1)[1]
    parser.add_argument("tasks", nargs="+", metavar="TASK",
                        help="task file, directory, examples, split:NAME[:DIR], kernelbench:PATH[:LEVELS]")
    parser.add_argument("--turns", type=int, default=4, help="turns per trajectory (default 4)")
    parser.add_argument("--samples", type=int, default=1, help="trajectories per task (default 1)")
    parser.add_argument("--model", default="smollm2", help="backend spec: smollm2, hf:PATH, "
                        "openai:URL[:MODEL], replay:FILE, pkg.module:factory (default smollm2)")
    parser.add_argument("--target-speedup", type=float, default=None,
                        help="stop a trajectory once a correct kernel reaches this speedup")
    parser.add_argument("--out", type=Path, default=Path("runs/optimize"), help="output directory")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="start no round after this many minutes (--resume continues the run)")
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu", "none"),
                        help="evaluator device (none: build and static checks only)")
    parser.add_argument("--format", default="fast", choices=("fast", "inline"),
                        help="solution format asked for")
    parser.add_argument("--accept-other-format", action="store_true",
                        help="evaluate answers in the other format too (off: told to the model, not run; a "
                        "load_inline answer's native host code could claim its own timings)")
    parser.add_argument("--baseline", default="auto", help="speedup that counts: auto, eager, compile, "
                        "serial_c, naive_cuda (auto: eager for PyTorch tasks, naive_cuda for C tasks)")
    parser.add_argument("--reward", default="cudaperf", help="reward preset: cudaperf, kevin, cuda-agent, "
                        "or pkg.module:function")
    parser.add_argument("--ranker", default=None, help="pkg.module:callable scoring (source, task, config)")
    parser.add_argument("--max-new-tokens", type=int, default=2048)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=None, help="sampling seed")
    parser.add_argument("--generate-batch", type=int, default=0,
                        help="conversations per backend call (0: all)")
    parser.add_argument("--history", type=int, default=2, help="earlier turns shown in full (default 2)")
    parser.add_argument("--feedback-tokens", type=int, default=1200, help="feedback budget in tokens")
    parser.add_argument("--max-prompt-tokens", type=int, default=None, help="shrink the history to fit")
    parser.add_argument("--limit", type=int, default=0,
                        help="at most this many tasks, round-robin over families")
    parser.add_argument("--kinds", default="", help="comma list: pytorch,c (default both)")
    parser.add_argument("--families", default="", help="comma list of families (default all)")
    parser.add_argument("--seeds", type=int, default=3, help="correctness seeds per configuration")
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument("--mode", default="default", choices=("default", "rl"),
                        help="evaluation mode: rl schedules the same checks for batches (several workers "
                        "per GPU, baselines cached per task and configuration, ranking budgets)")
    parser.add_argument("--allow-torch-ops", action="store_true",
                        help="accept torch compute ops in candidates (pure-PyTorch task sets, CPU runs)")
    parser.add_argument("--ray-address", default=None, metavar="ADDRESS",
                        help="evaluate on a Ray pool, one actor per GPU (cudaperf.scale; docs/scale.md): "
                        "auto, HOST:PORT, ray://HOST:PORT, or local (a Ray instance started here)")


def run(args: argparse.Namespace) -> int:
    from cudaperf.agent.taskset import TaskSpecError, resolve

    if args.turns < 1 or args.samples < 1:
        return _usage("--turns and --samples must be at least 1")
    try:
        taskset = resolve(args.tasks, kinds=_csv(args.kinds), families=_csv(args.families), limit=args.limit)
    except TaskSpecError as exc:
        return _usage(str(exc))
    for error in taskset.errors:
        print(f"cudaperf optimize: skipped a broken task: {error}", file=sys.stderr)
    if not taskset.tasks:
        return _usage("no tasks to optimise")
    settings = _settings(args)
    problem = _check_out_dir(args.out, settings, args.resume)
    if problem:
        return _usage(problem)
    return _run(args, list(taskset.tasks), settings)


def _run(args: argparse.Namespace, tasks: list, settings: dict[str, Any]) -> int:
    from cudaperf.agent.backends.base import BackendSpecError, load_backend
    from cudaperf.agent.loop import refine
    from cudaperf.agent.pending_replies import PendingReplies
    from cudaperf.agent.summary import summary_dict, write_best_kernels, write_summary
    from cudaperf.agent.trajectory import TrajectoryStore

    try:
        config, eval_config, ranker = _configs(args)
        backend = load_backend(args.model)
    except (BackendSpecError, ValueError, TypeError) as exc:
        return _usage(str(exc))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "run.json").write_text(json.dumps(settings, indent=1, sort_keys=True))
    store = TrajectoryStore(args.out / "trajectories.jsonl")
    if not args.resume:  # replies a stopped run left are not this run's (its settings may differ)
        PendingReplies.beside(store.path).clear()
    try:
        total = len(tasks) * args.samples * args.turns
        with _evaluator(args.ray_address, eval_config) as evaluator, _Progress(total) as bar:
            deadline_s = args.max_minutes * 60 if args.max_minutes is not None else None
            result = refine(tasks, backend, evaluator, config, store, ranker=ranker, on_turn=bar.advance,
                            deadline_s=deadline_s)
    finally:
        backend.close()
    summary = summary_dict(result.trajectories, result.rounds, args.turns)
    write_summary(summary, args.out)
    best = write_best_kernels(result.trajectories, args.out / "best")
    _print_summary(summary, args.out, len(best), result.resumed_turns)
    if result.unfinished:
        print(f"stopped by --max-minutes with {result.unfinished} trajectories unfinished: add --resume to "
              "continue")
    return 0


def _evaluator(ray_address: str | None, eval_config: Any) -> Any:
    """The local evaluator, or the Ray evaluation pool when --ray-address is given."""
    if ray_address:
        from cudaperf.scale import RayEvaluator

        return RayEvaluator.at(ray_address, eval_config)
    from cudaperf.agent.evaluation import LocalEvaluator

    return LocalEvaluator(eval_config)


def _configs(args: argparse.Namespace):
    from cudaperf.agent.backends.base import GenerationConfig
    from cudaperf.agent.context import ContextConfig
    from cudaperf.agent.environment import EnvConfig
    from cudaperf.agent.feedback import FeedbackConfig
    from cudaperf.agent.loop import RefineConfig
    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig, TimingConfig
    from cudaperf.reward import import_object

    policy = Policy(allow_torch_ops=args.allow_torch_ops)
    env = EnvConfig(format=args.format, accept_other_format=args.accept_other_format,
                    baseline=args.baseline, reward=args.reward, policy=policy,
                    feedback=FeedbackConfig(budget_tokens=args.feedback_tokens),
                    context=ContextConfig(history_window=args.history,
                                          max_prompt_tokens=args.max_prompt_tokens))
    generation = GenerationConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                  top_p=args.top_p, seed=args.seed)
    config = RefineConfig(turns=args.turns, samples=args.samples, target_speedup=args.target_speedup,
                          generation=generation, env=env, generate_batch=args.generate_batch)
    eval_config = EvalConfig(device=args.device, seeds=args.seeds, policy=policy,
                             timing=TimingConfig(enabled=not args.no_timing), mode=args.mode)
    ranker = import_object(args.ranker) if args.ranker else None
    return config, eval_config, ranker


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"model": args.model, "samples": args.samples, "turns": args.turns, "format": args.format,
            "reward": args.reward, "baseline": args.baseline, "allow_torch_ops": args.allow_torch_ops,
            "target_speedup": args.target_speedup, "device": args.device, "tasks": list(args.tasks),
            "mode": args.mode,
            "max_new_tokens": args.max_new_tokens, "temperature": args.temperature}


def _check_out_dir(out: Path, settings: dict[str, Any], resume: bool) -> str | None:
    """Why `out` cannot be used for this run, or None."""
    trajectories = out / "trajectories.jsonl"
    if not trajectories.exists() or trajectories.stat().st_size == 0:
        return None
    if not resume:
        return f"{trajectories} already holds a run: pass --resume to continue it, or choose another --out"
    try:
        earlier = json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        return None  # no record of the settings: trust the caller
    differ = [k for k in RESUME_KEYS if earlier.get(k) != settings.get(k)]
    if differ:
        pairs = ", ".join(f"{k}: {earlier.get(k)!r} -> {settings.get(k)!r}" for k in differ)
        return f"--resume with settings that differ from the run in {out} ({pairs})"
    return None


def _print_summary(summary: dict, out: Path, best_files: int, resumed: int) -> None:
    from cudaperf.agent.summary import markdown

    print(markdown(summary), end="")
    note = f", {resumed} turns resumed from the file" if resumed else ""
    print(f"\n{summary['tasks']} tasks, {summary['trajectories']} trajectories{note}; "
          f"{best_files} best kernels in {out / 'best'}; trajectories in {out / 'trajectories.jsonl'}")


class _Progress:
    """A rich progress bar over turns (the total is an upper bound: early stops end trajectories sooner)."""

    def __init__(self, total: int):
        self.total, self._bar, self._id = total, None, None

    def __enter__(self) -> Self:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("[bold]optimize"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("{task.description}"), transient=False)
        self._bar.start()
        self._id = self._bar.add_task("", total=self.total)
        return self

    def advance(self, record) -> None:
        speed = f" {record.speedup:.2f}x" if record.speedup is not None else ""
        what = f"{record.task_id} s{record.sample} t{record.turn + 1}: {record.result.outcome.value}{speed}"
        self._bar.update(self._id, advance=1, description=what)

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _usage(message: str) -> int:
    print(f"cudaperf optimize: {message}", file=sys.stderr)
    return 2
