"""Where a decoding step of the policy goes (dev/LOG.md, open questions: SmolLM2-135M decodes at 40-70 ms
a step on the H200 whatever the batch).

Times one decoding step (the difference between a long and a short `generate` of the same batch, so the
prefill cancels out; every row forced to the full length) in five forms, side by side in one run, in this
order (`--out` is rewritten after each, so a run stopped at its limit keeps what it measured):
- `rollout`: the RL rollout's own generator (`train.rollout.ModelGenerator`: float32 weights under
  bfloat16 autocast, the logits processor that records each chosen token's log-probability, top-p);
- `rollout_bf16`: the same generator with `weights="bfloat16"` (`RlConfig.generation_weights`: a bfloat16
  copy of the parameters, no autocast);
- `rollout_static`: the same with `cache="static"` (`RlConfig.generation_cache`; float32, no autocast),
  the form the RL trainer can switch to (its first call, compile included, and its first call at a second
  length reported on their own, `compiled_form`): these two decide `model_day.sh`'s choice;
- then a `torch.profiler` table of a few `rollout` steps: the operators with the most host and device time;
- `bf16`: the model cast to bfloat16, plain sampling, no processor;
- `static`: `bf16` with a static KV cache, which `transformers` compiles on a GPU (first calls reported).

`--model smollm2-shape` is a randomly initialised model of SmolLM2-135M's exact shape (no GGUF to carry):
a decoding step's time does not depend on the weights' values, since every row is forced to full length.

Not covered: the trainers (nothing here changes how they generate), prompts with padding.

    python3 scripts/generation_profile.py --model DIR [--batch 64 --prompt-tokens 1500 --new-tokens 128]
    python3 scripts/generation_profile.py --model smollm2-shape                      # H200, nothing carried
    python3 scripts/generation_profile.py --model tiny --device cpu --new-tokens 8   # CPU smoke
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

# SmolLM2-135M-Instruct's published configuration (the fields that set the cost of a decoding step).
SMOLLM2_135M_SHAPE = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
                      "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                      "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
                      "tie_word_embeddings": True}


def load_shape_model(device: str):
    """(float32 random model of SmolLM2-135M's shape, the tiny ChatML tokenizer): its special ids (0-2)
    are SmolLM2's, and every id it makes is inside the model's vocabulary."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from cudaperf.agent.backends.tiny import train_tokenizer

    tokenizer = train_tokenizer()
    config = LlamaConfig(**SMOLLM2_135M_SHAPE, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def load(model: str, device: str):
    """(float32 model, tokenizer) as the RL trainer loads them (`train.models.load_policy`)."""
    if model == "smollm2-shape":
        return load_shape_model(device)
    from cudaperf.train.config import RlConfig
    from cudaperf.train.models import load_policy

    return load_policy(RlConfig(model=model, device=device, output_dir=tempfile.mkdtemp(prefix="genprof-")))


def prompts(tokenizer, batch: int, length: int, seed: int = 0) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    special = set(tokenizer.all_special_ids)
    vocab = [i for i in range(len(tokenizer)) if i not in special]
    return [[rng.choice(vocab) for _ in range(length)] for _ in range(batch)]


def wall_s(fn, cuda: bool) -> float:
    """Seconds `fn()` takes, the GPU's queue drained before and after."""
    import torch

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    started = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - started


def timed_generate(model, ids, new_tokens: int, **kwargs) -> float:
    import torch

    def run() -> None:
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, do_sample=True, top_p=0.95, top_k=0, temperature=0.7,
                           **kwargs)

    return wall_s(run, ids.device.type == "cuda")


def per_step_ms(run, short: int, long: int) -> float:
    """ms a step: (long run - short run) / (long - short) tokens, so prefill and set-up cancel."""
    return 1e3 * (run(long) - run(short)) / (long - short)


@contextlib.contextmanager
def full_length(model, new_tokens: int):
    """Every row generates `new_tokens` (the end-of-turn token held back), as in the other forms; the
    rollout's generator reads this from the model's generation config."""
    model.generation_config.min_new_tokens = new_tokens
    try:
        yield
    finally:
        model.generation_config.min_new_tokens = None


def rollout_step_ms(gen, rows: list[list[int]], short: int, long: int, cuda: bool) -> float:
    def run(n: int) -> float:
        with full_length(gen.model, n):
            return wall_s(lambda: gen.generate(rows, n), cuda)

    return per_step_ms(run, short, long)


def compiled_form(name: str, run, short: int, long: int) -> dict:
    """A static-cache form, `run(n)` the wall seconds of an n-token call: its first call (short, compile
    included), its first call at a second length (long: a static cache is sized to prompt + new tokens,
    so a new length may compile again; what a caller whose lengths vary would pay), then its step from
    calls at both lengths already seen. Figures keyed by `name`; a form that fails is a finding
    (`<name>_error`), reported, not a crash."""
    try:
        first = run(short)
        new_length = run(long)
        step = per_step_ms(run, short, long)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        error = f"{type(exc).__name__}: {exc}"[:500]
        print(f"RESULT gen {name} failed: {error}", flush=True)
        return {f"{name}_error": error}
    print(f"RESULT gen {name} {step:.2f} ms a step (first call {first:.1f} s, compile included; first call "
          f"at a new length {new_length:.1f} s)", flush=True)
    return {f"{name}_ms_per_step": step, f"{name}_first_call_s": first,
            f"{name}_new_length_first_call_s": new_length}


def rollout_static(model, tokenizer, rows: list[list[int]], short: int, long: int, cuda: bool) -> dict:
    """The rollout's generator with a static cache (`compiled_form`)."""
    from cudaperf.train.rollout import ModelGenerator

    gen = ModelGenerator(model, tokenizer, temperature=0.7, top_p=0.95, batch_size=len(rows), cache="static")

    def run(n: int) -> float:
        with full_length(model, n):
            return wall_s(lambda: gen.generate(rows, n), cuda)

    return compiled_form("rollout_static", run, short, long)


def bf16_static(bf16, ids, short: int, long: int) -> dict:
    """`bf16` with a static cache (`compiled_form`)."""
    def run(n: int) -> float:
        return timed_generate(bf16, ids, n, cache_implementation="static")

    return compiled_form("static", run, short, long)


def profile_table(gen, rows: list[list[int]], steps: int, cuda: bool) -> str:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with full_length(gen.model, steps), profile(activities=activities) as prof:
        gen.generate(rows, steps)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    if cuda:
        table += "\n" + prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=10)
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a model directory, 'smollm2', 'smollm2-shape' or 'tiny'")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=1500)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--profile-steps", type=int, default=16)
    p.add_argument("--out", type=Path, default=None, help="JSON of the figures and the profile table here")
    args = p.parse_args(argv)
    import torch

    model, tokenizer = load(args.model, args.device)
    rows = prompts(tokenizer, args.batch, args.prompt_tokens)
    ids = torch.tensor(rows, device=args.device)
    short, long = max(2, args.new_tokens // 8), args.new_tokens
    figures: dict[str, float | str] = {"batch": args.batch, "prompt_tokens": args.prompt_tokens,
                                       "new_tokens": long, "device": args.device}
    from cudaperf.train.rollout import ModelGenerator

    cuda = args.device == "cuda"
    table = ""

    def save() -> None:  # after every form: a step killed at its limit keeps what it measured
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({**figures, "profile": table}, indent=1), encoding="utf-8")

    gen = ModelGenerator(model, tokenizer, temperature=0.7, top_p=0.95, batch_size=len(rows))
    figures["rollout_ms_per_step"] = rollout_step_ms(gen, rows, short, long, cuda)
    print(f"RESULT gen rollout {figures['rollout_ms_per_step']:.2f} ms a step", flush=True)
    save()
    bf16_gen = ModelGenerator(model, tokenizer, temperature=0.7, top_p=0.95, batch_size=len(rows),
                              weights="bfloat16")
    figures["rollout_bf16_ms_per_step"] = rollout_step_ms(bf16_gen, rows, short, long, cuda)
    print(f"RESULT gen rollout_bf16 {figures['rollout_bf16_ms_per_step']:.2f} ms a step", flush=True)
    del bf16_gen  # its copy of the weights
    save()
    figures.update(rollout_static(model, tokenizer, rows, short, long, cuda))  # the two the RL run picks from
    save()
    table = profile_table(gen, rows, args.profile_steps, cuda)
    print(table, flush=True)
    save()
    bf16 = model.to(torch.bfloat16)
    figures["bf16_ms_per_step"] = per_step_ms(lambda n: timed_generate(bf16, ids, n), short, long)
    print(f"RESULT gen bf16 {figures['bf16_ms_per_step']:.2f} ms a step", flush=True)
    save()
    figures.update(bf16_static(bf16, ids, short, long))
    print("RESULT generation_profile " + json.dumps(figures), flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
