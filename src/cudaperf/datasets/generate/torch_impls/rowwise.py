"""Implementations of the row-wise families (`reduction`, `softmax`, `normalization`: statistics over
the last dimension): one generic kernel per task, in the three row mappings of `parts.ROW_MAPPINGS`:
naive (one thread per row), warp_shuffle (one warp per row), block_tree (one 256-thread block per row).

Not covered: other dtypes than float32, reductions over other dimensions than the last.
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.torch_impls.parts import (
    NEG_INF,
    ROW_MAPPINGS,
    group_reductions,
    model_new,
)
from cudaperf.datasets.records import Implementation


def _loop(acc: str, init: str, comb: str) -> str:
    return (f"    float {acc} = {init};\n    for (int c = lane; c < cols; c += W) {{ float v = pre(xr[c]); "
            f"{acc} = {comb.format(a=acc)}; }}\n")


def _row_body(kind: str, v: dict[str, Any]) -> str:
    """Statements computing the row's statistics with g_* group reductions, then writing the outputs."""
    op = v["op"]
    if kind == "reduction":
        comb, fin = {
            "sum": ("{a} + v", "g_sum(s)"), "mean": ("{a} + v", "g_sum(s) / cols"),
            "amax": ("fmaxf({a}, v)", "g_max(s)"), "amin": ("fminf({a}, v)", "g_min(s)"),
            "l1": ("{a} + fabsf(v)", "g_sum(s)"), "l2": ("{a} + v * v", "sqrtf(g_sum(s))"),
            "sumsq": ("{a} + v * v", "g_sum(s)"), "var": ("{a} + v", None)}[op]
        init = {"amax": NEG_INF, "amin": "__int_as_float(0x7f800000)"}.get(op, "0.0f")
        if op == "var":
            return (_loop("s", "0.0f", "{a} + v") + "    float mean = g_sum(s) / cols;\n" +
                    _loop("q", "0.0f", "{a} + (v - mean) * (v - mean)") +
                    "    float r = g_sum(q) / cols;\n    if (lane == 0) out[row] = post(r);\n")
        return _loop("s", init, comb) + f"    float r = {fin};\n    if (lane == 0) out[row] = post(r);\n"
    if kind == "softmax":
        stats = (_loop("m", NEG_INF, "fmaxf({a}, v)") + "    m = g_max(m);\n" +
                 _loop("s", "0.0f", "{a} + expf(v - m)") + "    s = g_sum(s);\n")
        if op == "logsumexp":
            return stats + "    if (lane == 0) out[row] = post(m + logf(s));\n"
        val = "expf(pre(xr[c]) - m) / s" if op == "softmax" else "pre(xr[c]) - m - logf(s)"
        return stats + f"    for (int c = lane; c < cols; c += W) outr[c] = post({val});\n"
    eps = f"{v['eps']!r}f"
    if op == "layernorm":
        wb = ("* weight[c] + bias[c]" if v["affine"] else "")
        return (_loop("s", "0.0f", "{a} + v") + "    float mean = g_sum(s) / cols;\n" +
                _loop("q", "0.0f", "{a} + (v - mean) * (v - mean)") +
                f"    float inv = rsqrtf(g_sum(q) / cols + {eps});\n"
                f"    for (int c = lane; c < cols; c += W) outr[c] = post((pre(xr[c]) - mean) * inv {wb});\n")
    if op == "rmsnorm":
        w = "* weight[c]" if v["affine"] else ""
        return (_loop("q", "0.0f", "{a} + v * v") + f"    float inv = rsqrtf(g_sum(q) / cols + {eps});\n"
                f"    for (int c = lane; c < cols; c += W) outr[c] = post(pre(xr[c]) * inv {w});\n")
    return (_loop("q", "0.0f", "{a} + v * v") + f"    float inv = 1.0f / fmaxf(sqrtf(g_sum(q)), {eps});\n"
            "    for (int c = lane; c < cols; c += W) outr[c] = post(pre(xr[c]) * inv);\n")


def _row_init(kind: str, v: dict[str, Any]) -> tuple[str, str]:
    """ModelNew's parameters, created exactly like Model's so that seeded construction gives equal weights."""
    if kind != "normalization" or v["op"] == "l2normalize":
        return "", ""
    if v["affine"]:
        lines = "        self.weight = nn.Parameter(torch.rand(dim) + 0.5)\n"
        if v["op"] == "layernorm":
            lines += "        self.bias = nn.Parameter(torch.randn(dim) * 0.1)\n"
        return lines, (", self.weight" if v["op"] == "rmsnorm" else ", self.weight, self.bias")
    return "", ""


def row_impls(kind: str) -> Any:
    def impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
        _, pre = chain_exprs(v["pre"], "x", "v")
        _, post = chain_exprs(v["post"], "x", "v")
        init, wargs = _row_init(kind, v)
        wparams = "".join(f", const float* {n.split('.')[-1]}" for n in wargs.split(", ") if n)
        per_row = kind == "reduction" or v["op"] == "logsumexp"
        alloc = "x.new_empty(x.shape[:-1])" if per_row else "torch.empty_like(x)"
        out = []
        for strategy, (index, _, grid, block) in ROW_MAPPINGS.items():
            cuda = (f"__device__ __forceinline__ float pre(float v) {{ return {pre}; }}\n"
                    f"__device__ __forceinline__ float post(float v) {{ return {post}; }}\n"
                    f"{group_reductions(strategy)}\n"
                    "extern \"C\" __global__ void rowk(const float* __restrict__ x, float* "
                    f"__restrict__ out{wparams},"
                    f" int rows, int cols) {{\n    {index}\n"
                    "    const float* xr = x + (long long)row * cols;\n"
                    "    float* outr = out + (long long)row * cols;\n    (void)outr;\n"
                    f"{_row_body(kind, v)}}}\n")
            body = (f"        cols = x.shape[-1]\n        rows = x.numel() // cols\n        out = {alloc}\n"
                    f"        mod.rowk({grid}, {block}, x, out{wargs}, rows, cols)\n        return out\n")
            src = model_new(f"{strategy} row-wise {v['op']} for {task_id}", init, ", dim", "x", body, cuda)
            out.append(Implementation(f"{task_id}/{strategy}", task_id, strategy, src,
                                      (strategy, "row_wise", kind), strategy == "naive"))
        return out
    return impls
