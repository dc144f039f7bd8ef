"""The multi-GPU RL run (issue 22, item 3): the RL trainer with its policy on GPU 0 and evaluation on a Ray
pool over the other GPUs, against the same run on one GPU; and the evaluator's timing spread while training
runs.

    # GPU machine with >= 2 GPUs, Ray's wheel parts in /tmp/rw (docs/scale.md, "The multi-GPU RL run", gives
    # the carries and every call); each part resumes, so call it again until it prints "done":
    python3 scripts/ray_train_gpu.py --wheels /tmp/rw --policy /tmp/cudaperf_train/sft/final \\
        --out "$OUT/ray_train.json"
    # CPU machine, the small form (a tiny model built from a config, CPU-only actors, CPU evaluation):
    python3 scripts/ray_train_gpu.py --cpu --work /tmp/ray_train --out /tmp/ray_train.json

Part 1, rollout throughput ("arms"). One RL configuration (`RlConfig`: tasks, seed, steps, the policy given by
`--policy`) runs twice from the same starting point, each arm in its own folder under `--work`, each through
the real command (`cudaperf train rl --config FILE`) in a child process:
- one-gpu: the local evaluator, the child seeing GPU 0 only (`CUDA_VISIBLE_DEVICES`), so policy and
  evaluation share it (`ray_address=""`);
- pool: `ray_address="local"`, every GPU visible: the policy on GPU 0 and the pool's actors, one per GPU,
  on the others (`train.rl.make_evaluator` keeps GPU 0 out of the pool when there are several).
Every number comes from the run's own metrics.jsonl (`train.rl.run_rl` writes them; `train_h200._rl_steps`
joins them per step, the last record of a step winning after a resume): turns/min = 60 x turns / rollout
seconds over every step (warm-ups included) and the median of the steps' own turns/min (one warm-up step of
three, or the first step after a resume, does not move it); the time split over the steps' wall time
(`step_s` of the trainer's log): generation, evaluation, optimiser (step less rollout). The ratio pool /
one-gpu of both. The arms run one after the other, one-gpu first. Each arm checkpoints every step
(`save_steps=1`) and stops with a checkpoint before the call's budget ends (`RlConfig.max_minutes`, from
`--max-minutes` less what is spent); a re-run skips an arm whose `final/` holds `--steps` steps and resumes
the other from its last checkpoint. On a
2-GPU machine the pool holds one evaluation GPU, as many as the one-gpu arm: what differs is only that the
policy no longer shares its GPU, and a rollout generates then evaluates (never both at once), so no speedup
is expected there; the ratio is reported, not judged. Both arms sample with the same seed, but from the
second step on their policies differ by what their evaluations rewarded, so their replies' lengths may
differ: the table gives tokens per turn beside turns/min.

Part 2, the evaluator's timing spread while training runs ("spread"). Candidates: `--spread-tasks` dataset
PyTorch tasks with every fast implementation the dataset generates for them (`benchmarks/eval_modes.py`'s
makers, as `ray_pool_gpu.py` uses them; `--cpu`: the tasks' own model and a slower copy, pure PyTorch), kept
only where the local `Evaluator` (on GPU 1) finds them correct. A pool (`PoolConfig(trainer_gpus=(0,))`: one
actor per GPU but GPU 0) times every candidate R = `--repeats` times in the default evaluation mode (each
evaluation times its own baseline: the RL mode's per-task baseline cache would keep the idle side's baseline
times under training and hide half of the interference) twice: with GPU 0 idle, then while a training load
runs on GPU 0 in a child process. The load is real training, and its own: `cudaperf train sft` from the same
policy on GPU 0 (`CUDA_VISIBLE_DEVICES`), from its first logged step until the training side ends, then
stopped. SFT rather than an RL arm, because an RL run evaluates its own candidates, on the very pool GPUs
measured here (its candidates would be the interference, not its training), and its GPU use comes in
bursts; SFT keeps GPU 0 busy with forward and backward passes and the host with its data, as the policy's
training does, without a candidate of its own. Warm-up first: every actor evaluates every candidate once
(builds cached, workers started, references computed); then both sides evaluate the same texts in the same
order. Statistic: per candidate the spread of its speedup against eager = (max - min) / median over its R
repeats; per side the median over candidates; the ratio training / idle. Threshold 1.5x: that ratio, when
both sides draw from the same noise, exceeds 1.5 in 5% of cases with the default set (17 candidates, R = 3;
simulated with normal noise: 11% with 9 candidates, 0.8% with R = 5): a FAIL is a rise that chance gives
one time in twenty; a true rise near 1.5x passes about half the time, and a smaller one is not resolved at
this size. The spread runs once both arms are finished (when they are among `--parts`); its result is kept
in `--work` (spread.json) once its load ran, and a re-run reuses it.

Checks (PASS or FAIL each, in the JSON too): (1) rollout throughput reported: both arms finished with
positive turns/min, and the ratio; (2) the training load ran throughout the training side (its child alive
at the end, steps logged during it); (3) the spread under training within 1.5x of idle.
Refusals (exit 2): fewer than 2 visible GPUs without --cpu; trl, datasets or peft missing. Exit 3: a part is
unfinished (call the same command again); 1: a check failed; 0: done, every check passed. The JSON (`--out`)
has the arms' per-step rows, every candidate's speedups and the machine.

Not covered: more nodes than one, verl; where each pool actor ran in the RL arm (`ray_pool_gpu.py` checks the
placement); the pool arm with fewer evaluation GPUs than the machine has; a second pass in the other order
(arms, or idle/training sides: drift between them is not separated from the effect); C tasks in the spread
(their serial-C baselines share one machine-wide lock per host); the `--cpu` form's figures, which show only
that the plumbing runs (its load and its evaluator share two cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
# ray_pool_gpu puts src/ and benchmarks/ on sys.path and src/ on PYTHONPATH (children and Ray workers find
# this tree's cudaperf); install_ray joins and installs the carried Ray wheels.
from ray_pool_gpu import build_share, environment, install_ray  # noqa: E402

ARMS = ("one-gpu", "pool")
SIDES = ("idle", "training")
SPREAD_LIMIT = 1.5  # see the module docstring: the 95th percentile of the ratio without interference
BASELINE = "eager"
# Each form's defaults (an option given on the command line wins). GPU: 3 steps of 2 tasks x 4 trajectories
# x 2 turns at 256 new tokens: ~75 s a step on an H200 (dev/LOG.md, session 28: 80-103 ms a decoding step),
# ~4.5 min an arm with its start, so both arms fit a 10-minute call or resume in the next.
FORMS = {
    "gpu": {"policy": "smollm2", "steps": 3, "tasks": ["split:train"], "limit_tasks": 8, "tasks_per_step": 2,
            "trajectories": 4, "turns": 2, "max_new_tokens": 256, "generation_weights": "bfloat16",
            "repeats": 3, "spread_tasks": 6, "load_batch": 16, "load_tasks": 64,
            "load_kinds": ["pytorch", "c"], "load_max_length": 4096, "timing_budget_ms": 0.0},
    "cpu": {"policy": "tiny", "steps": 1, "tasks": ["examples"], "limit_tasks": 1, "tasks_per_step": 1,
            "trajectories": 2, "turns": 1, "max_new_tokens": 8, "generation_weights": "autocast",
            "repeats": 2, "spread_tasks": 1, "load_batch": 1, "load_tasks": 2, "load_kinds": ["c"],
            "load_max_length": 4096, "timing_budget_ms": 5.0},
}
ARM_START_S = 60.0  # an arm's start before the trainer's clock (policy, tasks, evaluator) and its final save


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="the small form, on a machine without a GPU")
    p.add_argument("--parts", nargs="+", default=["arms", "spread"], choices=("arms", "spread"))
    p.add_argument("--work", type=Path, default=Path("/tmp/cudaperf_raytrain"),
                   help="the arms' runs, the spread's result, logs (kept between calls: delete to redo)")
    p.add_argument("--out", type=Path, default=None, help="JSON with everything")
    p.add_argument("--max-minutes", type=float, default=9.0, help="start no part after this; arms stop by it")
    p.add_argument("--wheels", type=Path, default=None, help="carried Ray wheels to install first")
    p.add_argument("--site", type=Path, default=Path("/tmp/site"), help="where --wheels installs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy", default=None, help="model directory, 'smollm2' or 'tiny' (arms and load)")
    p.add_argument("--steps", type=int, default=None, help="RL optimiser steps per arm")
    p.add_argument("--tasks", nargs="+", default=None, help="RL task specs (RlConfig.tasks)")
    for name in ("limit-tasks", "tasks-per-step", "trajectories", "turns", "max-new-tokens", "repeats",
                 "spread-tasks", "load-batch", "load-tasks", "load-max-length"):
        p.add_argument(f"--{name}", type=int, default=None)
    p.add_argument("--load-kinds", nargs="+", default=None, help="task kinds of the SFT load")
    p.add_argument("--generation-weights", default=None, choices=("autocast", "bfloat16"))
    p.add_argument("--timing-budget-ms", type=float, default=None, help="0: the evaluator's default")
    p.add_argument("--load-start-s", type=float, default=300.0, help="longest wait for the load's first step")
    p.add_argument("--verbose", action="store_true", help="every candidate's spread")
    args = p.parse_args(argv)
    for key, value in FORMS["cpu" if args.cpu else "gpu"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.repeats < 2:
        p.error("--repeats must be >= 2 (one evaluation has no spread)")
    return args


# -- records -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArmRow:
    """One arm's RL run, from its metrics.jsonl (sums over its steps)."""

    arm: str
    steps: int  # steps with a rollout record
    finished: bool  # final/ written: every step done
    turns: int
    rollout_s: float
    timed_step_s: float  # wall time of the steps whose trainer log gave one (the split's denominator)
    generate_s: float  # these three over the same steps as timed_step_s
    evaluate_s: float
    optimizer_s: float
    turns_per_min: float  # 60 x turns / rollout_s, every step
    median_step_turns_per_min: float
    tokens_per_turn: float  # generated tokens per turn, mean over steps
    per_step: tuple[dict, ...]

    def share(self, seconds: float) -> float:
        return seconds / self.timed_step_s if self.timed_step_s > 0 else 0.0


@dataclass(frozen=True)
class SpreadRow:
    """One candidate's speedups against eager over the repeats of each side (None: not correct that time)."""

    candidate: str
    idle: tuple[float | None, ...]
    training: tuple[float | None, ...]

    def spread(self, side: str) -> float | None:
        """(max - min) / median over the repeats; None when a repeat gave no speedup."""
        values = getattr(self, side)
        if any(v is None for v in values) or not values:
            return None
        return (max(values) - min(values)) / statistics.median(values)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


# -- the machine ---------------------------------------------------------------------------------------------


def visible_gpus(args: argparse.Namespace) -> int:
    if args.cpu:
        return 0
    import torch

    return torch.cuda.device_count()


def refusal(args: argparse.Namespace, gpus: int) -> str | None:
    """Why this machine cannot run the script as asked, or None."""
    if not args.cpu and gpus < 2:
        return (f"needs at least 2 visible GPUs (the policy on GPU 0, the evaluation pool on the others); "
                f"this machine shows {gpus}. Run it on a multi-GPU machine, or pass --cpu for the small form")
    missing = [m for m in ("trl", "datasets", "peft") if importlib.util.find_spec(m) is None]
    if missing:
        return (f"missing here: {', '.join(missing)} (carry their wheels: docs/scale.md, 'The multi-GPU RL "
                "run')")
    return None


def first_gpu() -> str:
    """GPU 0 as CUDA_VISIBLE_DEVICES names it for a child (this process's first visible GPU)."""
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    return seen.split(",")[0].strip() if seen else "0"


def child_env(gpu0_only: bool) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if gpu0_only:
        env["CUDA_VISIBLE_DEVICES"] = first_gpu()
    return env


def resolve_policy(args: argparse.Namespace) -> str:
    """'tiny' is built once under --work, so both arms and the load start from the same weights."""
    if args.policy != "tiny":
        return args.policy
    from cudaperf.train.config import SftConfig
    from cudaperf.train.models import model_directory

    return str(model_directory(SftConfig(model="tiny", output_dir=str(args.work), seed=args.seed)))


# -- part 1: the arms ----------------------------------------------------------------------------------------


def arm_dir(args: argparse.Namespace, arm: str) -> Path:
    return args.work / "arms" / arm


def arm_config(args: argparse.Namespace, arm: str, policy: str, minutes: float):
    from cudaperf.train.config import RlConfig

    device = "cpu" if args.cpu else "cuda"
    # The CPU pool gets one actor (two would hold both cores); on GPUs 0 means one per free GPU.
    workers = 1 if args.cpu and arm == "pool" else 0
    # The same build processes in both arms: the cores less one, split between the pool's actors (a pool
    # actor would otherwise build with one process, its Ray CPU share, against the local evaluator's many).
    actors = 1 if args.cpu or arm == "one-gpu" else visible_gpus(args) - 1
    extra = {"timing_budget_ms": args.timing_budget_ms} if args.timing_budget_ms else {}
    return RlConfig(model=policy, output_dir=str(arm_dir(args, arm)), seed=args.seed, tasks=tuple(args.tasks),
                    limit_tasks=args.limit_tasks, tasks_per_step=args.tasks_per_step,
                    trajectories=args.trajectories, max_turns=args.turns, max_new_tokens=args.max_new_tokens,
                    max_steps=args.steps, save_steps=1, save_total_limit=1, max_minutes=max(0.5, minutes),
                    device=device, eval_device=device, allow_torch_ops=args.cpu,
                    generation_weights=args.generation_weights, eval_workers=workers,
                    build_workers=build_share(actors),
                    ray_address="local" if arm == "pool" else "", **extra)


def arm_finished(args: argparse.Namespace, arm: str) -> bool:
    """The arm's final model is written, by a run of at least `--steps` steps (more steps asked later: the
    run resumes from its last checkpoint)."""
    final = arm_dir(args, arm) / "final"
    if not (final / "config.json").is_file() or not (final / "train_config.json").is_file():
        return False
    return json.loads((final / "train_config.json").read_text()).get("max_steps", 0) >= args.steps


def run_arm(args: argparse.Namespace, arm: str, policy: str, left_s: float) -> str:
    """Run (or resume) one arm in a child for at most `left_s`; a line saying what happened."""
    if arm_finished(args, arm):
        return f"{arm}: finished in an earlier call"
    if left_s < ARM_START_S + 30:
        return f"{arm}: not started ({left_s:.0f} s left): call again"
    from cudaperf.train.config import save_config

    config = arm_config(args, arm, policy, (left_s - ARM_START_S) / 60)
    path = save_config(config, args.work / "configs" / arm)
    command = [sys.executable, "-m", "cudaperf.cli", "train", "rl", "--config", str(path)]
    log = args.work / "logs" / f"{arm}.log"
    rc, seconds = run_child(command, child_env(gpu0_only=arm == "one-gpu" and not args.cpu), log, left_s)
    state = "finished" if arm_finished(args, arm) else "not finished: call again"
    last = f"; its last line: {last_line(log)}" if rc else ""
    return f"{arm}: rc={rc} in {seconds:.0f} s, {state} (log: {log}{last})"


def last_line(path: Path) -> str:
    lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()] if path.is_file() else []
    return lines[-1][:300] if lines else "(empty)"


def run_child(command: list[str], env: dict[str, str], log: Path, timeout_s: float) -> tuple[int, float]:
    """The command, its output appended to `log`, stopped at the timeout (a backstop: the RL run stops itself
    by `max_minutes` first). Children stay in this process group, so that a call killed with its group takes
    them along rather than leaving a run on the GPUs into the next call; Ray's own processes share their
    driver's fate."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n== {' '.join(command)}\n")
        out.flush()
        child = subprocess.Popen(command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            rc = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_child(child)
            rc = 124
    return rc, time.monotonic() - started


def stop_child(child: subprocess.Popen) -> None:
    """SIGTERM to the child (the one process this script started), SIGKILL after 30 s."""
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        if child.poll() is not None:
            return
        child.send_signal(sig)
        try:
            child.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def read_arm(args: argparse.Namespace, arm: str) -> ArmRow | None:
    from train_h200 import _rl_steps

    from cudaperf.train.monitor import read_metrics

    steps = _rl_steps(read_metrics(arm_dir(args, arm)))
    if not steps:
        return None
    timed = [s for s in steps if s["optimizer_s"] is not None]
    turns = sum(s["turns"] for s in steps)
    rollout_s = sum(s["rollout_s"] for s in steps)
    return ArmRow(
        arm, len(steps), arm_finished(args, arm), int(turns), rollout_s,
        sum(s["rollout_s"] + s["optimizer_s"] for s in timed), sum(s["generate_s"] for s in timed),
        sum(s["evaluate_s"] for s in timed), sum(s["optimizer_s"] for s in timed),
        60.0 * turns / rollout_s if rollout_s > 0 else 0.0,
        statistics.median(s["turns_per_min"] for s in steps),
        statistics.mean(s["completion_tokens_per_turn"] for s in steps), tuple(steps))


# -- part 2: the spread --------------------------------------------------------------------------------------


def spread_eval_config(args: argparse.Namespace):
    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig, TimingConfig

    budget = {"budget_ms": args.timing_budget_ms, "warmup_ms": 1.0} if args.timing_budget_ms else {}
    return EvalConfig(device="cpu" if args.cpu else "cuda", mode="default", analyze=False,
                      timing=TimingConfig(baselines=(BASELINE,), **budget),
                      policy=Policy(allow_torch_ops=True) if args.cpu else None)


def spread_candidates(args: argparse.Namespace) -> list:
    """(task, candidate) of the honest kinds: the dataset's fast implementations, or (CPU) the task's own
    model and a slower copy."""
    from eval_modes import cpu_candidates, dataset_tasks, gpu_candidates

    tasks = dataset_tasks(args.spread_tasks, 0, small_only=args.cpu)
    found = (cpu_candidates if args.cpu else gpu_candidates)(tasks)
    return [(tasks[c.task_index][1], c) for c in found if c.kind in ("right", "slow")]


def labelled(candidates: list, label: str) -> list:
    """(Task, Solution) per candidate, the same text every time (warm builds), the id marked with `label`
    (no batch or store ever takes one evaluation for another)."""
    from cudaperf.solutions import solution_from_text

    return [(task, solution_from_text(c.source, f"{c.solution_id}@{label}")) for task, c in candidates]


def locally_correct(args: argparse.Namespace, candidates: list) -> list:
    """The candidates the local evaluator (GPU 1, as the pool's first actor) finds correct, with a speedup."""
    from cudaperf.evaluate import Evaluator

    config = dataclasses.replace(spread_eval_config(args), gpus=None if args.cpu else (1,))
    with Evaluator(config) as ev:
        good = {r.solution_id.split("@")[0] for r in ev.evaluate_many(labelled(candidates, "local"))
                if r.outcome.value == "correct" and r.speedups.get(BASELINE)}
    return [(t, c) for t, c in candidates if c.solution_id in good]


def timed_side(pool, candidates: list, side: str, repeats: int) -> dict[str, list[float | None]]:
    """Each candidate's speedup in each of `repeats` passes over all of them, in the same order."""
    speedups: dict[str, list[float | None]] = {c.solution_id: [] for _, c in candidates}
    for r in range(repeats):
        for result in pool.evaluate_many(labelled(candidates, f"{side}-{r}")):
            good = result.outcome.value == "correct"
            speedups[result.solution_id.split("@")[0]].append(result.speedups.get(BASELINE) if good else None)
    return speedups


def warm(pool, candidates: list) -> None:
    """Every actor evaluates every candidate once, untimed (directly, not through the queue)."""
    import ray

    ray.get([h.evaluate.remote(t, s) for name, h in pool.pool.live_actors().items()
             for t, s in labelled(candidates, f"warm-{name}")])


def start_load(args: argparse.Namespace, policy: str) -> tuple[subprocess.Popen, Path]:
    """`cudaperf train sft` from the policy on GPU 0, logging every step, until stopped."""
    out = args.work / "load-sft"
    shutil.rmtree(out, ignore_errors=True)  # a fresh run: a resumed one would replay its data order
    command = [sys.executable, "-m", "cudaperf.cli", "train", "sft", "--model", policy,
               "--output-dir", str(out), "--device", "cpu" if args.cpu else "cuda", "--max-steps", "1000000",
               "--save-steps", "1000000", "--eval-steps", "0", "--logging-steps", "1",
               "--batch-size", str(args.load_batch), "--limit-tasks", str(args.load_tasks),
               "--val-limit-tasks", "1", "--max-length", str(args.load_max_length), "--seed", str(args.seed),
               "--kinds", *args.load_kinds]
    log = args.work / "logs" / "load-sft.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as f:
        child = subprocess.Popen(command, env=child_env(gpu0_only=not args.cpu), cwd=ROOT, stdout=f,
                                 stderr=subprocess.STDOUT)
    return child, out


def load_steps(out: Path) -> int:
    from cudaperf.train.monitor import read_metrics

    return sum(1 for r in read_metrics(out, "train") if "loss" in r)


def wait_for_training(child: subprocess.Popen, out: Path, timeout_s: float) -> bool:
    """True once the load has logged a training step (its start, data and first step behind it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and child.poll() is None:
        if load_steps(out) > 0:
            return True
        time.sleep(1.0)
    return False


def measure_spread(args: argparse.Namespace, policy: str) -> dict:
    """Part 2 (the module docstring): the candidates' speedups idle and under the load, and the load's log."""
    from cudaperf.scale import PoolConfig, RayEvaluator

    candidates = locally_correct(args, spread_candidates(args))
    print(f"spread: {len(candidates)} candidates correct on the local evaluator", flush=True)
    pool_config = PoolConfig(trainer_gpus=() if args.cpu else (0,), cpu_actors=1,
                             cpus_per_actor=build_share(1 if args.cpu else visible_gpus(args) - 1))
    with RayEvaluator(spread_eval_config(args), pool_config) as pool:
        placement = pool.report().placement
        warm(pool, candidates)
        idle = timed_side(pool, candidates, "idle", args.repeats)
        load, out = start_load(args, policy)
        try:
            training_ok = wait_for_training(load, out, args.load_start_s)
            before = load_steps(out)
            training = timed_side(pool, candidates, "training", args.repeats) if training_ok else {}
            during = load_steps(out) - before
            alive = load.poll() is None
        finally:
            stop_child(load)
    rows = [SpreadRow(c.solution_id, tuple(idle[c.solution_id]), tuple(training.get(c.solution_id, ())))
            for _, c in candidates]
    return {"rows": [dataclasses.asdict(r) for r in rows], "placement": placement,
            "load": {"started": training_ok, "alive_at_end": alive, "steps_during": during,
                     "log": str(args.work / "logs" / "load-sft.log")}}


def spread_rows(spread: dict) -> list[SpreadRow]:
    """The spread part's rows (as measured now, or as an earlier call stored them) as records."""
    return [SpreadRow(r["candidate"], tuple(r["idle"]), tuple(r["training"])) for r in spread["rows"]]


def spread_summary(rows: list[SpreadRow]) -> dict:
    """Per side the median spread over candidates with every repeat correct on both sides; the ratio."""
    both = [r for r in rows if r.spread("idle") is not None and r.spread("training") is not None]
    medians = {side: statistics.median(r.spread(side) for r in both) if both else None for side in SIDES}
    idle, training = medians["idle"], medians["training"]
    ratio = None if idle is None or training is None else (
        training / idle if idle > 0 else (1.0 if training == 0 else float("inf")))
    return {"candidates": len(rows), "counted": len(both), "median_spread": medians, "ratio": ratio}


# -- checks and the report -----------------------------------------------------------------------------------


def check_throughput(arms: dict[str, ArmRow | None]) -> Check:
    rows = [arms.get(a) for a in ARMS]
    ok = all(r is not None and r.finished and r.turns_per_min > 0 for r in rows)
    detail = "; ".join(f"{a}: " + (f"{r.turns_per_min:.1f} turns/min over {r.steps} steps"
                                   f"{'' if r.finished else ' (unfinished)'}" if r else "no step yet")
                       for a, r in zip(ARMS, rows, strict=True))
    if ok:
        detail += f"; pool / one-gpu {rows[1].turns_per_min / rows[0].turns_per_min:.2f}x"
    return Check("rollout throughput reported (pool against one-gpu)", ok, detail)


def check_load(spread: dict) -> Check:
    load = spread["load"]
    ok = load["started"] and load["alive_at_end"] and load["steps_during"] > 0
    return Check("training load ran throughout the training side", ok,
                 f"started {load['started']}, alive at the end {load['alive_at_end']}, "
                 f"{load['steps_during']} SFT steps during it (log: {load['log']})")


def check_spread(summary: dict) -> Check:
    ratio = summary["ratio"]
    ok = ratio is not None and ratio <= SPREAD_LIMIT
    medians = summary["median_spread"]
    detail = (f"median (max-min)/median of the speedup over {summary['counted']} candidates: idle "
              f"{_pct(medians['idle'])}, training {_pct(medians['training'])}, ratio "
              f"{'-' if ratio is None else f'{ratio:.2f}x'} (limit {SPREAD_LIMIT}x)")
    return Check(f"spread under training within {SPREAD_LIMIT}x of idle", ok, detail)


def arms_table(arms: dict[str, ArmRow | None]) -> str:
    base = arms.get("one-gpu")
    lines = ["| arm | steps | turns | tokens/turn | turns/min | median step turns/min | generation "
             "| evaluation | optimiser | vs one-gpu |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in ARMS:
        r = arms.get(name)
        if r is None:
            lines.append(f"| {name} | 0 | - | - | - | - | - | - | - | - |")
            continue
        ratio = f"{r.turns_per_min / base.turns_per_min:.2f}x" if base and base.turns_per_min else "-"
        lines.append(f"| {name} | {r.steps}{'' if r.finished else ' (unfinished)'} | {r.turns} | "
                     f"{r.tokens_per_turn:.0f} | {r.turns_per_min:.1f} | {r.median_step_turns_per_min:.1f} | "
                     f"{_pct(r.share(r.generate_s))} | {_pct(r.share(r.evaluate_s))} | "
                     f"{_pct(r.share(r.optimizer_s))} | {ratio} |")
    return "\n".join(lines)


def spread_table(summary: dict, rows: list[SpreadRow], verbose: bool) -> str:
    medians = summary["median_spread"]
    lines = ["| side | candidates counted | median spread of the speedup |", "|---|---|---|"]
    lines += [f"| {side} | {summary['counted']} of {summary['candidates']} | {_pct(medians[side])} |"
              for side in SIDES]
    ratio = summary["ratio"]
    lines.append(f"training / idle: {'-' if ratio is None else f'{ratio:.2f}x'}")
    if verbose:
        lines += [f"  {r.candidate}: idle {_pct(r.spread('idle'))}, training {_pct(r.spread('training'))}"
                  for r in rows]
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def write_out(args: argparse.Namespace, result: dict) -> None:
    if args.out is None:
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))


# -- the recipe ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    gpus = visible_gpus(args)
    reason = refusal(args, gpus)
    if reason:
        print(f"ray_train_gpu: {reason}", file=sys.stderr)
        return 2
    if args.wheels is not None:
        install_ray(args.wheels, args.site)
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CUDAPERF_CACHE_DIR", str(args.work / "cache"))  # builds, a converted SmolLM2
    policy = resolve_policy(args)

    def left_s() -> float:
        return 60 * args.max_minutes - (time.monotonic() - started)

    result: dict = {"args": vars(args), "gpus": gpus, "policy": policy, "environment": environment()}
    notes: list[str] = []
    if "arms" in args.parts:
        for arm in ARMS:
            say(notes, run_arm(args, arm, policy, left_s()))
    arms = {arm: read_arm(args, arm) for arm in ARMS}
    result["arms"] = {a: dataclasses.asdict(r) if r else None for a, r in arms.items()}
    write_out(args, result)
    spread = run_spread(args, policy, left_s(), notes) if "spread" in args.parts else None
    rows = spread_rows(spread) if spread is not None else []
    if spread is not None:
        result["spread"] = {**spread, "summary": spread_summary(rows)}
    checks = ([check_throughput(arms)] if "arms" in args.parts else []) + (
        [check_load(spread), check_spread(result["spread"]["summary"])] if spread else [])
    result["checks"] = [dataclasses.asdict(c) for c in checks]
    result["notes"] = notes
    write_out(args, result)
    return report(args, arms, result, rows, checks)


def run_spread(args: argparse.Namespace, policy: str, left_s: float, notes: list[str]) -> dict | None:
    """The spread part, or its result from an earlier call (work/spread.json); None when not run now."""
    path = args.work / "spread.json"
    if path.is_file():
        say(notes, f"spread: from an earlier call ({path})")
        return json.loads(path.read_text())
    if "arms" in args.parts and not all(arm_finished(args, a) for a in ARMS):
        say(notes, "spread: not started (the arms come first): call again")
        return None
    if left_s < 120:
        say(notes, f"spread: not started ({left_s:.0f} s left): call again")
        return None
    spread = measure_spread(args, policy)
    if spread["load"]["started"]:  # a load that never trained is measured again by the next call
        path.write_text(json.dumps(spread, indent=1, default=str))
    return spread


def say(notes: list[str], line: str) -> None:
    """Print what a part did as it ends (a call killed later still shows it) and keep it for the JSON."""
    print(line, flush=True)
    notes.append(line)


def report(args: argparse.Namespace, arms: dict, result: dict, rows: list[SpreadRow],
           checks: list[Check]) -> int:
    if "arms" in args.parts:
        print(arms_table(arms))
    if "spread" in result:
        print(spread_table(result["spread"]["summary"], rows, args.verbose))
    for c in checks:
        print(f"{'PASS' if c.ok else 'FAIL'}  {c.name}: {c.detail}")
    done = (all(arm_finished(args, a) for a in ARMS) or "arms" not in args.parts) and (
        "spread" in result or "spread" not in args.parts)
    print("done" if done else "not finished: call the same command again (each part resumes)")
    if not done:
        return 3
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
