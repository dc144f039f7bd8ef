"""Implementations of the `gather_scatter` family, out = post(op(...)) * scale with int64 indices: row
gathers: naive, grid_stride (one warp per row), vectorized (float4 stores, float4 loads when rows are
16-byte multiples); scalar gathers: naive, grid_stride, coarsened; scatter-add: naive (atomics, one
thread per element), grid_stride (atomics, one warp per row), two_pass (counting sort by destination,
then a segmented sum without atomics).

Not covered: other dtypes than float32, out-of-range indices (the tasks draw valid ones).
"""

from __future__ import annotations

import textwrap
from typing import Any

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.torch_impls.parts import float_literal, implementation
from cudaperf.datasets.records import Implementation

_ROW_GATHER_PARAMS = ("const float* __restrict__ t, const long long* __restrict__ idx, float* "
                      "__restrict__ out, "
                      "long long R, int D")

_ROW_GATHER = {
    "naive": f"""
extern "C" __global__ void gather_rows({_ROW_GATHER_PARAMS}) {{
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e < R * D) out[e] = fin(t[idx[e / D] * D + e % D]);
}}
""",
    "grid_stride": f"""
extern "C" __global__ void gather_rows({_ROW_GATHER_PARAMS}) {{
    // a fixed grid of warps strides over the output rows; each row's index is read once per lane
    int lane = threadIdx.x % 32;
    long long w = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;
    long long nw = gridDim.x * (long long)blockDim.x / 32;
    for (long long r = w; r < R; r += nw) {{
        const float* src = t + idx[r] * D;
        for (int c = lane; c < D; c += 32) out[r * D + c] = fin(src[c]);
    }}
}}
""",
    "vectorized": f"""
extern "C" __global__ void gather_rows({_ROW_GATHER_PARAMS}) {{
    // float4 stores over the flat output; float4 loads too when rows are whole float4s (D % 4 == 0)
    long long n = R * D, nq = n / 4, tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (long long q = tid; q < nq; q += gridDim.x * (long long)blockDim.x) {{
        long long e = q * 4;
        float4 r;
        if (D % 4 == 0) {{
            float4 s = *reinterpret_cast<const float4*>(t + idx[e / D] * D + e % D);
            r = make_float4(fin(s.x), fin(s.y), fin(s.z), fin(s.w));
        }} else {{
            float v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) v[u] = fin(t[idx[(e + u) / D] * D + (e + u) % D]);
            r = make_float4(v[0], v[1], v[2], v[3]);
        }}
        reinterpret_cast<float4*>(out)[q] = r;
    }}
    long long e = nq * 4 + tid;
    if (e < n) out[e] = fin(t[idx[e / D] * D + e % D]);
}}
""",
}

_ROW_GATHER_GRID = {"naive": "((r * d + 255) // 256,)", "grid_stride": "(max(1, min((r * 32 + 255) "
                                                                       "// 256, 4096)),)",
                    "vectorized": "(max(1, min((r * d // 4 + 255) // 256, 4096)),)"}

_ELEM_GATHER_PARAMS = ("const float* __restrict__ x, const long long* __restrict__ idx, float* "
                       "__restrict__ out, "
                       "long long n, int V, int S")

_ELEM_GATHER = {
    "naive": f"""
extern "C" __global__ void gather_elems({_ELEM_GATHER_PARAMS}) {{
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e < n) out[e] = fin(x[e / S * V + idx[e]]);
}}
""",
    "grid_stride": f"""
extern "C" __global__ void gather_elems({_ELEM_GATHER_PARAMS}) {{
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += gridDim.x * (long long)blockDim.x)
        out[e] = fin(x[e / S * V + idx[e]]);
}}
""",
    "coarsened": f"""
extern "C" __global__ void gather_elems({_ELEM_GATHER_PARAMS}) {{
    // 4 outputs per thread, blockDim apart (coalesced); the 4 independent loads are in flight together
    long long base = blockIdx.x * (long long)blockDim.x * 4 + threadIdx.x;
    long long at[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {{
        long long e = base + u * (long long)blockDim.x;
        at[u] = e < n ? e / S * V + idx[e] : -1;
    }}
#pragma unroll
    for (int u = 0; u < 4; ++u)
        if (at[u] >= 0) out[base + u * (long long)blockDim.x] = fin(x[at[u]]);
}}
""",
}

_ELEM_GATHER_GRID = {"naive": "((n + 255) // 256,)", "grid_stride": "(max(1, min((n + 255) // 256, 4096)),)",
                     "coarsened": "((n + 1023) // 1024,)"}

_SCATTER_EPILOGUE = """
extern "C" __global__ void finish(float* __restrict__ out, long long n) {
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e < n) out[e] = fin(out[e]);
}
"""

_SCATTER_PARAMS = ("const float* __restrict__ x, const long long* __restrict__ idx, float* __restrict__ out, "
                   "int S, int D")

_SCATTER_ATOMIC = {
    "naive": f"""
extern "C" __global__ void scatter_rows({_SCATTER_PARAMS}) {{
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e < (long long)S * D) atomicAdd(&out[idx[e / D] * D + e % D], x[e]);
}}
""",
    "grid_stride": f"""
extern "C" __global__ void scatter_rows({_SCATTER_PARAMS}) {{
    // a fixed grid of warps strides over the input rows: coalesced atomics along the destination row
    int lane = threadIdx.x % 32;
    long long w = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;
    long long nw = gridDim.x * (long long)blockDim.x / 32;
    for (long long s = w; s < S; s += nw) {{
        float* dst = out + idx[s] * D;
        for (int c = lane; c < D; c += 32) atomicAdd(&dst[c], x[s * D + c]);
    }}
}}
""",
}

_SCATTER_SORTED = """
extern "C" __global__ void count(const long long* __restrict__ idx, int* __restrict__ cnt, int S) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s < S) atomicAdd(&cnt[idx[s]], 1);
}
extern "C" __global__ void offsets(const int* __restrict__ cnt, int* __restrict__ off, int V) {
    // one block of 256: exclusive prefix sum of the counts, off[V] = total
    __shared__ int wsum[8];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, carry = 0;
    for (int c0 = 0; c0 < V; c0 += 256) {
        int i = c0 + threadIdx.x, v = i < V ? cnt[i] : 0, inc = v;
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            int y = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += y;
        }
        if (lane == 31) wsum[warp] = inc;
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < 8; ++w) {
            before += w < warp ? wsum[w] : 0;
            total += wsum[w];
        }
        if (i < V) off[i] = carry + before + inc - v;
        carry += total;
        __syncthreads();
    }
    if (threadIdx.x == 0) off[V] = carry;
}
extern "C" __global__ void fill(const long long* __restrict__ idx, const int* __restrict__ off,
                                int* __restrict__ cursor, int* __restrict__ perm, int S) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s < S) perm[off[idx[s]] + atomicAdd(&cursor[idx[s]], 1)] = s;
}
extern "C" __global__ void segment_sum(const float* __restrict__ x, const int* __restrict__ off,
                                       const int* __restrict__ perm, float* __restrict__ out, int V, int D) {
    // one warp per destination row sums its sources: no float atomics, the epilogue fused
    int lane = threadIdx.x % 32;
    long long w = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;
    long long nw = gridDim.x * (long long)blockDim.x / 32;
    for (long long r = w; r < V; r += nw)
        for (int c = lane; c < D; c += 32) {
            float acc = 0.0f;
            for (int p = off[r]; p < off[r + 1]; ++p) acc += x[(long long)perm[p] * D + c];
            out[r * D + c] = fin(acc);
        }
}
"""


def _gather_fin(v: dict[str, Any]) -> str:
    _, post = chain_exprs([(v["post"], 0.0)] if v["post"] else [], "x", "v")
    return (f"__device__ __forceinline__ float fin(float v) {{ return ({post}) "
            f"* {float_literal(v['scale'])}; }}\n")


def _row_gather_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    if v["op"] == "embedding":
        init, sig = "        self.table = nn.Embedding(vocab, dim)\n", "idx"
        head = "t = self.table.weight\nd = t.shape[1]\nr = idx.numel()\nout = t.new_empty((*idx.shape, d))\n"
    else:
        init, sig = "", "x, idx"
        head = "t = x\nd = t.shape[1]\nr = idx.numel()\nout = t.new_empty((r, d))\n"
    return [implementation(task_id, strategy, v["op"], _gather_fin(v) + cuda,
                           head + f"mod.gather_rows({_ROW_GATHER_GRID[strategy]}, (256,), t, idx, out, r, "
                           "d)\nreturn out",
                           sig, ("gather",), init, ", vocab, dim")
            for strategy, cuda in _ROW_GATHER.items()]


def _elem_gather_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    head = "n = idx.numel()\nout = x.new_empty(idx.shape)\n"
    return [implementation(task_id, strategy, v["op"], _gather_fin(v) + cuda,
                           head + f"mod.gather_elems({_ELEM_GATHER_GRID[strategy]}, (256,), x, idx, out, "
                           "n, x.shape[1], "
                           "idx.shape[1])\nreturn out", "x, idx", ("gather",), "", ", vocab, dim")
            for strategy, cuda in _ELEM_GATHER.items()]


def _scatter_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    init = "        self.vocab_out = vocab // 4 + 1\n"
    head = "s, d = x.shape[0], x.shape[1]\nvo = self.vocab_out\nout = x.new_zeros((vo, d))\n"
    fin = _gather_fin(v)
    grids = {"naive": "((s * d + 255) // 256,)", "grid_stride": "(max(1, min((s * 32 + 255) // 256, 4096)),)"}
    out = [implementation(task_id, strategy, v["op"], fin + cuda + _SCATTER_EPILOGUE,
                          head + f"mod.scatter_rows({grids[strategy]}, (256,), x, idx, out, s, d)\n"
                          "mod.finish(((vo * d + 255) // 256,), (256,), out, vo * d)\nreturn out",
                          "x, idx", ("scatter", "atomic", "unfused"), init, ", vocab, dim")
           for strategy, cuda in _SCATTER_ATOMIC.items()]
    # segment_sum writes every output row: no zero fill
    body = head.replace("new_zeros", "new_empty") + _textblock("""
        cnt = idx.new_zeros((vo,), dtype=torch.int32)
        cursor = idx.new_zeros((vo,), dtype=torch.int32)
        off = idx.new_empty((vo + 1,), dtype=torch.int32)
        perm = idx.new_empty((max(s, 1),), dtype=torch.int32)
        mod.count(((s + 255) // 256,), (256,), idx, cnt, s)
        mod.offsets((1,), (256,), cnt, off, vo)
        mod.fill(((s + 255) // 256,), (256,), idx, off, cursor, perm, s)
        mod.segment_sum((max(1, min((vo * 32 + 255) // 256, 4096)),), (256,), x, off, perm, out, vo, d)
        return out""")
    out.append(implementation(task_id, "two_pass", v["op"], fin + _SCATTER_SORTED, body, "x, idx",
                     ("scatter", "sorted", "segmented"), init, ", vocab, dim"))
    return out


def _textblock(text: str) -> str:
    return textwrap.dedent(text).strip("\n") + "\n"


def gather_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    op = v["op"]
    if op in ("embedding", "index_select"):
        return _row_gather_impls(v, task_id)
    if op in ("gather", "take_along"):
        return _elem_gather_impls(v, task_id)
    return _scatter_impls(v, task_id)
