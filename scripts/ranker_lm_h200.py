"""The LM ranker with SmolLM2-135M on the H200: train a Bradley-Terry head on the dataset's train and val
families, score every row of the test families, and write the scores and figures under --out.

    python3 scripts/ranker_lm_h200.py --out $OUT --gguf /tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 scripts/ranker_lm_h200.py --out $OUT --model /tmp/smollm2-f32      # an already converted dir
    python3 scripts/ranker_lm_h200.py --out $OUT --tiny --device cpu --steps 50  # a dry run anywhere
    python3 scripts/ranker_lm_h200.py --out $OUT --model DIR --device cpu --steps 2 --batch-pairs 2 \
        --max-tokens 128 --families elementwise sort               # SmolLM2 on the CPU, two families

Writes `lm_scores.json` ({"task|config|impl": reward} for the test rows: `cudaperf rank eval --lm-scores
FILE` puts them beside the feature ranker on the same pairs) and `lm_summary.json` (the LM ranker's
accuracy on the test families per gap bucket, pooled and macro, length-controlled, beside "longer source
wins" and random, plus the training losses). Needs transformers (and `gguf` to convert the GGUF, see
docs/gpu-machine.md for carrying it); not tree-sitter or lightgbm: the table is read without features.
Budget: SmolLM2 at 16 pairs x 512 tokens per step runs ~0.1-0.2 s a step on the H200, so the default 1,000
steps plus scoring ~16k rows take a few minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default=None, help="a Hugging Face model directory")
    ap.add_argument("--gguf", default=None, help="SmolLM2 GGUF to convert first (into /tmp/smollm2-f32)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model from a config (dry run)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch-pairs", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", help="autocast dtype (float32 for none)")
    ap.add_argument("--families", nargs="*", default=None,
                    help="only these families' rows (a smoke run: name train and test families)")
    ap.add_argument("--max-train-pairs", type=int, default=50_000)
    ap.add_argument("--train-max-minutes", type=float, default=0.0,
                    help="stop training after this long even before --steps (0: no limit), then score")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    import numpy as np

    from cudaperf.ranker import evaluation
    from cudaperf.ranker.lm_ranker import LMRanker, LMRankerConfig, load_pretrained, tiny_model
    from cudaperf.ranker.pairs import make_pairs
    from cudaperf.ranker.table import build_table

    table = build_table(features=False, families=args.families)
    pairs = make_pairs(table)
    print(f"table {len(table)} rows, {len(pairs)} pairs ({time.time() - t0:.0f} s)", flush=True)
    cfg = LMRankerConfig(
        max_tokens=args.max_tokens,
        batch_pairs=args.batch_pairs,
        steps=args.steps,
        learning_rate=args.lr if not args.tiny else 3e-4,
        device=args.device,
        dtype=args.dtype if args.device.startswith("cuda") else "float32",
        max_seconds=60 * args.train_max_minutes,
    )
    model_dir = _model_dir(args)

    def make(texts: list[str]) -> LMRanker:
        model, tok = tiny_model(texts, max_tokens=cfg.max_tokens) if args.tiny else load_pretrained(model_dir)
        return LMRanker(model.to(cfg.device), tok, cfg)

    held = evaluation.lm_split_scores(table, make, pairs, max_train_pairs=args.max_train_pairs,
                                      progress=lambda m: print(m, flush=True))
    print(f"trained and scored in {time.time() - t0:.0f} s", flush=True)
    losses = list(held.losses)
    scores = {
        "|".join(table.keys[i]): float(held.scores[i])
        for i in range(len(table))
        if math.isfinite(held.scores[i])
    }
    (args.out / "lm_scores.json").write_text(
        json.dumps({"scale": float(np.nanmax(held.scale)), "scores": scores})
    )
    base = evaluation.baseline_scores(table)
    fig = evaluation.figures(
        table,
        pairs,
        {"lm_ranker": held.scores, "longer_source": base["longer_source"], "random": base["random"]},
        held,
        ranker_name="lm_ranker",
    )
    summary = {
        "model": "tiny" if args.tiny else str(model_dir),
        "config": cfg.__dict__,
        "seconds": time.time() - t0,
        "losses_first_last_100": [
            sum(losses[:100]) / max(1, len(losses[:100])),
            sum(losses[-100:]) / max(1, len(losses[-100:])),
        ],
        "figures": fig,
    }
    (args.out / "lm_summary.json").write_text(json.dumps(summary, indent=1))
    for bucket, per in fig["buckets"].items():
        line = "  ".join(
            f"{n} {_pct(v['all']['macro'])}/{_pct(v['all']['pooled'])} "
            f"(len-ctl {_pct(v['length_controlled']['pooled'])})"
            for n, v in per.items()
        )
        print(f"{bucket}: {line}", flush=True)
    overall = {b: {n: v["all"]["macro"] for n, v in per.items()} for b, per in fig["buckets"].items()}
    print("RESULT ranker_lm " + json.dumps({"seconds": round(time.time() - t0), "macro": overall}),
          flush=True)
    print(f"done in {time.time() - t0:.0f} s; wrote {args.out}/lm_scores.json and lm_summary.json")
    return 0


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def _model_dir(args) -> str | None:
    if args.tiny:
        return None
    if args.model:
        return args.model
    if not args.gguf:
        sys.exit("give --model DIR, --gguf FILE or --tiny")
    from cudaperf.agent.backends.smollm2 import convert

    target = Path("/tmp/smollm2-f32")
    if not target.exists():
        convert(Path(args.gguf), target, "float32")
    return str(target)


if __name__ == "__main__":
    sys.exit(main())
