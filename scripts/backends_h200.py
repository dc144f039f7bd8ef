"""SmolLM2-135M-Instruct through the `hf_local` backend on the H200: load times and batched generation
throughput (tokens/s at batch 1, 16, 64 and 128).

The GPU machine has no network and a 64 MiB carry per call, so the 98 MB GGUF travels in two parts:

    # on the CPU machine (once): the parts and the gguf wheel, in git-ignored folders
    python3 scripts/backends_h200.py split            # writes .smollm2-part1/ and .smollm2-part2/
    python3 -m pip download -q --no-deps gguf==0.19.0 -d .whl-agent
    # device call 1, carry [".smollm2-part1"]:
    python3 scripts/backends_h200.py stash .smollm2-part1/part
    # device call 2 straight after (same warm machine), carry [".smollm2-part2", ".whl-agent"]:
    pip install --no-index --no-deps --target /tmp/site-agent .whl-agent/*.whl && \
    PYTHONPATH=/tmp/site-agent python3 scripts/backends_h200.py run --parts .smollm2-part2/part \
        --out $OUT/backends_h200.json

`run` joins the stashed part 1 with part 2 (checking the md5 written by `split`), converts the GGUF once to
a bf16 safetensors directory under /tmp (timed: the cold load), loads it again (the cached load), then
generates with sampling (temperature 0.7, top_p 0.95, a fixed seed) `--max-new-tokens` tokens for batches
of `--batches` kernel-writing prompts, after one warm-up batch, and prints (and appends to --out) one JSON
line per measurement as it is made. With --keep-cache an existing converted copy is kept (the first load
is then labelled `load_first_s`, not a cold conversion); the GGUF is $CUDAPERF_SMOLLM2_GGUF when no parts
are given (scripts/model_day.sh D).
tokens/s counts the completion tokens actually generated (a row that ends early counts what it produced).
Runs on the CPU too, for a dry run: `run --device cpu --batches 1,2 --max-new-tokens 8`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

STASH = Path("/tmp/smollm2-stash")
PART_BYTES = 50_000_000  # under the 64 MiB carry, as measured in gpu-machine.md
TASKS = ("ReLU over a float32 tensor of 16M elements", "a row-wise softmax over a 4096x4096 float32 matrix",
         "a 1024x1024x1024 float32 matrix multiplication with shared-memory tiling",
         "layer normalisation over the last dimension of a (64, 4096) float32 tensor",
         "a sum reduction of 2^26 float32 values", "GELU (tanh approximation) over a float32 tensor",
         "a 3x3 2D convolution on a (16, 64, 128, 128) float32 tensor", "an element-wise a*x+y (SAXPY)")


def split(args: argparse.Namespace) -> int:
    from cudaperf.agent.backends.smollm2 import find_gguf

    data = find_gguf(args.gguf).read_bytes()
    for index, start in enumerate(range(0, len(data), PART_BYTES), start=1):
        folder = ROOT / f".smollm2-part{index}"
        folder.mkdir(exist_ok=True)
        (folder / "part").write_bytes(data[start:start + PART_BYTES])
        (folder / "md5").write_text(hashlib.md5(data).hexdigest() + "\n")
        _ignore(f"/.smollm2-part{index}/")
    print(json.dumps({"bytes": len(data), "md5": hashlib.md5(data).hexdigest(), "parts": index}))
    return 0


def _ignore(pattern: str) -> None:
    exclude = ROOT / ".git" / "info" / "exclude"
    if exclude.parent.is_dir() and pattern not in exclude.read_text().splitlines():
        with open(exclude, "a") as f:
            f.write(pattern + "\n")


def stash(args: argparse.Namespace) -> int:
    STASH.mkdir(parents=True, exist_ok=True)
    for number, part in enumerate(args.parts, start=1):
        shutil.copy(part, STASH / f"part{number}")
        md5 = Path(part).parent / "md5"
        if md5.is_file():
            shutil.copy(md5, STASH / "md5")
    print(json.dumps({"stashed": sorted(p.name for p in STASH.iterdir())}))
    return 0


def _join(parts: list[str]) -> Path:
    stashed = sorted(STASH.glob("part*")) if STASH.is_dir() else []
    files = [*stashed, *map(Path, parts)]
    target = Path("/tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        out.writelines(f.read_bytes() for f in files)
    expected = next((p.parent / "md5" for p in files if (p.parent / "md5").is_file()), None)
    actual = hashlib.md5(target.read_bytes()).hexdigest()
    if expected is not None and expected.read_text().strip() != actual:
        raise SystemExit(f"joined GGUF md5 {actual} != {expected.read_text().strip()}: a part is missing")
    return target


def _prompts(n: int):
    from cudaperf.agent.backends.base import ChatMessage

    system = ChatMessage("system", "You are an expert CUDA programmer. Answer with one CUDA kernel.")
    return [[system, ChatMessage("user", f"Write a fast CUDA kernel for {TASKS[i % len(TASKS)]}.")]
            for i in range(n)]


def run(args: argparse.Namespace) -> int:
    import torch
    import transformers

    from cudaperf.agent.backends.base import GenerationConfig
    from cudaperf.agent.backends.smollm2 import SmolLM2Options, load_smollm2

    gguf = _join(args.parts) if args.parts or STASH.is_dir() else None
    cache = Path(args.cache_dir)
    cold = not (args.keep_cache and cache.exists())
    if cold and cache.exists():
        shutil.rmtree(cache)
    batches = [int(b) for b in args.batches.split(",")]
    options = SmolLM2Options(gguf=str(gguf) if gguf else None, cache_dir=str(cache), device=args.device,
                             batch_size=max(batches))
    out = Path(args.out) if args.out else None
    if out is not None:
        out.write_text("")

    def emit(row: dict) -> None:  # printed and written as measured: a kill keeps what was done
        print(json.dumps(row), flush=True)
        if out is not None:
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")

    emit({"what": "environment", "python": platform.python_version(), "torch": torch.__version__,
          "transformers": transformers.__version__,
          "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"})
    start = time.perf_counter()
    load_smollm2(options).close()
    emit({"what": "load_cold_convert_s" if cold else "load_first_s (converted copy kept)",
          "value": round(time.perf_counter() - start, 2)})
    start = time.perf_counter()
    backend = load_smollm2(options)
    emit({"what": "load_cached_s", "value": round(time.perf_counter() - start, 2),
          "device": str(backend.model.device), "dtype": str(backend.model.dtype)})
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, temperature=0.7, top_p=0.95, seed=0)
    backend.generate(_prompts(min(4, max(batches))), GenerationConfig(max_new_tokens=16, seed=0))  # warm-up
    rates = {}
    for batch in batches:
        row = _throughput(backend, batch, config)
        rates[batch] = row["tokens_per_s"]
        emit(row)
        print("RESULT backends " + json.dumps({"tokens_per_s_by_batch": rates}), flush=True)
    example = backend.generate(_prompts(1), GenerationConfig(max_new_tokens=160, temperature=0.0))[0]
    emit({"what": "greedy_example", "reply": example.text, "finish": example.finish_reason})
    return 0


def _throughput(backend, batch: int, config) -> dict:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    generations = backend.generate(_prompts(batch), config)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    wall_s = time.perf_counter() - start
    tokens = sum(g.completion_tokens for g in generations)
    finishes = {r: sum(g.finish_reason == r for g in generations) for r in ("stop", "length", "error")}
    errors = [g.error for g in generations if g.error][:2]
    return {"what": "throughput", "batch": batch, "max_new_tokens": config.max_new_tokens, "wall_s":
            round(wall_s, 2), "completion_tokens": tokens, "tokens_per_s": round(tokens / wall_s, 1),
            "finish": finishes, "errors": errors,
            "with_global": sum("__global__" in g.text for g in generations)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("split", help="cut the installed GGUF into carry-sized parts (CPU machine)")
    p.add_argument("--gguf", default=None)
    p = sub.add_parser("stash", help="copy carried parts to /tmp for the next call")
    p.add_argument("parts", nargs="+")
    p = sub.add_parser("run", help="join the parts, load, measure")
    p.add_argument("--parts", nargs="*", default=[], help="parts carried in this call (after stashed ones)")
    p.add_argument("--cache-dir", default="/tmp/cudaperf-cache")
    p.add_argument("--keep-cache", action="store_true", help="keep an earlier conversion (no cold load)")
    p.add_argument("--device", default="auto")
    p.add_argument("--batches", default="1,16,64,128")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    return {"split": split, "stash": stash, "run": run}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
