"""Fast-format CUDA implementations (a `ModelNew` launching NVRTC kernels through `cudaperf.cuda`) of the
PyTorch families torch_impls.py does not cover, several optimisation strategies each:

  matmul_epilogue  naive (one thread per output), smem_tiled (16x16 tiles, epilogue fused),
                   register_tiled (64x64 block tile, 4x4 outputs per thread, epilogue fused),
                   tensor_core (64x64 block tile of WMMA TF32 tiles, 3xTF32 for fp32 accuracy, epilogue
                   fused), unfused (tiled matmul, then a separate epilogue kernel)
  conv_activation  naive (one thread per output, activation fused), unfused (conv kernel + activation
                   kernel), smem_tiled (input tile with halo in shared memory), register_tiled (shared
                   input tile, 4 output channels per thread), tensor_core (implicit GEMM on the tensor-core
                   matmul kernel, 3xTF32)
  pooling          naive (one thread per output), coarsened (4 outputs per thread from a register window),
                   smem_tiled (input tile with halo), separable (2-D only: row pass then column pass)
  attention        scores / qk-normalised scores: naive, smem_tiled, register_tiled, tensor_core (the
                   matmul kernels, batched); probs and attention: naive and unfused (scores, row softmax,
                   P·V as separate kernels), fused (online softmax, one warp per query, 8 queries per block
                   sharing K (and V) chunks in shared memory; attention: head dim <= 128); rotary: naive, coarsened,
                   unfused (cos/sin table kernel), smem_tiled (per-position table in shared memory)
  scan_torch       naive (one thread runs a whole line), warp_shuffle (one warp per line, chunks of 32
                   with a carry), block_tree (one block per line, 4 items per thread, warp-then-block scan)
  gather_scatter   row gathers: naive, grid_stride (one warp per row), vectorized (float4 stores, float4
                   loads when rows are 16-byte multiples); scalar gathers: naive, grid_stride, coarsened;
                   scatter-add: naive (atomics, one thread per element), grid_stride (atomics, one warp per
                   row), two_pass (counting sort by destination, then a segmented sum without atomics)
  loss             elementwise: naive, grid_stride, coarsened, vectorized; row-reduced: naive (thread per
                   row), warp_shuffle, block_tree, atomic (column chunks + atomicAdd), two_pass (chunk
                   partials + a second kernel); softmax-based and per-row losses: the three row mappings
                   (+ unfused stats/elementwise kernels for elementwise KL)

Every implementation guards its tails (no size needs to be a multiple of a block or tile) and creates
its parameters exactly like the task's `Model` (same modules, same order), so seeded construction gives
equal weights.

Not covered: other dtypes than float32, tensor cores, inputs that are not contiguous, grids beyond the
hardware limits for shapes far outside the tasks' configurations (blockIdx.y/z <= 65535).
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable
from typing import Any

from cudaperf.datasets.generate.tensor_core import TILE, wmma_tf32_kernel
from cudaperf.datasets.generate.torch_families import chain_exprs

# The row-to-threads mappings and group reductions of the row-wise families are shared with them, not
# copied: a change of those kernels' conventions (block of 256, g_sum/g_max) then reaches both modules.
from cudaperf.datasets.generate.torch_impls import _BLOCK, _GROUP, _REDUCERS, NEG_INF, _group_fns, _model_new
from cudaperf.datasets.records import Family, Implementation

Impls = Callable[[dict[str, Any], str], list[Implementation]]
POS_INF = "__int_as_float(0x7f800000)"
ROW_STRATEGIES = tuple(_GROUP)  # naive (thread per row), warp_shuffle (warp per row), block_tree


def _body(text: str) -> str:
    """Forward-body lines (written flush left) indented into the generated method."""
    return textwrap.indent(textwrap.dedent(text).strip("\n") + "\n", " " * 8)


def _impl(task_id: str, strategy: str, what: str, cuda: str, body: str, fwd_args: str,
          tags: tuple[str, ...], init: str = "", init_args: str = "") -> Implementation:
    src = _model_new(f"{strategy} {what} for {task_id}", init, init_args, fwd_args, _body(body), cuda)
    return Implementation(f"{task_id}/{strategy}", task_id, strategy, src, (strategy, *tags), strategy == "naive")


def _flit(x: float) -> str:
    """A float literal for CUDA (`0.5f`)."""
    return f"{float(x)!r}f"


# ================================================================================================
# batched matmul kernels C[z] = fin(A[z] · B[z]^T) (layout "nt": B is n x k, a Linear weight or keys) or
# C[z] = fin(A[z] · B[z]) (layout "nn": B is k x n, values); `fin` is a device function of the family

_MM_PARAMS = ("const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, "
              "const float* __restrict__ e0, const float* __restrict__ e1, int m, int n, int k, "
              "long long sa, long long sb, long long sc, float alpha")
_FIN_PARAMS = ("float acc, int z, int i, int j, int m, int n, int k, const float* __restrict__ e0, "
               "const float* __restrict__ e1, float alpha")
_FIN_ARGS = "z, i, j, m, n, k, e0, e1, alpha"


def _mm_naive(name: str, layout: str, fin: str) -> str:
    b_at = "b[(long long)j * k + p]" if layout == "nt" else "b[(long long)p * n + j]"
    return f"""
extern "C" __global__ void {name}({_MM_PARAMS}) {{
    int j = blockIdx.x * 16 + threadIdx.x, i = blockIdx.y * 16 + threadIdx.y, z = blockIdx.z;
    if (i >= m || j >= n) return;
    a += z * sa; b += z * sb; c += z * sc;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) acc += a[(long long)i * k + p] * {b_at};
    c[(long long)i * n + j] = {fin}(acc, {_FIN_ARGS});
}}
"""


def _mm_tiled(name: str, layout: str, fin: str) -> str:
    # B tiles are loaded along B's contiguous dimension (coalesced) and stored as ws[p][col]
    nt = ("{ int jj = blockIdx.x * 16 + ty, pp = p0 + tx;\n"
          "          ws[tx][ty] = (jj < n && pp < k) ? b[(long long)jj * k + pp] : 0.0f; }")
    nn = ("{ int pp = p0 + ty;\n"
          "          ws[ty][tx] = (j < n && pp < k) ? b[(long long)pp * n + j] : 0.0f; }")
    load_b = nt if layout == "nt" else nn
    return f"""
extern "C" __global__ void {name}({_MM_PARAMS}) {{
    __shared__ float xs[16][17], ws[16][17];  // xs[row][p], ws[p][col]; +1 column against bank conflicts
    int tx = threadIdx.x, ty = threadIdx.y, z = blockIdx.z;
    int i = blockIdx.y * 16 + ty, j = blockIdx.x * 16 + tx;
    a += z * sa; b += z * sb; c += z * sc;
    float acc = 0.0f;
    for (int p0 = 0; p0 < k; p0 += 16) {{
        xs[ty][tx] = (i < m && p0 + tx < k) ? a[(long long)i * k + p0 + tx] : 0.0f;
        {load_b}
        __syncthreads();
#pragma unroll
        for (int p = 0; p < 16; ++p) acc += xs[ty][p] * ws[p][tx];
        __syncthreads();
    }}
    if (i < m && j < n) c[(long long)i * n + j] = {fin}(acc, {_FIN_ARGS});
}}
"""


def _mm_register(name: str, layout: str, fin: str) -> str:
    load_b = ("ws[p][r] = (col0 + r < n && p0 + p < k) ? b[(long long)(col0 + r) * k + p0 + p] : 0.0f;"
              if layout == "nt" else
              "{ int pp = e / 64, jj = e % 64;\n"
              "              ws[pp][jj] = (col0 + jj < n && p0 + pp < k) ? b[(long long)(p0 + pp) * n + col0 + jj]"
              " : 0.0f; }")
    return f"""
extern "C" __global__ void {name}({_MM_PARAMS}) {{
    // 64x64 block tile, 16-deep k slices, 256 threads; thread (tx, ty) owns rows ty + 16r, cols tx + 16q
    __shared__ float xs[16][68], ws[16][68];  // [p][row], [p][col]
    int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx, z = blockIdx.z;
    int row0 = blockIdx.y * 64, col0 = blockIdx.x * 64;
    a += z * sa; b += z * sb; c += z * sc;
    float acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[r][q] = 0.0f;
    for (int p0 = 0; p0 < k; p0 += 16) {{
#pragma unroll
        for (int l = 0; l < 4; ++l) {{
            int e = tid + 256 * l, r = e / 16, p = e % 16;
            xs[p][r] = (row0 + r < m && p0 + p < k) ? a[(long long)(row0 + r) * k + p0 + p] : 0.0f;
            {load_b}
        }}
        __syncthreads();
#pragma unroll
        for (int p = 0; p < 16; ++p) {{
            float ra[4], rb[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) ra[r] = xs[p][ty + 16 * r];
#pragma unroll
            for (int q = 0; q < 4; ++q) rb[q] = ws[p][tx + 16 * q];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[r][q] += ra[r] * rb[q];
        }}
        __syncthreads();
    }}
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int q = 0; q < 4; ++q) {{
            int i = row0 + ty + 16 * r, j = col0 + tx + 16 * q;
            if (i < m && j < n) c[(long long)i * n + j] = {fin}(acc[r][q], {_FIN_ARGS});
        }}
}}
"""


_MM_KERNELS = {"naive": (_mm_naive, 16), "smem_tiled": (_mm_tiled, 16), "register_tiled": (_mm_register, 64)}

def _mm_tensor_core(name: str, layout: str, fin: str) -> str:
    """WMMA TF32 tiles with the 3xTF32 split (`tensor_core.py`); B as n x k (layout "nt") only."""
    if layout != "nt":
        raise ValueError("the tensor-core matmul reads B as n x k (layout 'nt')")
    return wmma_tf32_kernel(name, _MM_PARAMS, "int z = blockIdx.z;\n    a += z * sa; b += z * sb; c += z * sc;",
                            "a[(long long)row * k + p]", "b[(long long)col * k + p]",
                            f"c[(long long)i * n + j] = {fin}(v, {_FIN_ARGS});")


_MM_WITH_TENSOR_CORES = {**_MM_KERNELS, "tensor_core": (_mm_tensor_core, TILE)}  # where B is n x k


def _mm_launch(kernel: str, tile: int, m: str, n: str, z: str, args: str) -> str:
    """A Python launch line of one matmul kernel (block 16x16, one block per tile x tile outputs)."""
    return f"mod.{kernel}((({n} + {tile - 1}) // {tile}, ({m} + {tile - 1}) // {tile}, {z}), (16, 16), {args})"


def _raw_fin() -> str:
    return f"__device__ __forceinline__ float raw({_FIN_PARAMS}) {{ return acc; }}\n"


# ------------------------------------------------------------------------------------------------
# matmul_epilogue: out = epi(x W^T + b) (+ x[:, :n] when residual)


def _matmul_fin(v: dict[str, Any]) -> str:
    _, epi = chain_exprs(v["ops"], "x", "v")
    bias = " + e0[j]" if v["bias"] else ""
    res = " + e1[(long long)i * k + j]" if v["residual"] else ""
    return (f"__device__ __forceinline__ float epi(float v) {{ return {epi}; }}\n"
            f"__device__ __forceinline__ float fin({_FIN_PARAMS}) {{ return epi(acc{bias}){res}; }}\n")


_MM_EPILOGUE = """
extern "C" __global__ void epilogue(const float* __restrict__ t, float* __restrict__ out,
                                    const float* __restrict__ e0, const float* __restrict__ e1,
                                    int m, int n, int k) {
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= (long long)m * n) return;
    out[e] = fin(t[e], 0, (int)(e / n), (int)(e % n), m, n, k, e0, e1, 1.0f);
}
"""


def matmul_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    fin = _matmul_fin(v)
    init = f"        self.linear = nn.Linear(k, n, bias={bool(v['bias'])})\n"
    head = ("kk = x.shape[-1]\nm = x.numel() // kk\nn = self.linear.out_features\n"
            "out = x.new_empty((*x.shape[:-1], n))\n")
    args = "x, self.linear.weight, {dst}, {e0}, {e1}, m, n, kk, 0, 0, 0, 1.0"
    out = []
    for strategy, (gen, tile) in _MM_WITH_TENSOR_CORES.items():
        cuda = fin + gen("gemm", "nt", "fin")
        body = head + _mm_launch("gemm", tile, "m", "n", "1", args.format(dst="out", e0="self.linear.bias", e1="x"))
        tags = ("matmul", "fused") if strategy != "naive" else ("matmul",)
        out.append(_impl(task_id, strategy, "linear + epilogue", cuda, body + "\nreturn out", "x", tags, init,
                         ", k, n"))
    cuda = fin + _raw_fin() + _mm_tiled("gemm", "nt", "raw") + _MM_EPILOGUE
    body = (head + "t = x.new_empty((m, n))\n" + _mm_launch("gemm", 16, "m", "n", "1", args.format(
        dst="t", e0="None", e1="None")) + "\nmod.epilogue(((m * n + 255) // 256,), (256,), t, out, "
        "self.linear.bias, x, m, n, kk)\nreturn out")
    out.append(_impl(task_id, "unfused", "linear + epilogue", cuda, body, "x", ("matmul", "smem_tiled"), init,
                     ", k, n"))
    return out


# ================================================================================================
# conv_activation: out = act(conv(x) + bias) * scale; 1-D convolutions run as 2-D ones with H = 1


def _conv_defines(v: dict[str, Any]) -> str:
    k, s, p = v["k"], v["stride"], v["pad"]
    kh, sh, ph = (k, s, p) if v["dims"] == 2 else (1, 1, 0)
    th, tw = (16, 16) if v["dims"] == 2 else (1, 256)
    _, act = chain_exprs([*v["ops"], ("scale", v["scale"])], "x", "v")
    return (f"#define KH {kh}\n#define KW {k}\n#define SH {sh}\n#define SW {s}\n#define PH {ph}\n#define PW {p}\n"
            f"#define TH {th}\n#define TW {tw}\n#define IHT ((TH - 1) * SH + KH)\n#define IWT ((TW - 1) * SW + KW)\n"
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
        if (co0 + c < CO) out[(((long long)b * CO + co0 + c) * OH + oh) * OW + ow] = act(acc[c] + bias[co0 + c]);
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
    return (f"w = self.conv.weight\ncout = w.shape[0]\nb, cin = x.shape[0], x.shape[1]\n{height}wd = x.shape[-1]\n"
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
        "unfused": (_CONV_DIRECT.format(name="conv", params=_CONV_PARAMS, finish="acc + bias[co]") + _CONV_ACT,
                    direct + "\nmod.activate(((total + 255) // 256,), (256,), out, total)", ("conv",)),
        "smem_tiled": (_conv_template(_CONV_SMEM),
                       f"mod.conv_tiled({tiles.format(z='b * cout')}, {args})", ("conv", "fused")),
        "register_tiled": (_conv_template(_CONV_REG),
                           f"mod.conv_reg({tiles.format(z='b * ((cout + 3) // 4)')}, {args})",
                           ("conv", "smem_tiled", "fused")),
        "tensor_core": (_conv_tensor_core(),
                        (f"mod.conv_tc(((cout + {TILE - 1}) // {TILE}, (b * oh * ow + {TILE - 1}) // {TILE}), "
                         f"(16, 16), {args})"), ("conv", "fused", "matmul")),
    }
    return [_impl(task_id, strategy, f"conv{d}d + activation", defs + cuda, head + launch + "\nreturn out", "x",
                  tags, init, ", cin, cout")
            for strategy, (cuda, launch, tags) in variants.items()]


# ================================================================================================
# pooling: max (implicit -inf padding) or average (zero padding counted: divisor k^d), then a post op;
# 1-D pooling runs as 2-D with H = 1


def _pool_defines(v: dict[str, Any]) -> str:
    k, s, p = v["k"], v["stride"], v["pad"]
    kh, sh, ph = (k, s, p) if v["dims"] == 2 else (1, 1, 0)
    th, tw = (16, 16) if v["dims"] == 2 else (1, 256)
    is_max = v["kind"] == "max"
    _, post = chain_exprs([(v["post"], 0.0)] if v["post"] else [], "x", "v")
    return (f"#define KH {kh}\n#define KW {k}\n#define SH {sh}\n#define SW {s}\n#define PH {ph}\n#define PW {p}\n"
            f"#define TH {th}\n#define TW {tw}\n#define IHT ((TH - 1) * SH + KH)\n#define IWT ((TW - 1) * SW + KW)\n"
            f"#define PADV {NEG_INF if is_max else '0.0f'}\n"
            f"#define RED(a, v) {'fmaxf(a, v)' if is_max else '((a) + (v))'}\n"
            f"#define FIN(a) {'(a)' if is_max else '((a) / (float)(KH * KW))'}\n"
            f"__device__ __forceinline__ float post(float v) {{ return {post}; }}\n")


_POOL_PARAMS = "const float* __restrict__ x, float* __restrict__ out, int planes, int H, int W, int OH, int OW"

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
    head = (("h = x.shape[-2]\n" if d == 2 else "h = 1\n") + "wd = x.shape[-1]\nplanes = x.numel() // (h * wd)\n"
            + (f"oh = (h + {2 * p} - {k}) // {s} + 1\n" if d == 2 else "oh = 1\n")
            + f"ow = (wd + {2 * p} - {k}) // {s} + 1\n"
            + f"out = x.new_empty((*x.shape[:-{d}], {'oh, ow' if d == 2 else 'ow'}))\n")
    args = "x, out, planes, h, wd, oh, ow"
    tw, th = (16, 16) if d == 2 else (256, 1)
    tiled = f"mod.pool(((ow + {tw - 1}) // {tw}, (oh + {th - 1}) // {th}, planes), ({tw}, {th}), {args})"
    variants = {
        "naive": (_POOL_NAIVE, f"mod.pool(((planes * oh * ow + 255) // 256,), (256,), {args})", ()),
        "coarsened": (_POOL_COARSE, f"mod.pool(((planes * oh * ((ow + 3) // 4) + 255) // 256,), (256,), {args})",
                      ("register_tiled",)),
        "smem_tiled": (_POOL_SMEM, tiled, ()),
    }
    if d == 2:  # a 1-D window has nothing to separate
        variants["separable"] = (_POOL_SEPARABLE, tiled, ("smem_tiled",))
    return [_impl(task_id, strategy, f"{v['kind']} pooling {d}-D", defs + cuda, head + launch + "\nreturn out", "x",
                  ("pooling", *tags))
            for strategy, (cuda, launch, tags) in variants.items()]


# ================================================================================================
# attention pieces over (batch, heads, seq, hdim) inputs: z = batch * heads independent problems

_WARP_ROWS_NORM = """
extern "C" __global__ void inv_norms(const float* __restrict__ x, float* __restrict__ inv, long long rows, int cols) {
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

_ROT_PARAMS = "const float* __restrict__ x, float* __restrict__ out, long long rows, int S, int D, float alpha"

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
    return [_impl(task_id, strategy, "rotary embedding", _ROTARY + cuda, head + _ROT_LAUNCH[strategy] + "\nreturn out",
                  "q", ("attention", "rotary"))
            for strategy, cuda in _ROT_KERNELS.items()]


def _scores_fin(v: dict[str, Any], masked: str) -> str:
    """fin of a scores matmul: scale (and the q/k inverse norms), causal positions set to `masked`."""
    norm = " * e0[(long long)z * m + i] * e1[(long long)z * n + j]" if v["piece"] == "qk_norm_scores" else ""
    mask = f"j > i ? {masked} : " if v["causal"] else ""
    return f"__device__ __forceinline__ float fin({_FIN_PARAMS}) {{ return {mask}acc{norm} * alpha; }}\n"


_ATT_HEAD = "s, d = q.shape[-2], q.shape[-1]\nz = q.numel() // (s * d)\nscale = {scale}\n"
_SCORES_ARGS = "q, k, {dst}, {e0}, {e1}, s, s, d, s * d, s * d, s * s, scale"


def _scores_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    norms = v["piece"] == "qk_norm_scores"
    pre = ("rq = q.new_empty(q.shape[:-1])\nrk = k.new_empty(k.shape[:-1])\n"
           "mod.inv_norms(((z * s * 32 + 255) // 256,), (256,), q, rq, z * s, d)\n"
           "mod.inv_norms(((z * s * 32 + 255) // 256,), (256,), k, rk, z * s, d)\n") if norms else ""
    cuda_pre = _REDUCERS + _WARP_ROWS_NORM if norms else ""
    head = _ATT_HEAD.format(scale=_scale_expr(v)) + "out = q.new_empty((*q.shape[:-1], s))\n" + pre
    args = _SCORES_ARGS.format(dst="out", e0="rq" if norms else "None", e1="rk" if norms else "None")
    out = []
    for strategy, (gen, tile) in _MM_WITH_TENSOR_CORES.items():
        cuda = cuda_pre + _scores_fin(v, "0.0f") + gen("scores", "nt", "fin")
        body = head + _mm_launch("scores", tile, "s", "s", "z", args) + "\nreturn out"
        out.append(_impl(task_id, strategy, f"attention {v['piece']}", cuda, body, "q, k", ("attention", "matmul")))
    return out


def _softmax_rows(strategy: str) -> str:
    return _group_fns(strategy) + _SOFTMAX_ROWS.replace("INDEX", _GROUP[strategy][0])


def _softmax_launch(strategy: str, rows: str, cols: str, dst: str) -> str:
    _, _, grid, block = _GROUP[strategy]
    return f"rows = {rows}\nmod.softmax_rows({grid}, {block}, {dst}, rows, {cols})\n"


def _probs_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    causal = f"#define CAUSAL {int(bool(v['causal']))}\n#define NEG_INF {NEG_INF}\n"
    head = _ATT_HEAD.format(scale=_scale_expr(v)) + "out = q.new_empty((*q.shape[:-1], s))\n"
    scores = _SCORES_ARGS.format(dst="out", e0="None", e1="None")
    out = []
    for strategy, mm, rows, tags in (("naive", "naive", "naive", ("unfused",)),
                                     ("unfused", "smem_tiled", "warp_shuffle", ("smem_tiled", "warp_shuffle"))):
        gen, tile = _MM_KERNELS[mm]
        cuda = causal + _scores_fin(v, "NEG_INF") + gen("scores", "nt", "fin") + _softmax_rows(rows)
        body = (head + _mm_launch("scores", tile, "s", "s", "z", scores) + "\n"
                + _softmax_launch(rows, "z * s", "s", "out") + "return out")
        out.append(_impl(task_id, strategy, "attention probs", cuda, body, "q, k", ("attention", *tags)))
    cuda = causal + _REDUCERS + _PROBS_FUSED
    body = (head + "mod.probs_fused(((s + 7) // 8, z), (256,), q, k, out, s, d, scale, "
            "smem_bytes=4 * (8 * d + 32 * (d + 1)))\nreturn out")
    out.append(_impl(task_id, "fused", "attention probs", cuda, body, "q, k",
                     ("attention", "warp_shuffle", "smem_tiled")))
    return out


def _attention_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    causal = f"#define CAUSAL {int(bool(v['causal']))}\n#define NEG_INF {NEG_INF}\n"
    head = _ATT_HEAD.format(scale=_scale_expr(v)) + "out = torch.empty_like(q)\n"
    scores = _SCORES_ARGS.format(dst="p", e0="None", e1="None")
    pv = "p, vv, out, None, None, s, d, s, s * s, s * d, s * d, 1.0"
    out = []
    for strategy, mm, rows, tags in (("naive", "naive", "naive", ("unfused",)),
                                     ("unfused", "smem_tiled", "warp_shuffle", ("smem_tiled", "warp_shuffle"))):
        gen, tile = _MM_KERNELS[mm]
        cuda = (causal + _scores_fin(v, "NEG_INF") + _raw_fin() + gen("scores", "nt", "fin") + gen("pv", "nn", "raw")
                + _softmax_rows(rows))
        body = (head + "p = q.new_empty((*q.shape[:-1], s))\n" + _mm_launch("scores", tile, "s", "s", "z", scores)
                + "\n" + _softmax_launch(rows, "z * s", "s", "p") + _mm_launch("pv", tile, "s", "d", "z", pv)
                + "\nreturn out")
        out.append(_impl(task_id, strategy, "attention", cuda, body, "q, k, vv", ("attention", *tags)))
    cuda = causal + _REDUCERS + _ATTN_FUSED
    body = (head + "if d > 128:\n    raise ValueError('attn_fused keeps 4 head dims per lane: head dim <= 128')\n"
            "mod.attn_fused(((s + 7) // 8, z), (256,), q, k, vv, out, s, d, scale, "
            "smem_bytes=4 * (8 * d + 64 * (d + 1)))\nreturn out")
    out.append(_impl(task_id, "fused", "attention", cuda, body, "q, k, vv",
                     ("attention", "warp_shuffle", "smem_tiled")))
    return out


def attention_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    piece = v["piece"]
    if piece == "rotary":
        return _rotary_impls(v, task_id)
    if piece in ("scores", "qk_norm_scores"):
        return _scores_impls(v, task_id)
    return _probs_impls(v, task_id) if piece == "probs" else _attention_impls(v, task_id)


# ================================================================================================
# scan_torch: inclusive scans along one dimension (forward or reversed); a line is `L` elements `inner`
# apart, lines = numel / L

_SCAN_OPS = {  # op -> (combine(a, b), identity)
    "cumsum": ("a + b", "0.0f"),
    "cumprod": ("a * b", "1.0f"),
    "cummax": ("fmaxf(a, b)", NEG_INF),
    "cummin": ("fminf(a, b)", POS_INF),
    # log(exp(a) + exp(b)) without overflow; the identity -inf must give the other operand back exactly
    "logcumsumexp": ("fmaxf(a, b) == NEG_INF ? NEG_INF : fmaxf(a, b) + log1pf(expf(fminf(a, b) - fmaxf(a, b)))",
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
        "warp_shuffle": (_SCAN_WARP, "mod.scan(((lines * 32 + 255) // 256,), (256,), x, out, lines, length, inner)",
                         ()),
        "block_tree": (_SCAN_BLOCK, "mod.scan((lines,), (256,), x, out, lines, length, inner)", ("warp_shuffle",)),
    }
    return [_impl(task_id, strategy, f"{v['op']} scan", defs + cuda, head + launch + "\nreturn out", "x",
                  ("scan", *tags))
            for strategy, (cuda, launch, tags) in variants.items()]


# ================================================================================================
# gather_scatter: out = post(op(...)) * scale; indices are int64

_ROW_GATHER_PARAMS = ("const float* __restrict__ t, const long long* __restrict__ idx, float* __restrict__ out, "
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

_ROW_GATHER_GRID = {"naive": "((r * d + 255) // 256,)", "grid_stride": "(max(1, min((r * 32 + 255) // 256, 4096)),)",
                    "vectorized": "(max(1, min((r * d // 4 + 255) // 256, 4096)),)"}

_ELEM_GATHER_PARAMS = ("const float* __restrict__ x, const long long* __restrict__ idx, float* __restrict__ out, "
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
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += gridDim.x * (long long)blockDim.x)
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
    return f"__device__ __forceinline__ float fin(float v) {{ return ({post}) * {_flit(v['scale'])}; }}\n"


def _row_gather_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    if v["op"] == "embedding":
        init, sig = "        self.table = nn.Embedding(vocab, dim)\n", "idx"
        head = "t = self.table.weight\nd = t.shape[1]\nr = idx.numel()\nout = t.new_empty((*idx.shape, d))\n"
    else:
        init, sig = "", "x, idx"
        head = "t = x\nd = t.shape[1]\nr = idx.numel()\nout = t.new_empty((r, d))\n"
    return [_impl(task_id, strategy, v["op"], _gather_fin(v) + cuda,
                  head + f"mod.gather_rows({_ROW_GATHER_GRID[strategy]}, (256,), t, idx, out, r, d)\nreturn out",
                  sig, ("gather",), init, ", vocab, dim")
            for strategy, cuda in _ROW_GATHER.items()]


def _elem_gather_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    head = "n = idx.numel()\nout = x.new_empty(idx.shape)\n"
    return [_impl(task_id, strategy, v["op"], _gather_fin(v) + cuda,
                  head + f"mod.gather_elems({_ELEM_GATHER_GRID[strategy]}, (256,), x, idx, out, n, x.shape[1], "
                  "idx.shape[1])\nreturn out", "x, idx", ("gather",), "", ", vocab, dim")
            for strategy, cuda in _ELEM_GATHER.items()]


def _scatter_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    init = "        self.vocab_out = vocab // 4 + 1\n"
    head = "s, d = x.shape[0], x.shape[1]\nvo = self.vocab_out\nout = x.new_zeros((vo, d))\n"
    fin = _gather_fin(v)
    grids = {"naive": "((s * d + 255) // 256,)", "grid_stride": "(max(1, min((s * 32 + 255) // 256, 4096)),)"}
    out = [_impl(task_id, strategy, v["op"], fin + cuda + _SCATTER_EPILOGUE,
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
    out.append(_impl(task_id, "two_pass", v["op"], fin + _SCATTER_SORTED, body, "x, idx",
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


# ================================================================================================
# loss: a = randn * 1.5, b = randn + 0.3, both (batch, dim); elementwise losses kept per element or
# reduced per row, softmax-based (kl_div, cross_entropy) and cosine losses need row statistics

_ELEMENT_LOSSES = ("mse", "l1", "smooth_l1", "huber", "bce_logits")


def _loss_fn(loss: str, p: float) -> str:
    """The elementwise loss of the task (same formulas as torch's kernels, p = beta / delta / logit scale)."""
    pf = _flit(p)
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
        "        float4 x = reinterpret_cast<const float4*>(a)[q], y = reinterpret_cast<const float4*>(b)[q];\n"
        "        reinterpret_cast<float4*>(out)[q] = make_float4(lossf(x.x, y.x), lossf(x.y, y.y),"
        " lossf(x.z, y.z), lossf(x.w, y.w));\n    }\n"
        "    long long i = nq * 4 + tid;\n    if (i < n) out[i] = lossf(a[i], b[i]);"),
        "(max(1, min((n // 4 + 255) // 256, 4096)),)"),
}


def _loss_elementwise(v: dict[str, Any], task_id: str) -> list[Implementation]:
    out = []
    for strategy, (code, grid) in _LOSS_EW.items():
        cuda = (_loss_fn(v["loss"], v["param"]) + "extern \"C\" __global__ void loss(const float* __restrict__ a, "
                f"const float* __restrict__ b, float* __restrict__ out, long long n) {{\n    {code}\n}}\n")
        body = f"out = torch.empty_like(a)\nn = a.numel()\nmod.loss({grid}, (256,), a, b, out, n)\nreturn out"
        out.append(_impl(task_id, strategy, f"{v['loss']} loss", cuda, body, "a, b", ("loss", "elementwise")))
    return out


def _row_loop(acc: str, expr: str) -> str:
    return f"    for (int c = lane; c < cols; c += W) {{ float x = ar[c], y = br[c]; {acc} {expr}; }}\n"


def _softmax_stats(p: float) -> str:
    """Row statistics of log_softmax(a * p) (`lsa`) and softmax(b) (`mb`, `lsb` = max, log of the sum)."""
    pf = _flit(p)
    return ("    float ma = NEG_INF, mb = NEG_INF;\n" + _row_loop("ma = fmaxf(ma,", f"x * {pf}); mb = fmaxf(mb, y)")
            + "    ma = g_max(ma);\n    mb = g_max(mb);\n    float sa = 0.0f, sb = 0.0f;\n"
            + _row_loop("sa +=", f"expf(x * {pf} - ma); sb += expf(y - mb)")
            + "    sa = g_sum(sa);\n    sb = g_sum(sb);\n    float lsa = ma + logf(sa), lsb = logf(sb);\n")


def _kl_term(p: float) -> str:
    """target * (log target - log_softmax(a p)), target = softmax(b), from the row statistics."""
    return f"expf(y - mb - lsb) * ((y - mb - lsb) - (x * {_flit(p)} - lsa))"


def _loss_row_body(v: dict[str, Any]) -> str:
    """Statements of one row (`row`, `lane`, `W`, pointers `ar`, `br`, `outr`) with group reductions g_*."""
    loss, red, p = v["loss"], v["reduce"], v["param"]
    mean = " / cols" if red == "row_mean" else ""
    if loss in _ELEMENT_LOSSES:
        return ("    float s = 0.0f;\n" + _row_loop("s +=", "lossf(x, y)")
                + f"    s = g_sum(s);\n    if (lane == 0) out[row] = s{mean};\n")
    if loss == "cosine":  # 1 - cos(a p, b); norms clamped at eps = 1e-8 as torch does
        pf = _flit(p)
        return ("    float dot = 0.0f, na = 0.0f, nb = 0.0f;\n"
                + _row_loop("dot +=", f"x * {pf} * y; na += x * {pf} * x * {pf}; nb += y * y")
                + "    dot = g_sum(dot);\n    na = g_sum(na);\n    nb = g_sum(nb);\n"
                "    if (lane == 0) out[row] = 1.0f - dot / (fmaxf(sqrtf(na), 1e-8f) * fmaxf(sqrtf(nb), 1e-8f));\n")
    stats = _softmax_stats(p)
    if loss == "cross_entropy":  # -sum softmax(b) * log_softmax(a p)
        return (stats + "    float s = 0.0f;\n" + _row_loop("s +=", f"expf(y - mb - lsb) * (x * {_flit(p)} - lsa)")
                + "    s = g_sum(s);\n    if (lane == 0) out[row] = -s;\n")
    if red == "none":  # kl_div per element
        return (stats + "    for (int c = lane; c < cols; c += W) "
                f"{{ float x = ar[c], y = br[c]; outr[c] = {_kl_term(p)}; }}\n")
    return (stats + "    float s = 0.0f;\n" + _row_loop("s +=", _kl_term(p))
            + f"    s = g_sum(s);\n    if (lane == 0) out[row] = s{mean};\n")


def _loss_row_kernel(v: dict[str, Any], strategy: str) -> str:
    fn = _loss_fn(v["loss"], v["param"]) if v["loss"] in _ELEMENT_LOSSES else ""
    return (f"#define NEG_INF {NEG_INF}\n{fn}{_group_fns(strategy)}\n"
            "extern \"C\" __global__ void loss(const float* __restrict__ a, const float* __restrict__ b, "
            f"float* __restrict__ out, int rows, int cols) {{\n    {_GROUP[strategy][0]}\n"
            "    const float* ar = a + (long long)row * cols;\n    const float* br = b + (long long)row * cols;\n"
            "    float* outr = out + (long long)row * cols;\n    (void)outr;\n"
            f"{_loss_row_body(v)}}}\n")


def _per_row_output(v: dict[str, Any]) -> bool:
    return v["loss"] in ("cross_entropy", "cosine") or v["reduce"] != "none"


def _loss_rows(v: dict[str, Any], task_id: str) -> list[Implementation]:
    alloc = "a.new_empty(a.shape[:-1])" if _per_row_output(v) else "torch.empty_like(a)"
    out = []
    for strategy in ROW_STRATEGIES:
        _, _, grid, block = _GROUP[strategy]
        body = (f"cols = a.shape[-1]\nrows = a.numel() // cols\nout = {alloc}\n"
                f"mod.loss({grid}, {block}, a, b, out, rows, cols)\nreturn out")
        out.append(_impl(task_id, strategy, f"{v['loss']} loss", _loss_row_kernel(v, strategy), body, "a, b",
                         ("loss", "row_wise")))
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
extern "C" __global__ void row_sums(const float* __restrict__ part, float* __restrict__ out, int rows, int chunks,
                                    float inv) {
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
    fn = _loss_fn(v["loss"], v["param"]) + _REDUCERS + _BLOCK
    inv = "1.0 / cols" if v["reduce"] == "row_mean" else "1.0"
    head = "cols = a.shape[-1]\nrows = a.numel() // cols\nchunks = (cols + 1023) // 1024\n"
    atomic = _CHUNK_SUM.replace("STORE", "atomicAdd(&dst[row], s * inv)")
    two = _CHUNK_SUM.replace("STORE", "dst[row * gridDim.y + blockIdx.y] = s") + _PARTIALS_SUM
    return [
        _impl(task_id, "atomic", f"{v['loss']} loss", fn + atomic,
              head + f"out = a.new_zeros(a.shape[:-1])\nmod.chunk_sums((rows, chunks), (256,), a, b, out, rows, cols, "
              f"{inv})\nreturn out", "a, b", ("loss", "block_tree")),
        _impl(task_id, "two_pass", f"{v['loss']} loss", fn + two,
              head + "part = a.new_empty((rows, chunks))\nout = a.new_empty(a.shape[:-1])\n"
              "mod.chunk_sums((rows, chunks), (256,), a, b, part, rows, cols, 1.0)\n"
              f"mod.row_sums(((rows * 32 + 255) // 256,), (256,), part, out, rows, chunks, {inv})\nreturn out",
              "a, b", ("loss", "block_tree", "warp_shuffle")),
    ]


_KL_STATS_THEN_ELEMENTS = """
extern "C" __global__ void kl_elements(const float* __restrict__ a, const float* __restrict__ b,
                                       const float* __restrict__ st, float* __restrict__ out, long long n, int cols) {
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
    cuda = (f"#define NEG_INF {NEG_INF}\n{_group_fns('warp_shuffle')}\n"
            "extern \"C\" __global__ void kl_stats(const float* __restrict__ a, const float* __restrict__ b, "
            f"float* __restrict__ st, int rows, int cols) {{\n    {_GROUP['warp_shuffle'][0]}\n"
            "    const float* ar = a + (long long)row * cols;\n    const float* br = b + (long long)row * cols;\n"
            f"{stats}}}\n" + _KL_STATS_THEN_ELEMENTS.replace("TERM", _kl_term(v["param"])))
    body = ("cols = a.shape[-1]\nrows = a.numel() // cols\nn = a.numel()\nst = a.new_empty((rows, 3))\n"
            "out = torch.empty_like(a)\nmod.kl_stats(((rows * 32 + 255) // 256,), (256,), a, b, st, rows, cols)\n"
            "mod.kl_elements(((n + 255) // 256,), (256,), a, b, st, out, n, cols)\nreturn out")
    return _impl(task_id, "unfused", "kl_div loss", cuda, body, "a, b", ("loss", "warp_shuffle"))


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


# ================================================================================================
# registration

MORE_IMPLS: dict[str, Impls] = {
    "matmul_epilogue": matmul_impls,
    "conv_activation": conv_impls,
    "pooling": pool_impls,
    "attention": attention_impls,
    "scan_torch": scan_impls,
    "gather_scatter": gather_impls,
    "loss": loss_impls,
}


def with_more_impls(families: tuple[Family, ...]) -> tuple[Family, ...]:
    """`families` with this module's implementations attached to the families it covers (by name)."""
    return tuple(dataclasses.replace(f, implementations=MORE_IMPLS[f.name]) if f.name in MORE_IMPLS else f
                 for f in families)
