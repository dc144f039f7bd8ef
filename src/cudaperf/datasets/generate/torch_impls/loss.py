"""Implementations of the `loss` family (a = randn * 1.5, b = randn + 0.3, both (batch, dim)):
elementwise losses kept per element: naive, grid_stride, coarsened, vectorized; reduced per row or
overall: naive (thread per row), warp_shuffle, block_tree, atomic (column chunks + atomicAdd), two_pass
(chunk partials + a second kernel); softmax-based (kl_div, cross_entropy) and cosine losses need row
statistics: the three row mappings (+ unfused stats/elementwise kernels for elementwise KL).

Not covered: other dtypes than float32, class weights or label smoothing.
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.torch_impls.parts import (
    BLOCK_REDUCTIONS,
    NEG_INF,
    ROW_MAPPINGS,
    ROW_STRATEGIES,
    WARP_REDUCTIONS,
    float_literal,
    group_reductions,
    implementation,
)
from cudaperf.datasets.records import Implementation

_ELEMENT_LOSSES = ("mse", "l1", "smooth_l1", "huber", "bce_logits")


def _loss_fn(loss: str, p: float) -> str:
    """The elementwise loss of the task (same formulas as torch's kernels, p = beta / delta / logit scale)."""
    pf = float_literal(p)
    body = {
        "mse": "float d = a - b; return d * d;",
        "l1": "return fabsf(a - b);",
        "smooth_l1": f"float z = fabsf(a - b); return z < {pf} ? 0.5f * z * z / {pf} : z - 0.5f * {pf};",
        "huber": f"float z = fabsf(a - b); return z < {pf} ? 0.5f * z * z : {pf} * (z - 0.5f * {pf});",
        # target sigmoid(b); (1 - t) x - log_sigmoid(x) with log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|))
        "bce_logits": (f"float x = a * {pf}, t = 1.0f / (1.0f + expf(-b));\n"
                       "    return (1.0f - t) * x - (fminf(x, 0.0f) - log1pf(expf(-fabsf(x))));"),
    }[loss]
    return f"__device__ __forceinline__ float lossf(float a, float b) {{\n    {body}\n}}\n"


_LOSS_EW = {  # strategy -> (kernel body, Python grid)
    "naive": (
        ("long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
         "    if (i < n) out[i] = lossf(a[i], b[i]);"),
        "((n + 255) // 256,)"),
    "grid_stride": (
        ("for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;"
         " i += gridDim.x * (long long)blockDim.x)\n        out[i] = lossf(a[i], b[i]);"),
        "(max(1, min((n + 255) // 256, 4096)),)"),
    "coarsened": (
        ("long long base = blockIdx.x * (long long)blockDim.x * 4 + threadIdx.x;\n#pragma unroll\n"
         "    for (int u = 0; u < 4; ++u) {\n        long long i = base + u * (long long)blockDim.x;\n"
         "        if (i < n) out[i] = lossf(a[i], b[i]);\n    }"),
        "((n + 1023) // 1024,)"),
    "vectorized": (
        ("long long nq = n / 4, tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
         "    for (long long q = tid; q < nq; q += gridDim.x * (long long)blockDim.x) {\n"
         "        float4 x = reinterpret_cast<const float4*>(a)[q], y = reinterpret_cast<const "
         "float4*>(b)[q];\n"
         "        reinterpret_cast<float4*>(out)[q] = make_float4(lossf(x.x, y.x), lossf(x.y, y.y),"
         " lossf(x.z, y.z), lossf(x.w, y.w));\n    }\n"
         "    long long i = nq * 4 + tid;\n    if (i < n) out[i] = lossf(a[i], b[i]);"),
        "(max(1, min((n // 4 + 255) // 256, 4096)),)"),
}


def _loss_elementwise(v: dict[str, Any], task_id: str) -> list[Implementation]:
    out = []
    for strategy, (code, grid) in _LOSS_EW.items():
        cuda = (_loss_fn(v["loss"], v["param"]) + "extern \"C\" __global__ void loss(const float* "
                                                  "__restrict__ a, "
                f"const float* __restrict__ b, float* __restrict__ out, long long n) {{\n    {code}\n}}\n")
        body = f"out = torch.empty_like(a)\nn = a.numel()\nmod.loss({grid}, (256,), a, b, out, n)\nreturn out"
        out.append(implementation(task_id, strategy, f"{v['loss']} loss", cuda, body, "a, b",
                                  ("loss", "elementwise")))
    return out


def _row_loop(acc: str, expr: str) -> str:
    return f"    for (int c = lane; c < cols; c += W) {{ float x = ar[c], y = br[c]; {acc} {expr}; }}\n"


def _softmax_stats(p: float) -> str:
    """Row statistics of log_softmax(a * p) (`lsa`) and softmax(b) (`mb`, `lsb` = max, log of the sum)."""
    pf = float_literal(p)
    return ("    float ma = NEG_INF, mb = NEG_INF;\n" + _row_loop("ma = fmaxf(ma,", f"x * {pf}); mb "
                                                                                    "= fmaxf(mb, y)")
            + "    ma = g_max(ma);\n    mb = g_max(mb);\n    float sa = 0.0f, sb = 0.0f;\n"
            + _row_loop("sa +=", f"expf(x * {pf} - ma); sb += expf(y - mb)")
            + "    sa = g_sum(sa);\n    sb = g_sum(sb);\n    float lsa = ma + logf(sa), lsb = logf(sb);\n")


def _kl_term(p: float) -> str:
    """target * (log target - log_softmax(a p)), target = softmax(b), from the row statistics."""
    return f"expf(y - mb - lsb) * ((y - mb - lsb) - (x * {float_literal(p)} - lsa))"


def _loss_row_body(v: dict[str, Any]) -> str:
    """Statements of one row (`row`, `lane`, `W`, pointers `ar`, `br`, `outr`) with group reductions g_*."""
    loss, red, p = v["loss"], v["reduce"], v["param"]
    mean = " / cols" if red == "row_mean" else ""
    if loss in _ELEMENT_LOSSES:
        return ("    float s = 0.0f;\n" + _row_loop("s +=", "lossf(x, y)")
                + f"    s = g_sum(s);\n    if (lane == 0) out[row] = s{mean};\n")
    if loss == "cosine":  # 1 - cos(a p, b); norms clamped at eps = 1e-8 as torch does
        pf = float_literal(p)
        return ("    float dot = 0.0f, na = 0.0f, nb = 0.0f;\n"
                + _row_loop("dot +=", f"x * {pf} * y; na += x * {pf} * x * {pf}; nb += y * y")
                + "    dot = g_sum(dot);\n    na = g_sum(na);\n    nb = g_sum(nb);\n"
                "    if (lane == 0) out[row] = 1.0f - dot / (fmaxf(sqrtf(na), 1e-8f) * "
                "fmaxf(sqrtf(nb), 1e-8f));\n")
    stats = _softmax_stats(p)
    if loss == "cross_entropy":  # -sum softmax(b) * log_softmax(a p)
        return (stats + "    float s = 0.0f;\n" + _row_loop("s +=", "expf(y - mb - lsb) * (x "
                                                            f"* {float_literal(p)} - lsa)")
                + "    s = g_sum(s);\n    if (lane == 0) out[row] = -s;\n")
    if red == "none":  # kl_div per element
        return (stats + "    for (int c = lane; c < cols; c += W) "
                f"{{ float x = ar[c], y = br[c]; outr[c] = {_kl_term(p)}; }}\n")
    return (stats + "    float s = 0.0f;\n" + _row_loop("s +=", _kl_term(p))
            + f"    s = g_sum(s);\n    if (lane == 0) out[row] = s{mean};\n")


def _loss_row_kernel(v: dict[str, Any], strategy: str) -> str:
    fn = _loss_fn(v["loss"], v["param"]) if v["loss"] in _ELEMENT_LOSSES else ""
    return (f"#define NEG_INF {NEG_INF}\n{fn}{group_reductions(strategy)}\n"
            "extern \"C\" __global__ void loss(const float* __restrict__ a, const float* __restrict__ b, "
            f"float* __restrict__ out, int rows, int cols) {{\n    {ROW_MAPPINGS[strategy][0]}\n"
            "    const float* ar = a + (long long)row * cols;\n"
            "    const float* br = b + (long long)row * cols;\n"
            "    float* outr = out + (long long)row * cols;\n    (void)outr;\n"
            f"{_loss_row_body(v)}}}\n")


def _per_row_output(v: dict[str, Any]) -> bool:
    return v["loss"] in ("cross_entropy", "cosine") or v["reduce"] != "none"


def _loss_rows(v: dict[str, Any], task_id: str) -> list[Implementation]:
    alloc = "a.new_empty(a.shape[:-1])" if _per_row_output(v) else "torch.empty_like(a)"
    out = []
    for strategy in ROW_STRATEGIES:
        _, _, grid, block = ROW_MAPPINGS[strategy]
        body = (f"cols = a.shape[-1]\nrows = a.numel() // cols\nout = {alloc}\n"
                f"mod.loss({grid}, {block}, a, b, out, rows, cols)\nreturn out")
        out.append(implementation(task_id, strategy, f"{v['loss']} loss", _loss_row_kernel(v, strategy), body,
                                  "a, b", ("loss", "row_wise")))
    return out


_CHUNK_SUM = """
extern "C" __global__ void chunk_sums(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ dst, int rows, int cols, float inv) {
    // block (row, chunk of 1024 columns): 4 elements per thread, then a block tree reduction
    long long row = blockIdx.x;
    int c0 = blockIdx.y * 1024;
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        int c = c0 + u * 256 + threadIdx.x;
        if (c < cols) s += lossf(a[row * cols + c], b[row * cols + c]);
    }
    s = g_sum(s);
    if (threadIdx.x == 0) STORE;
}
"""

_PARTIALS_SUM = """
extern "C" __global__ void row_sums(const float* __restrict__ part, float* __restrict__ out, int rows,
                                    int chunks, float inv) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    float s = 0.0f;
    for (int c = lane; c < chunks; c += 32) s += part[(long long)row * chunks + c];
    s = warp_sum(s);
    if (lane == 0) out[row] = s * inv;
}
"""


def _loss_chunked(v: dict[str, Any], task_id: str) -> list[Implementation]:
    """Row-reduced elementwise losses over a 2-D grid of (row, column chunk) blocks."""
    fn = _loss_fn(v["loss"], v["param"]) + WARP_REDUCTIONS + BLOCK_REDUCTIONS
    inv = "1.0 / cols" if v["reduce"] == "row_mean" else "1.0"
    head = "cols = a.shape[-1]\nrows = a.numel() // cols\nchunks = (cols + 1023) // 1024\n"
    atomic = _CHUNK_SUM.replace("STORE", "atomicAdd(&dst[row], s * inv)")
    two = _CHUNK_SUM.replace("STORE", "dst[row * gridDim.y + blockIdx.y] = s") + _PARTIALS_SUM
    return [
        implementation(task_id, "atomic", f"{v['loss']} loss", fn + atomic,
                       head + "out = a.new_zeros(a.shape[:-1])\nmod.chunk_sums((rows, chunks), (256,), a, b, "
                       "out, rows, cols, "
                       f"{inv})\nreturn out", "a, b", ("loss", "block_tree")),
        implementation(task_id, "two_pass", f"{v['loss']} loss", fn + two,
                       head + "part = a.new_empty((rows, chunks))\nout = a.new_empty(a.shape[:-1])\n"
                       "mod.chunk_sums((rows, chunks), (256,), a, b, part, rows, cols, 1.0)\n"
                       "mod.row_sums(((rows * 32 + 255) // 256,), (256,), part, out, rows, "
                       f"chunks, {inv})\nreturn out",
                       "a, b", ("loss", "block_tree", "warp_shuffle")),
    ]


_KL_STATS_THEN_ELEMENTS = """
extern "C" __global__ void kl_elements(const float* __restrict__ a, const float* __restrict__ b,
                                       const float* __restrict__ st, float* __restrict__ out, long long n,
                                       int cols) {
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= n) return;
    long long row = e / cols;
    float lsa = st[3 * row], mb = st[3 * row + 1], lsb = st[3 * row + 2], x = a[e], y = b[e];
    out[e] = TERM;
}
"""


def _kl_unfused(v: dict[str, Any], task_id: str) -> Implementation:
    """Elementwise KL as a row-statistics kernel (one warp per row) and a flat elementwise kernel."""
    stats = (_softmax_stats(v["param"])
             + "    if (lane == 0) { st[3 * row] = lsa; st[3 * row + 1] = mb; st[3 * row + 2] = lsb; }\n")
    cuda = (f"#define NEG_INF {NEG_INF}\n{group_reductions('warp_shuffle')}\n"
            "extern \"C\" __global__ void kl_stats(const float* __restrict__ a, const float* __restrict__ b, "
            f"float* __restrict__ st, int rows, int cols) {{\n    {ROW_MAPPINGS['warp_shuffle'][0]}\n"
            "    const float* ar = a + (long long)row * cols;\n"
            "    const float* br = b + (long long)row * cols;\n"
            f"{stats}}}\n" + _KL_STATS_THEN_ELEMENTS.replace("TERM", _kl_term(v["param"])))
    body = ("cols = a.shape[-1]\nrows = a.numel() // cols\nn = a.numel()\nst = a.new_empty((rows, 3))\n"
            "out = torch.empty_like(a)\nmod.kl_stats(((rows * 32 + 255) // 256,), (256,), a, b, "
            "st, rows, cols)\n"
            "mod.kl_elements(((n + 255) // 256,), (256,), a, b, st, out, n, cols)\nreturn out")
    return implementation(task_id, "unfused", "kl_div loss", cuda, body, "a, b", ("loss", "warp_shuffle"))


def loss_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    loss, red = v["loss"], v["reduce"]
    if loss in _ELEMENT_LOSSES and red == "none":
        return _loss_elementwise(v, task_id)
    out = _loss_rows(v, task_id)
    if loss in _ELEMENT_LOSSES:
        out += _loss_chunked(v, task_id)
    elif loss == "kl_div" and red == "none":
        out.append(_kl_unfused(v, task_id))
    return out
