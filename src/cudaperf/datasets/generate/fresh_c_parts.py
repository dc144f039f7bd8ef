"""CUDA (and shared C) text of the fresh C→CUDA families (fresh_c_families.py): order-preserving stream
compaction kernels, polynomial evaluation chains, and the dynamically scheduled escape-time kernel.

Compaction (`CompactSpec`): keep the elements of `src` that pass a predicate, in index order, writing
their values and/or indices, the count, and a cleared tail (values 0, indices -1) up to n. Strategies:
  * serial_thread: the serial loop run by one thread (the naive port of a loop with a carried counter);
  * block_tree: one element per thread, 256-element tiles; per-tile counts by a shared-memory tree, one
    block scans the counts, a Hillis-Steele shared-memory scan ranks the elements of each tile;
  * warp_shuffle: 2048-element tiles (8 rows of 256); warp ballots and popcounts rank the elements, one
    warp scans the 64 warp counts of a tile; per-tile counts, a one-block scan of them, the scatter;
  * two_pass: the tiles of warp_shuffle, but no scan kernel: each block of the scatter sums the counts of
    the tiles before it (and of all of them, for the tail) itself;
  * atomic: one pass; tiles take a ticket from a global atomic counter (so that every tile a tile waits
    for is already running) and find their offset by a decoupled look-back over the tiles' published
    (flag, count) words.
Polynomial evaluation (`poly_chain`): Horner (monomial basis), Clenshaw (Chebyshev basis) or a rational
p(x) / (1 + q(x)^2), written for any number of independent elements evaluated in one interleaved loop
(instruction-level parallelism), so the serial C and every CUDA strategy share the same arithmetic.

Not covered: the families' variants, serial references of escape time and polynomials, configurations and
tolerances (fresh_c_families.py); running anything.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from cudaperf.datasets.generate.c_family_parts import arr, scalar
from cudaperf.datasets.generate.loop_nest import (
    GRID_STRIDE_BLOCKS,
    SM_COUNT_H200,
    LoopNest,
    args,
    cuda_prelude,
    decls,
)
from cudaperf.tasks.ctask import CParam

NT = 256  # threads per block of the tiled compaction kernels
ITEMS = 8  # rows of NT elements per tile: NT * ITEMS = 2048 elements
NW = NT // 32
assert NW * ITEMS == 64, "tile_ranks scans the warp counts of a tile with one warp, two per lane"
COMPACT_ENTRY = "compact"


@dataclass(frozen=True)
class CompactSpec:
    """One compaction task: element type, predicate (a C expression over `x`), and what is written."""

    dtype: str
    keep: str
    output: str  # values | indices | pairs

    @property
    def values(self) -> bool:
        return self.output in ("values", "pairs")

    @property
    def indices(self) -> bool:
        return self.output in ("indices", "pairs")

    def params(self) -> tuple[CParam, ...]:
        outs = ([arr("dst", self.dtype, "out", "n")] if self.values else []) + (
            [arr("idx", "int", "out", "n")] if self.indices else [])
        return (arr("src", self.dtype, "in", "n"), *outs, arr("count", "int", "out", "1"), scalar("n"))

    def helper(self) -> str:
        return f"HD int keep({self.dtype} x) {{ return {self.keep}; }}"

    def out_decls(self) -> str:
        return ", ".join(p.c_decl() for p in self.params()[1:-2])

    def out_args(self) -> str:
        return ", ".join(p.name for p in self.params()[1:-2])

    def put(self, pos: str, i: str, val: str) -> str:
        return " ".join(([f"dst[{pos}] = {val};"] if self.values else []) +
                        ([f"idx[{pos}] = {i};"] if self.indices else []))

    def clear(self, pos: str) -> str:
        return " ".join(([f"dst[{pos}] = 0;"] if self.values else []) +
                        ([f"idx[{pos}] = -1;"] if self.indices else []))


def compact_serial_body(spec: CompactSpec) -> str:
    """The serial loop (C and CUDA alike): a running count, then the tail cleared."""
    return (f"    int k = 0;\n    for (int i = 0; i < n; ++i) {{\n"
            f"        if (keep(src[i])) {{ {spec.put('k', 'i', 'src[i]')} ++k; }}\n    }}\n"
            f"    count[0] = k;\n    for (int i = k; i < n; ++i) {{ {spec.clear('i')} }}\n")


def compact_serial_c(spec: CompactSpec) -> str:
    return (f"#include <math.h>\n#define HD static inline\n{spec.helper()}\n\n"
            f"void {COMPACT_ENTRY}({decls(spec.params())}) {{\n{compact_serial_body(spec)}}}\n")


def _launch(lines: str) -> str:
    return "import torch\n\n" + textwrap.dedent(lines).strip()


def compact_strategies(spec: CompactSpec) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """strategy -> (CUDA source, launch code, tags)."""
    return {
        "serial_thread": _compact_serial(spec),
        "block_tree": _compact_block_tree(spec),
        "warp_shuffle": _compact_scan_tiles(spec),
        "two_pass": _compact_two_pass(spec),
        "atomic": _compact_one_pass(spec),
    }


def _compact_serial(spec: CompactSpec) -> tuple[str, str, tuple[str, ...]]:
    src = (cuda_prelude(spec.helper()) + '\nextern "C" __global__ void '
           f"compact_serial({decls(spec.params())}) {{\n{compact_serial_body(spec)}}}\n")
    return src, f"mod.compact_serial((1,), (1,), {args(spec.params())})", ("serial",)


_SCAN_COUNTS = """
// One block of 1024 threads: exclusive scan of the per-tile counts (each thread a contiguous run),
// and the total into count[0].
extern "C" __global__ void scan_counts(const int* counts, int* offs, int* count, int nb) {
    __shared__ int part[1024];
    int per = (nb + 1023) / 1024, lo = threadIdx.x * per, hi = min(lo + per, nb);
    int s = 0;
    for (int j = lo; j < hi; ++j) s += counts[j];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int d = 1; d < 1024; d *= 2) {
        int y = threadIdx.x >= d ? part[threadIdx.x - d] : 0;
        __syncthreads();
        part[threadIdx.x] += y;
        __syncthreads();
    }
    int run = part[threadIdx.x] - s;
    for (int j = lo; j < hi; ++j) { offs[j] = run; run += counts[j]; }
    if (threadIdx.x == 1023) count[0] = part[1023];
}
"""


def _compact_block_tree(spec: CompactSpec) -> tuple[str, str, tuple[str, ...]]:
    t = spec.dtype
    src = cuda_prelude(spec.helper()) + f"""
extern "C" __global__ void count_tree(const {t}* src, int* counts, int n) {{
    __shared__ int s[256];
    int i = blockIdx.x * 256 + threadIdx.x;
    s[threadIdx.x] = i < n && keep(src[i]);
    __syncthreads();
    for (int h = 128; h > 0; h /= 2) {{
        if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }}
    if (threadIdx.x == 0) counts[blockIdx.x] = s[0];
}}
{_SCAN_COUNTS}
extern "C" __global__ void scatter_tree(const {t}* src, {spec.out_decls()}, const int* offs, const int* count,
                                        int n) {{
    __shared__ int s[256];
    int i = blockIdx.x * 256 + threadIdx.x;
    {t} x = i < n ? src[i] : ({t})0;
    int f = i < n && keep(x);
    s[threadIdx.x] = f;
    __syncthreads();
    for (int d = 1; d < 256; d *= 2) {{
        int y = threadIdx.x >= d ? s[threadIdx.x - d] : 0;
        __syncthreads();
        s[threadIdx.x] += y;
        __syncthreads();
    }}
    if (f) {{ int pos = offs[blockIdx.x] + s[threadIdx.x] - 1; {spec.put('pos', 'i', 'x')} }}
    if (i < n && i >= count[0]) {{ {spec.clear('i')} }}
}}
"""
    launch = _launch(f"""
        nb = (n + 255) // 256
        counts = torch.empty(nb, dtype=torch.int32, device=src.device)
        offs = torch.empty(nb, dtype=torch.int32, device=src.device)
        mod.count_tree((nb,), (256,), src, counts, n)
        mod.scan_counts((1,), (1024,), counts, offs, count, nb)
        mod.scatter_tree((nb,), (256,), src, {spec.out_args()}, offs, count, n)""")
    return src, launch, ("scan", "smem")


def _tile_device(spec: CompactSpec) -> str:
    """Device functions shared by the 2048-element tile strategies (warp_shuffle, two_pass, atomic)."""
    t = spec.dtype
    return cuda_prelude(spec.helper()) + f"""
#define NT {NT}
#define NW {NW}
#define ITEMS {ITEMS}
#define TILE (NT * ITEMS)

// Element base + j * NT + threadIdx.x is row j of the tile. Each warp's ballot of a row ranks the kept
// elements inside the warp; warp 0 scans the ITEMS * NW warp counts (row-major: row, then warp, which is
// index order) into exclusive offsets woff[], two per lane. Returns the tile's kept count.
__device__ __forceinline__ int tile_ranks(const {t}* src, int n, int base, {t}* vals, unsigned* masks,
                                          int* woff) {{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {{
        int i = base + j * NT + threadIdx.x;
        vals[j] = i < n ? src[i] : ({t})0;
        masks[j] = __ballot_sync(0xffffffffu, i < n && keep(vals[j]));
        if (lane == 0) woff[j * NW + warp] = __popc(masks[j]);
    }}
    __syncthreads();
    if (warp == 0) {{
        int a = woff[2 * lane], b = woff[2 * lane + 1], s = a + b;
        for (int d = 1; d < 32; d *= 2) {{
            int y = __shfl_up_sync(0xffffffffu, s, d);
            if (lane >= d) s += y;
        }}
        woff[2 * lane] = s - a - b;
        woff[2 * lane + 1] = s - b;
        if (lane == 31) woff[ITEMS * NW] = s;
    }}
    __syncthreads();
    return woff[ITEMS * NW];
}}

// Kept elements to off + their rank; positions at or past `total` that this thread owns are cleared.
__device__ __forceinline__ void tile_scatter({spec.out_decls()}, int n, int base, int off, int total,
                                             const {t}* vals, const unsigned* masks, const int* woff) {{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned below = (1u << lane) - 1u;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {{
        int i = base + j * NT + threadIdx.x;
        if ((masks[j] >> lane) & 1u) {{
            int pos = off + woff[j * NW + warp] + __popc(masks[j] & below);
            {spec.put('pos', 'i', 'vals[j]')}
        }}
        if (i < n && i >= total) {{ {spec.clear('i')} }}
    }}
}}

extern "C" __global__ void count_tiles(const {t}* src, int* counts, int n) {{
    __shared__ int wsum[NW];
    int lane = threadIdx.x & 31, base = blockIdx.x * TILE, c = 0;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {{
        int i = base + j * NT + threadIdx.x;
        c += __popc(__ballot_sync(0xffffffffu, i < n && keep(src[i])));
    }}
    if (lane == 0) wsum[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x == 0) {{
        int s = 0;
        for (int w = 0; w < NW; ++w) s += wsum[w];
        counts[blockIdx.x] = s;
    }}
}}
"""


def _compact_scan_tiles(spec: CompactSpec) -> tuple[str, str, tuple[str, ...]]:
    t = spec.dtype
    src = _tile_device(spec) + _SCAN_COUNTS + f"""
extern "C" __global__ void scatter_tiles(const {t}* src, {spec.out_decls()}, const int* offs,
                                         const int* count, int n) {{
    __shared__ int woff[ITEMS * NW + 1];
    {t} vals[ITEMS];
    unsigned masks[ITEMS];
    int base = blockIdx.x * TILE;
    tile_ranks(src, n, base, vals, masks, woff);
    tile_scatter({spec.out_args()}, n, base, offs[blockIdx.x], count[0], vals, masks, woff);
}}
"""
    launch = _launch(f"""
        nb = (n + {NT * ITEMS - 1}) // {NT * ITEMS}
        counts = torch.empty(nb, dtype=torch.int32, device=src.device)
        offs = torch.empty(nb, dtype=torch.int32, device=src.device)
        mod.count_tiles((nb,), ({NT},), src, counts, n)
        mod.scan_counts((1,), (1024,), counts, offs, count, nb)
        mod.scatter_tiles((nb,), ({NT},), src, {spec.out_args()}, offs, count, n)""")
    return src, launch, ("scan", "ballot", "coarsened")


def _compact_two_pass(spec: CompactSpec) -> tuple[str, str, tuple[str, ...]]:
    t = spec.dtype
    src = _tile_device(spec) + f"""
// Each block sums the counts of the tiles before it (its offset) and of all tiles (the total) itself.
extern "C" __global__ void scatter_summed(const {t}* src, {spec.out_decls()}, const int* counts,
                                          int* count, int n, int nb) {{
    __shared__ int woff[ITEMS * NW + 1];
    __shared__ int red[2][NW];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int before = 0, all = 0;
    for (int j = threadIdx.x; j < nb; j += NT) {{
        int c = counts[j];
        all += c;
        if (j < (int)blockIdx.x) before += c;
    }}
    for (int d = 16; d > 0; d /= 2) {{
        before += __shfl_down_sync(0xffffffffu, before, d);
        all += __shfl_down_sync(0xffffffffu, all, d);
    }}
    if (lane == 0) {{ red[0][warp] = before; red[1][warp] = all; }}
    __syncthreads();
    int off = 0, total = 0;
    for (int w = 0; w < NW; ++w) {{ off += red[0][w]; total += red[1][w]; }}
    if (blockIdx.x == 0 && threadIdx.x == 0) count[0] = total;
    {t} vals[ITEMS];
    unsigned masks[ITEMS];
    int base = blockIdx.x * TILE;
    tile_ranks(src, n, base, vals, masks, woff);
    tile_scatter({spec.out_args()}, n, base, off, total, vals, masks, woff);
}}
"""
    launch = _launch(f"""
        nb = (n + {NT * ITEMS - 1}) // {NT * ITEMS}
        counts = torch.empty(nb, dtype=torch.int32, device=src.device)
        mod.count_tiles((nb,), ({NT},), src, counts, n)
        mod.scatter_summed((nb,), ({NT},), src, {spec.out_args()}, counts, count, n, nb)""")
    return src, launch, ("ballot", "coarsened")


def _compact_one_pass(spec: CompactSpec) -> tuple[str, str, tuple[str, ...]]:
    t = spec.dtype
    src = _tile_device(spec) + f"""
#define FLAG_AGGREGATE 1ull
#define FLAG_PREFIX 2ull

extern "C" __global__ void init_status(unsigned long long* status, int* ticket, int ntiles) {{
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < ntiles; j += gridDim.x * blockDim.x)
        status[j] = 0;
    if (blockIdx.x == 0 && threadIdx.x == 0) ticket[0] = 0;
}}

// A tile publishes (flag << 32 | count) in one 64-bit word: FLAG_AGGREGATE with its own count as soon as it
// knows it, FLAG_PREFIX with the inclusive prefix once its offset is known. Thread 0 walks back over the
// predecessors, adding aggregates, until it meets a prefix; tiles are numbered by a ticket taken when the
// block starts, so every predecessor is running or done and the spin ends.
extern "C" __global__ void compact_one_pass(const {t}* src, {spec.out_decls()}, int* count, int n,
                                            unsigned long long* status, int* ticket) {{
    __shared__ int woff[ITEMS * NW + 1];
    __shared__ int tile_s, off_s;
    if (threadIdx.x == 0) tile_s = atomicAdd(ticket, 1);
    __syncthreads();
    int tile = tile_s, base = tile * TILE;
    {t} vals[ITEMS];
    unsigned masks[ITEMS];
    int agg = tile_ranks(src, n, base, vals, masks, woff);
    if (threadIdx.x == 0) {{
        int excl = 0;
        if (tile > 0) {{
            atomicExch(&status[tile], (FLAG_AGGREGATE << 32) | (unsigned)agg);
            for (int p = tile - 1; ; ) {{
                unsigned long long s = *(volatile unsigned long long*)&status[p];
                unsigned long long flag = s >> 32;
                if (flag == 0) continue;
                excl += (int)(unsigned)(s & 0xffffffffull);
                if (flag == FLAG_PREFIX) break;
                --p;
            }}
        }}
        atomicExch(&status[tile], (FLAG_PREFIX << 32) | (unsigned)(excl + agg));
        if (tile == (int)gridDim.x - 1) count[0] = excl + agg;
        off_s = excl;
    }}
    __syncthreads();
    tile_scatter({spec.out_args()}, n, base, off_s, n, vals, masks, woff);
}}

extern "C" __global__ void fill_tail({spec.out_decls()}, const int* count, int n) {{
    for (int i = count[0] + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {{
        {spec.clear('i')}
    }}
}}
"""
    launch = _launch(f"""
        nb = (n + {NT * ITEMS - 1}) // {NT * ITEMS}
        status = torch.empty(nb, dtype=torch.int64, device=src.device)
        ticket = torch.empty(1, dtype=torch.int32, device=src.device)
        mod.init_status((max(1, min((nb + 255) // 256, 64)),), (256,), status, ticket, nb)
        mod.compact_one_pass((nb,), ({NT},), src, {spec.out_args()}, count, n, status, ticket)
        mod.fill_tail((max(1, min((n + 255) // 256, {GRID_STRIDE_BLOCKS})),), (256,), {spec.out_args()},
                      count, n)""")
    return src, launch, ("single_pass", "decoupled_lookback", "ballot", "coarsened")


# ------------------------------------------------------------------------------------------------
# polynomial evaluation chains


def poly_coefficients(kind: str, degree: int) -> int:
    """How many coefficients a task of this kind and degree reads (the rational kind: p's, then q's)."""
    return 2 * (degree + 1) if kind == "rational" else degree + 1


def poly_chain(kind: str, t: str, xs: list[str], ys: list[str], c: str) -> str:
    """C statements evaluating the polynomial at each x of `xs` into the matching y of `ys`, all
    elements in one loop over the coefficients `c[k]` (DEG is the degree, a macro)."""
    idx = range(len(xs))
    if kind == "clenshaw":  # b_k = 2 x b_{k+1} - b_{k+2} + c_k;  f = x b_1 - b_2 + c_0
        init = "\n".join(f"{t} b1_{j} = 0, b2_{j} = 0;" for j in idx)
        step = "\n".join(f"    {{ {t} b0 = 2 * {x} * b1_{j} - b2_{j} + ck; b2_{j} = b1_{j}; b1_{j} = b0; }}"
                         for j, x in enumerate(xs))
        done = "\n".join(f"{y} = {x} * b1_{j} - b2_{j} + {c}[0];" for j, (x, y) in enumerate(zip(xs, ys)))
        return f"{init}\nfor (int k = DEG; k >= 1; --k) {{\n    {t} ck = {c}[k];\n{step}\n}}\n{done}"
    rational = kind == "rational"  # a second chain q over the coefficients after p's
    init = "\n".join(f"{t} p{j} = {c}[DEG];" + (f" {t} q{j} = {c}[2 * DEG + 1];" if rational else "")
                     for j in idx)
    load = f"    {t} ck = {c}[k];" + (f" {t} dk = {c}[DEG + 1 + k];" if rational else "")
    step = "\n".join(f"    p{j} = p{j} * {x} + ck;" + (f" q{j} = q{j} * {x} + dk;" if rational else "")
                     for j, x in enumerate(xs))
    done = "\n".join(f"{y} = p{j} / (1 + q{j} * q{j});" if rational else f"{y} = p{j};"
                     for j, y in enumerate(ys))
    return f"{init}\nfor (int k = DEG - 1; k >= 0; --k) {{\n{load}\n{step}\n}}\n{done}"


def _stage_coefficients(t: str, ncoef: int) -> str:
    return (f"    __shared__ {t} sc[{ncoef}];\n"
            f"    for (int k = threadIdx.x; k < {ncoef}; k += blockDim.x) sc[k] = coef[k];\n"
            "    __syncthreads();\n")


def _indent(code: str, level: int) -> str:
    return textwrap.indent(code, "    " * level)


def poly_smem(nest: LoopNest, kind: str, t: str, ncoef: int) -> tuple[str, str]:
    """One element per thread, the coefficients staged in shared memory by each block."""
    src = cuda_prelude(nest.helpers) + f"""
extern "C" __global__ void poly_smem({decls(nest.params)}) {{
{_stage_coefficients(t, ncoef)}    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    {t} v = x[i];
{_indent(poly_chain(kind, t, ["v"], ["y[i]"], "sc"), 1)}
}}
"""
    return src, f"mod.poly_smem(((n + 255) // 256,), (256,), {args(nest.params)})"


def poly_register_tiled(nest: LoopNest, kind: str, t: str, ncoef: int, per: int = 4) -> tuple[str, str]:
    """`per` elements per thread (a blockDim apart, so loads stay coalesced) evaluated in one interleaved
    loop: each shared-memory coefficient read serves `per` independent dependency chains."""
    xs, ys = [f"v{j}" for j in range(per)], [f"r{j}" for j in range(per)]
    loads = "\n".join(f"    {t} v{j} = i0 + {j * 256} < n ? x[i0 + {j * 256}] : 0;" for j in range(per))
    stores = "\n".join(f"    if (i0 + {j * 256} < n) y[i0 + {j * 256}] = r{j};" for j in range(per))
    src = cuda_prelude(nest.helpers) + f"""
extern "C" __global__ void poly_ilp({decls(nest.params)}) {{
{_stage_coefficients(t, ncoef)}    int i0 = blockIdx.x * {256 * per} + threadIdx.x;
{loads}
    {t} {", ".join(ys)};
{_indent(poly_chain(kind, t, xs, ys, "sc"), 1)}
{stores}
}}
"""
    return src, f"mod.poly_ilp(((n + {256 * per - 1}) // {256 * per},), (256,), {args(nest.params)})"


def poly_vectorized(nest: LoopNest, kind: str, t: str, ncoef: int) -> tuple[str, str]:
    """float4 / double2 loads and stores, their components evaluated as interleaved chains, a scalar tail;
    coefficients in shared memory."""
    vec, w = ("float4", 4) if t == "float" else ("double2", 2)
    comps = ["x", "y", "z", "w"][:w]
    xs, ys = [f"v.{c}" for c in comps], [f"r.{c}" for c in comps]
    src = cuda_prelude(nest.helpers) + f"""
extern "C" __global__ void poly_vec({decls(nest.params)}) {{
{_stage_coefficients(t, ncoef)}    int nq = n / {w};
    int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q < nq) {{
        {vec} v = reinterpret_cast<const {vec}*>(x)[q];
        {vec} r;
{_indent(poly_chain(kind, t, xs, ys, "sc"), 2)}
        reinterpret_cast<{vec}*>(y)[q] = r;
    }}
    int i = nq * {w} + q;
    if (i < n) {{
        {t} u = x[i];
{_indent(poly_chain(kind, t, ["u"], ["y[i]"], "sc"), 2)}
    }}
}}
"""
    return src, f"mod.poly_vec((max(1, (n // {w} + 255) // 256),), (256,), {args(nest.params)})"


# ------------------------------------------------------------------------------------------------
# escape time: dynamic scheduling


def escape_dynamic(nest: LoopNest, tile_w: int = 8, tile_h: int = 4,
                   blocks: int = SM_COUNT_H200 * 4) -> tuple[str, str]:
    """Persistent blocks; each warp takes the next tile_w x tile_h pixel tile from a global atomic counter
    until none is left, so warps that drew cheap tiles take more of them. Half the H200's resident warps:
    even the smallest large image (512 x 512, 8192 tiles) gives each warp about two tiles to balance."""
    assert tile_w * tile_h == 32, "one pixel per lane"
    (y, ny), (x, nx) = nest.dims
    body = _indent(textwrap.dedent(nest.body).strip(), 3)
    src = cuda_prelude(nest.helpers) + f"""
extern "C" __global__ void zero_counter(int* counter) {{ counter[0] = 0; }}

extern "C" __global__ void escape_dynamic({decls(nest.params)}, int* counter) {{
    int lane = threadIdx.x & 31;
    int tiles_x = ({nx} + {tile_w - 1}) / {tile_w}, tiles = tiles_x * (({ny} + {tile_h - 1}) / {tile_h});
    for (;;) {{
        int t = 0;
        if (lane == 0) t = atomicAdd(counter, 1);
        t = __shfl_sync(0xffffffffu, t, 0);
        if (t >= tiles) break;
        int {x} = (t % tiles_x) * {tile_w} + lane % {tile_w};
        int {y} = (t / tiles_x) * {tile_h} + lane / {tile_w};
        if ({x} < {nx} && {y} < {ny}) {{
{body}
        }}
    }}
}}
"""
    out = next(p for p in nest.params if p.kind.value == "out")
    launch = _launch(f"""
        counter = torch.empty(1, dtype=torch.int32, device={out.name}.device)
        mod.zero_counter((1,), (1,), counter)
        mod.escape_dynamic(({blocks},), (256,), {args(nest.params)}, counter)""")
    return src, launch
