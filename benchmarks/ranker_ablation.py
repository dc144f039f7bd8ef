"""Which feature groups the feature ranker's out-of-family accuracy rests on: leave-one-group-out with one
group of features blanked (set to missing) at a time, >= 1.5x pairs, beside the full model.

    python3 benchmarks/ranker_ablation.py --out benchmarks/results/2026-12-04-session13/ranker

An ablation, not a model selection: the shipped model and the headline figures keep every feature (the
schema was fixed before these runs), so nothing here is tuned on the held-out families.
Writes ablation.json and ablation.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

GROUPS = {"problem (p_)": "p_", "launch (l_)": "l_", "analysis (a_)": "a_", "source text (s_)": "s_"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from cudaperf.ranker import metrics
    from cudaperf.ranker.evaluation import lofo_scores
    from cudaperf.ranker.features import FEATURE_NAMES
    from cudaperf.ranker.pairs import at_least, make_pairs
    from cudaperf.ranker.table import Table, build_table

    table = build_table()
    pairs = make_pairs(table)
    pairs = pairs.select(at_least(pairs, 1.5))
    results = {}
    for label, prefix in {"all features": None, **{f"without {k}": v for k, v in GROUPS.items()}}.items():
        x = table.x.copy()
        if prefix:
            x[:, [i for i, n in enumerate(FEATURE_NAMES) if n.startswith(prefix)]] = np.nan
        blanked = Table(
            table.keys,
            table.family,
            table.group,
            table.split,
            table.time_ms,
            table.rel_iqr,
            table.n_samples,
            x,
            table.source_chars,
            table.structural,
        )
        acc = metrics.accuracy(lofo_scores(blanked).scores, pairs)
        results[label] = {"macro": acc.macro, "pooled": acc.pooled, "per_family": acc.per_family}
        print(f"{label}: macro {acc.macro:.3f} pooled {acc.pooled:.3f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ablation.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    lines = [
        "# Feature-group ablation, leave one group out, >= 1.5x pairs",
        "",
        "| features | macro over families | pooled |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {100 * v['macro']:.1f}% | {100 * v['pooled']:.1f}% |" for k, v in results.items()]
    (args.out / "ablation.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
