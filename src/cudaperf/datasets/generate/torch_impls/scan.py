"""Implementations of the `scan_torch` family, inclusive scans along one dimension (forward or reversed;
a line is `L` elements `inner` apart, lines = numel / L): naive (one thread runs a whole line),
warp_shuffle (one warp per line, chunks of 32 with a carry), block_tree (one block per line, 4 items
per thread, warp-then-block scan).

Not covered: other dtypes than float32, exclusive scans.
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.torch_impls.parts import NEG_INF, POS_INF, implementation
from cudaperf.datasets.records import Implementation

_SCAN_OPS = {  # op -> (combine(a, b), identity)
    "cumsum": ("a + b", "0.0f"),
    "cumprod": ("a * b", "1.0f"),
    "cummax": ("fmaxf(a, b)", NEG_INF),
    "cummin": ("fminf(a, b)", POS_INF),
    # log(exp(a) + exp(b)) without overflow; the identity -inf must give the other operand back exactly
    "logcumsumexp": ("fmaxf(a, b) == NEG_INF ? NEG_INF : fmaxf(a, b) + log1pf(expf(fminf(a, b) "
                     "- fmaxf(a, b)))",
                     NEG_INF),
}

_SCAN_PARAMS = "const float* __restrict__ x, float* __restrict__ out, long long lines, int L, int inner"


def _scan_defines(v: dict[str, Any]) -> str:
    _, pre = chain_exprs([(v["pre"], 0.0)] if v["pre"] else [], "x", "v")
    if v["op"] == "cumprod":  # the task keeps products near 1: 1 + 0.01 * tanh(pre(x))
        pre = f"1.0f + 0.01f * tanhf({pre})"
    comb, ident = _SCAN_OPS[v["op"]]
    pos = "(L - 1 - (t))" if v["reverse"] else "(t)"
    return (f"#define NEG_INF {NEG_INF}\n#define IDENT {ident}\n#define POS(t) {pos}\n"
            f"__device__ __forceinline__ float val(float v) {{ return {pre}; }}\n"
            f"__device__ __forceinline__ float op(float a, float b) {{ return {comb}; }}\n"
            "__device__ __forceinline__ long long line_base(long long line, int L, int inner) {\n"
            "    return line / inner * L * inner + line % inner;\n}\n")


_SCAN_SERIAL = f"""
extern "C" __global__ void scan({_SCAN_PARAMS}) {{
    long long line = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (line >= lines) return;
    long long base = line_base(line, L, inner);
    float acc = IDENT;
    for (int t = 0; t < L; ++t) {{
        long long at = base + (long long)POS(t) * inner;
        acc = op(acc, val(x[at]));
        out[at] = acc;
    }}
}}
"""

_WARP_SCAN = """
__device__ __forceinline__ float warp_scan(float v, int lane) {  // inclusive, over the 32 lanes
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
        float y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v = op(y, v);
    }
    return v;
}
"""

_SCAN_WARP = _WARP_SCAN + f"""
extern "C" __global__ void scan({_SCAN_PARAMS}) {{
    long long line = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (line >= lines) return;  // uniform over the warp
    long long base = line_base(line, L, inner);
    float carry = IDENT;
    for (int t0 = 0; t0 < L; t0 += 32) {{
        int t = t0 + lane;
        long long at = base + (long long)POS(t) * inner;
        float v = warp_scan(t < L ? val(x[at]) : IDENT, lane);
        v = op(carry, v);
        if (t < L) out[at] = v;
        carry = __shfl_sync(0xffffffffu, v, 31);
    }}
}}
"""

_SCAN_BLOCK = _WARP_SCAN + f"""
#define ITEMS 4
extern "C" __global__ void scan({_SCAN_PARAMS}) {{
    // one block (256 threads) per line, ITEMS consecutive elements per thread: a serial scan of the
    // items, a warp scan of the thread totals, a scan of the 8 warp totals, then the carry of earlier chunks
    __shared__ float wsum[8];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    long long base = line_base(blockIdx.x, L, inner);
    float carry = IDENT;
    for (int t0 = 0; t0 < L; t0 += 256 * ITEMS) {{
        float loc[ITEMS];
#pragma unroll
        for (int u = 0; u < ITEMS; ++u) {{
            int t = t0 + threadIdx.x * ITEMS + u;
            float v = t < L ? val(x[base + (long long)POS(t) * inner]) : IDENT;
            loc[u] = u ? op(loc[u - 1], v) : v;
        }}
        float inc = warp_scan(loc[ITEMS - 1], lane);
        float excl = __shfl_up_sync(0xffffffffu, inc, 1);
        if (lane == 31) wsum[warp] = inc;
        __syncthreads();
        if (warp == 0) {{
            float w = warp_scan(lane < 8 ? wsum[lane] : IDENT, lane);
            if (lane < 8) wsum[lane] = w;
        }}
        __syncthreads();
        float pre = warp ? wsum[warp - 1] : IDENT;
        if (lane) pre = op(pre, excl);
        pre = op(carry, pre);
#pragma unroll
        for (int u = 0; u < ITEMS; ++u) {{
            int t = t0 + threadIdx.x * ITEMS + u;
            if (t < L) out[base + (long long)POS(t) * inner] = op(pre, loc[u]);
        }}
        carry = op(carry, wsum[7]);
        __syncthreads();  // wsum is rewritten by the next chunk
    }}
}}
"""


def scan_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    defs = _scan_defines(v)
    dim = v["dim"]
    # a contiguous input's stride along `dim` is the distance between a line's neighbouring elements
    head = (f"dim = {dim} % x.dim()\nlength = x.shape[dim]\ninner = x.stride(dim)\n"
            "lines = x.numel() // length\nout = torch.empty_like(x)\n")
    variants = {
        "naive": (_SCAN_SERIAL, "mod.scan(((lines + 127) // 128,), (128,), x, out, lines, length, inner)",
                  ("serial_thread",)),
        "warp_shuffle": (_SCAN_WARP, "mod.scan(((lines * 32 + 255) // 256,), (256,), x, out, lines, "
                         "length, inner)",
                         ()),
        "block_tree": (_SCAN_BLOCK, "mod.scan((lines,), (256,), x, out, lines, length, inner)",
                       ("warp_shuffle",)),
    }
    return [implementation(task_id, strategy, f"{v['op']} scan", defs + cuda, head + launch + "\nreturn out",
                           "x", ("scan", *tags))
            for strategy, (cuda, launch, tags) in variants.items()]
