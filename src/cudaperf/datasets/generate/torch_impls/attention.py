"""Implementations of the `attention` family's pieces over (batch, heads, seq, hdim) inputs (z = batch *
heads independent problems): scores and qk-normalised scores: naive, smem_tiled, register_tiled,
tensor_core (the batched matmul kernels); probs and attention: naive and unfused (scores, row softmax,
P·V as separate kernels), fused (online softmax, one warp per query, 8 queries per block sharing K (and
V) chunks in shared memory; attention: head dim <= 128); rotary: naive, coarsened, unfused (cos/sin
table kernel), smem_tiled (per-position table in shared memory).

Not covered: other dtypes than float32, head dims above 128 in the fused attention.
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.torch_impls.matmul_kernels import (
    FIN_PARAMS,
    MM_KERNELS,
    MM_WITH_TENSOR_CORES,
    mm_launch,
    raw_fin,
)
from cudaperf.datasets.generate.torch_impls.parts import (
    NEG_INF,
    ROW_MAPPINGS,
    WARP_REDUCTIONS,
    group_reductions,
    implementation,
)
from cudaperf.datasets.records import Implementation

_WARP_ROWS_NORM = """
extern "C" __global__ void inv_norms(const float* __restrict__ x, float* __restrict__ inv, long long rows,
                                     int cols) {
    long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += x[row * cols + c] * x[row * cols + c];
    s = warp_sum(s);
    if (lane == 0) inv[row] = 1.0f / fmaxf(sqrtf(s), 1e-12f);  // F.normalize: x / max(||x||, eps)
}
"""

_SOFTMAX_ROWS = """
extern "C" __global__ void softmax_rows(float* __restrict__ x, int rows, int cols) {
    INDEX
    float* xr = x + (long long)row * cols;
    float m = NEG_INF;
    for (int c = lane; c < cols; c += W) m = fmaxf(m, xr[c]);
    m = g_max(m);
    float s = 0.0f;
    for (int c = lane; c < cols; c += W) s += expf(xr[c] - m);
    s = g_sum(s);
    for (int c = lane; c < cols; c += W) xr[c] = expf(xr[c] - m) / s;
}
"""

_PROBS_FUSED = """
extern "C" __global__ void probs_fused(const float* __restrict__ q, const float* __restrict__ kk,
                                       float* __restrict__ out, int S, int D, float alpha) {
    // one warp per query row, 8 rows per block sharing each chunk of 32 keys in shared memory; pass 1
    // writes the raw scores and keeps a running max and sum (online softmax), pass 2 rescales the row in
    // place (lane l rereads exactly the scores it wrote: no synchronisation needed)
    extern __shared__ float sm[];
    float* qs = sm;          // [8][D]
    float* ks = sm + 8 * D;  // [32][D + 1]: padded, lanes read different rows
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, i = blockIdx.x * 8 + warp;
    long long base = (long long)blockIdx.y * S * D;
    float* orow = out + ((long long)blockIdx.y * S + i) * S;
    bool active = i < S;
    for (int d = lane; d < D; d += 32) qs[warp * D + d] = active ? q[base + (long long)i * D + d] : 0.0f;
    float mrun = NEG_INF, lrun = 0.0f;
    for (int j0 = 0; j0 < S; j0 += 32) {
        __syncthreads();  // the previous chunk is consumed (first pass: qs is written)
        for (int e = threadIdx.x; e < 32 * D; e += blockDim.x) {
            int r = e / D, c = e % D;
            ks[r * (D + 1) + c] = j0 + r < S ? kk[base + (long long)(j0 + r) * D + c] : 0.0f;
        }
        __syncthreads();
        if (!active) continue;  // uniform over the warp
        int j = j0 + lane;
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += qs[warp * D + d] * ks[lane * (D + 1) + d];
        s *= alpha;
        if (j >= S || (CAUSAL && j > i)) s = NEG_INF;
        if (j < S) orow[j] = s;
        float mnew = fmaxf(mrun, warp_max(s));  // finite: key 0 is valid for every row
        lrun = lrun * expf(mrun - mnew) + warp_sum(expf(s - mnew));
        mrun = mnew;
    }
    if (!active) return;
    for (int j = lane; j < S; j += 32) orow[j] = expf(orow[j] - mrun) / lrun;
}
"""

_ATTN_FUSED = """
extern "C" __global__ void attn_fused(const float* __restrict__ q, const float* __restrict__ kk,
                                      const float* __restrict__ vv, float* __restrict__ out, int S, int D,
                                      float alpha) {
    // online softmax (running max and sum), one warp per query row, 8 queries per block sharing each
    // chunk of 32 keys/values in shared memory; lane l scores key j0 + l, then lanes own head dims
    // d = lane + 32t (t < 4: D <= 128)
    extern __shared__ float sm[];
    float* qs = sm;                  // [8][D]
    float* ks = sm + 8 * D;          // [32][D + 1]: padded, lanes read different rows
    float* vs = ks + 32 * (D + 1);   // [32][D + 1]
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, i = blockIdx.x * 8 + warp;
    long long base = (long long)blockIdx.y * S * D;
    bool active = i < S;
    for (int d = lane; d < D; d += 32) qs[warp * D + d] = active ? q[base + (long long)i * D + d] : 0.0f;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float mrun = NEG_INF, lrun = 0.0f;
    int last = CAUSAL ? min(S, (int)blockIdx.x * 8 + 8) : S;  // causal: later keys are masked for all 8 rows
    for (int j0 = 0; j0 < last; j0 += 32) {
        __syncthreads();  // the previous chunk is consumed (first pass: qs is written)
        for (int e = threadIdx.x; e < 32 * D; e += blockDim.x) {
            int r = e / D, c = e % D, j = j0 + r;
            ks[r * (D + 1) + c] = j < S ? kk[base + (long long)j * D + c] : 0.0f;
            vs[r * (D + 1) + c] = j < S ? vv[base + (long long)j * D + c] : 0.0f;
        }
        __syncthreads();
        if (!active || (CAUSAL && j0 > i)) continue;  // uniform over the warp
        int j = j0 + lane;
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += qs[warp * D + d] * ks[lane * (D + 1) + d];
        s *= alpha;
        if (j >= S || (CAUSAL && j > i)) s = NEG_INF;
        float mnew = fmaxf(mrun, warp_max(s));  // finite: key j0 <= i is always valid
        float p = expf(s - mnew), corr = expf(mrun - mnew);
        lrun = lrun * corr + warp_sum(p);
#pragma unroll
        for (int t = 0; t < 4; ++t) acc[t] *= corr;
        for (int l = 0; l < 32; ++l) {
            float pl = __shfl_sync(0xffffffffu, p, l);
#pragma unroll
            for (int t = 0; t < 4; ++t)
                if (lane + 32 * t < D) acc[t] += pl * vs[l * (D + 1) + lane + 32 * t];
        }
        mrun = mnew;
    }
    if (!active) return;
#pragma unroll
    for (int t = 0; t < 4; ++t)
        if (lane + 32 * t < D) out[base + (long long)i * D + lane + 32 * t] = acc[t] / lrun;
}
"""

_ROTARY = """
__device__ __forceinline__ void angle(int pos, int j, int half, float alpha, float* c, float* s) {
    // the task's torch order: freq = exp(-j / half * 9.2103), angle = pos * freq * scale
    float a = (float)pos * expf(-(float)j / (float)half * 9.2103f) * alpha;
    *c = cosf(a);
    *s = sinf(a);
}
"""

_ROT_PARAMS = ("const float* __restrict__ x, float* __restrict__ out, long long rows, int S, int "
               "D, float alpha")

_ROT_KERNELS = {
    "naive": f"""
extern "C" __global__ void rotary({_ROT_PARAMS}) {{
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= rows * S * D) return;
    int d = (int)(e % D), pos = (int)(e / D % S), half = D / 2, j = d < half ? d : d - half;
    float c, s;
    angle(pos, j, half, alpha, &c, &s);
    const float* xr = x + e / D * D;
    out[e] = d < half ? xr[j] * c - xr[j + half] * s : xr[j] * s + xr[j + half] * c;
}}
""",
    "coarsened": f"""
extern "C" __global__ void rotary({_ROT_PARAMS}) {{
    // one thread per (q1, q2) pair: one cos/sin for two outputs
    int half = D / 2;
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= rows * S * half) return;
    int j = (int)(e % half), pos = (int)(e / half % S);
    float c, s;
    angle(pos, j, half, alpha, &c, &s);
    long long r = e / half * D;
    float q1 = x[r + j], q2 = x[r + j + half];
    out[r + j] = q1 * c - q2 * s;
    out[r + j + half] = q1 * s + q2 * c;
}}
""",
    "unfused": """
extern "C" __global__ void table(float* __restrict__ tab, int S, int D, float alpha) {
    int half = D / 2;
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= (long long)S * half) return;
    angle((int)(e / half), (int)(e % half), half, alpha, &tab[e], &tab[(long long)S * half + e]);
}
extern "C" __global__ void rotary(const float* __restrict__ x, const float* __restrict__ tab,
                                  float* __restrict__ out, long long rows, int S, int D) {
    int half = D / 2;
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= rows * S * half) return;
    long long t = e % ((long long)S * half);  // (pos, j) in the table
    float c = tab[t], s = tab[(long long)S * half + t];
    long long r = e / half * D;
    int j = (int)(e % half);
    float q1 = x[r + j], q2 = x[r + j + half];
    out[r + j] = q1 * c - q2 * s;
    out[r + j + half] = q1 * s + q2 * c;
}
""",
    "smem_tiled": f"""
extern "C" __global__ void rotary({_ROT_PARAMS}) {{
    // one block per position: its cos/sin row is computed once into shared memory for all heads
    extern __shared__ float cs[];  // [half] cos, then [half] sin
    int pos = blockIdx.x, half = D / 2;
    for (int j = threadIdx.x; j < half; j += blockDim.x) angle(pos, j, half, alpha, &cs[j], &cs[half + j]);
    __syncthreads();
    for (long long e = threadIdx.x; e < rows * half; e += blockDim.x) {{
        int j = (int)(e % half);
        long long r = (e / half * S + pos) * D;
        float q1 = x[r + j], q2 = x[r + j + half];
        out[r + j] = q1 * cs[j] - q2 * cs[half + j];
        out[r + j + half] = q1 * cs[half + j] + q2 * cs[j];
    }}
}}
""",
}

_ROT_LAUNCH = {
    "naive": "mod.rotary(((rows * s * d + 255) // 256,), (256,), q, out, rows, s, d, scale)",
    "coarsened": "mod.rotary(((rows * s * (d // 2) + 255) // 256,), (256,), q, out, rows, s, d, scale)",
    "unfused": ("tab = q.new_empty((2, s, d // 2))\n"
                "mod.table(((s * (d // 2) + 255) // 256,), (256,), tab, s, d, scale)\n"
                "mod.rotary(((rows * s * (d // 2) + 255) // 256,), (256,), q, tab, out, rows, s, d)"),
    "smem_tiled": "mod.rotary((s,), (128,), q, out, rows, s, d, scale, smem_bytes=4 * 2 * (d // 2))",
}


def _scale_expr(v: dict[str, Any]) -> str:
    return "d ** -0.5" if v["scale"] == "rsqrt" else repr(float(v["scale"]))


def _rotary_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    head = (f"s, d = q.shape[-2], q.shape[-1]\nrows = q.numel() // (s * d)\nscale = {_scale_expr(v)}\n"
            "out = torch.empty_like(q)\n")
    return [implementation(task_id, strategy, "rotary embedding", _ROTARY + cuda,
                           head + _ROT_LAUNCH[strategy] + "\nreturn out", "q", ("attention", "rotary"))
            for strategy, cuda in _ROT_KERNELS.items()]


def _scores_fin(v: dict[str, Any], masked: str) -> str:
    """fin of a scores matmul: scale (and the q/k inverse norms), causal positions set to `masked`."""
    norm = " * e0[(long long)z * m + i] * e1[(long long)z * n + j]" if v["piece"] == "qk_norm_scores" else ""
    mask = f"j > i ? {masked} : " if v["causal"] else ""
    return f"__device__ __forceinline__ float fin({FIN_PARAMS}) {{ return {mask}acc{norm} * alpha; }}\n"


_ATT_HEAD = "s, d = q.shape[-2], q.shape[-1]\nz = q.numel() // (s * d)\nscale = {scale}\n"
_SCORES_ARGS = "q, k, {dst}, {e0}, {e1}, s, s, d, s * d, s * d, s * s, scale"


def _scores_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    norms = v["piece"] == "qk_norm_scores"
    pre = ("rq = q.new_empty(q.shape[:-1])\nrk = k.new_empty(k.shape[:-1])\n"
           "mod.inv_norms(((z * s * 32 + 255) // 256,), (256,), q, rq, z * s, d)\n"
           "mod.inv_norms(((z * s * 32 + 255) // 256,), (256,), k, rk, z * s, d)\n") if norms else ""
    cuda_pre = WARP_REDUCTIONS + _WARP_ROWS_NORM if norms else ""
    head = _ATT_HEAD.format(scale=_scale_expr(v)) + "out = q.new_empty((*q.shape[:-1], s))\n" + pre
    args = _SCORES_ARGS.format(dst="out", e0="rq" if norms else "None", e1="rk" if norms else "None")
    out = []
    for strategy, (gen, tile) in MM_WITH_TENSOR_CORES.items():
        cuda = cuda_pre + _scores_fin(v, "0.0f") + gen("scores", "nt", "fin")
        body = head + mm_launch("scores", tile, "s", "s", "z", args) + "\nreturn out"
        out.append(implementation(task_id, strategy, f"attention {v['piece']}", cuda, body, "q, k",
                                  ("attention", "matmul")))
    return out


def _softmax_rows(strategy: str) -> str:
    return group_reductions(strategy) + _SOFTMAX_ROWS.replace("INDEX", ROW_MAPPINGS[strategy][0])


def _softmax_launch(strategy: str, rows: str, cols: str, dst: str) -> str:
    _, _, grid, block = ROW_MAPPINGS[strategy]
    return f"rows = {rows}\nmod.softmax_rows({grid}, {block}, {dst}, rows, {cols})\n"


# (strategy, matmul kernels, row mapping of the softmax, tags) of the unfused probs and attention
_UNFUSED_PLANS = (("naive", "naive", "naive", ("unfused",)),
                  ("unfused", "smem_tiled", "warp_shuffle", ("smem_tiled", "warp_shuffle")))


def _probs_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    causal = f"#define CAUSAL {int(bool(v['causal']))}\n#define NEG_INF {NEG_INF}\n"
    head = _ATT_HEAD.format(scale=_scale_expr(v)) + "out = q.new_empty((*q.shape[:-1], s))\n"
    scores = _SCORES_ARGS.format(dst="out", e0="None", e1="None")
    out = []
    for strategy, mm, rows, tags in _UNFUSED_PLANS:
        gen, tile = MM_KERNELS[mm]
        cuda = causal + _scores_fin(v, "NEG_INF") + gen("scores", "nt", "fin") + _softmax_rows(rows)
        body = (head + mm_launch("scores", tile, "s", "s", "z", scores) + "\n"
                + _softmax_launch(rows, "z * s", "s", "out") + "return out")
        out.append(implementation(task_id, strategy, "attention probs", cuda, body, "q, k",
                                  ("attention", *tags)))
    cuda = causal + WARP_REDUCTIONS + _PROBS_FUSED
    body = (head + "mod.probs_fused(((s + 7) // 8, z), (256,), q, k, out, s, d, scale, "
            "smem_bytes=4 * (8 * d + 32 * (d + 1)))\nreturn out")
    out.append(implementation(task_id, "fused", "attention probs", cuda, body, "q, k",
                     ("attention", "warp_shuffle", "smem_tiled")))
    return out


def _attention_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    causal = f"#define CAUSAL {int(bool(v['causal']))}\n#define NEG_INF {NEG_INF}\n"
    head = _ATT_HEAD.format(scale=_scale_expr(v)) + "out = torch.empty_like(q)\n"
    scores = _SCORES_ARGS.format(dst="p", e0="None", e1="None")
    pv = "p, vv, out, None, None, s, d, s, s * s, s * d, s * d, 1.0"
    out = []
    for strategy, mm, rows, tags in _UNFUSED_PLANS:
        gen, tile = MM_KERNELS[mm]
        cuda = (causal + _scores_fin(v, "NEG_INF") + raw_fin() + gen("scores", "nt", "fin")
                + gen("pv", "nn", "raw") + _softmax_rows(rows))
        body = (head + "p = q.new_empty((*q.shape[:-1], s))\n"
                + mm_launch("scores", tile, "s", "s", "z", scores) + "\n"
                + _softmax_launch(rows, "z * s", "s", "p") + mm_launch("pv", tile, "s", "d", "z", pv)
                + "\nreturn out")
        out.append(implementation(task_id, strategy, "attention", cuda, body, "q, k, vv",
                                  ("attention", *tags)))
    cuda = causal + WARP_REDUCTIONS + _ATTN_FUSED
    body = (head + "if d > 128:\n    raise ValueError('attn_fused keeps 4 head dims per lane: head "
            "dim <= 128')\n"
            "mod.attn_fused(((s + 7) // 8, z), (256,), q, k, vv, out, s, d, scale, "
            "smem_bytes=4 * (8 * d + 64 * (d + 1)))\nreturn out")
    out.append(implementation(task_id, "fused", "attention", cuda, body, "q, k, vv",
                     ("attention", "warp_shuffle", "smem_tiled")))
    return out


def attention_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    piece = v["piece"]
    if piece == "rotary":
        return _rotary_impls(v, task_id)
    if piece in ("scores", "qk_norm_scores"):
        return _scores_impls(v, task_id)
    return _probs_impls(v, task_id) if piece == "probs" else _attention_impls(v, task_id)
