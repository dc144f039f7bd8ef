"""Which condition of the real runs slows the rollouts' decoding step (dev/LOG.md, open questions: 80-103 ms
a step in session 28's RL rollouts and ~90-100 ms in its comparison, against 21.0 ms for the same form in
the generation profile, H100, session 27).

One run, the RL rollout's own sampler (`train.rollout.ModelGenerator` on a bfloat16 copy of the weights,
dynamic cache, temperature 0.7, top-p 0.95, the log-probability recorder), every row forced to its full
length. Each form adds one condition of the real runs to the one before it, in this order:
- `equal`: `--rows` prompts of `--prompt-tokens` each, `--new-tokens` new tokens (the profile's condition
  at the rollout's rows);
- `padded`: prompts of uneven length (uniform in prompt-tokens +- `--spread`, so left padding), same mean;
- `padded_long`: the same with `--long-tokens` new tokens (the real rounds' ~1,000: caches reach
  prompt + long);
- `evaluator_idle` and `evaluator_idle_long`: `padded` and `padded_long` again with the RL trainer's
  evaluator open beside the model (`train.rl.make_evaluator` with `RlConfig`'s defaults: its workers and
  referees started, each worker's CUDA context made, `--warm-candidates` honest candidates of dataset tasks
  evaluated, as many as the RL mode's workers by default), idle, as it is while a rollout generates;
- `after_close`: `padded` once the evaluator is closed (what moved over the run without it).
After one untimed call (the copy's first refresh, first kernels), a form's step is (wall of an n-token call -
wall of an n/8-token call) / (n - n/8), so the prefill and set-up cancel (`generation_profile.per_step_ms`).
The long forms' n-token call carries a decoding probe (`agent.backends.decoding_probe`: every step's time in
thirds, 8 steps profiled, host against device time a step; the profiled steps add ~1% to that call), written
beside `--out`.

`--model smollm2-shape` (default) is a random model of SmolLM2-135M's shape: nothing to carry, and a step's
time does not depend on the weights' values. The evaluator needs the GPU machine's carried `.whl` and
`.probe` (gpu_check.sh installs them; `--cpu` needs nothing).

Not covered: the trainer's own state beside the model (its optimiser, TRL's wrappers), a real policy's
prompts (random tokens of the same lengths), the comparison's backend (`agent.backends.hf_local`).

    python3 scripts/decoding_conditions_gpu.py --out "$OUT/decoding/conditions.json"      # GPU, ~2-5 min
    python3 scripts/decoding_conditions_gpu.py --cpu --out /tmp/decoding/conditions.json  # CPU form
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # generation_profile.py: the model, prompts, clocks
sys.path.insert(0, str(ROOT / "benchmarks"))  # eval_modes.py: the honest candidates
sys.path.insert(0, str(ROOT / "src"))


@dataclass(frozen=True)
class Form:
    name: str
    lengths: tuple[int, ...]  # each row's prompt tokens
    new_tokens: int
    evaluator: bool  # the evaluator open beside the model


@dataclass(frozen=True)
class Measured:
    form: str
    rows: int
    prompt_min: int
    prompt_max: int
    new_tokens: int
    evaluator: bool
    ms_per_step: float
    short_call_s: float
    long_call_s: float


def uneven_lengths(rows: int, mean: int, spread: int, seed: int = 0) -> tuple[int, ...]:
    """`rows` prompt lengths uniform in mean +- spread (at least 1 each), their mean `mean` to within
    rounding: paired draws mirrored around the mean."""
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < rows:
        d = rng.randint(0, spread)
        out += [mean + d, mean - d]
    return tuple(max(1, n) for n in out[:rows])


def forms(args: argparse.Namespace) -> list[Form]:
    equal = (args.prompt_tokens,) * args.rows
    uneven = uneven_lengths(args.rows, args.prompt_tokens, args.spread)
    return [Form("equal", equal, args.new_tokens, False),
            Form("padded", uneven, args.new_tokens, False),
            Form("padded_long", uneven, args.long_tokens, False),
            Form("evaluator_idle", uneven, args.new_tokens, True),
            Form("evaluator_idle_long", uneven, args.long_tokens, True),
            Form("after_close", uneven, args.new_tokens, False)]


def prompt_rows(tokenizer, lengths: tuple[int, ...]) -> list[list[int]]:
    from generation_profile import prompts

    return [prompts(tokenizer, 1, n, seed=i)[0] for i, n in enumerate(lengths)]


def measure(gen, tokenizer, form: Form, cuda: bool, probe_dir: Path | None) -> Measured:
    """One form's step time (the module docstring); a probe on the long call of a long form."""
    from generation_profile import full_length, per_step_ms, wall_s

    rows = prompt_rows(tokenizer, form.lengths)
    calls: dict[int, float] = {}

    def run(n: int) -> float:
        if probe_dir is not None and n == form.new_tokens and n >= 256:
            gen.probe_to = str(probe_dir / f"{form.name}-decoding_probe.txt")
        with full_length(gen.model, n):
            calls[n] = wall_s(lambda: gen.generate(rows, n), cuda)
        return calls[n]

    short = max(2, form.new_tokens // 8)
    step = per_step_ms(run, short, form.new_tokens)
    return Measured(form.name, len(rows), min(form.lengths), max(form.lengths), form.new_tokens,
                    form.evaluator, round(step, 3), round(calls[short], 3), round(calls[form.new_tokens], 3))


def open_and_warm(args: argparse.Namespace) -> tuple[object, dict[str, str]]:
    """The RL trainer's evaluator (`train.rl.make_evaluator`, `RlConfig`'s defaults), every worker having
    evaluated an honest candidate; (evaluator, outcome per candidate)."""
    from eval_modes import cpu_candidates, dataset_tasks, gpu_candidates, pairs_for_run

    from cudaperf.train.config import RlConfig
    from cudaperf.train.rl import make_evaluator

    config = RlConfig(eval_device="cpu" if args.cpu else "cuda", allow_torch_ops=args.cpu,
                      output_dir=tempfile.mkdtemp(prefix="decoding-conditions-"))
    evaluator = make_evaluator(config)
    tasks = dataset_tasks(args.warm_tasks, 0, small_only=args.cpu)
    right = [c for c in (cpu_candidates if args.cpu else gpu_candidates)(tasks) if c.kind == "right"]
    pairs = pairs_for_run(tasks, right[:args.warm_candidates], "decoding-conditions")
    outcomes = {pairs[i][1].solution_id: r.outcome.value for i, r in evaluator.evaluate_stream(pairs)}
    return evaluator, outcomes


def environment() -> dict[str, str]:
    """The machine (`scripts/env_info.py`, as every committed result carries it) and transformers' version."""
    import transformers
    from env_info import env_info

    return {**env_info(), "transformers": transformers.__version__}


def table(rows: list[Measured]) -> str:
    """Markdown: each form's step time and its ratio to `equal`'s."""
    base = next((m.ms_per_step for m in rows if m.form == "equal"), None)
    lines = ["| form | rows | prompt tokens | new tokens | evaluator open | ms a step | vs equal |",
             "|---|---|---|---|---|---|---|"]
    for m in rows:
        ratio = f"{m.ms_per_step / base:.2f}x" if base else "n/a"
        lines.append(f"| {m.form} | {m.rows} | {m.prompt_min}-{m.prompt_max} | {m.new_tokens} | "
                     f"{'yes' if m.evaluator else 'no'} | {m.ms_per_step:.2f} | {ratio} |")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-shape", help="'smollm2-shape', 'tiny' or a model directory")
    p.add_argument("--cpu", action="store_true", help="the small form on a machine without a GPU")
    p.add_argument("--rows", type=int, default=16, help="rows a call (the rollout's: 4 tasks x 4)")
    p.add_argument("--prompt-tokens", type=int, default=1800, help="mean prompt tokens")
    p.add_argument("--spread", type=int, default=600, help="uneven prompts: mean +- this many tokens")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--long-tokens", type=int, default=1000)
    p.add_argument("--warm-tasks", type=int, default=4, help="dataset PyTorch tasks of the warm-up")
    p.add_argument("--warm-candidates", type=int, default=8, help="honest candidates evaluated to warm up")
    p.add_argument("--out", type=Path, required=True, help="JSON of every figure; probes beside it")
    args = p.parse_args(argv)
    if args.cpu:  # small sizes for a 2-core machine (given values are replaced)
        args.model, args.rows, args.prompt_tokens, args.spread = "tiny", 2, 48, 16
        args.new_tokens, args.long_tokens, args.warm_tasks, args.warm_candidates = 16, 256, 1, 2
    if args.spread >= args.prompt_tokens:
        p.error("--spread must be under --prompt-tokens (every prompt at least one token)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from generation_profile import load

    from cudaperf.train.rollout import ModelGenerator

    device = "cpu" if args.cpu else "cuda"
    model, tokenizer = load(args.model, device)
    gen = ModelGenerator(model, tokenizer, temperature=0.7, top_p=0.95, batch_size=args.rows,
                         weights="bfloat16")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "environment": environment(),
                    "forms": [], "warm_up": {}}
    evaluator = None
    started = time.perf_counter()
    gen.generate(prompt_rows(tokenizer, (args.prompt_tokens,) * args.rows), 8)  # one-off costs, untimed
    try:
        for form in forms(args):
            if form.evaluator and evaluator is None:
                t0 = time.perf_counter()
                evaluator, record["warm_up"] = open_and_warm(args)
                record["warm_up_s"] = round(time.perf_counter() - t0, 1)
                print(f"evaluator open, {len(record['warm_up'])} candidates in {record['warm_up_s']} s: "
                      f"{statistics.mode(record['warm_up'].values()) if record['warm_up'] else 'none'}",
                      flush=True)
            if not form.evaluator and evaluator is not None:
                evaluator.close()
                evaluator = None
            m = measure(gen, tokenizer, form, not args.cpu, args.out.parent)
            record["forms"].append(asdict(m))
            print(f"RESULT decoding {form.name} {m.ms_per_step:.2f} ms a step", flush=True)
            args.out.write_text(json.dumps(record, indent=1))  # a run stopped at its limit keeps its forms
    finally:
        if evaluator is not None:
            evaluator.close()
    record["seconds"] = round(time.perf_counter() - started, 1)
    args.out.write_text(json.dumps(record, indent=1))
    print(table([Measured(**f) for f in record["forms"]]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
