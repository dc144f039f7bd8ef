"""Implementations of the fresh `row_topk` family: the k largest (or smallest) values of pre(x) along each
row, sorted as `torch.topk(..., sorted=True)` returns them, then the values, a scale or a softmax over
the k values.

Every strategy selects on a key (the value, or its negation for the smallest) and keeps a thread's best k
keys sorted in registers (a branch-free insertion that only runs when a key beats the k-th best). Groups
of threads then merge their lists in k rounds: the group's largest head is the next result, and the
lowest thread holding it pops it, so duplicates are kept as `torch.topk` keeps them.

Strategies:
  naive        one thread per row scans it alone (uncoalesced, little parallelism on few long rows)
  subwarp      8 lanes per row (4 rows per warp), shuffle merge inside each 8-lane group
  warp_shuffle one warp per row, shuffle merge
  block_tree   one block of 256 threads per row, k rounds of a block-wide (max, lowest thread) reduction
  two_pass     rows split into chunks of 2048 columns, one block per (row, chunk) writes the chunk's k
               best keys, then one warp per row merges the chunks' candidates

Not covered: other dtypes than float32, NaN inputs (the tasks draw none), returning the indices.
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.torch_impls.parts import NEG_INF, float_literal, implementation
from cudaperf.datasets.records import Implementation

CHUNK = 2048  # columns per block in two_pass's first pass

_SHARED = f"""
#define NEG_INF {NEG_INF}
__device__ __forceinline__ void insert(float (&t)[K], float v) {{
    // t sorted descending; v takes its place and the smallest falls out (ties keep either copy: same values)
    if (!(v > t[K - 1])) return;
#pragma unroll
    for (int i = 0; i < K; ++i) {{
        float hi = fmaxf(t[i], v);
        v = fminf(t[i], v);
        t[i] = hi;
    }}
}}
__device__ __forceinline__ void pop(float (&t)[K]) {{
#pragma unroll
    for (int i = 0; i + 1 < K; ++i) t[i] = t[i + 1];
    t[K - 1] = NEG_INF;
}}
__device__ __forceinline__ void clear(float (&t)[K]) {{
#pragma unroll
    for (int i = 0; i < K; ++i) t[i] = NEG_INF;
}}
"""

_GROUP_MERGE = """
__device__ __forceinline__ void group_merge(float (&t)[K], float (&r)[K], int lane) {
    // G-lane groups (G a power of two <= 32): xor shuffles below G stay inside the group
#pragma unroll
    for (int i = 0; i < K; ++i) {
        float m = t[0];
        for (int o = G / 2; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        int who = t[0] == m ? lane : 64;
        for (int o = G / 2; o > 0; o /= 2) who = min(who, __shfl_xor_sync(0xffffffffu, who, o));
        if (lane == who) pop(t);
        r[i] = m;
    }
}
"""

_NAIVE = """
extern "C" __global__ void topk_rows(const float* __restrict__ x, float* __restrict__ out, int R, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= R) return;
    float t[K];
    clear(t);
    const float* xr = x + (long long)row * C;
    for (int c = 0; c < C; ++c) insert(t, key(xr[c]));
    write_row(out + (long long)row * K, t);
}
"""

_GROUPED = """
extern "C" __global__ void topk_rows(const float* __restrict__ x, float* __restrict__ out, int R, int C) {
    // G lanes per row; lanes past the last row still take part in the shuffles (no early return)
    int lane = threadIdx.x % 32, sub = lane % G;
    long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / G;
    float t[K], r[K];
    clear(t);
    if (row < R) {
        const float* xr = x + row * C;
        for (int c = sub; c < C; c += G) insert(t, key(xr[c]));
    }
    group_merge(t, r, lane);
    if (row < R && sub == 0) write_row(out + row * K, r);
}
"""

# The block-wide selection over columns [begin, end) of one row (blockDim 256); every thread gets the k keys.
_BLOCK_SELECT = """
__device__ void block_select(const float* xr, int begin, int end, float (&r)[K]) {
    __shared__ float wmax[8];
    __shared__ int wwho[8];
    int tid = threadIdx.x, lane = tid % 32, wp = tid / 32;
    float t[K];
    clear(t);
    for (int c = begin + tid; c < end; c += 256) insert(t, key(xr[c]));
#pragma unroll
    for (int i = 0; i < K; ++i) {
        float m = t[0];
        for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) wmax[wp] = m;
        __syncthreads();
        m = wmax[0];
        for (int q = 1; q < 8; ++q) m = fmaxf(m, wmax[q]);
        int who = t[0] == m ? tid : 1 << 30;
        for (int o = 16; o > 0; o /= 2) who = min(who, __shfl_xor_sync(0xffffffffu, who, o));
        if (lane == 0) wwho[wp] = who;
        __syncthreads();  // every thread has read wmax before the next round writes it
        who = wwho[0];
        for (int q = 1; q < 8; ++q) who = min(who, wwho[q]);
        if (tid == who) pop(t);
        r[i] = m;
    }
    __syncthreads();  // wwho is read by all before a later call writes it
}
"""

_BLOCK_TREE = _BLOCK_SELECT + """
extern "C" __global__ void topk_rows(const float* __restrict__ x, float* __restrict__ out, int R, int C) {
    float r[K];
    block_select(x + (long long)blockIdx.x * C, 0, C, r);
    if (threadIdx.x == 0) write_row(out + (long long)blockIdx.x * K, r);
}
"""

_TWO_PASS = _BLOCK_SELECT + _GROUP_MERGE + f"""
#define CHUNK {CHUNK}
extern "C" __global__ void chunk_topk(const float* __restrict__ x, float* __restrict__ cand, int R, int C,
                                      int nch) {{
    // block b: row b / nch, chunk b % nch; writes the chunk's K best keys (NEG_INF past a short chunk)
    int row = blockIdx.x / nch, ch = blockIdx.x % nch;
    float r[K];
    block_select(x + (long long)row * C, ch * CHUNK, min(C, (ch + 1) * CHUNK), r);
    if (threadIdx.x == 0) {{
#pragma unroll
        for (int i = 0; i < K; ++i) cand[(long long)blockIdx.x * K + i] = r[i];
    }}
}}
extern "C" __global__ void merge(const float* __restrict__ cand, float* __restrict__ out, int R, int L) {{
    // one warp per row over its L = nch * K candidate keys
    int lane = threadIdx.x % 32;
    long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;
    float t[K], r[K];
    clear(t);
    if (row < R)
        for (int c = lane; c < L; c += 32) insert(t, cand[row * L + c]);
    group_merge(t, r, lane);
    if (row < R && lane == 0) write_row(out + row * K, r);
}}
"""


def _defines(v: dict[str, Any], group: int = 0) -> str:
    k, sign = v["k"], "1.0f" if v["largest"] else "-1.0f"
    _, pre = chain_exprs([(v["pre"], 0.0)] if v["pre"] else [], "x", "v")
    if v["post"] == "softmax":  # over the k values, as torch.softmax(values, dim=-1)
        write = ("    float m = NEG_INF, s = 0.0f, e[K];\n#pragma unroll\n"
                 "    for (int i = 0; i < K; ++i) m = fmaxf(m, SIGN * r[i]);\n#pragma unroll\n"
                 "    for (int i = 0; i < K; ++i) { e[i] = expf(SIGN * r[i] - m); s += e[i]; }\n"
                 "#pragma unroll\n    for (int i = 0; i < K; ++i) o[i] = e[i] / s;\n")
    else:
        scale = f" * {float_literal(v['scale'])}" if v["post"] == "scale" else ""
        write = f"#pragma unroll\n    for (int i = 0; i < K; ++i) o[i] = SIGN * r[i]{scale};\n"
    return (f"#define K {k}\n#define SIGN {sign}\n" + (f"#define G {group}\n" if group else "") + _SHARED
            + f"__device__ __forceinline__ float key(float v) {{ return SIGN * ({pre}); }}\n"
            + "__device__ __forceinline__ void write_row(float* o, const float (&r)[K]) {\n"
            + "    // r: the row's K best keys, largest first\n" + write + "}\n")


_HEAD = "r, c = x.shape\nout = x.new_empty((r, {k}))\n"
_ROWS = ", x, out, r, c)"
_STRATEGIES = {  # strategy -> (group size or 0, CUDA, launch, tags)
    "naive": (0, _NAIVE, "mod.topk_rows(((r + 127) // 128,), (128,)" + _ROWS, ("thread_per_row",)),
    "subwarp": (8, _GROUP_MERGE + _GROUPED, "mod.topk_rows(((r * 8 + 255) // 256,), (256,)" + _ROWS, ()),
    "warp_shuffle": (32, _GROUP_MERGE + _GROUPED, "mod.topk_rows(((r * 32 + 255) // 256,), (256,)" + _ROWS,
                     ()),
    "block_tree": (0, _BLOCK_TREE, "mod.topk_rows((r,), (256,)" + _ROWS, ()),
    "two_pass": (32, _TWO_PASS, f"nch = (c + {CHUNK - 1}) // {CHUNK}\n"
                                "cand = x.new_empty((r * nch * {k},))\n"
                                "mod.chunk_topk((r * nch,), (256,), x, cand, r, c, nch)\n"
                                "mod.merge(((r * 32 + 255) // 256,), (256,), cand, out, r, nch * {k})",
                 ("split_row",)),
}


def topk_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    k = v["k"]
    return [implementation(task_id, strategy, f"row top-{k}", _defines(v, group) + cuda,
                           _HEAD.format(k=k) + launch.format(k=k) + "\nreturn out", "x",
                           ("topk", "selection", *tags))
            for strategy, (group, cuda, launch, tags) in _STRATEGIES.items()]
