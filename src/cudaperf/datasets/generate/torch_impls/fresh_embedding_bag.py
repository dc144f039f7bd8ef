"""Implementations of the fresh `embedding_bag` family: out[b] = post(reduce over the bag's entries j of
(weight_j *) table[idx[j]]) * scale, with int64 indices and bag starts (a bag ends where the next starts,
the last at the end of `idx`; an empty bag gives post(0) * scale, as `nn.EmbeddingBag` does).

Strategies:
  naive        one thread per output element loops over its bag (each thread reads the bag's indices)
  grid_stride  one warp per bag over a fixed grid of warps: 32 indices loaded at once and shared by
               shuffles, lanes across the columns (4 per lane per pass)
  vectorized   the same warp per bag with float4 loads and stores when rows are whole float4s (dim % 4
               == 0), the scalar warp path otherwise
  block_tree   one block per bag: 8 thread rows split the bag's entries, 32 lanes x 4 the columns, the 8
               partial rows folded by a shared-memory tree (long bags keep a whole block busy)
  atomic       one thread per (entry, column): the entry's bag found by binary search over the starts,
               global atomics (atomicMax on order-preserving integers for max), then a pass that divides
               the means and applies the post op (balanced whatever the bag lengths)

Not covered: other dtypes than float32, out-of-range indices or unsorted offsets (the tasks draw valid
ones), `padding_idx`, `include_last_offset`, 2-D index inputs.
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.torch_impls.parts import NEG_INF, float_literal, implementation
from cudaperf.datasets.records import Implementation

_PARAMS = ("const float* __restrict__ t, const long long* __restrict__ idx, "
           "const long long* __restrict__ off, const float* __restrict__ w, float* __restrict__ out, int B, "
           "long long N, int D")

_SHARED = f"""
#define IDENT (MODE == 2 ? {NEG_INF} : 0.0f)
__device__ __forceinline__ float weight(const float* w, long long j) {{ return WEIGHTED ? w[j] : 1.0f; }}
__device__ __forceinline__ float combine(float a, float x, float wj) {{
    return MODE == 2 ? fmaxf(a, x) : a + (WEIGHTED ? wj * x : x);
}}
__device__ __forceinline__ float merge(float a, float b) {{ return MODE == 2 ? fmaxf(a, b) : a + b; }}
__device__ __forceinline__ float finish(float a, long long count) {{
    // an empty bag is 0 in every mode (before the post op)
    float v = count == 0 ? 0.0f : (MODE == 1 ? a / (float)count : a);
    return post(v);
}}
__device__ __forceinline__ long long bag_end(const long long* off, int b, int B, long long N) {{
    return b + 1 < B ? off[b + 1] : N;
}}
"""

_NAIVE = f"""
extern "C" __global__ void bag({_PARAMS}) {{
    long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (o >= (long long)B * D) return;
    int b = (int)(o / D), d = (int)(o % D);
    long long s = off[b], e = bag_end(off, b, B, N);
    float a = IDENT;
    for (long long j = s; j < e; ++j) a = combine(a, t[idx[j] * D + d], weight(w, j));
    out[o] = finish(a, e - s);
}}
"""

# One warp's scalar pass over a bag: 4 columns per lane per pass, the indices shared by shuffles.
_WARP_SCALAR = """
__device__ void warp_bag_scalar(const float* t, const long long* idx, const float* w, float* orow,
                                long long s, long long e, int D, int lane) {
    for (int c0 = 0; c0 < D; c0 += 128) {
        float a[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) a[u] = IDENT;
        for (long long j0 = s; j0 < e; j0 += 32) {
            long long mine = j0 + lane < e ? idx[j0 + lane] : 0;
            float mw = j0 + lane < e ? weight(w, j0 + lane) : 0.0f;
            int cnt = (int)min(32LL, e - j0);
            for (int q = 0; q < cnt; ++q) {
                const float* row = t + __shfl_sync(0xffffffffu, mine, q) * D;
                float wq = __shfl_sync(0xffffffffu, mw, q);
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    int c = c0 + lane + 32 * u;
                    if (c < D) a[u] = combine(a[u], row[c], wq);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            int c = c0 + lane + 32 * u;
            if (c < D) orow[c] = finish(a[u], e - s);
        }
    }
}
"""

_WARP_LOOP = f"""
extern "C" __global__ void bag({_PARAMS}) {{
    // a fixed grid of warps strides over the bags (the bag index is warp-uniform: full-warp shuffles)
    int lane = threadIdx.x % 32;
    long long nw = gridDim.x * (long long)blockDim.x / 32;
    for (long long b = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32; b < B; b += nw) {{
        long long s = off[b], e = bag_end(off, (int)b, B, N);
        BAG_BODY
    }}
}}
"""

_GRID_STRIDE = _WARP_SCALAR + _WARP_LOOP.replace(
    "BAG_BODY", "warp_bag_scalar(t, idx, w, out + b * D, s, e, D, lane);")

_VECTORIZED = _WARP_SCALAR + """
__device__ void warp_bag_vec4(const float* t, const long long* idx, const float* w, float* orow,
                              long long s, long long e, int D, int lane) {
    // rows are whole float4s: 2 float4 per lane per pass (256 columns)
    int D4 = D / 4;
    for (int q0 = 0; q0 < D4; q0 += 64) {
        float4 a[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) a[u] = make_float4(IDENT, IDENT, IDENT, IDENT);
        for (long long j0 = s; j0 < e; j0 += 32) {
            long long mine = j0 + lane < e ? idx[j0 + lane] : 0;
            float mw = j0 + lane < e ? weight(w, j0 + lane) : 0.0f;
            int cnt = (int)min(32LL, e - j0);
            for (int q = 0; q < cnt; ++q) {
                long long rq = __shfl_sync(0xffffffffu, mine, q);
                const float4* row = reinterpret_cast<const float4*>(t + rq * D);
                float wq = __shfl_sync(0xffffffffu, mw, q);
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    int c = q0 + lane + 32 * u;
                    if (c < D4) {
                        float4 x = row[c];
                        a[u] = make_float4(combine(a[u].x, x.x, wq), combine(a[u].y, x.y, wq),
                                           combine(a[u].z, x.z, wq), combine(a[u].w, x.w, wq));
                    }
                }
            }
        }
        long long n = e - s;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            int c = q0 + lane + 32 * u;
            if (c < D4)
                reinterpret_cast<float4*>(orow)[c] = make_float4(finish(a[u].x, n), finish(a[u].y, n),
                                                                 finish(a[u].z, n), finish(a[u].w, n));
        }
    }
}
""" + _WARP_LOOP.replace("BAG_BODY", """if (D % 4 == 0) warp_bag_vec4(t, idx, w, out + b * D, s, e, D, lane);
        else warp_bag_scalar(t, idx, w, out + b * D, s, e, D, lane);""")

_BLOCK_TREE = f"""
#define BY 8
#define CPT 4
extern "C" __global__ void bag({_PARAMS}) {{
    // blockDim (32, BY): threadIdx.y splits the bag's entries, threadIdx.x (x CPT) the columns
    __shared__ float part[BY][32 * CPT];
    int b = blockIdx.x, tx = threadIdx.x, ty = threadIdx.y;
    long long s = off[b], e = bag_end(off, b, B, N);
    for (int c0 = 0; c0 < D; c0 += 32 * CPT) {{
        float a[CPT];
#pragma unroll
        for (int u = 0; u < CPT; ++u) a[u] = IDENT;
        for (long long j = s + ty; j < e; j += BY) {{
            const float* row = t + idx[j] * D;
            float wj = weight(w, j);
#pragma unroll
            for (int u = 0; u < CPT; ++u) {{
                int c = c0 + tx + 32 * u;
                if (c < D) a[u] = combine(a[u], row[c], wj);
            }}
        }}
#pragma unroll
        for (int u = 0; u < CPT; ++u) part[ty][tx + 32 * u] = a[u];
        __syncthreads();
        for (int h = BY / 2; h > 0; h /= 2) {{
            if (ty < h) {{
#pragma unroll
                for (int u = 0; u < CPT; ++u)
                    part[ty][tx + 32 * u] = merge(part[ty][tx + 32 * u], part[ty + h][tx + 32 * u]);
            }}
            __syncthreads();
        }}
        if (ty == 0) {{
#pragma unroll
            for (int u = 0; u < CPT; ++u) {{
                int c = c0 + tx + 32 * u;
                if (c < D) out[(long long)b * D + c] = finish(part[0][tx + 32 * u], e - s);
            }}
        }}
        __syncthreads();  // part is rewritten by the next column pass
    }}
}}
"""

_ATOMIC = f"""
// max: floats as integers whose signed order is the floats' order (an involution), for atomicMax
__device__ __forceinline__ int ordered(int i) {{ return i >= 0 ? i : i ^ 0x7fffffff; }}
extern "C" __global__ void init(float* __restrict__ out, long long n) {{
    long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (o < n) {{
        if (MODE == 2) reinterpret_cast<int*>(out)[o] = ordered(__float_as_int(IDENT));
        else out[o] = 0.0f;
    }}
}}
extern "C" __global__ void scatter_bags({_PARAMS}) {{
    long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (o >= N * D) return;
    long long j = o / D;
    int d = (int)(o % D), lo = 0, hi = B - 1;
    while (lo < hi) {{  // the last bag starting at or before j (empty bags before it share its start)
        int mid = (lo + hi + 1) / 2;
        if (off[mid] <= j) lo = mid;
        else hi = mid - 1;
    }}
    float x = t[idx[j] * D + d];
    float* dst = out + (long long)lo * D + d;
    if (MODE == 2) atomicMax(reinterpret_cast<int*>(dst), ordered(__float_as_int(x)));
    else atomicAdd(dst, WEIGHTED ? weight(w, j) * x : x);
}}
extern "C" __global__ void finish_bags(const long long* __restrict__ off, float* __restrict__ out, int B,
                                       long long N, int D) {{
    long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (o >= (long long)B * D) return;
    int b = (int)(o / D);
    float a = MODE == 2 ? __int_as_float(ordered(reinterpret_cast<int*>(out)[o])) : out[o];
    out[o] = finish(a, bag_end(off, b, B, N) - off[b]);
}}
"""


def _defines(v: dict[str, Any]) -> str:
    mode = {"sum": 0, "wsum": 0, "mean": 1, "max": 2}[v["mode"]]
    _, post = chain_exprs([(v["post"], 0.0)] if v["post"] else [], "x", "v")
    return (f"#define MODE {mode}\n#define WEIGHTED {int(v['mode'] == 'wsum')}\n"
            f"__device__ __forceinline__ float post(float v) {{ return ({post}) "
            f"* {float_literal(v['scale'])}; }}\n" + _SHARED)


_HEAD = ("t = self.table.weight\nb, n, d = offsets.numel(), idx.numel(), t.shape[1]\n"
         "out = t.new_empty((b, d))\n")
_WARPS = "(max(1, min((b * 32 + 255) // 256, 4096)),), (256,)"
_LAUNCH = {
    "naive": ("mod.bag(((b * d + 255) // 256,), (256,), {args})", ()),
    "grid_stride": (f"mod.bag({_WARPS}, {{args}})", ("warp_per_bag",)),
    "vectorized": (f"mod.bag({_WARPS}, {{args}})", ("warp_per_bag",)),
    "block_tree": ("mod.bag((b,), (32, 8), {args})", ("block_per_bag",)),
    "atomic": ("mod.init(((b * d + 255) // 256,), (256,), out, b * d)\n"
               "mod.scatter_bags(((n * d + 255) // 256,), (256,), {args})\n"
               "mod.finish_bags(((b * d + 255) // 256,), (256,), offsets, out, b, n, d)", ("unfused",)),
}
_CUDA = {"naive": _NAIVE, "grid_stride": _GRID_STRIDE, "vectorized": _VECTORIZED, "block_tree": _BLOCK_TREE,
         "atomic": _ATOMIC}


def bag_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    weighted = v["mode"] == "wsum"
    mode = "sum" if weighted else v["mode"]
    init = f"        self.table = nn.EmbeddingBag(vocab, dim, mode=\"{mode}\")\n"
    args = f"t, idx, offsets, {'weights' if weighted else 'None'}, out, b, n, d"
    sig = "idx, offsets, weights" if weighted else "idx, offsets"
    return [implementation(task_id, strategy, f"embedding bag ({v['mode']})", _defines(v) + _CUDA[strategy],
                           _HEAD + launch.format(args=args) + "\nreturn out", sig,
                           ("embedding_bag", "gather", *tags), init, ", vocab, dim")
            for strategy, (launch, tags) in _LAUNCH.items()]
