"""The offline pairwise ranker (issue 20): which of two correct kernels for the same task and input
configuration is faster, learned from the measured dataset, without a GPU.

```python
from cudaperf.ranker.store import load_model
from cudaperf.ranker.contract import reward_probability
from cudaperf.ranker.prefilter import top_k

ranker = load_model().backend                      # the shipped feature model (LightGBM)
ranker.score(source, task, "large")                # higher = faster (relative log speed)
ranker.compare(a, b, task, "large")                # P(a faster), calibrated out of family
ranker.explain_compare(a, b, task, "large")        # the features that decided (TreeSHAP)
reward_probability(ranker, source, task)           # in [0, 1]: compute_reward(..., ranker_score=...)
top_k(ranker, candidates, task, k=2)               # evaluate only these on the GPU
```

| module | what it is |
|---|---|
| `contract.py` | the `Ranker` protocol both backends implement; `reward_probability` |
| `problem.py` | a task as the ranker sees it: calling a solution on meta tensors, sizes per configuration |
| `trace.py` | a solution's launches (grid, block, kernel arguments) without a GPU; sandboxed variant |
| `features.py` | per-configuration features: problem, launches vs problem, bound analysis, source text |
| `table.py` | the measured dataset as rows with features (cached on disk) |
| `pairs.py` | pairs beyond noise, balanced orientation, LOFO and dataset splits, length control |
| `feature_ranker.py` | LightGBM on relative log time; calibration; explanations; `FeatureBackend` |
| `lm_ranker.py` | Bradley-Terry head on a Hugging Face model; tiny model from a config for CPU and CI |
| `metrics.py` | pairwise accuracy (macro, pooled, buckets), Kendall tau, calibration |
| `evaluation.py` | held-out scores (LOFO, test families, LM) and every figure beside the baselines |
| `prefilter.py` | top-k before GPU evaluation, and its offline replay |
| `store.py` | save/load with feature schema and versions; the shipped model's path |
| `report.py` | `cudaperf rank eval`: everything in one run, JSON and markdown |

Not covered: wiring the score into the reward (the caller passes `reward_probability`), pairs of
model-written kernels (`scripts/ranker_model_pairs.py` forms them from agent trajectories measured on the
H200).
"""
