"""C→CUDA families whose serial loops carry a dependency: row and full reductions, row scans,
histograms and segmented sorts (sorting networks).

The naive port of each is the serial loop run by one thread per independent unit (a row, a segment;
one thread for a full reduction); the other strategies are written as templates: warp-shuffle and
shared-memory tree reductions, two-pass and atomic reductions, warp and block scans, privatised
shared-memory histograms, bitonic and odd-even transposition sorting networks in shared memory.

Not covered: perfectly parallel loop nests (c_parallel_families.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from cudaperf.datasets.generate.c_family_parts import (
    FLOATS,
    arr,
    configs,
    fs,
    lit,
    nest_family,
    nest_task,
    scalar,
    tolerance,
)
from cudaperf.datasets.generate.loop_nest import LoopNest, args, decls, solution_module
from cudaperf.datasets.records import Family, Implementation
from cudaperf.tasks.ctask import ArrayGen, CTask
from cudaperf.types import TaskKind, Tolerance

# op -> (pre-transform of v, combine(acc, v), post-transform of acc); idempotent ops pad with the first value
_RED = {
    "sum": ("{v}", "{a} + {b}", "{a}"), "max": ("{v}", "fmax{f}({a}, {b})", "{a}"),
    "min": ("{v}", "fmin{f}({a}, {b})", "{a}"), "sumsq": ("{v} * {v}", "{a} + {b}", "{a}"),
    "l1": ("fabs{f}({v})", "{a} + {b}", "{a}"), "l2": ("{v} * {v}", "{a} + {b}", "sqrt{f}({a})"),
    "maxabs": ("fabs{f}({v})", "fmax{f}({a}, {b})", "{a}"), "mean": ("{v}", "{a} + {b}", "{a} / cols"),
    "sumexp": ("exp{f}({v})", "{a} + {b}", "log{f}({a})"), "sumtanh": ("tanh{f}({v})", "{a} + {b}", "{a}"),
}
_IDEMPOTENT = ("max", "min", "maxabs")


def _red_ops(op: str, dtype: str, count: str) -> tuple[str, str, str]:
    pre, comb, post = _RED[op]
    return pre.replace("{f}", fs(dtype)), comb.replace("{f}", fs(dtype)), post.replace(
        "{f}", fs(dtype)).replace("cols", count)


def _reduce_rows_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"op": op, "dtype": t, "scale": s} for op in _RED for t in FLOATS for s in (1.0, 0.5, 2.0, -1.0)]


def _reduce_rows_nest(v: dict[str, Any]) -> LoopNest:
    t = v["dtype"]
    pre, comb, post = _red_ops(v["op"], t, "cols")
    first = pre.format(v="src[r * cols]")
    body = (f"{t} acc = {first if v['op'] in _IDEMPOTENT else lit(0, t)};\n"
            f"for (int c = 0; c < cols; ++c) {{ {t} v = {pre.format(v='src[r * cols + c]')}; "
            f"acc = {comb.format(a='acc', b='v')}; }}\n"
            f"dst[r] = {lit(v['scale'], t)} * ({post.format(a='acc')});")
    return LoopNest("reduce_rows", (arr("src", t, "in", "rows*cols"), arr("dst", t, "out", "rows"),
                                    scalar("rows"), scalar("cols")), (("r", "rows"),), body)


def _reduce_rows_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    return nest_task(nest, "reduce_rows", {"src": ArrayGen("normal", 0.0, 1.0)},
                     configs({"rows": 8, "cols": 100}, {"rows": 8192, "cols": 4096},
                             {"rows": 1001, "cols": 3001}),
                     tolerance(v["dtype"], 10.0), f"Row-wise {v['op']} reduction.", ("reduction",))


def _row_reduce_kernel(v: dict[str, Any], nest: LoopNest, mode: str) -> tuple[str, str]:
    """`warp`: one warp per row, shuffle tree. `block`: one 256-thread block per row, shared-memory tree."""
    t = v["dtype"]
    pre, comb, post = _red_ops(v["op"], t, "cols")
    init = pre.format(v="src[(long long)r * cols]") if v["op"] in _IDEMPOTENT else lit(0, t)
    loop = (f"    {t} acc = {init};\n"
            f"    for (int c = lane; c < cols; c += W) {{ {t} v "
            f"= {pre.format(v='src[(long long)r * cols + c]')};"
            f" acc = {comb.format(a='acc', b='v')}; }}\n")
    shfl = (f"    for (int off = 16; off > 0; off /= 2) {{ {t} o = __shfl_down_sync(0xffffffffu, acc, off);"
            f" acc = {comb.format(a='acc', b='o')}; }}\n")
    store = f"dst[r] = {lit(v['scale'], t)} * ({post.format(a='acc')});"
    if mode == "warp":
        src = (f'extern "C" __global__ void reduce_warp({decls(nest.params)}) {{\n#define W 32\n'
               "    int r = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;\n"
               f"    if (r >= rows) return;\n{loop}{shfl}    if (lane == 0) {store}\n}}\n")
        return src, f"mod.reduce_warp(((rows * 32 + 255) // 256,), (256,), {args(nest.params)})"
    src = (f'extern "C" __global__ void reduce_block({decls(nest.params)}) {{\n#define W 256\n'
           f"    __shared__ {t} part[8];\n    int r = blockIdx.x, lane = threadIdx.x;\n{loop}{shfl}"
           "    if (lane % 32 == 0) part[lane / 32] = acc;\n    __syncthreads();\n"
           f"    if (lane < 32) {{\n        acc = lane < 8 ? part[lane] : part[0];\n"
           + shfl.replace("    ", "        ", 1) +
           f"        if (lane == 0) {store}\n    }}\n}}\n")
    if v["op"] not in _IDEMPOTENT:
        src = src.replace("lane < 8 ? part[lane] : part[0]", f"lane < 8 ? part[lane] : {lit(0, t)}")
    return src, f"mod.reduce_block((rows,), (256,), {args(nest.params)})"


REDUCE_ROWS = nest_family(
    "reduce_rows", _reduce_rows_variants, _reduce_rows_nest, _reduce_rows_task,
    lambda v, n: {"warp_shuffle": _row_reduce_kernel(v, n, "warp"),
                  "block_tree": _row_reduce_kernel(v, n, "block")},
    group="reduction")


# ------------------------------------------------------------------------------------------------
# full reductions to one value


def _reduce_all_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"op": op, "dtype": t, "scale": s} for op in _RED if op != "sumexp" for t in FLOATS
            for s in (1.0, 0.25, 3.0, -1.0)]


def _double_fold(v: dict[str, Any]) -> str:
    """The serial loop of the reference (and of its one-thread CUDA port): a double accumulator, so its own
    rounding is negligible (a float one drifts by ~3% over 2^24 values), scaled and cast at the end."""
    pre, comb, post = _red_ops(v["op"], "double", "n")
    pre = pre.replace("{v}", "(double){v}")
    first = pre.format(v="src[0]") if v["op"] in _IDEMPOTENT else "0.0"
    return (f"    double acc = {first};\n"
            f"    for (int i = 0; i < n; ++i) {{ double v = {pre.format(v='src[i]')}; acc "
            f"= {comb.format(a='acc', b='v')}; }}\n"
            f"    dst[0] = ({v['dtype']})({lit(v['scale'], 'double')} * ({post.format(a='acc')}));\n")


def _reduce_all_source(v: dict[str, Any]) -> tuple[tuple, str]:
    t = v["dtype"]
    params = (arr("src", t, "in", "n"), arr("dst", t, "out", "1"), scalar("n"))
    return params, f"#include <math.h>\n\nvoid reduce_all({decls(params)}) {{\n{_double_fold(v)}}}\n"


def _reduce_all_task(v: dict[str, Any]) -> CTask:
    params, src = _reduce_all_source(v)
    return CTask("", "reduce_all", "reduce_all", src, params, {"src": ArrayGen("normal", 0.0, 1.0)},
                 configs({"n": 1000}, {"n": 1 << 24}, {"n": 1_000_003}), tolerance(v["dtype"], 10.0),
                 f"Full {v['op']} reduction of an array to one value.", ("reduction",))


def _reduce_all_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    t = v["dtype"]
    params, _ = _reduce_all_source(v)
    pre, comb, post = _red_ops(v["op"], t, "n")
    idem = v["op"] in _IDEMPOTENT
    ident = pre.format(v="src[0]") if idem else lit(0, t)
    scale = lit(v["scale"], t)
    shfl = (f"for (int off = 16; off > 0; off /= 2) {{ {t} o = __shfl_down_sync(0xffffffffu, acc, off);"
            f" acc = {comb.format(a='acc', b='o')}; }}")
    # pass 1: each block folds a grid-stride slice of src into part[blockIdx.x]; pass 2: one block folds part
    block_fold = (f"    __shared__ {t} sm[256];\n    sm[threadIdx.x] = acc;\n    __syncthreads();\n"
                  f"    for (int s = 128; s > 0; s /= 2) {{ if (threadIdx.x < s) sm[threadIdx.x] = "
                  f"{comb.format(a='sm[threadIdx.x]', b='sm[threadIdx.x + s]')}; __syncthreads(); }}\n"
                  "    acc = sm[0];\n")
    warp_fold = (f"    __shared__ {t} sm[8];\n    {shfl}\n    if (threadIdx.x % 32 == 0) sm[threadIdx.x "
                 "/ 32] = acc;\n"
                 f"    __syncthreads();\n    acc = threadIdx.x < 8 ? sm[threadIdx.x] : {ident};\n"
                 f"    if (threadIdx.x < 32) {{ {shfl} }}\n")
    out = []
    for strategy, fold in (("block_tree", block_fold), ("warp_shuffle", warp_fold)):
        cuda = f"""
extern "C" __global__ void pass1(const {t}* src, {t}* part, int n) {{
    {t} acc = {ident};
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {{
        {t} v = {pre.format(v='src[i]')}; acc = {comb.format(a='acc', b='v')}; }}
{fold}    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}}
extern "C" __global__ void pass2(const {t}* part, {t}* dst, int nb, int n) {{
    const {t}* src = part;
    {t} acc = {ident};
    for (int i = threadIdx.x; i < nb; i += blockDim.x) acc = {comb.format(a='acc', b='part[i]')};
{fold}    if (threadIdx.x == 0) dst[0] = {scale} * ({post.format(a='acc')});
}}
"""
        launch = ("import torch\n\nnb = max(1, min((n + 255) // 256, 1024))\n"
                  "part = torch.empty(nb, dtype=src.dtype, device=src.device)\n"
                  "mod.pass1((nb,), (256,), src, part, n)\nmod.pass2((1,), (256,), part, dst, nb, n)")
        out.append(_impl(task_id, strategy, params, cuda, launch, ("two_pass", "reduction")))
    # the serial C loop ported as it is: one thread, the reference's double accumulator (a float one
    # failed the tolerance on 2^24 values: dev/LOG.md, session 6)
    serial = f'extern "C" __global__ void reduce_serial({decls(params)}) {{\n{_double_fold(v)}}}\n'
    out.insert(0, _impl(task_id, "serial_thread", params, serial,
                        "mod.reduce_serial((1,), (1,), src, dst, n)", ("reduction",), baseline=True))
    if not idem and v["op"] != "l2" and v["op"] != "mean":
        atomic = (f'extern "C" __global__ void zero({t}* dst) {{ dst[0] = 0; }}\n'
                  f'extern "C" __global__ void reduce_atomic({decls(params)}) {{\n'
                  f"    {t} acc = 0;\n    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; "
                  f"i += gridDim.x * blockDim.x) acc += {pre.format(v='src[i]')};\n    {shfl}\n"
                  f"    if (threadIdx.x % 32 == 0) atomicAdd(dst, {scale} * acc);\n}}\n")
        out.append(_impl(task_id, "atomic", params, atomic,
                         "mod.zero((1,), (1,), dst)\nmod.reduce_atomic((max(1, min((n + 255) // 256, "
                         "1056)),), (256,),"
                         " src, dst, n)", ("reduction", "warp_shuffle")))
    return out


def _impl(task_id: str, strategy: str, params: tuple, cuda: str, launch: str, tags: tuple[str, ...] = (),
          baseline: bool = False, entry: str = "reduce_all") -> Implementation:
    doc = f"{strategy} CUDA implementation of {task_id} (generated by cudaperf.datasets)."
    return Implementation(f"{task_id}/{strategy}", task_id, strategy,
                          solution_module(entry, params, cuda, launch, doc), (strategy, *tags), baseline)


REDUCE_ALL = Family("reduce_all", TaskKind.C, _reduce_all_variants, _reduce_all_task, _reduce_all_impls,
                    description="full reductions", group="reduction")


# ------------------------------------------------------------------------------------------------
# row scans


def _scan_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"op": op, "dtype": t, "exclusive": ex, "pre": pre}
            for op in ("sum", "max", "min") for t in ("int", "float", "double") for ex in (False, True)
            for pre in ("", "abs", "square") if not (ex and op != "sum")]


def _scan_parts(v: dict[str, Any]) -> tuple[str, str, str]:
    t = v["dtype"]
    f = "" if t == "int" else fs(t)
    pre = {"": "{v}", "abs": ("abs({v})" if t == "int" else f"fabs{f}({{v}})"),
           "square": "{v} * {v}"}[v["pre"]]
    if v["op"] == "sum":
        comb = "{a} + {b}"
    elif t == "int":
        comb = "({a} > {b} ? {a} : {b})" if v["op"] == "max" else "({a} < {b} ? {a} : {b})"
    else:
        comb = f"fmax{f}({{a}}, {{b}})" if v["op"] == "max" else f"fmin{f}({{a}}, {{b}})"
    return t, pre, comb


def _scan_nest(v: dict[str, Any]) -> LoopNest:
    t, pre, comb = _scan_parts(v)
    first = "0" if v["op"] == "sum" else pre.format(v="src[r * cols]")
    if v["exclusive"]:
        step = f"dst[r * cols + c] = acc; acc = {comb.format(a='acc', b=pre.format(v='src[r * cols + c]'))};"
    else:
        step = f"acc = {comb.format(a='acc', b=pre.format(v='src[r * cols + c]'))}; dst[r * cols + c] = acc;"
    body = f"{t} acc = {first};\nfor (int c = 0; c < cols; ++c) {{ {step} }}"
    helpers = "HD int iabs_(int v) { return v < 0 ? -v : v; }" if t == "int" else ""
    body = body.replace("abs(", "iabs_(") if t == "int" else body
    return LoopNest("scan_rows", (arr("src", t, "in", "rows*cols"), arr("dst", t, "out", "rows*cols"),
                                  scalar("rows"), scalar("cols")), (("r", "rows"),), body, helpers)


def _scan_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    gen = ArrayGen("randint", -100, 100) if v["dtype"] == "int" else ArrayGen("normal", 0.0, 1.0)
    return nest_task(nest, "scan", {"src": gen},
                     configs({"rows": 4, "cols": 100}, {"rows": 4096, "cols": 4096},
                             {"rows": 1001, "cols": 3001}),
                     tolerance(v["dtype"], 10.0),
                     f"Row-wise {'exclusive' if v['exclusive'] else 'inclusive'} {v['op']} scan.", ("scan",))


def _scan_warp(v: dict[str, Any], nest: LoopNest) -> dict[str, tuple[str, str]]:
    """One warp per row: 32-element chunks scanned with __shfl_up_sync, the carry passed on by lane 31."""
    t, pre, comb = _scan_parts(v)
    helpers = "__device__ __forceinline__ int iabs_(int v) { return v < 0 ? -v : v; }\n" if t == "int" else ""
    p = pre.format(v="src[base + c]")
    p = p.replace("abs(", "iabs_(") if t == "int" else p
    first = "0" if v["op"] == "sum" else (pre.format(v="src[base]").replace("abs(", "iabs_(") if t == "int"
                                          else pre.format(v="src[base]"))
    out_val = "excl" if v["exclusive"] else "x"
    src = helpers + f"""
extern "C" __global__ void scan_warp({decls(nest.params)}) {{
    int r = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    long long base = (long long)r * cols;
    {t} carry = {first};
    for (int c0 = 0; c0 < cols; c0 += 32) {{
        int c = c0 + lane;
        {t} x = c < cols ? {p} : {first};
        for (int off = 1; off < 32; off *= 2) {{
            {t} y = __shfl_up_sync(0xffffffffu, x, off);
            if (lane >= off) x = {comb.format(a='y', b='x')};
        }}
        x = {comb.format(a='carry', b='x')};
        {t} excl = __shfl_up_sync(0xffffffffu, x, 1);
        if (lane == 0) excl = carry;
        if (c < cols) dst[base + c] = {out_val};
        carry = __shfl_sync(0xffffffffu, x, 31);
    }}
}}
"""
    return {"warp_shuffle": (src, f"mod.scan_warp(((rows * 32 + 255) // 256,), (256,), {args(nest.params)})")}


SCAN = nest_family("scan", _scan_variants, _scan_nest, _scan_task,
                   lambda v, n: {**_scan_warp(v, n), "block_tree": _scan_block(v, n)})


def _scan_block(v: dict[str, Any], nest: LoopNest) -> tuple[str, str]:
    """One 256-thread block per row: Hillis-Steele scan of each 256-chunk in shared memory, plus a carry."""
    t, pre, comb = _scan_parts(v)
    helpers = "__device__ __forceinline__ int iabs_(int v) { return v < 0 ? -v : v; }\n" if t == "int" else ""
    fix = (lambda s: s.replace("abs(", "iabs_(")) if t == "int" else (lambda s: s)
    first = "0" if v["op"] == "sum" else fix(pre.format(v="src[base]"))
    out_val = "(threadIdx.x == 0 ? carry : buf[threadIdx.x - 1])" if v["exclusive"] else "buf[threadIdx.x]"
    src = helpers + f"""
extern "C" __global__ void scan_block({decls(nest.params)}) {{
    __shared__ {t} buf[256];
    __shared__ {t} carry_s;
    long long base = (long long)blockIdx.x * cols;
    {t} carry = {first};
    for (int c0 = 0; c0 < cols; c0 += 256) {{
        int c = c0 + threadIdx.x;
        buf[threadIdx.x] = c < cols ? {fix(pre.format(v='src[base + c]'))} : {first};
        __syncthreads();
        for (int off = 1; off < 256; off *= 2) {{
            {t} y = threadIdx.x >= off ? buf[threadIdx.x - off] : buf[threadIdx.x];
            __syncthreads();
            if (threadIdx.x >= off) buf[threadIdx.x] = {comb.format(a='y', b='buf[threadIdx.x]')};
            __syncthreads();
        }}
        buf[threadIdx.x] = {comb.format(a='carry', b='buf[threadIdx.x]')};
        __syncthreads();
        if (c < cols) dst[base + c] = {out_val};
        if (threadIdx.x == 255) carry_s = buf[255];
        __syncthreads();
        carry = carry_s;
    }}
}}
"""
    return src, f"mod.scan_block((rows,), (256,), {args(nest.params)})"


# ------------------------------------------------------------------------------------------------
# histograms


def _hist_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"bins": b, "input": i, "weighted": w, "accumulate": a}
            for b in (16, 32, 64, 100, 128, 256, 500, 1000, 1024, 2048, 4096)
            for i in ("int", "uniform", "normal") for w in (False, True) for a in (False, True)]


def _hist_bin(v: dict[str, Any]) -> str:
    b = v["bins"]
    if v["input"] == "int":
        return "src[i]"
    lo, hi = (0.0, 1.0) if v["input"] == "uniform" else (-3.0, 3.0)
    return (f"(int)((src[i] - {lo!r}f) * {b / (hi - lo)!r}f) < 0 ? 0 : ((int)((src[i] - {lo!r}f) "
            f"* {b / (hi - lo)!r}f)"
            f" > {b - 1} ? {b - 1} : (int)((src[i] - {lo!r}f) * {b / (hi - lo)!r}f))")


def _hist_params(v: dict[str, Any]) -> tuple:
    ht = "float" if v["weighted"] else "unsigned int"
    st = "int" if v["input"] == "int" else "float"
    ps = [arr("src", st, "in", "n")] + ([arr("wt", "float", "in", "n")] if v["weighted"] else [])
    return (*ps, arr("hist", ht, "inout" if v["accumulate"] else "out", str(v["bins"])), scalar("n"))


def _hist_task(v: dict[str, Any]) -> CTask:
    params = _hist_params(v)
    inc = "wt[i]" if v["weighted"] else "1"
    zero = "" if v["accumulate"] else f"    for (int b = 0; b < {v['bins']}; ++b) hist[b] = 0;\n"
    src = (f"void histogram({decls(params)}) {{\n{zero}    for (int i = 0; i < n; ++i) {{\n"
           f"        int b = {_hist_bin(v)};\n        hist[b] += {inc};\n    }}\n}}\n")
    inputs = {"src": {"int": ArrayGen("randint", 0, v["bins"]), "uniform": ArrayGen("uniform", 0.0, 1.0),
                      "normal": ArrayGen("normal", 0.0, 1.0)}[v["input"]]}
    if v["weighted"]:
        inputs["wt"] = ArrayGen("uniform", 0.0, 1.0)
    if v["accumulate"]:
        inputs["hist"] = ArrayGen("uniform", 0.0, 10.0) if v["weighted"] else ArrayGen("randint", 0, 1000)
    # weighted bins are float sums in any order on the GPU: relative 1e-4 (tiny n: counts are exact)
    tol = Tolerance(1e-3, 1e-4) if v["weighted"] else Tolerance(0.0, 0.0)
    return CTask("", "histogram", "histogram", src, params, inputs,
                 configs({"n": 1000}, {"n": 1 << 24}, {"n": 1_000_003}), tol,
                 f"{'Weighted h' if v['weighted'] else 'H'}istogram into {v['bins']} bins"
                 f"{' added to the existing counts' if v['accumulate'] else ''}.", ("atomics",))


def _hist_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    params = _hist_params(v)
    ht = "float" if v["weighted"] else "unsigned int"
    inc = "wt[i]" if v["weighted"] else "1u"
    nb = v["bins"]
    a = args(params)
    zero = "" if v["accumulate"] else (f'extern "C" __global__ void zero({ht}* hist) {{\n'
                                       f"    for (int b = threadIdx.x; b < {nb}; b += blockDim.x) "
                                       f"hist[b] = 0;\n}}\n")
    zl = "" if v["accumulate"] else "mod.zero((1,), (256,), hist)\n"
    naive = zero + (f'extern "C" __global__ void hist_atomic({decls(params)}) {{\n'
                    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                    f"    if (i < n) atomicAdd(&hist[{_hist_bin(v)}], {inc});\n}}\n")
    out = [_impl(task_id, "atomic", params, naive, zl + f"mod.hist_atomic(((n + 255) // 256,), (256,), {a})",
                 ("naive",), baseline=True, entry="histogram")]
    for strategy, grid in (("privatized", "(n + 255) // 256"), ("coarsened", "max(1, min((n + 255) "
                                                                             "// 256, 1056))")):
        cuda = zero + f"""
extern "C" __global__ void hist_private({decls(params)}) {{
    __shared__ {ht} local[{nb}];
    for (int b = threadIdx.x; b < {nb}; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[{_hist_bin(v)}], {inc});
    __syncthreads();
    for (int b = threadIdx.x; b < {nb}; b += blockDim.x)
        if (local[b] != 0) atomicAdd(&hist[b], local[b]);
}}
"""
        out.append(_impl(task_id, strategy, params, cuda, zl + f"mod.hist_private(({grid},), (256,), {a})",
                         ("privatized", "smem"), entry="histogram"))
    return out


HISTOGRAM = Family("histogram", TaskKind.C, _hist_variants, _hist_task, _hist_impls, description="histograms")


# ------------------------------------------------------------------------------------------------
# segmented sorts (sorting networks)


def _sort_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"seg": s, "dtype": t, "desc": d, "kv": kv}
            for s in (32, 64, 128, 256, 512, 1024) for t in ("int", "float", "unsigned int")
            for d in (False, True) for kv in (False, True)]


def _sort_params(v: dict[str, Any]) -> tuple:
    t = v["dtype"]
    ps = [arr("keys", t, "inout", f"nseg*{v['seg']}")]
    if v["kv"]:
        ps.append(arr("vals", "int", "inout", f"nseg*{v['seg']}"))
    return (*ps, scalar("nseg"))


def _sort_nest(v: dict[str, Any]) -> LoopNest:
    t, seg = v["dtype"], v["seg"]
    cmp = ">" if not v["desc"] else "<"
    movev = ("    int vv = vals[base + j];\n" if v["kv"] else "")
    shiftv = "vals[base + p + 1] = vals[base + p]; " if v["kv"] else ""
    putv = "    vals[base + p + 1] = vv;\n" if v["kv"] else ""
    body = (f"int base = s * {seg};\nfor (int j = 1; j < {seg}; ++j) {{\n"
            f"    {t} key = keys[base + j];\n{movev}"
            f"    int p = j - 1;\n    while (p >= 0 && keys[base + p] {cmp} key) {{ keys[base + p + 1] = "
            "keys[base + p]; "
            f"{shiftv}--p; }}\n    keys[base + p + 1] = key;\n{putv}}}")
    return LoopNest("sort_segments", _sort_params(v), (("s", "nseg"),), body)


def _sort_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    # key-value sorts use distinct keys (a permutation) so that the order of values is unambiguous
    keys = ArrayGen("permutation") if v["kv"] else (
        ArrayGen("normal", 0.0, 1.0) if v["dtype"] == "float" else ArrayGen("randint", 0, 1 << 20))
    inputs = {"keys": keys, **({"vals": ArrayGen("randint", 0, 1 << 30)} if v["kv"] else {})}
    return nest_task(nest, "sort", inputs,
                     configs({"nseg": 3}, {"nseg": 16384 if v["seg"] <= 256 else 4096}, {"nseg": 999}),
                     Tolerance(0.0, 0.0),
                     f"Sort each segment of {v['seg']} {'keys (with values)' if v['kv'] else 'keys'} in "
                     f"{'descending' if v['desc'] else 'ascending'} order.", ("sorting_network",))


def _sort_network(v: dict[str, Any], nest: LoopNest, kind: str) -> tuple[str, str]:
    """One block per segment in shared memory: a bitonic network (L log^2 L) or odd-even transposition
    (L^2)."""
    t, seg = v["dtype"], v["seg"]
    half = seg // 2
    swap_kv = "int tv = sv[i]; sv[i] = sv[j]; sv[j] = tv;" if v["kv"] else ""
    load_kv = "sv[q] = vals[base + q];" if v["kv"] else ""
    store_kv = "vals[base + q] = sv[q];" if v["kv"] else ""
    worse = "<" if v["desc"] else ">"
    exch = (f"if ((sk[i] {worse} sk[j]) == up) {{ {t} tk = sk[i]; sk[i] = sk[j]; sk[j] = tk; {swap_kv} }}")
    if kind == "bitonic":
        network = f"""
    for (int size = 2; size <= {seg}; size *= 2)
        for (int stride = size / 2; stride > 0; stride /= 2) {{
            int p = threadIdx.x;
            int i = 2 * p - (p & (stride - 1)), j = i + stride;
            bool up = (i & size) == 0;
            {exch}
            __syncthreads();
        }}"""
    else:
        network = f"""
    for (int phase = 0; phase < {seg}; ++phase) {{
        int i = 2 * threadIdx.x + (phase & 1), j = i + 1;
        bool up = true;
        if (j < {seg}) {{ {exch} }}
        __syncthreads();
    }}"""
    src = f"""
extern "C" __global__ void sort_{kind}({decls(nest.params)}) {{
    __shared__ {t} sk[{seg}];
    {"__shared__ int sv[" + str(seg) + "];" if v["kv"] else ""}
    long long base = (long long)blockIdx.x * {seg};
    for (int q = threadIdx.x; q < {seg}; q += blockDim.x) {{ sk[q] = keys[base + q]; {load_kv} }}
    __syncthreads();{network}
    for (int q = threadIdx.x; q < {seg}; q += blockDim.x) {{ keys[base + q] = sk[q]; {store_kv} }}
}}
"""
    return src, f"mod.sort_{kind}((nseg,), ({half},), {args(nest.params)})"


SORT = nest_family("sort", _sort_variants, _sort_nest, _sort_task,
                   lambda v, n: {"bitonic": _sort_network(v, n, "bitonic"),
                                 "odd_even": _sort_network(v, n, "odd_even")})


def _only_naive(family: Family) -> Family:
    """Dependent loops: of the mechanical strategies only the naive port (one thread per unit) applies."""
    def implementations(variant: dict[str, Any], task_id: str) -> list[Implementation]:
        impls = family.implementations(variant, task_id)
        return [i for i in impls if i.strategy not in ("grid_stride", "coarsened", "uncoalesced")]

    return dataclasses.replace(family, implementations=implementations)


DEP_FAMILIES = (_only_naive(REDUCE_ROWS), REDUCE_ALL, _only_naive(SCAN), HISTOGRAM, _only_naive(SORT))
