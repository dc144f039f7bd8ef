"""Implementations of the `conv_activation` family, out = act(conv(x) + bias) * scale (1-D convolutions
run as 2-D ones with H = 1): naive (one thread per output, activation fused), unfused (conv kernel +
activation kernel), smem_tiled (input tile with halo in shared memory), register_tiled (shared input
tile, 4 output channels per thread), tensor_core (implicit GEMM on the tensor-core matmul, 3xTF32).

Not covered: other dtypes than float32, grids beyond the hardware limits for shapes far outside the
tasks' configurations (blockIdx.y/z <= 65535).
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.tensor_core import TILE, wmma_tf32_kernel
from cudaperf.datasets.generate.torch_impls.parts import implementation
from cudaperf.datasets.records import Implementation


def _conv_defines(v: dict[str, Any]) -> str:
    k, s, p = v["k"], v["stride"], v["pad"]
    kh, sh, ph = (k, s, p) if v["dims"] == 2 else (1, 1, 0)
    th, tw = (16, 16) if v["dims"] == 2 else (1, 256)
    _, act = chain_exprs([*v["ops"], ("scale", v["scale"])], "x", "v")
    return (f"#define KH {kh}\n#define KW {k}\n#define SH {sh}\n#define SW {s}\n#define PH {ph}\n"
            f"#define PW {p}\n"
            f"#define TH {th}\n#define TW {tw}\n#define IHT ((TH - 1) * SH + KH)\n"
            "#define IWT ((TW - 1) * SW + KW)\n"
            f"__device__ __forceinline__ float act(float v) {{ return {act}; }}\n")


_CONV_PARAMS = ("const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias, "
                "float* __restrict__ out, int B, int CI, int CO, int H, int W, int OH, int OW")

_CONV_DIRECT = """
extern "C" __global__ void {name}({params}) {{
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= (long long)B * CO * OH * OW) return;
    int ow = (int)(e % OW); long long t = e / OW;
    int oh = (int)(t % OH); t /= OH;
    int co = (int)(t % CO), b = (int)(t / CO);
    float acc = 0.0f;
    for (int ci = 0; ci < CI; ++ci) {{
        const float* xp = x + ((long long)b * CI + ci) * H * W;
        const float* wp = w + ((long long)co * CI + ci) * KH * KW;
        for (int kh = 0; kh < KH; ++kh) {{
            int ih = oh * SH - PH + kh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KW; ++kw) {{
                int iw = ow * SW - PW + kw;
                if (iw >= 0 && iw < W) acc += xp[(long long)ih * W + iw] * wp[kh * KW + kw];
            }}
        }}
    }}
    out[e] = {finish};
}}
"""

_CONV_ACT = """
extern "C" __global__ void activate(float* __restrict__ out, long long n) {
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e < n) out[e] = act(out[e]);
}
"""

_CONV_TILE_LOAD = """        const float* xp = x + ((long long)b * CI + ci) * H * W;
        for (int e = tid; e < IHT * IWT; e += TH * TW) {
            int r = e / IWT, c = e % IWT, ih = ih0 + r, iw = iw0 + c;
            tile[r][c] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? xp[(long long)ih * W + iw] : 0.0f;
        }"""

_CONV_SMEM = """
extern "C" __global__ void conv_tiled({params}) {
    __shared__ float tile[IHT][IWT];  // the input patch (with halo) of this block's TH x TW outputs
    int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TW + tx;
    int ow = blockIdx.x * TW + tx, oh = blockIdx.y * TH + ty, co = blockIdx.z % CO, b = blockIdx.z / CO;
    int ih0 = blockIdx.y * TH * SH - PH, iw0 = blockIdx.x * TW * SW - PW;
    float acc = 0.0f;
    for (int ci = 0; ci < CI; ++ci) {
@LOAD@
        __syncthreads();
        const float* wp = w + ((long long)co * CI + ci) * KH * KW;
#pragma unroll
        for (int kh = 0; kh < KH; ++kh)
#pragma unroll
            for (int kw = 0; kw < KW; ++kw) acc += tile[ty * SH + kh][tx * SW + kw] * wp[kh * KW + kw];
        __syncthreads();
    }
    if (oh < OH && ow < OW) out[(((long long)b * CO + co) * OH + oh) * OW + ow] = act(acc + bias[co]);
}
"""

_CONV_REG = """
#define COB 4
extern "C" __global__ void conv_reg({params}) {
    // shared input patch as in conv_tiled, but each thread accumulates COB output channels in registers
    __shared__ float tile[IHT][IWT];
    __shared__ float wsm[COB][KH * KW];
    int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TW + tx, groups = (CO + COB - 1) / COB;
    int ow = blockIdx.x * TW + tx, oh = blockIdx.y * TH + ty, co0 = (blockIdx.z % groups) * COB;
    int b = blockIdx.z / groups;
    int ih0 = blockIdx.y * TH * SH - PH, iw0 = blockIdx.x * TW * SW - PW;
    float acc[COB];
#pragma unroll
    for (int c = 0; c < COB; ++c) acc[c] = 0.0f;
    for (int ci = 0; ci < CI; ++ci) {
@LOAD@
        for (int e = tid; e < COB * KH * KW; e += TH * TW) {
            int c = e / (KH * KW), r = e % (KH * KW);
            wsm[c][r] = co0 + c < CO ? w[((long long)(co0 + c) * CI + ci) * KH * KW + r] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kh = 0; kh < KH; ++kh)
#pragma unroll
            for (int kw = 0; kw < KW; ++kw) {
                float xv = tile[ty * SH + kh][tx * SW + kw];
#pragma unroll
                for (int c = 0; c < COB; ++c) acc[c] += xv * wsm[c][kh * KW + kw];
            }
        __syncthreads();
    }
    if (oh >= OH || ow >= OW) return;
#pragma unroll
    for (int c = 0; c < COB; ++c)
        if (co0 + c < CO)
            out[(((long long)b * CO + co0 + c) * OH + oh) * OW + ow] = act(acc[c] + bias[co0 + c]);
}
"""


_CONV_GATHER = """
// implicit GEMM: row = output pixel (b, oh, ow), p = reduction index (ci, kh, kw); zero padding
__device__ __forceinline__ float conv_x(const float* __restrict__ x, int row, int p, int CI, int H, int W,
                                        int OH, int OW) {
    int ow = row % OW, t = row / OW, oh = t % OH, b = t / OH;
    int kw = p % KW, t2 = p / KW, kh = t2 % KH, ci = t2 / KH;
    int ih = oh * SH - PH + kh, iw = ow * SW - PW + kw;
    return (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[(((long long)b * CI + ci) * H + ih) * W + iw] : 0.0f;
}
"""


def _conv_tensor_core() -> str:
    """The convolution as an implicit GEMM (M = output pixels, N = output channels, K = CI x KH x KW: the
    weight is N x K as stored) on the shared tensor-core kernel, bias and activation fused."""
    return _CONV_GATHER + wmma_tf32_kernel(
        "conv_tc", _CONV_PARAMS, "int m = B * OH * OW, n = CO, k = CI * KH * KW;",
        "conv_x(x, row, p, CI, H, W, OH, OW)", "w[(long long)col * k + p]",
        "out[((long long)(i / (OH * OW)) * CO + j) * OH * OW + i % (OH * OW)] = act(v + bias[j]);")


def _conv_template(text: str) -> str:
    return text.replace("{params}", _CONV_PARAMS).replace("@LOAD@", _CONV_TILE_LOAD)


def _conv_head(v: dict[str, Any]) -> str:
    k, s, p = v["k"], v["stride"], v["pad"]
    shape = "(b, cout, oh, ow)" if v["dims"] == 2 else "(b, cout, ow)"
    height = "h = x.shape[2]\n" if v["dims"] == 2 else "h = 1\n"
    oh = f"(h + {2 * p} - {k}) // {s} + 1" if v["dims"] == 2 else "1"
    return ("w = self.conv.weight\ncout = w.shape[0]\nb, cin = x.shape[0], x.shape[1]\n"
            f"{height}wd = x.shape[-1]\n"
            f"oh = {oh}\now = (wd + {2 * p} - {k}) // {s} + 1\nout = x.new_empty({shape})\n"
            "total = b * cout * oh * ow\n")


def conv_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    d, k, s, p = v["dims"], v["k"], v["stride"], v["pad"]
    defs = _conv_defines(v)
    init = f"        self.conv = nn.Conv{d}d(cin, cout, {k}, stride={s}, padding={p})\n"
    head = _conv_head(v)
    args = "x, w, self.conv.bias, out, b, cin, cout, h, wd, oh, ow"
    tw, th = (16, 16) if d == 2 else (256, 1)
    tiles = f"((ow + {tw - 1}) // {tw}, (oh + {th - 1}) // {th}, {{z}}), ({tw}, {th})"
    direct = f"mod.conv(((total + 255) // 256,), (256,), {args})"
    variants = {
        "naive": (_CONV_DIRECT.format(name="conv", params=_CONV_PARAMS, finish="act(acc + bias[co])"), direct,
                  ("conv", "fused")),
        "unfused": (_CONV_DIRECT.format(name="conv", params=_CONV_PARAMS, finish="acc + bias[co]")
                    + _CONV_ACT,
                    direct + "\nmod.activate(((total + 255) // 256,), (256,), out, total)", ("conv",)),
        "smem_tiled": (_conv_template(_CONV_SMEM),
                       f"mod.conv_tiled({tiles.format(z='b * cout')}, {args})", ("conv", "fused")),
        "register_tiled": (_conv_template(_CONV_REG),
                           f"mod.conv_reg({tiles.format(z='b * ((cout + 3) // 4)')}, {args})",
                           ("conv", "smem_tiled", "fused")),
        "tensor_core": (_conv_tensor_core(),
                        (f"mod.conv_tc(((cout + {TILE - 1}) // {TILE}, (b * oh * ow "
                         f"+ {TILE - 1}) // {TILE}), "
                         f"(16, 16), {args})"), ("conv", "fused", "matmul")),
    }
    return [implementation(task_id, strategy, f"conv{d}d + activation", defs + cuda,
                           head + launch + "\nreturn out", "x", tags, init, ", cin, cout")
            for strategy, (cuda, launch, tags) in variants.items()]
