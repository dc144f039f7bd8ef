import json, sys, dataclasses, numpy as np
from cudaperf.ranker.table import build_table
from cudaperf.ranker.feature_ranker import FeatureRankerConfig
from cudaperf.ranker.evaluation import lofo_scores
from cudaperf.ranker.pairs import make_pairs, at_least
from cudaperf.ranker import metrics
t = build_table(compute_missing=False)
p = make_pairs(t); p15 = p.select(at_least(p, 1.5))
out = {}
for seed in (0, 1, 2):
    cfg = FeatureRankerConfig(seed=seed)
    h = lofo_scores(t, cfg)
    a = metrics.accuracy(h.scores, p15)
    out[seed] = {"macro": a.macro, "pooled": a.pooled, "per_family": a.per_family}
    print(seed, round(100*a.macro,2), round(100*a.pooled,2), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
fams = sorted(out[0]["per_family"])
for f in fams:
    v = [100*out[s]["per_family"][f] for s in out]
    print(f"{f:18s} " + " ".join(f"{x:5.1f}" for x in v) + f"  spread {max(v)-min(v):4.1f}")
