"""PyTorch→CUDA families held out of the dataset: a fresh held-out set for the ranker (issue 20).

None of these families is in `registry.all_families()`, so the dataset, its splits and everything trained
on it stay as they were; `registry.fresh_families()` lists them, and their tasks' split is "fresh". They
are written, measured and then read once, by a protocol committed before their first measurement.

Families (24 variants each, three configurations each: small, large, and sizes that are multiples of no
block size; the large and odd sizes depend on the variant where the kernels' trade-offs do):
  embedding_bag         `nn.EmbeddingBag` (sum, mean, max, weighted sum) over int64 indices and bag
                        offsets with fixed, ragged or heavy-tailed bag lengths (empty bags included),
                        uniform or hot indices, then a post op and a scale (irregular, memory bound)
  row_topk              `torch.topk(...).values` along rows (largest or smallest, k in 2..16) in a router
                        shape (many short rows) or a vocabulary shape (few long rows), then the values,
                        a scale or a softmax over the k values (selection)
  batched_small_matmul  `torch.bmm` of many small matrices (8..64, square and rectangular, B transposed or
                        not) with a bias and activation or an activation and scale (compute, regular)

Implementations: torch_impls/fresh_embedding_bag.py, fresh_row_topk.py, fresh_batched_small_matmul.py.

Not covered: the dataset's own families (torch_families.py), other dtypes than float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.torch_families import _const, _module
from cudaperf.datasets.generate.torch_impls.fresh_batched_small_matmul import bmm_impls, odd_dims
from cudaperf.datasets.generate.torch_impls.fresh_embedding_bag import bag_impls
from cudaperf.datasets.generate.torch_impls.fresh_row_topk import topk_impls
from cudaperf.datasets.records import Family
from cudaperf.types import TaskKind

_POSTS = ("", "relu", "tanh", "sigmoid", "gelu")


def _post(name: str, x: str) -> str:
    return chain_exprs([(name, 0.0)] if name else [], x, "v")[0]


# ------------------------------------------------------------------------------------------------
# embedding_bag

_BAG_MODES = ("sum", "mean", "max", "wsum")  # wsum: mode "sum" with per-sample weights
_BAG_LENGTHS = ("fixed", "ragged", "skewed")

# Bag starts (int64, non-decreasing, the first 0) for `bags` bags over `total` indices.
_BAG_OFFSETS = {
    "fixed": "torch.arange(bags) * avg",
    # uniform cut points: exponential-like lengths, a few empty bags
    "ragged": "torch.cat([torch.zeros(1, dtype=torch.long), "
              "torch.sort(torch.randint(0, bags * avg + 1, (bags - 1,))).values])",
    "skewed": "skewed_offsets(bags, bags * avg)",
}

# Heavy-tailed lengths (Pareto, tail index 2, capped at 100x the smallest weight), in float64 so that the
# starts stay non-decreasing on any device's cumulative sum.
_SKEWED_HELPER = '''
def skewed_offsets(bags, total):
    """Bag starts whose lengths follow a capped Pareto tail: most bags short, a few ~50x the mean."""
    w = torch.rand(bags, dtype=torch.float64).clamp(min=1e-4) ** -0.5
    c = torch.cumsum(w, 0)
    return ((c - w) / c[-1] * total).long()
'''


def _bag_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"mode": mode, "lengths": lengths, "hot": hot, "post": str(rng.choice(_POSTS)),
             "scale": _const(rng), "dim_large": int(rng.choice([64, 128, 256])),
             "dim_odd": int(rng.choice([33, 67, 131]))}
            for mode in _BAG_MODES for lengths in _BAG_LENGTHS for hot in (False, True)]


def _bag_make(v: dict[str, Any]) -> str:
    mode, weighted = ("sum", True) if v["mode"] == "wsum" else (v["mode"], False)
    call = "self.table(idx, offsets" + (", per_sample_weights=weights)" if weighted else ")")
    model = ((_SKEWED_HELPER.strip() + "\n\n\n" if v["lengths"] == "skewed" else "")
             + f"class Model(nn.Module):\n    \"\"\"EmbeddingBag ({v['mode']}) over {v['lengths']} bags of "
             f"{'hot' if v['hot'] else 'uniform'} indices, then {v['post'] or 'identity'} and a scale."
             "\"\"\"\n\n    def __init__(self, vocab, dim):\n        super().__init__()\n"
             f"        self.table = nn.EmbeddingBag(vocab, dim, mode=\"{mode}\")\n\n"
             f"    def forward(self, idx, offsets{', weights' if weighted else ''}):\n"
             f"        return {_post(v['post'], call)} * {v['scale']}\n")
    n = "bags * avg"
    idx = (f"torch.clamp((torch.rand({n}) ** 4 * vocab).long(), max=vocab - 1)" if v["hot"]
           else f"torch.randint(0, vocab, ({n},))")
    inputs = f"[{idx}, {_BAG_OFFSETS[v['lengths']]}" + (f", torch.randn({n})]" if weighted else "]")
    cfgs = [{"name": "small", "bags": 8, "avg": 6, "vocab": 100, "dim": 16},
            {"name": "large", "bags": 8192, "avg": 40, "vocab": 50000, "dim": v["dim_large"]},
            {"name": "odd", "bags": 999, "avg": 13, "vocab": 3001, "dim": v["dim_odd"]}]
    return _module(f"EmbeddingBag {v['mode']}", "embedding_bag", model, inputs, "[vocab, dim]", cfgs)


# ------------------------------------------------------------------------------------------------
# row_topk

TOPK_SHAPES = {  # (small, large, odd) as (rows, cols)
    "router": ((16, 64), (65536, 256), (9999, 97)),  # mixture-of-experts routing: many short rows
    "vocab": ((4, 1000), (256, 32768), (33, 30011)),  # sampling over a vocabulary: few long rows
}
_TOPK_POSTS = ("values", "scale", "softmax")


def _topk_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    out = []
    for k in (2, 4, 8, 16):
        for shape in TOPK_SHAPES:
            for post in _TOPK_POSTS:
                largest = bool(rng.random() < 0.7)
                # |x| or tanh would crowd the smallest values near zero, where zeros pass the tolerance
                pre = str(rng.choice(["", "abs", "tanh"])) if largest else ""
                out.append({"k": k, "shape": shape, "post": post, "largest": largest, "pre": pre,
                            "scale": _const(rng)})
    return out


def _topk_make(v: dict[str, Any]) -> str:
    x = _post(v["pre"], "x")
    y = f"torch.topk({x}, {v['k']}, dim=-1, largest={v['largest']}, sorted=True).values"
    y = {"values": y, "scale": f"{y} * {v['scale']}", "softmax": f"torch.softmax({y}, dim=-1)"}[v["post"]]
    which = "largest" if v["largest"] else "smallest"
    model = (f"class Model(nn.Module):\n    \"\"\"The {v['k']} {which} values of each row "
             f"({v['shape']} shape), then {v['post']}.\"\"\"\n\n"
             "    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n"
             f"        return {y}\n")
    small, large, odd = TOPK_SHAPES[v["shape"]]
    cfgs = [{"name": name, "rows": r, "cols": c} for name, (r, c) in zip(("small", "large", "odd"),
                                                                         (small, large, odd), strict=True)]
    return _module(f"Row top-{v['k']}", "row_topk", model, "[torch.randn(rows, cols)]", "[]", cfgs)


# ------------------------------------------------------------------------------------------------
# batched_small_matmul

BMM_SHAPES = ((8, 8, 8), (16, 16, 16), (32, 32, 32), (64, 64, 64), (16, 64, 16), (64, 16, 64))  # m, k, n
_ACTS = ("relu", "gelu", "silu", "tanh", "sigmoid")


def _bmm_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    out = []
    for m, k, n in BMM_SHAPES:
        for trans_b in (False, True):
            for epi in ("bias_act", "act_scale"):
                act = str(rng.choice(_ACTS if epi == "bias_act" else ("", *_ACTS)))
                out.append({"m": m, "k": k, "n": n, "trans_b": trans_b, "bias": epi == "bias_act",
                            "act": act, "scale": _const(rng) if epi == "act_scale" else 1.0})
    return out


def _bmm_make(v: dict[str, Any]) -> str:
    y = "torch.bmm(a, b.transpose(1, 2))" if v["trans_b"] else "torch.bmm(a, b)"
    y = f"{y} + self.bias" if v["bias"] else y
    y = _post(v["act"], y)
    y = f"{y} * {v['scale']}" if v["scale"] != 1.0 else y
    init = "        self.bias = nn.Parameter(torch.randn(n) * 0.1)\n" if v["bias"] else ""
    model = (f"class Model(nn.Module):\n    \"\"\"Batched {v['m']}x{v['k']} @ {v['k']}x{v['n']} matmul"
             f"{' (B transposed)' if v['trans_b'] else ''}"
             f"{', bias' if v['bias'] else ''}, then {v['act'] or 'identity'}"
             f"{' and a scale' if v['scale'] != 1.0 else ''}.\"\"\"\n\n"
             f"    def __init__(self, n):\n        super().__init__()\n{init}\n"
             f"    def forward(self, a, b):\n        return {y}\n")
    b_shape = "(batch, n, k)" if v["trans_b"] else "(batch, k, n)"
    m, k, n = v["m"], v["k"], v["n"]
    om, ok, on = odd_dims(m, k, n)
    cfgs = [{"name": "small", "batch": 4, "m": m, "k": k, "n": n},
            {"name": "large", "batch": 2 ** 23 // (m * k), "m": m, "k": k, "n": n},
            {"name": "odd", "batch": 999, "m": om, "k": ok, "n": on}]
    return _module("Batched small matmul", "batched_small_matmul", model,
                   f"[torch.randn(batch, m, k), torch.randn{b_shape}]", "[n]", cfgs)


def _fresh(name: str, variants: Any, make: Any, impls: Any, description: str) -> Family:
    return Family(name=name, kind=TaskKind.PYTORCH, variants=variants, make=make, implementations=impls,
                  description=description, group=name)


FRESH_TORCH_FAMILIES: tuple[Family, ...] = (
    _fresh("embedding_bag", _bag_variants, _bag_make, bag_impls, "embedding bags over ragged offsets"),
    _fresh("row_topk", _topk_variants, _topk_make, topk_impls, "top-k values along rows"),
    _fresh("batched_small_matmul", _bmm_variants, _bmm_make, bmm_impls, "bmm of many small matrices"),
)
