"""Implementations of the `pooling` family: max (implicit -inf padding) or average (zero padding
counted: divisor k^d), then a post op; 1-D pooling runs as 2-D with H = 1. Strategies: naive (one
thread per output), coarsened (4 outputs per thread from a register window), smem_tiled (input tile
with halo), separable (2-D only: a row pass then a column pass).

Not covered: other dtypes than float32, dilation, ceil_mode.
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.torch_impls.parts import NEG_INF, implementation
from cudaperf.datasets.records import Implementation


def _pool_defines(v: dict[str, Any]) -> str:
    k, s, p = v["k"], v["stride"], v["pad"]
    kh, sh, ph = (k, s, p) if v["dims"] == 2 else (1, 1, 0)
    th, tw = (16, 16) if v["dims"] == 2 else (1, 256)
    is_max = v["kind"] == "max"
    _, post = chain_exprs([(v["post"], 0.0)] if v["post"] else [], "x", "v")
    return (f"#define KH {kh}\n#define KW {k}\n#define SH {sh}\n#define SW {s}\n#define PH {ph}\n"
            f"#define PW {p}\n"
            f"#define TH {th}\n#define TW {tw}\n#define IHT ((TH - 1) * SH + KH)\n"
            "#define IWT ((TW - 1) * SW + KW)\n"
            f"#define PADV {NEG_INF if is_max else '0.0f'}\n"
            f"#define RED(a, v) {'fmaxf(a, v)' if is_max else '((a) + (v))'}\n"
            f"#define FIN(a) {'(a)' if is_max else '((a) / (float)(KH * KW))'}\n"
            f"__device__ __forceinline__ float post(float v) {{ return {post}; }}\n")


_POOL_PARAMS = ("const float* __restrict__ x, float* __restrict__ out, int planes, int H, int W, "
                "int OH, int OW")

_POOL_NAIVE = f"""
extern "C" __global__ void pool({_POOL_PARAMS}) {{
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= (long long)planes * OH * OW) return;
    int ow = (int)(e % OW), oh = (int)(e / OW % OH);
    const float* xp = x + e / ((long long)OH * OW) * H * W;
    float a = PADV;
    for (int kh = 0; kh < KH; ++kh) {{
        int ih = oh * SH - PH + kh;
        if (ih < 0 || ih >= H) continue;  // padding: -inf for max, 0 for the (padding-counting) average
        for (int kw = 0; kw < KW; ++kw) {{
            int iw = ow * SW - PW + kw;
            if (iw >= 0 && iw < W) a = RED(a, xp[(long long)ih * W + iw]);
        }}
    }}
    out[e] = post(FIN(a));
}}
"""

_POOL_COARSE = f"""
#define OUTS 4
#define SPAN ((OUTS - 1) * SW + KW)
extern "C" __global__ void pool({_POOL_PARAMS}) {{
    // OUTS neighbouring outputs of one row per thread: each input row span is loaded once into registers
    int owq = (OW + OUTS - 1) / OUTS;
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= (long long)planes * OH * owq) return;
    int ow0 = (int)(e % owq) * OUTS, oh = (int)(e / owq % OH);
    const float* xp = x + e / ((long long)OH * owq) * H * W;
    float acc[OUTS];
#pragma unroll
    for (int u = 0; u < OUTS; ++u) acc[u] = PADV;
    for (int kh = 0; kh < KH; ++kh) {{
        int ih = oh * SH - PH + kh;
        if (ih < 0 || ih >= H) continue;
        float win[SPAN];
#pragma unroll
        for (int s = 0; s < SPAN; ++s) {{
            int iw = ow0 * SW - PW + s;
            win[s] = (iw >= 0 && iw < W) ? xp[(long long)ih * W + iw] : PADV;
        }}
#pragma unroll
        for (int u = 0; u < OUTS; ++u)
#pragma unroll
            for (int kw = 0; kw < KW; ++kw) acc[u] = RED(acc[u], win[u * SW + kw]);
    }}
    float* op = out + e / ((long long)OH * owq) * OH * OW + (long long)oh * OW;
#pragma unroll
    for (int u = 0; u < OUTS; ++u)
        if (ow0 + u < OW) op[ow0 + u] = post(FIN(acc[u]));
}}
"""

_POOL_TILE = """
    __shared__ float tile[IHT][IWT];  // this block's input patch with halo, padding already applied
    int tx = threadIdx.x, ty = threadIdx.y, plane = blockIdx.z;
    int ow = blockIdx.x * TW + tx, oh = blockIdx.y * TH + ty;
    int ih0 = blockIdx.y * TH * SH - PH, iw0 = blockIdx.x * TW * SW - PW;
    const float* xp = x + (long long)plane * H * W;
    for (int e = ty * TW + tx; e < IHT * IWT; e += TH * TW) {
        int r = e / IWT, c = e % IWT, ih = ih0 + r, iw = iw0 + c;
        tile[r][c] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? xp[(long long)ih * W + iw] : PADV;
    }
    __syncthreads();
"""

_POOL_SMEM = f"""
extern "C" __global__ void pool({_POOL_PARAMS}) {{{_POOL_TILE}
    if (oh >= OH || ow >= OW) return;
    float a = PADV;
#pragma unroll
    for (int kh = 0; kh < KH; ++kh)
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) a = RED(a, tile[ty * SH + kh][tx * SW + kw]);
    out[((long long)plane * OH + oh) * OW + ow] = post(FIN(a));
}}
"""

_POOL_SEPARABLE = f"""
extern "C" __global__ void pool({_POOL_PARAMS}) {{{_POOL_TILE}
    __shared__ float rows[IHT][TW];  // each patch row reduced over the KW window of every output column
    for (int r = ty; r < IHT; r += TH) {{
        float a = PADV;
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) a = RED(a, tile[r][tx * SW + kw]);
        rows[r][tx] = a;
    }}
    __syncthreads();
    if (oh >= OH || ow >= OW) return;
    float a = PADV;
#pragma unroll
    for (int kh = 0; kh < KH; ++kh) a = RED(a, rows[ty * SH + kh][tx]);
    out[((long long)plane * OH + oh) * OW + ow] = post(FIN(a));
}}
"""


def pool_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    d, k, s, p = v["dims"], v["k"], v["stride"], v["pad"]
    defs = _pool_defines(v)
    head = (("h = x.shape[-2]\n" if d == 2 else "h = 1\n") + "wd = x.shape[-1]\n"
                                                             "planes = x.numel() // (h * wd)\n"
            + (f"oh = (h + {2 * p} - {k}) // {s} + 1\n" if d == 2 else "oh = 1\n")
            + f"ow = (wd + {2 * p} - {k}) // {s} + 1\n"
            + f"out = x.new_empty((*x.shape[:-{d}], {'oh, ow' if d == 2 else 'ow'}))\n")
    args = "x, out, planes, h, wd, oh, ow"
    tw, th = (16, 16) if d == 2 else (256, 1)
    tiled = f"mod.pool(((ow + {tw - 1}) // {tw}, (oh + {th - 1}) // {th}, planes), ({tw}, {th}), {args})"
    variants = {
        "naive": (_POOL_NAIVE, f"mod.pool(((planes * oh * ow + 255) // 256,), (256,), {args})", ()),
        "coarsened": (_POOL_COARSE, "mod.pool(((planes * oh * ((ow + 3) // 4) + 255) // 256,), "
                                    f"(256,), {args})",
                      ("register_tiled",)),
        "smem_tiled": (_POOL_SMEM, tiled, ()),
    }
    if d == 2:  # a 1-D window has nothing to separate
        variants["separable"] = (_POOL_SEPARABLE, tiled, ("smem_tiled",))
    return [implementation(task_id, strategy, f"{v['kind']} pooling {d}-D", defs + cuda,
                           head + launch + "\nreturn out", "x", ("pooling", *tags))
            for strategy, (cuda, launch, tags) in variants.items()]
