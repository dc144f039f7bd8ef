"""The training run the lead runs on the H200 (issue 23, item 6): SmolLM2-135M-Instruct -> SFT on the
dataset's verified implementations -> a few GRPO steps over multi-turn refinement with real kernel
evaluation. Prints a table and writes it (and the metrics) under --out.

    python3 scripts/train_h200.py --out "$OUT/train"            # call again until it prints "done"

One call stops starting work after --max-minutes (default 8.5, so a 10-minute call holds it; each stage's
own budget is what is left less --margin-minutes, counted from the stage's start (its loading and examples
included), so the margin covers a step longer than the one before it and the final save); every stage
checkpoints under --work (default /tmp/cudaperf_train, which survives between back-to-back calls on the
same warm machine: a 135M checkpoint is too large to come back through $OUT) and the next call resumes
where the last one stopped: SFT from its last checkpoint, RL from its last checkpoint once SFT is final.

Needs on the machine: trl 1.16 and datasets (wheels carried, see shared/docs/gpu-machine.md), the
SmolLM2 GGUF and `gguf` (as for `cudaperf optimize --model smollm2`). Everything is a field of
`cudaperf.train.config.SftConfig` / `RlConfig`; the options below set the ones a lead tunes per call.

Prints: per stage its steps and minutes; SFT's examples, token lengths, last train and eval loss; per RL
step the mean turn score and sample reward, each reward component, correct rate (all turns, first turn,
best of turns), geometric-mean speedup of correct turns, anti-cheat flags by kind, tokens per turn, and the
time split (generation, evaluation, optimiser) with turns per minute. One `RESULT sft ...` / `RESULT rl ...`
line per stage as it ends; --out gets the JSON and each stage's metrics.jsonl after each stage (a call
killed later keeps them). With --final-on-limit a stage stopped by its budget still leaves a `final/`
model: its last checkpoint, marked by `stopped_early.json` (the next stage and the comparison use it; a
LoRA checkpoint merged into the stage's starting model). With --sft-lora-rank SFT trains LoRA adapters and
keeps the adapter in sft/final/adapter (megabytes: it can come back through $OUT and be carried to a later
lease, where --sft-from-adapter makes sft/final from it and the base without training). With --rl-lora-rank
RL trains LoRA adapters too, kept in rl/final/adapter with `rl_lineage.json` (the RL steps behind it, over
every lease); --rl-from-adapter starts RL from sft/final merged with such an adapter (rl_start/), so RL
continues in a later lease, with a fresh optimiser, on a new adapter; --rl-final-from-adapter makes
rl/final from sft/final and such an adapter without training (a later lease that compares it);
--rl-from-state DIR continues an earlier lease's RL run itself from its last checkpoint, carried without
its optimiser state: the same adapter, the same data order (the tasks after those it trained on), a fresh
optimiser, refused when the checkpoint was trained on another SFT model (`rl_base.json`).
--build-sft-examples FILE builds SFT's examples with the options given and stops (on a machine without a
GPU, before the lease); --sft-examples FILE trains on them (built in the run when the file was built for
other options or another tokenizer). --sft-continue trains an SFT stopped by its limit on from its
last checkpoint (a second call); --sft-from-state DIR from an earlier lease's last checkpoint, carried
without its optimiser state.

Not covered: the before/after comparison of base, SFT and RL models on held-out tasks over several seeds
(`scripts/train_compare_h200.py`, run after this one on the same warm machine), verl.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from cudaperf.agent.backends.base import GENERATION_CACHES
    from cudaperf.agent.backends.decoding_attention import DECODING_ATTENTION
    from cudaperf.train.config import GENERATION_WEIGHTS, TIMING_BASELINES
    from cudaperf.train.credit import TURN_SCORES

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "runs")) / "train")
    p.add_argument("--work", type=Path, default=Path("/tmp/cudaperf_train"))
    p.add_argument("--max-minutes", type=float, default=8.5, help="start no work after this")
    p.add_argument("--margin-minutes", type=float, default=1.0,
                   help="kept free at the end of each stage's budget (a longer last step, saving)")
    p.add_argument("--sft-max-minutes", type=float, default=0.0, help="SFT's own budget (0: what is left)")
    p.add_argument("--rl-max-minutes", type=float, default=0.0, help="RL's own budget (0: what is left)")
    p.add_argument("--final-on-limit", action="store_true",
                   help="a stage stopped by its budget promotes its last checkpoint to final/")
    p.add_argument("--sft-max-steps", type=int, default=-1, help="SFT optimiser steps (-1: the epochs')")
    p.add_argument("--sft-stop-at-step", type=int, default=0,
                   help="stop SFT after this many steps, the schedule unchanged (0: no such stop)")
    p.add_argument("--sft-max-length", type=int, default=4096, help="longest example (keeps them all)")
    p.add_argument("--sft-val-limit-tasks", type=int, default=64,
                   help="validation tasks for the eval loss (every 200 steps and at the end)")
    p.add_argument("--sft-fastest-per-task", type=int, default=0,
                   help="each task's k fastest measured implementations (SftConfig.fastest_per_task)")
    p.add_argument("--sft-refine-per-task", type=int, default=0,
                   help="second-turn examples a task, improving on a slower measured implementation "
                   "(SftConfig.refine_per_task)")
    p.add_argument("--sft-refine-min-speedup", type=float, default=1.2,
                   help="a refinement pair's answer at least this many times faster than its first reply "
                   "(SftConfig.refine_min_speedup)")
    p.add_argument("--sft-refine-from", nargs="*", default=[], metavar="STRATEGY",
                   help="refinement pairs' first replies from these strategies first, in this order "
                   "(SftConfig.refine_from; default: the slowest first)")
    p.add_argument("--sft-repair-per-task", type=int, default=0,
                   help="repair examples a task: a broken copy of a verified implementation, its feedback, "
                   "the intact one (SftConfig.repair_per_task)")
    p.add_argument("--sft-only", action="store_true", help="stop after SFT (RL in a later call)")
    p.add_argument("--promote-only", action="store_true",
                   help="only give each stage without final/ its last checkpoint as final/ (after a kill)")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--sft-epochs", type=float, default=2.0)
    p.add_argument("--sft-batch", type=int, default=16)
    p.add_argument("--sft-lr", type=float, default=1e-4)
    p.add_argument("--sft-limit-tasks", type=int, default=0, help="train tasks (0: all)")
    p.add_argument("--measurements", default="benchmarks/dataset_measure",
                   help="keep implementations measured correct here ('' for all)")
    p.add_argument("--rl-steps", type=int, default=4)
    p.add_argument("--rl-min-headroom", type=float, default=0.0,
                   help="RL only on tasks the --measurements show this much room over the baseline or more "
                        "(RlConfig.min_headroom; 0: every task)")
    p.add_argument("--rl-tasks", nargs="+", default=["split:train"])
    p.add_argument("--rl-limit-tasks", type=int, default=32)
    p.add_argument("--rl-kinds", nargs="+", default=["pytorch", "c"],
                   help="the RL tasks' kinds (RlConfig.kinds): a curriculum starts where SFT succeeds")
    p.add_argument("--rl-families", nargs="*", default=[], help="the RL tasks' families (default: all)")
    p.add_argument("--rl-turns", type=int, default=2)
    p.add_argument("--rl-trajectories", type=int, default=4)
    p.add_argument("--rl-tasks-per-step", type=int, default=4)
    p.add_argument("--rl-max-new-tokens", type=int, default=1536)
    p.add_argument("--rl-lr", type=float, default=2e-6)
    p.add_argument("--rl-iterations", type=int, default=1,
                   help="optimiser steps per rollout batch (RlConfig.num_iterations; --rl-steps a multiple)")
    p.add_argument("--rl-eval-workers-per-gpu", type=int, default=8,
                   help="sandboxed evaluation workers per GPU (RlConfig.eval_workers_per_gpu)")
    p.add_argument("--rl-timing-baselines", default="reward", choices=TIMING_BASELINES,
                   help="what the rollouts' candidates are timed against (RlConfig.timing_baselines)")
    p.add_argument("--rl-share-repeated-answers", action=argparse.BooleanOptionalAction, default=True,
                   help="evaluate each distinct answer once (RlConfig.share_repeated_answers)")
    p.add_argument("--rl-anchor-copies", action=argparse.BooleanOptionalAction, default=True,
                   help="a copy of a C task's naive port takes the port's timings (RlConfig.anchor_copies)")
    p.add_argument("--rl-evaluate-while-generating", action=argparse.BooleanOptionalAction, default=True,
                   help="evaluate each answer as its reply ends, timing after the generation "
                        "(RlConfig.evaluate_while_generating)")
    p.add_argument("--rl-generation-cache", default="dynamic", choices=GENERATION_CACHES,
                   help="the rollouts' KV cache (RlConfig.generation_cache)")
    p.add_argument("--rl-generation-attention", default="no_cudnn", choices=DECODING_ATTENTION,
                   help="the rollouts' attention kernels (RlConfig.generation_attention)")
    p.add_argument("--rl-generation-weights", default="autocast", choices=GENERATION_WEIGHTS,
                   help="how the rollouts' sampler holds the weights (RlConfig.generation_weights)")
    p.add_argument("--rl-profile-decoding", action="store_true",
                   help="time and profile the first rollout's decoding steps (RlConfig.profile_decoding)")
    p.add_argument("--credit", default="turn", choices=("turn", "trajectory"))
    p.add_argument("--rl-turn-score", default="own", choices=TURN_SCORES,
                   help="a turn's score in the returns: its own, or the best up to it (RlConfig.turn_score)")
    p.add_argument("--eval-mode", default="rl", choices=("rl", "default"))
    p.add_argument("--lora", action="store_true", help="LoRA adapters in both stages")
    p.add_argument("--sft-lora-rank", type=int, default=0,
                   help="SFT alone with LoRA adapters of this rank (0: full fine-tuning; RL as --lora says); "
                        "the adapter is kept in sft/final/adapter, megabytes that can leave the machine")
    p.add_argument("--sft-from-adapter", type=Path, default=None,
                   help="no SFT training: sft/final is the base model merged with this LoRA adapter folder "
                        "(an earlier run's sft/final/adapter)")
    p.add_argument("--sft-init-adapter", type=Path, default=None,
                   help="SFT's LoRA adapter starts from this one's weights (an earlier run's "
                        "sft/final/adapter, the same rank) and trains on this run's examples: a second "
                        "stage of SFT (SftConfig.init_adapter)")
    p.add_argument("--sft-examples", type=Path, default=None,
                   help="train SFT on this file's examples (--build-sft-examples, built on another machine "
                        "with the same SFT options) instead of building them here; a file built for other "
                        "options or another tokenizer is refused and the examples are built here")
    p.add_argument("--build-sft-examples", type=Path, default=None,
                   help="build SFT's examples with these options into this file and stop (no training)")
    p.add_argument("--sft-continue", action="store_true",
                   help="an SFT run stopped early by its time limit trains on from its last checkpoint "
                        "(without this its promoted model is final)")
    p.add_argument("--sft-save-steps", type=int, default=100, help="SFT checkpoints every this many steps")
    p.add_argument("--sft-from-state", type=Path, default=None,
                   help="SFT continues from this checkpoint of an earlier lease's run, carried without its "
                        "optimiser state (export_sft_state in model_day.sh): placed in sft/ as its "
                        "checkpoint when sft/ holds none, then resumed with the same data order and schedule")
    p.add_argument("--rl-lora-rank", type=int, default=0,
                   help="RL alone with LoRA adapters of this rank (0: as --lora says); the adapter is kept "
                        "in rl/final/adapter with its lineage (rl_lineage.json), megabytes that can leave "
                        "the machine")
    p.add_argument("--rl-from-adapter", type=Path, default=None,
                   help="RL starts from sft/final merged with this adapter of an earlier RL run (its "
                        "rl/final/adapter): RL continued in a later lease, a new adapter trained on top")
    p.add_argument("--rl-from-state", type=Path, default=None,
                   help="RL continues from this checkpoint of an earlier lease's RL run, carried without its "
                        "optimiser state (export_rl_state in model_day.sh): placed in rl/ as its checkpoint "
                        "when rl/ holds none, then resumed with the same adapter and data order; --rl-steps "
                        "must exceed its step")
    p.add_argument("--rl-final-from-adapter", type=Path, default=None,
                   help="no RL training: rl/final is sft/final merged with this adapter of an earlier RL run "
                        "(its rl/final/adapter, with rl_lineage.json), so that a later lease compares it")
    p.add_argument("--rl-final-name", default="rl",
                   help="the model folder --rl-final-from-adapter makes under --work (NAME/final), e.g. "
                        "rl@seed1: a training seed of RL that the comparison reports with the others "
                        "(cudaperf.train.training_seeds)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-smoke", action="store_true",
                   help="run here on the CPU (use with --model tiny and small limits): training on the CPU, "
                   "pure-PyTorch answers judged by the CPU worker")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.promote_only:
        bases = {"sft": lambda: _sft_base(args), "rl": lambda: _rl_base(args)}
        current = {stage: _final_is_current(args.work / stage) for stage in ("sft", "rl")}
        done = {stage: current[stage] or _promote(args.work / stage, -1, None, bases[stage])
                for stage in ("sft", "rl")}
        if done["rl"] and not current["rl"]:  # promoted now: its lineage counts the checkpoint's steps
            _write_lineage(args, args.work / "rl" / "final", None)
        _stage_records(args, "rl")  # a train call killed by its limit never copied them
        print("RESULT promote " + json.dumps({f"{k}_final": v for k, v in done.items()}))
        return 0
    if args.rl_from_state is not None and (args.rl_from_adapter or args.rl_final_from_adapter):
        print("--rl-from-state continues one RL run; --rl-from-adapter and --rl-final-from-adapter start or "
              "make another: pass one of them", file=sys.stderr)
        return 2
    started = time.monotonic()
    os.environ.setdefault("CUDAPERF_CACHE_DIR", str(args.work / "cache"))  # the converted model, builds
    if args.build_sft_examples is not None:
        return _build_sft_examples(args)
    missing = [m for m in ("trl", "datasets", "peft") if _missing(m)]
    if missing:
        print(f"missing on this machine: {', '.join(missing)} (carry their wheels)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, object] = {"environment": _environment()}

    def left() -> float:
        return args.max_minutes - (time.monotonic() - started) / 60

    stamp = time.strftime("%Y%m%dT%H%M%S")
    sft = _sft(args, _budget(args.sft_max_minutes, left() - args.margin_minutes))
    rows["sft"] = sft
    _stage_out(args, rows, stamp, "sft")
    print("RESULT sft " + json.dumps({k: v for k, v in sft.items() if k != "final_dir"}, default=str),
          flush=True)
    if sft.get("usable") and args.rl_final_from_adapter is not None:
        rows["rl"] = _rl_final_from_adapter(args, Path(sft["final_dir"]))
        _write(args.out, rows, stamp)
        print("RESULT rl " + json.dumps(rows["rl"], default=str), flush=True)
    elif sft.get("usable") and not args.sft_only and left() > args.margin_minutes + 0.5:
        start = _rl_start(args, Path(sft["final_dir"]))
        rows["rl"] = _rl(args, str(start), _budget(args.rl_max_minutes, left() - args.margin_minutes))
        _stage_out(args, rows, stamp, "rl")
        print("RESULT rl " + json.dumps({k: v for k, v in rows["rl"].items() if k != "per_step"},
                                        default=str), flush=True)
    _print_table(rows)
    rl = rows.get("rl", {})
    done = bool(sft.get("usable")) and (args.sft_only or bool(rl.get("finished") or rl.get("stopped_early")))
    print("done" if done else "not finished: call the same command again (it resumes from /tmp)")
    return 0


def _budget(explicit: float, left: float) -> float:
    """A stage's minutes: its own budget when given, never more than what is left (at least 0.5)."""
    return max(0.5, min(explicit, left) if explicit > 0 else left)


def _stage_out(args: argparse.Namespace, rows: dict, stamp: str, stage: str) -> None:
    """The JSON so far and the stage's records to --out, at once (a later kill keeps them)."""
    _write(args.out, rows, stamp)
    _stage_records(args, stage)


def _stage_records(args: argparse.Namespace, stage: str) -> None:
    """The stage's metrics, rollouts, batches' fingerprints, decoding probe, evaluation stalls (every
    thread's stack) and evaluated candidates, as far as they go, to --out as <stage>_<name>."""
    from cudaperf.agent.backends.decoding_probe import DECODING_PROBE_FILE
    from cudaperf.train.monitor import BATCHES_FILE, EVALUATIONS_FILE, METRICS_FILE, STALLS_FILE
    from cudaperf.train.rl import ROLLOUTS_FILE

    args.out.mkdir(parents=True, exist_ok=True)
    for name in (METRICS_FILE, ROLLOUTS_FILE, BATCHES_FILE, DECODING_PROBE_FILE, STALLS_FILE,
                 EVALUATIONS_FILE):
        if (args.work / stage / name).is_file():
            shutil.copy(args.work / stage / name, args.out / f"{stage}_{name}")


FINAL_SKIP = ("optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin", "rng_state")


def _promote(out: Path, steps: int, max_steps: int | None, base: Callable[[], Path] | None = None) -> bool:
    """Copy the last checkpoint's model (`monitor.last_checkpoint`: the newest with finite weights; not its
    optimiser state) to out/final, marked stopped early; a checkpoint of a LoRA run (an adapter alone) is
    merged into the model `base()` names (the stage's starting model). False when there is no checkpoint, or
    an adapter and no `base`."""
    from cudaperf.train.models import merge_adapter
    from cudaperf.train.monitor import last_checkpoint

    checkpoint = last_checkpoint(out)
    adapter_only = checkpoint is not None and (Path(checkpoint) / "adapter_config.json").is_file()
    if checkpoint is None or not ((Path(checkpoint) / "config.json").is_file() or (adapter_only and base)):
        return False
    final = out / "final"
    scratch = out / "final.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    if adapter_only:
        merge_adapter(base(), Path(checkpoint), scratch)
    else:
        shutil.copytree(checkpoint, scratch,
                        ignore=lambda _d, names: [n for n in names if n.startswith(FINAL_SKIP)])
    (scratch / "stopped_early.json").write_text(json.dumps(
        {"checkpoint": Path(checkpoint).name, "max_steps": max_steps,
         "steps": steps if steps >= 0 else int(Path(checkpoint).name.rsplit("-", 1)[-1])}) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    scratch.rename(final)
    return True


def _final_is_current(out: Path) -> bool:
    """out/final is the stage's last word: a finished run's model, or a promoted checkpoint that is still
    the last one (a run resumed in a later call and killed there has newer checkpoints to promote)."""
    from cudaperf.train.monitor import last_checkpoint

    final = out / "final"
    if not (final / "config.json").is_file():
        return False
    early = final / "stopped_early.json"
    if not early.is_file():
        return True
    checkpoint = last_checkpoint(out)
    return checkpoint is None or json.loads(early.read_text()).get("checkpoint") == Path(checkpoint).name


def _missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


def _environment() -> dict[str, str]:
    import torch

    env = {"torch": torch.__version__, "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    for module in ("transformers", "trl", "peft"):
        env[module] = __import__(module).__version__
    return env


def _sft_config(args: argparse.Namespace, minutes: float):
    from cudaperf.train.config import SftConfig

    measurements = args.measurements if args.measurements and Path(args.measurements).is_dir() else ""
    lora = ({"lora": True, "lora_rank": args.sft_lora_rank} if args.sft_lora_rank > 0
            else {"lora": args.lora})
    return SftConfig(model=args.model, output_dir=str(args.work / "sft"), seed=args.seed,
                     epochs=args.sft_epochs, batch_size=args.sft_batch, learning_rate=args.sft_lr,
                     limit_tasks=args.sft_limit_tasks, val_limit_tasks=args.sft_val_limit_tasks,
                     measurements=measurements, fastest_per_task=args.sft_fastest_per_task,
                     refine_per_task=args.sft_refine_per_task, refine_from=tuple(args.sft_refine_from),
                     refine_min_speedup=args.sft_refine_min_speedup,
                     repair_per_task=args.sft_repair_per_task,
                     max_length=args.sft_max_length, save_steps=args.sft_save_steps,
                     eval_steps=200, logging_steps=10, max_minutes=minutes, **lora,
                     max_steps=args.sft_max_steps, stop_at_step=args.sft_stop_at_step,
                     device="cpu" if args.cpu_smoke else "cuda",
                     examples_file=str(args.sft_examples) if args.sft_examples and args.sft_examples.is_file()
                     else "", init_adapter=str(args.sft_init_adapter or ""))


def _sft_base(args: argparse.Namespace) -> Path:
    """The model SFT starts from (converted or built first when needed)."""
    from cudaperf.train.models import model_directory

    return model_directory(_sft_config(args, 0.0))


def _sft(args: argparse.Namespace, minutes: float) -> dict:
    from cudaperf.train.monitor import last_checkpoint

    out = args.work / "sft"
    if (out / "final" / "config.json").is_file():
        early = (out / "final" / "stopped_early.json").is_file()
        if not (early and args.sft_continue and args.sft_from_adapter is None):
            return {"finished": not early, "usable": True, "final_dir": str(out / "final"),
                    "note": "already trained" + (" (stopped early)" if early else "")}
        shutil.rmtree(out / "final")  # trained on from its last checkpoint (the promoted copy of it)
    if args.sft_from_adapter is not None:
        return _sft_from_adapter(args, out / "final")
    config = _sft_config(args, minutes)
    t0 = time.monotonic()
    if args.sft_from_state is not None and last_checkpoint(out) is None:
        from cudaperf.train.carried_state import seed_run_directory

        print(f"SFT continues from {seed_run_directory(args.sft_from_state, out)}", flush=True)
    report = _run_sft_with_examples(config)
    promoted = not report.finished and args.final_on_limit and _promote(out, report.steps, None,
                                                                        lambda: _sft_base(args))
    return {"finished": report.finished, "usable": report.finished or promoted,
            "stopped_early": bool(promoted), "final_dir": report.final_dir, "steps": report.steps,
            "train_examples": report.train_examples, "val_examples": report.val_examples,
            "tokens": report.train_lengths.line(), "train_loss": report.train_loss,
            "eval_loss": report.eval_loss, "minutes": (time.monotonic() - t0) / 60,
            "resumed_from": report.resumed_from}


def _run_sft_with_examples(config):
    """`run_sft`; when the examples file was built for other options, another tokenizer or other code,
    say so and build the examples in the run instead (minutes, but the call still trains)."""
    from dataclasses import replace

    from cudaperf.train.sft import run_sft
    from cudaperf.train.sft_examples_file import ExamplesMismatch

    try:
        return run_sft(config)
    except ExamplesMismatch as exc:
        print(f"SFT examples file refused, building them here: {exc}", flush=True)
        return run_sft(replace(config, examples_file=""))


def _build_sft_examples(args: argparse.Namespace) -> int:
    from cudaperf.train.sft import build_examples_file

    t0 = time.monotonic()
    built = build_examples_file(_sft_config(args, 0.0), args.build_sft_examples)
    result = {"file": built.path, "train": built.train_examples, "val": built.val_examples,
              "fingerprint": built.fingerprint, "seconds": round(time.monotonic() - t0, 1)}
    print("RESULT sft_examples " + json.dumps(result))
    return 0


def _sft_from_adapter(args: argparse.Namespace, final: Path) -> dict:
    """sft/final made of the base and a carried adapter, with a note of where it came from."""
    t0 = time.monotonic()
    digest = _merged_from_adapter(_sft_base(args), args.sft_from_adapter, final)
    return {"finished": True, "usable": True, "final_dir": str(final),
            "from_adapter": str(args.sft_from_adapter), "adapter_sha256": digest,
            "minutes": (time.monotonic() - t0) / 60}


def _merged_from_adapter(base: Path, adapter: Path, out: Path) -> str | None:
    """out = base merged with a carried LoRA adapter (`train.models.merge_adapter`), noted in
    `from_adapter.json` (the adapter's folder and its weights' sha256, returned)."""
    from cudaperf.train.models import merge_adapter

    merge_adapter(base, adapter, out)
    digest = _adapter_sha(adapter)
    (out / "from_adapter.json").write_text(json.dumps({"adapter": str(adapter), "sha256": digest}) + "\n")
    return digest


def _adapter_sha(adapter: Path) -> str | None:
    """The sha256 of an adapter folder's weights (None without weights)."""
    import hashlib

    weights = sorted(adapter.glob("adapter_model.*"))
    return hashlib.sha256(weights[0].read_bytes()).hexdigest() if weights else None


LINEAGE = "rl_lineage.json"  # beside an RL adapter: the RL steps behind it, over every lease
RL_BASE = "rl_base.json"  # in rl/ and in its carried state: which SFT adapter the RL run trains on
RL_START = "rl_start"  # under --work: SFT's model merged with a carried RL adapter, where RL starts


def _rl_start(args: argparse.Namespace, sft_final: Path) -> Path:
    """The model RL starts from: SFT's, or with --rl-from-adapter SFT's merged with an earlier RL run's
    adapter (made once per machine, in rl_start/)."""
    if args.rl_from_adapter is None:
        return sft_final
    start = args.work / RL_START
    if not (start / "config.json").is_file():
        _merged_from_adapter(sft_final, args.rl_from_adapter, start)
    return start


def _rl_base(args: argparse.Namespace) -> Path:
    """The model the RL run started from (what its LoRA checkpoints merge into)."""
    start = args.work / RL_START
    return start if (start / "config.json").is_file() else args.work / "sft" / "final"


def _prior_steps(args: argparse.Namespace) -> int:
    """RL steps behind the carried adapter RL started from (0 without one, or one without a lineage)."""
    if args.rl_from_adapter is None or not (args.rl_from_adapter / LINEAGE).is_file():
        return 0
    return int(json.loads((args.rl_from_adapter / LINEAGE).read_text()).get("steps_total", 0))


def _write_lineage(args: argparse.Namespace, final: Path, steps: int | None) -> None:
    """The RL steps behind final/'s adapter, in final/adapter/rl_lineage.json (which leaves the machine with
    it): this run's (`steps`, or the promoted checkpoint's) and the carried adapter's before them."""
    adapter = final / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        return
    if steps is None:
        early = final / "stopped_early.json"
        steps = int(json.loads(early.read_text())["steps"]) if early.is_file() else 0
    prior = _prior_steps(args)
    (adapter / LINEAGE).write_text(json.dumps({"steps_before": prior, "steps": steps,
                                               "steps_total": prior + steps, "seed": args.seed}) + "\n")


def _rl_final_from_adapter(args: argparse.Namespace, sft_final: Path) -> dict:
    """rl/final (--rl-final-name/final) made of sft/final and a carried RL adapter, its lineage copied
    beside it (rl_lineage.json); a final already made from the same adapter (its weights' sha256) is kept."""
    name = args.rl_final_name
    if name in ("", ".", "..", "sft") or "/" in name:
        raise SystemExit(f"--rl-final-name {name!r}: name one folder under --work other than sft")
    adapter, final = args.rl_final_from_adapter, args.work / name / "final"
    if not (adapter / "adapter_config.json").is_file():
        raise SystemExit(f"--rl-final-from-adapter {adapter}: no adapter_config.json there")
    t0 = time.monotonic()
    made_from, digest = final / "from_adapter.json", _adapter_sha(adapter)
    if not (made_from.is_file() and json.loads(made_from.read_text())["sha256"] == digest):
        if final.exists():
            shutil.rmtree(final)
        _merged_from_adapter(sft_final, adapter, final)
    if (adapter / LINEAGE).is_file():
        shutil.copyfile(adapter / LINEAGE, final / LINEAGE)
    lineage = json.loads((final / LINEAGE).read_text()) if (final / LINEAGE).is_file() else {}
    return {"finished": True, "from_adapter": str(adapter), "adapter_sha256": digest,
            "steps_total": lineage.get("steps_total"), "minutes": (time.monotonic() - t0) / 60}


def _base_identity(model_dir: Path) -> dict:
    """What an RL run trains on, as `rl_base.json` keeps it: the sha256 of the adapter its start model was
    merged from: a carried one (`from_adapter.json`), or, for a LoRA SFT trained on this machine, its own
    (`adapter/` beside the merged model, the weights that ship as sft-adapter.tgz and that a later lease's
    SFT_FROM_ADAPTER merges into the same base); None for a model with neither (a full fine-tune)."""
    from cudaperf.train.models import ADAPTER_DIR

    made = model_dir / "from_adapter.json"
    if made.is_file():
        return {"sft_adapter_sha256": json.loads(made.read_text())["sha256"]}
    return {"sft_adapter_sha256": _adapter_sha(model_dir / ADAPTER_DIR)}


def _seed_rl_state(args: argparse.Namespace, model_dir: Path) -> None:
    """With --rl-from-state and no checkpoint in rl/: the carried checkpoint placed there
    (`train.carried_state.seed_run_directory`), once its `rl_base.json` names the model RL starts from now
    and its step is below --rl-steps; the placed configuration then names the model where it lies on this
    machine (its identity is the adapter's sha256, not its path). Then rl/ notes its base for the next
    lease's state."""
    from cudaperf.train.carried_state import carried_step, seed_run_directory
    from cudaperf.train.config import load_config, save_config
    from cudaperf.train.monitor import last_checkpoint

    out, state, base = args.work / "rl", args.rl_from_state, _base_identity(model_dir)
    if state is not None and last_checkpoint(out) is None:
        noted = state / RL_BASE
        if not noted.is_file():
            raise SystemExit(f"--rl-from-state {state}: no {RL_BASE}, so which SFT model it trained on is "
                             "unknown (export_rl_state in model_day.sh ships it)")
        carried = json.loads(noted.read_text())
        if carried.get("sft_adapter_sha256") is None:
            raise SystemExit(f"--rl-from-state {state} trained on an SFT model with no adapter (no sha256), "
                             "which no other machine can match: continue RL from a run on a LoRA SFT model, "
                             "or use --rl-from-adapter")
        if carried != base:
            raise SystemExit(f"--rl-from-state {state} trained on {carried}, RL starts now from {base}: "
                             "carry the SFT adapter that run started from")
        if carried_step(state) >= args.rl_steps:
            raise SystemExit(f"--rl-from-state {state} is at step {carried_step(state)}: pass --rl-steps "
                             "above it (RL_STEPS in model_day.sh) to train on")
        placed = seed_run_directory(state, out)
        here = dataclasses.replace(load_config(out), model=str(model_dir))
        save_config(here, out)
        save_config(here, placed)
        print(f"RL continues from {placed}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / RL_BASE).write_text(json.dumps(base) + "\n")


def _rl(args: argparse.Namespace, model_dir: str, minutes: float) -> dict:
    from cudaperf.train.config import RlConfig
    from cudaperf.train.monitor import read_metrics
    from cudaperf.train.rl import run_rl

    config = RlConfig(model=model_dir, output_dir=str(args.work / "rl"), seed=args.seed,
                      tasks=tuple(args.rl_tasks), limit_tasks=args.rl_limit_tasks, max_turns=args.rl_turns,
                      min_headroom=args.rl_min_headroom,
                      measurements=args.measurements if args.rl_min_headroom else "",
                      kinds=tuple(args.rl_kinds), families=tuple(args.rl_families),
                      trajectories=args.rl_trajectories, tasks_per_step=args.rl_tasks_per_step,
                      max_new_tokens=args.rl_max_new_tokens, learning_rate=args.rl_lr, credit=args.credit,
                      turn_score=args.rl_turn_score,
                      max_steps=args.rl_steps, save_steps=args.rl_iterations, eval_mode=args.eval_mode,
                      num_iterations=args.rl_iterations, eval_workers_per_gpu=args.rl_eval_workers_per_gpu,
                      timing_baselines=args.rl_timing_baselines,
                      share_repeated_answers=args.rl_share_repeated_answers,
                      anchor_copies=args.rl_anchor_copies,
                      evaluate_while_generating=args.rl_evaluate_while_generating,
                      max_minutes=minutes, generation_cache=args.rl_generation_cache,
                      **({"lora": True, "lora_rank": args.rl_lora_rank} if args.rl_lora_rank > 0
                         else {"lora": args.lora}),
                      generation_weights=args.rl_generation_weights,
                      generation_attention=args.rl_generation_attention,
                      profile_decoding=args.rl_profile_decoding,
                      device="cpu" if args.cpu_smoke else "cuda",
                      eval_device="cpu" if args.cpu_smoke else "cuda", allow_torch_ops=args.cpu_smoke)
    _seed_rl_state(args, Path(model_dir))
    t0 = time.monotonic()
    report = run_rl(config)
    steps = _rl_steps(read_metrics(config.output_dir))
    promoted = not report.finished and args.final_on_limit and _promote(
        args.work / "rl", report.steps, config.max_steps, lambda: Path(model_dir))
    if report.finished or promoted:
        _write_lineage(args, args.work / "rl" / "final", report.steps)
    return {"finished": report.finished, "stopped_early": bool(promoted), "steps": report.steps,
            "tasks": report.tasks,
            "minutes": (time.monotonic() - t0) / 60, "per_step": steps, "resumed_from": report.resumed_from}


def _rl_steps(records: list[dict]) -> list[dict]:
    """Per rollout step: its summary joined with the trainer's loss and the optimiser's time (the steps the
    batch served less its rollout, `report_html.optimizer_seconds`)."""
    from cudaperf.report_html import TrainingRun, optimizer_seconds

    run = TrainingRun("rl", tuple(records))
    rollouts, train = run.of_kind("rollout"), run.of_kind("train")
    optimizer = optimizer_seconds(rollouts, train)
    return [{**row, "loss": train.get(step, {}).get("loss"), "optimizer_s": optimizer_s}
            for (step, row), optimizer_s in zip(rollouts.items(), optimizer, strict=True)]


def _write(out: Path, rows: dict, stamp: str) -> None:
    path = out / f"train_h200_{stamp}.json"
    path.write_text(json.dumps(rows, indent=2, default=str))


COLUMNS = (("step", "{:>4}"), ("score_mean", "{:>7.3f}"), ("sample_reward_mean", "{:>7.3f}"),
           ("correct_rate", "{:>6.2f}"), ("first_turn_correct_rate", "{:>6.2f}"),
           ("best_of_turns_correct_rate", "{:>6.2f}"), ("speedup_geomean", "{:>6.2f}"),
           ("speedup_term_mean", "{:>6.3f}"), ("structural_term_mean", "{:>6.3f}"),
           ("ranker_term_mean", "{:>6.3f}"), ("hack_rate", "{:>5.2f}"), ("no_code_rate", "{:>5.2f}"),
           ("completion_tokens_per_turn", "{:>6.0f}"), ("generate_s", "{:>6.1f}"), ("evaluate_s", "{:>6.1f}"),
           ("optimizer_s", "{:>6.1f}"), ("turns_per_min", "{:>6.1f}"))


def _print_table(rows: dict) -> None:
    print(json.dumps(rows.get("environment")))
    sft = rows.get("sft", {})
    print("SFT:", json.dumps({k: v for k, v in sft.items() if k != "final_dir"}, default=str))  # type: ignore
    rl = rows.get("rl")
    if not rl:
        return
    print("RL:", json.dumps({k: v for k, v in rl.items() if k != "per_step"}, default=str))  # type: ignore
    if "per_step" not in rl:  # a final made from a carried adapter: no step here
        return
    print(" | ".join(name for name, _ in COLUMNS))
    for row in rl["per_step"]:  # type: ignore[index]
        print(" | ".join(_cell(fmt, row.get(name)) for name, fmt in COLUMNS))
        flags = [k for k in row if k.startswith("hack_") and k != "hack_rate" and k != "hack_kinds"]
        if flags:
            print("      anti-cheat flags:", ", ".join(f"{k[5:]}={row[k]:.0f}" for k in flags))


def _cell(fmt: str, value: object) -> str:
    if value is None:
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


if __name__ == "__main__":
    sys.exit(main())
