"""What a rollout's decoding step costs with and without cuDNN's attention, on key lengths new to cuDNN's
plan cache and on lengths it has seen, and with the RL trainer's evaluator open beside the model.

Session 32's probes of the real runs (benchmarks/results/2026-12-06-s32-h100/) found cuDNN's attention
building a plan at every decoding step (a step's key length is new to its shape-keyed cache), about half
of a step's host time; this script's first form (session 31) had measured the same lengths in several
calls, so every call after the first found its plans cached and decoded up to twice as fast. Here every
form's key lengths are chosen so that the cache holds exactly what the form says.

One run, the RL rollout's own sampler (`train.rollout.ModelGenerator` on a bfloat16 copy of the weights,
dynamic cache, temperature 0.7, top-p 0.95, the log-probability recorder), `--rows` prompts of uneven
length (uniform in `--prompt-tokens` +- `--spread`, so left padding and an attention mask, as in every
real batch), every row forced to `--new-tokens` new tokens. The forms, in this order:
- `no_cudnn`: `generation_attention='no_cudnn'` (the default: PyTorch's flash, memory-efficient and math
  kernels);
- `graph`: the same with `generation_cache='graph'` (`agent.backends.step_decoder`: a static cache, the
  decoding step one captured CUDA graph);
- `cudnn_new_shapes`: 'any' (cuDNN's attention where it applies), nothing before it having used cuDNN
  for these key lengths (the real runs' case: every call brings new prompt widths);
- `cudnn_seen_shapes`: 'any' again over the same lengths (every plan cached: the old form's case);
- `no_cudnn_evaluator_open`: `no_cudnn` with the RL trainer's evaluator open beside the model
  (`train.rl.make_evaluator` with `RlConfig`'s defaults, its workers and referees started, `--warm-candidates`
  honest candidates of dataset tasks evaluated), idle, as it is while a rollout generates.
A form's step is (wall of the n-token call - wall of an n/8-token call) / (n - n/8), so the prefill and set-up
cancel (as `generation_profile.per_step_ms` measures, in the other order: `measure`); the long call runs
first, and the short one's prompts are n + 1 tokens longer than the long one's, so no key length of the short
call was reached by the long call (its longer prefill, one forward pass, is spread over n - n/8 steps). Each
long call carries a decoding probe (`agent.backends.decoding_probe`: every step's time in thirds, 8 steps
profiled, host and device time a step; the profiled steps add ~1% to that call), written beside `--out`.

`--model smollm2-shape` (default) is a random model of SmolLM2-135M's shape: nothing to carry, and a step's
time does not depend on the weights' values. The evaluator needs the GPU machine's carried `.whl` and
`.probe` (gpu_check.sh installs them; `--cpu` needs nothing; on a CPU the two attention choices are the
same kernels).

Not covered: the trainer's own state beside the model (its optimiser, TRL's wrappers), a real policy's
prompts (random tokens of the same lengths), the comparison's backend (`agent.backends.hf_local`, which
takes the same setting).

    python3 scripts/decoding_conditions_gpu.py --out "$OUT/decoding/conditions.json"      # GPU, ~6-7 min
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
    attention: str  # `RlConfig.generation_attention`
    cache: str = "dynamic"  # `RlConfig.generation_cache`


@dataclass(frozen=True)
class Measured:
    form: str
    rows: int
    prompt_min: int
    prompt_max: int
    new_tokens: int
    evaluator: bool
    attention: str
    ms_per_step: float
    short_call_s: float
    long_call_s: float
    cache: str = "dynamic"


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
    """The module docstring's forms, in its order (all over the same prompt lengths)."""
    uneven = uneven_lengths(args.rows, args.prompt_tokens, args.spread)
    n = args.new_tokens
    return [Form("no_cudnn", uneven, n, False, "no_cudnn"),
            Form("graph", uneven, n, False, "no_cudnn", "graph"),
            Form("cudnn_new_shapes", uneven, n, False, "any"),
            Form("cudnn_seen_shapes", uneven, n, False, "any"),
            Form("no_cudnn_evaluator_open", uneven, n, True, "no_cudnn")]


def short_call_lengths(lengths: tuple[int, ...], new_tokens: int) -> tuple[int, ...]:
    """The short call's prompt lengths: each `new_tokens` + 1 longer, so its padded width (its first key
    length) is past the long call's last key length (the long call's width + `new_tokens`)."""
    return tuple(n + new_tokens + 1 for n in lengths)


def prompt_rows(tokenizer, lengths: tuple[int, ...]) -> list[list[int]]:
    from generation_profile import prompts

    return [prompts(tokenizer, 1, n, seed=i)[0] for i, n in enumerate(lengths)]


def measure(gen, tokenizer, form: Form, cuda: bool, probe_dir: Path | None) -> Measured:
    """One form's step time (the module docstring: the long call first, the short one on longer prompts);
    a probe on the long call."""
    from generation_profile import full_length, wall_s

    long, short = form.new_tokens, max(2, form.new_tokens // 8)
    rows = {long: prompt_rows(tokenizer, form.lengths),
            short: prompt_rows(tokenizer, short_call_lengths(form.lengths, long))}
    gen.attention, gen.cache = form.attention, form.cache
    calls: dict[int, float] = {}
    for n in (long, short):
        if probe_dir is not None and n == long and n >= 256:
            gen.probe_to = str(probe_dir / f"{form.name}-decoding_probe.txt")
        with full_length(gen.model, n):
            calls[n] = wall_s(lambda n=n: gen.generate(rows[n], n), cuda)
    step = 1e3 * (calls[long] - calls[short]) / (long - short)
    return Measured(form.name, len(form.lengths), min(form.lengths), max(form.lengths), long, form.evaluator,
                    form.attention, round(step, 3), round(calls[short], 3), round(calls[long], 3), form.cache)


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
    """Markdown: each form's step time and its ratio to `no_cudnn`'s."""
    base = next((m.ms_per_step for m in rows if m.form == "no_cudnn"), None)
    lines = ["| form | attention | decoding | rows | prompt tokens | new tokens | evaluator open | ms a step "
             "| vs no_cudnn |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m in rows:
        ratio = f"{m.ms_per_step / base:.2f}x" if base else "n/a"
        lines.append(f"| {m.form} | {m.attention} | {m.cache} | {m.rows} | {m.prompt_min}-{m.prompt_max} | "
                     f"{m.new_tokens} | {'yes' if m.evaluator else 'no'} | {m.ms_per_step:.2f} | {ratio} |")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-shape", help="'smollm2-shape', 'tiny' or a model directory")
    p.add_argument("--cpu", action="store_true", help="the small form on a machine without a GPU")
    p.add_argument("--rows", type=int, default=16, help="rows a call (the rollout's: 4 tasks x 4)")
    p.add_argument("--prompt-tokens", type=int, default=1800, help="mean prompt tokens")
    p.add_argument("--spread", type=int, default=600, help="uneven prompts: mean +- this many tokens")
    p.add_argument("--new-tokens", type=int, default=1000, help="new tokens of a form's long call (the "
                   "real rounds' ~1,000)")
    p.add_argument("--warm-tasks", type=int, default=4, help="dataset PyTorch tasks of the warm-up")
    p.add_argument("--warm-candidates", type=int, default=8, help="honest candidates evaluated to warm up")
    p.add_argument("--out", type=Path, required=True, help="JSON of every figure; probes beside it")
    args = p.parse_args(argv)
    if args.cpu:  # small sizes for a 2-core machine (given values are replaced)
        args.model, args.rows, args.prompt_tokens, args.spread = "tiny", 2, 48, 16
        args.new_tokens, args.warm_tasks, args.warm_candidates = 256, 1, 2
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
    # (no_cudnn: its 8 key lengths stay out of cuDNN's cache; the forms' widths are other lengths anyway)
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
