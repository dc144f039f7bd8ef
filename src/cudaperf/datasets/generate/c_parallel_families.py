"""C→CUDA families whose serial code is a perfectly parallel loop nest: maps, 1-D/2-D/3-D stencils,
image filters, 1-D and multi-channel 2-D convolutions, transposes and permutations, matrix products,
matrix-vector products, CSR SpMV and n-body.

Each family draws its variants (operations, element types, constants, radii, epilogues) from a seeded
numpy generator, so the same seed gives the same tasks. Implementations: the mechanical strategies of
`loop_nest` (naive port, grid-stride, coarsened, uncoalesced) plus family-specific ones (vectorised maps,
shared-memory tiles with and without padding, warp-per-row products, tensor-core tiles for matrix
products: `tensor_core.py`).

Not covered: loops with carried dependencies (c_dependent_families.py), PyTorch tasks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cudaperf.datasets.generate.c_family_parts import (
    CLAMPI,
    FLOATS,
    arr,
    boundary_macro_1d,
    boundary_macro_2d,
    configs,
    fs,
    lit,
    nest_family,
    nest_task,
    scalar,
    tiled_1d,
    tiled_2d,
    tolerance,
    value_gen,
)
from cudaperf.datasets.generate.loop_nest import GRID_STRIDE_BLOCKS, LoopNest, args, cuda_prelude, decls
from cudaperf.datasets.generate.tensor_core import TILE, wmma_f64_kernel, wmma_tf32_kernel
from cudaperf.tasks.ctask import ArrayGen, CTask
from cudaperf.types import Tolerance


def _pick(rng: np.random.Generator, items: list | tuple) -> Any:
    return items[int(rng.integers(len(items)))]


def _consts(rng: np.random.Generator, k: int, lo: float = 0.1, hi: float = 2.0) -> list[float]:
    return [round(float(v), 3) for v in rng.uniform(lo, hi, k)]


# ------------------------------------------------------------------------------------------------
# maps: out[i] = f(x[i], y[i], z[i]; s)

_UNARY = ["sqrt{f}(fabs{f}({0}))", "tanh{f}({0})", "sin{f}({0})", "cos{f}({0})", "fabs{f}({0})",
          "({0}) * ({0})", "exp{f}(-fabs{f}({0}))", "log{f}(1 + fabs{f}({0}))", "1 / (1 + exp{f}(-({0})))",
          "fmax{f}({0}, {c})", "fmin{f}({0}, {c})", "({0}) * {c}", "({0}) + {c}",
          "(({0}) > 0 ? ({0}) : {c} * ({0}))", "atan{f}({0})", "({0}) / (1 + ({0}) * ({0}))"]
_BINARY = ["({0}) + ({1})", "({0}) - ({1})", "({0}) * ({1})", "({0}) / (1 + fabs{f}({1}))",
           "fmax{f}({0}, {1})", "fmin{f}({0}, {1})", "({0}) * {c} + ({1})", "hypot{f}({0}, {1})",
           "(({0}) > ({1}) ? ({0}) - ({1}) : {c} * ({1}))"]


def _map_expr(rng: np.random.Generator, leaves: list[str], dtype: str) -> str:
    """Every leaf goes through 0-2 unary ops, then leaves are folded with binary ops; maybe a last op."""
    def unary(e: str) -> str:
        return _pick(rng, _UNARY).format(e, f=fs(dtype), c=lit(_consts(rng, 1)[0], dtype))

    terms = []
    for leaf in leaves:
        for _ in range(int(rng.integers(0, 3))):
            leaf = unary(leaf)
        terms.append(leaf)
    expr = terms[0]
    for t in terms[1:]:
        expr = _pick(rng, _BINARY).format(expr, t, f=fs(dtype), c=lit(_consts(rng, 1)[0], dtype))
    if len(leaves) == 1 or rng.random() < 0.3:
        expr = unary(expr)
    return expr


def _map_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    out = []
    for _ in range(1300):
        dtype = "float" if rng.random() < 0.7 else "double"
        arity = int(rng.integers(1, 4))
        leaves = ["a", "b", "c"][:arity] + (["s"] if rng.random() < 0.3 else [])
        out.append({"dtype": dtype, "arity": arity, "inplace": arity == 1 and rng.random() < 0.3,
                    "scalar": "s" in leaves, "expr": _map_expr(rng, leaves, dtype),
                    "dist": _pick(rng, ["normal", "uniform"])})
    return out


def _map_nest(v: dict[str, Any]) -> LoopNest:
    t = v["dtype"]
    ins = ["x", "y", "z"][: v["arity"]]
    if v["inplace"]:
        params = (arr("x", t, "inout", "n"), scalar("n"))
    else:
        params = (*(arr(a, t, "in", "n") for a in ins), arr("out", t, "out", "n"), scalar("n"))
    if v["scalar"]:
        params = (*params, scalar("s", t))
    fargs = ", ".join(f"{t} {a}" for a in ["a", "b", "c"][: v["arity"]] + (["s"] if v["scalar"] else []))
    call = ", ".join([f"{a}[i]" for a in ins] + (["s"] if v["scalar"] else []))
    dst = "x" if v["inplace"] else "out"
    return LoopNest(entry="map_kernel", params=params, dims=(("i", "n"),),
                    body=f"{dst}[i] = f({call});", helpers=f"HD {t} f({fargs}) {{ return {v['expr']}; }}")


def _map_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    big = 1 << 24 if v["dtype"] == "float" else 1 << 23
    scal = {"s": 1.5} if v["scalar"] else {}
    inputs = {p.name: value_gen(v["dtype"], v["dist"]) for p in nest.params
              if p.kind.value in ("in", "inout")}
    return nest_task(nest, "map", inputs,
                     configs({"n": 4096, **scal}, {"n": big, **scal}, {"n": 1_000_003, **scal}),
                     tolerance(v["dtype"]), "Element-wise map.", ("memory_bound",))


def _map_vectorized(v: dict[str, Any], nest: LoopNest) -> dict[str, tuple[str, str]]:
    """float4 / double2 loads and stores over the aligned body, a scalar tail."""
    t = v["dtype"]
    vec, w = ("float4", 4) if t == "float" else ("double2", 2)
    comps = ["x", "y", "z", "w"][:w]
    ins = ["x"] if v["inplace"] else ["x", "y", "z"][: v["arity"]]
    dst = "x" if v["inplace"] else "out"
    loads = "\n".join(f"        {vec} v{a} = reinterpret_cast<const {vec}*>({a})[q];" for a in ins)
    sarg = [", s"] if v["scalar"] else [""]
    comp = "\n".join(f"        r.{c} = f({', '.join(f'v{a}.{c}' for a in ins)}{sarg[0]});" for c in comps)
    tail = f"f({', '.join(f'{a}[i]' for a in ins)}{sarg[0]})"
    src = cuda_prelude(nest.helpers) + f"""
extern "C" __global__ void map_vec({decls(nest.params)}) {{
    int nq = n / {w};
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    for (int q = tid; q < nq; q += gridDim.x * blockDim.x) {{
{loads}
        {vec} r;
{comp}
        reinterpret_cast<{vec}*>({dst})[q] = r;
    }}
    int i = nq * {w} + tid;
    if (i < n) {dst}[i] = {tail};
}}
"""
    launch = (f"mod.map_vec((max(1, min((n // {w} + 255) // 256, {GRID_STRIDE_BLOCKS})),), "
              f"(256,), {args(nest.params)})")
    return {"vectorized": (src, launch)}


MAP = nest_family("map", _map_variants, _map_nest, _map_task, _map_vectorized,
                  description="element-wise maps of 1-3 arrays")


# ------------------------------------------------------------------------------------------------
# stencils


def _stencil1d_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    out = []
    for radius in range(1, 7):
        for bc in ("clamp", "zero", "periodic"):
            for dtype in FLOATS:
                for _ in range(9):
                    out.append({"radius": radius, "bc": bc, "dtype": dtype,
                                "weights": _consts(rng, 2 * radius + 1, -1.0, 1.0),
                                "post": _pick(rng, ["", "fabs", "relu", "tanh"])})
    return out


def _post(expr: str, post: str, dtype: str) -> str:
    f = fs(dtype)
    return {"": expr, "fabs": f"fabs{f}({expr})", "relu": f"fmax{f}({expr}, 0)",
            "tanh": f"tanh{f}({expr})"}[post]


def _stencil1d_nest(v: dict[str, Any]) -> LoopNest:
    t, r = v["dtype"], v["radius"]
    terms = " + ".join(f"{lit(w, t)} * IN(i + {k - r})" for k, w in enumerate(v["weights"]))
    return LoopNest("stencil1d", (arr("src", t, "in", "n"), arr("dst", t, "out", "n"), scalar("n")),
                    (("i", "n"),), f"{t} acc = {terms};\ndst[i] = {_post('acc', v['post'], t)};",
                    helpers=f"{CLAMPI}\n{boundary_macro_1d(v['bc'])}")


def _stencil1d_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    return nest_task(nest, "stencil1d", {"src": value_gen(v["dtype"])},
                     configs({"n": 5000}, {"n": 1 << 24}, {"n": 1_000_001}), tolerance(v["dtype"]),
                     f"1-D stencil of radius {v['radius']} ({v['bc']} boundary).", ("stencil",))


STENCIL1D = nest_family("stencil1d", _stencil1d_variants, _stencil1d_nest, _stencil1d_task,
                        lambda v, n: {"smem_tiled": tiled_1d(n, v["dtype"], v["radius"])})

_SHAPES_2D = {"cross1": (1, "cross"), "cross2": (2, "cross"), "cross3": (3, "cross"),
              "box1": (1, "box"), "box2": (2, "box")}


def _offsets_2d(radius: int, shape: str) -> list[tuple[int, int]]:
    return [(dy, dx) for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1)
            if shape == "box" or dy == 0 or dx == 0]


def _stencil2d_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    out = []
    for shape, (radius, kind) in _SHAPES_2D.items():
        for bc in ("clamp", "zero"):
            for dtype in FLOATS:
                for _ in range(11):
                    out.append({"shape": shape, "radius": radius, "bc": bc, "dtype": dtype,
                                "weights": _consts(rng, len(_offsets_2d(radius, kind)), -1.0, 1.0),
                                "post": _pick(rng, ["", "fabs", "relu", "tanh"])})
    return out


def _stencil2d_nest(v: dict[str, Any]) -> LoopNest:
    t = v["dtype"]
    offs = _offsets_2d(v["radius"], _SHAPES_2D[v["shape"]][1])
    terms = " + ".join(f"{lit(w, t)} * IN(y + {dy}, x + {dx})" for (dy, dx), w in zip(offs, v["weights"]))
    return LoopNest("stencil2d", (arr("src", t, "in", "ny*nx"), arr("dst", t, "out", "ny*nx"),
                                  scalar("ny"), scalar("nx")),
                    (("y", "ny"), ("x", "nx")),
                    f"{t} acc = {terms};\ndst[y * nx + x] = {_post('acc', v['post'], t)};",
                    helpers=f"{CLAMPI}\n{boundary_macro_2d(v['bc'])}")


def _stencil2d_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    return nest_task(nest, "stencil2d", {"src": value_gen(v["dtype"])},
                     configs({"ny": 64, "nx": 96}, {"ny": 4096, "nx": 4096}, {"ny": 1000, "nx": 1537}),
                     tolerance(v["dtype"]), f"2-D {v['shape']} stencil ({v['bc']} boundary).", ("stencil",))


STENCIL2D = nest_family(
    "stencil2d", _stencil2d_variants, _stencil2d_nest, _stencil2d_task,
    lambda v, n: {"smem_tiled": tiled_2d(n, v["dtype"], v["radius"]),
                  "smem_tiled_padded": tiled_2d(n, v["dtype"], v["radius"], pad=1)})


def _stencil3d_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    out = []
    for shape, radius in (("cross", 1), ("cross", 2), ("box", 1)):
        for bc in ("clamp", "zero"):
            for dtype in FLOATS:
                for _ in range(10):
                    n = len(_offsets_3d(radius, shape))
                    out.append({"shape": shape, "radius": radius, "bc": bc, "dtype": dtype,
                                "weights": _consts(rng, n, -1.0, 1.0),
                                "post": _pick(rng, ["", "fabs", "relu"])})
    return out


def _offsets_3d(radius: int, shape: str) -> list[tuple[int, int, int]]:
    rng = range(-radius, radius + 1)
    return [(a, b, c) for a in rng for b in rng for c in rng
            if shape == "box" or sum(1 for d in (a, b, c) if d) <= 1]


def _stencil3d_nest(v: dict[str, Any]) -> LoopNest:
    t = v["dtype"]
    offs = _offsets_3d(v["radius"], v["shape"])
    terms = " + ".join(f"{lit(w, t)} * IN(z + {a}, y + {b}, x + {c})"
                       for (a, b, c), w in zip(offs, v["weights"]))
    if v["bc"] == "clamp":
        macro = ("#define IN(zz, yy, xx) src[(clampi((zz), 0, nz - 1) * ny + clampi((yy), 0, ny - 1)) * nx"
                 " + clampi((xx), 0, nx - 1)]")
    else:
        macro = ("#define IN(zz, yy, xx) (((zz) >= 0 && (zz) < nz && (yy) >= 0 && (yy) < ny && (xx) >= 0 && "
                 "(xx) < nx) ? src[((zz) * ny + (yy)) * nx + (xx)] : 0)")
    return LoopNest("stencil3d", (arr("src", t, "in", "nz*ny*nx"), arr("dst", t, "out", "nz*ny*nx"),
                                  scalar("nz"), scalar("ny"), scalar("nx")),
                    (("z", "nz"), ("y", "ny"), ("x", "nx")),
                    f"{t} acc = {terms};\ndst[(z * ny + y) * nx + x] = {_post('acc', v['post'], t)};",
                    helpers=f"{CLAMPI}\n{macro}")


def _stencil3d_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    return nest_task(nest, "stencil3d", {"src": value_gen(v["dtype"])},
                     configs({"nz": 16, "ny": 24, "nx": 32}, {"nz": 256, "ny": 256, "nx": 256},
                             {"nz": 67, "ny": 101, "nx": 129}),
                     tolerance(v["dtype"]), f"3-D {v['shape']} stencil of radius {v['radius']} ({v['bc']}).",
                     ("stencil",))


STENCIL3D = nest_family("stencil3d", _stencil3d_variants, _stencil3d_nest, _stencil3d_task)


# ------------------------------------------------------------------------------------------------
# image filters on 8-bit or float images

_FILTERS = ("box", "gauss", "sobel", "laplace4", "laplace8", "sharpen", "erode", "dilate", "median3",
            "adaptive_threshold", "emboss", "unsharp")


def _image_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    out = []
    for flt in _FILTERS:
        fixed_3x3 = ("sobel", "laplace4", "laplace8", "sharpen", "median3", "emboss")
        radii = (1,) if flt in fixed_3x3 else (1, 2, 3)
        for radius in radii:
            for pix in ("unsigned char", "float"):
                for bc in ("clamp", "zero"):
                    for _ in range(3 if len(radii) == 1 else 2):
                        out.append({"filter": flt, "radius": radius, "pix": pix, "bc": bc,
                                    "k": round(float(rng.uniform(0.2, 2.0)), 2),
                                    "offset": int(rng.integers(-12, 13))})
    return out


def _image_body(v: dict[str, Any]) -> str:
    r, f, pix = v["radius"], v["filter"], v["pix"]
    u8 = pix == "unsigned char"
    to_out = "dst[y * nx + x] = store(val);"
    neigh = [(dy, dx) for dy in range(-r, r + 1) for dx in range(-r, r + 1)]
    if f in ("box", "gauss"):
        w = [1] * len(neigh) if f == "box" else [
            (_binom(2 * r, dy + r) * _binom(2 * r, dx + r)) for dy, dx in neigh]
        terms = " + ".join(f"{wi} * (float)IN(y + {dy}, x + {dx})" for (dy, dx), wi in zip(neigh, w))
        return f"float val = ({terms}) * {1.0 / sum(w)!r}f;\n{to_out}"
    if f in ("erode", "dilate"):
        op = "fminf" if f == "erode" else "fmaxf"
        lines = ["float val = (float)IN(y, x);"] + [
            f"val = {op}(val, (float)IN(y + {dy}, x + {dx}));" for dy, dx in neigh if (dy, dx) != (0, 0)]
        return "\n".join(lines + [to_out])
    if f == "sobel":
        return ("float gx = -(float)IN(y - 1, x - 1) - 2 * (float)IN(y, x - 1) - (float)IN(y + 1, x - 1)"
                " + (float)IN(y - 1, x + 1) + 2 * (float)IN(y, x + 1) + (float)IN(y + 1, x + 1);\n"
                "float gy = -(float)IN(y - 1, x - 1) - 2 * (float)IN(y - 1, x) - (float)IN(y - 1, x + 1)"
                " + (float)IN(y + 1, x - 1) + 2 * (float)IN(y + 1, x) + (float)IN(y + 1, x + 1);\n"
                f"float val = {v['k']!r}f * sqrtf(gx * gx + gy * gy);\n{to_out}")
    if f in ("laplace4", "laplace8", "sharpen"):
        ring = [(dy, dx) for dy, dx in neigh
                if (dy, dx) != (0, 0) and (f == "laplace8" or dy == 0 or dx == 0)]
        centre = {"laplace4": 4, "laplace8": 8, "sharpen": 5}[f]
        terms = " - ".join(f"(float)IN(y + {dy}, x + {dx})" for dy, dx in ring)
        val = f"fabsf({centre} * (float)IN(y, x) - {terms})" if f != "sharpen" else \
            f"{centre} * (float)IN(y, x) - {terms}"
        return f"float val = {v['k']!r}f * {val};\n{to_out}"
    if f == "median3":
        loads = "\n".join(f"p[{k}] = (float)IN(y + {dy}, x + {dx});" for k, (dy, dx) in enumerate(neigh))
        return (f"float p[9];\n{loads}\n"
                "for (int a = 0; a < 5; ++a) for (int b = a + 1; b < 9; ++b)\n"
                "    if (p[b] < p[a]) { float t = p[a]; p[a] = p[b]; p[b] = t; }\n"
                f"float val = p[4];\n{to_out}")
    if f == "emboss":
        return (f"float val = {v['k']!r}f * ((float)IN(y + 1, x + 1) - (float)IN(y - 1, x - 1))"
                f" + {128.0 if u8 else 0.5}f;\n{to_out}")
    terms = " + ".join(f"(float)IN(y + {dy}, x + {dx})" for dy, dx in neigh)
    mean = f"({terms}) * {1.0 / len(neigh)!r}f"
    if f == "unsharp":
        return f"float c = (float)IN(y, x);\nfloat val = c + {v['k']!r}f * (c - {mean});\n{to_out}"
    # +0.5 on 8-bit images: the mean is a multiple of 1/n, so no pixel sits exactly on the threshold and
    # the GPU's fused multiply-add cannot flip a comparison the CPU made.
    off = v["offset"] + 0.5 if u8 else v["offset"] / 255.0
    hi = "255.0f" if u8 else "1.0f"
    return f"float val = (float)IN(y, x) > {mean} + {off!r}f ? {hi} : 0.0f;\n{to_out}"


def _binom(n: int, k: int) -> int:
    from math import comb

    return comb(n, k)


def _image_nest(v: dict[str, Any]) -> LoopNest:
    pix = v["pix"]
    store = ("HD unsigned char store(float v) { v = v < 0 ? 0 : (v > 255 ? 255 : v); "
             "return (unsigned char)(v + 0.5f); }") if pix == "unsigned char" else \
        "HD float store(float v) { return v; }"
    return LoopNest(f"filter_{v['filter']}", (arr("src", pix, "in", "ny*nx"), arr("dst", pix, "out", "ny*nx"),
                                              scalar("ny"), scalar("nx")),
                    (("y", "ny"), ("x", "nx")), _image_body(v),
                    helpers=f"{CLAMPI}\n{store}\n{boundary_macro_2d(v['bc'])}")


def _image_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    u8 = v["pix"] == "unsigned char"
    # 8-bit outputs are rounded from float arithmetic that the GPU contracts into fused multiply-adds
    # and the host compiler does not: a value on a rounding edge may land one level away (measured on
    # the H200: sharpen, 1 level on up to 0.4% of pixels). Allow one level, nothing more.
    tol = tolerance("float") if not u8 else Tolerance(atol=1.0, rtol=0.0, int_atol=1)
    gen = ArrayGen("randint", 0, 256) if u8 else ArrayGen("uniform", 0.0, 1.0)
    return nest_task(nest, "image_filter", {"src": gen},
                     configs({"ny": 48, "nx": 64}, {"ny": 2160, "nx": 3840}, {"ny": 1081, "nx": 1921}),
                     tol, f"Image filter `{v['filter']}` (radius {v['radius']}, {v['bc']} border) on a "
                          f"{'8-bit' if u8 else 'float'} image.", ("image",))


IMAGE = nest_family(
    "image_filter", _image_variants, _image_nest, _image_task,
    lambda v, n: {"smem_tiled": tiled_2d(n, v["pix"], v["radius"]),
                  "smem_tiled_padded": tiled_2d(n, v["pix"], v["radius"], pad=1)})


# ------------------------------------------------------------------------------------------------
# convolutions

_ACTS = ("", "relu", "tanh", "fabs", "sigmoid")


def _act(expr: str, act: str, dtype: str) -> str:
    f = fs(dtype)
    return {"": expr, "relu": f"fmax{f}({expr}, 0)", "tanh": f"tanh{f}({expr})", "fabs": f"fabs{f}({expr})",
            "sigmoid": f"1 / (1 + exp{f}(-({expr})))"}[act]


def _conv1d_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"k": k, "dtype": t, "act": a, "mode": m, "dil": d}
            for k in (3, 5, 7, 9, 11, 15, 21, 31) for t in FLOATS for a in _ACTS for m in ("valid", "same")
            for d in (1, 2)]


def _conv1d_nest(v: dict[str, Any]) -> LoopNest:
    t, k, d = v["dtype"], v["k"], v["dil"]
    span = (k - 1) * d
    if v["mode"] == "valid":
        outlen, shift, macro = f"n - {span}", 0, "#define IN(ii) src[(ii)]"
    else:
        outlen, shift, macro = "n", span // 2, boundary_macro_1d("zero")
    body = (f"{t} acc = 0;\nfor (int t = 0; t < {k}; ++t) acc += w[t] * IN(i + t * {d} - {shift});\n"
            f"dst[i] = {_act('acc', v['act'], t)};")
    params = (arr("src", t, "in", "n"), arr("w", t, "in", str(k)), arr("dst", t, "out", outlen), scalar("n"))
    return LoopNest("conv1d", params, (("i", outlen),), body, helpers=macro)


def _conv1d_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    return nest_task(nest, "conv1d", {"src": value_gen(v["dtype"]), "w": ArrayGen("uniform", -1.0, 1.0)},
                     configs({"n": 3000}, {"n": 1 << 23}, {"n": 1_000_003}), tolerance(v["dtype"]),
                     f"1-D convolution, {v['k']} taps, dilation {v['dil']}, {v['mode']} output.", ("conv",))


def _conv1d_tiled(v: dict[str, Any], nest: LoopNest) -> dict[str, tuple[str, str]]:
    span = (v["k"] - 1) * v["dil"]
    if v["mode"] == "valid":  # the tile needs IN(i .. i+span): shift the window by half of the span
        return {}
    return {"smem_tiled": tiled_1d(nest, v["dtype"], max(span // 2, span - span // 2))}


CONV1D = nest_family("conv1d", _conv1d_variants, _conv1d_nest, _conv1d_task, _conv1d_tiled)


def _conv2d_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"k": k, "dtype": t, "act": a, "bias": b, "stride": s}
            for k in (1, 3, 5, 7) for t in FLOATS for a in _ACTS for b in (False, True) for s in (1, 2)]


def _conv2d_nest(v: dict[str, Any]) -> LoopNest:
    t, k, s = v["dtype"], v["k"], v["stride"]
    params = [arr("src", t, "in", "c*h*w"), arr("wt", t, "in", f"co*c*{k * k}")]
    if v["bias"]:
        params.append(arr("bias", t, "in", "co"))
    params += [arr("dst", t, "out", "co*oh*ow"), scalar("c"), scalar("co"), scalar("h"), scalar("w"),
               scalar("oh"), scalar("ow")]
    init = "bias[o]" if v["bias"] else "0"
    body = (f"{t} acc = {init};\n"
            f"for (int ci = 0; ci < c; ++ci)\n"
            f"    for (int ky = 0; ky < {k}; ++ky)\n"
            f"        for (int kx = 0; kx < {k}; ++kx)\n"
            f"            acc += wt[((o * c + ci) * {k} + ky) * {k} + kx] * "
            f"src[(ci * h + y * {s} + ky) * w + x * {s} + kx];\n"
            f"dst[(o * oh + y) * ow + x] = {_act('acc', v['act'], t)};")
    return LoopNest("conv2d", tuple(params), (("o", "co"), ("y", "oh"), ("x", "ow")), body)


def _conv2d_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    k, s = v["k"], v["stride"]

    def size(c: int, co: int, h: int, w: int) -> dict[str, int]:
        return {"c": c, "co": co, "h": h, "w": w, "oh": (h - k) // s + 1, "ow": (w - k) // s + 1}

    inputs = {"src": value_gen(v["dtype"]), "wt": ArrayGen("uniform", -0.5, 0.5)}
    if v["bias"]:
        inputs["bias"] = ArrayGen("uniform", -1.0, 1.0)
    return nest_task(nest, "conv2d", inputs,
                     configs(size(3, 4, 20, 24), size(16, 32, 128, 128), size(5, 7, 67, 93)),
                     tolerance(v["dtype"], 10.0),
                     f"Multi-channel 2-D convolution, {k}x{k} filter, stride {s}, valid padding.", ("conv",))


CONV2D = nest_family("conv2d", _conv2d_variants, _conv2d_nest, _conv2d_task)


# ------------------------------------------------------------------------------------------------
# transposes and permutations

_TOPS = ("copy", "scale", "neg", "square", "abs", "add", "bias")


def _transpose_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    out = [{"rank": 2, "perm": (1, 0), "dtype": t, "op": op}
           for t in ("float", "double", "int", "unsigned char") for op in _TOPS
           if not (t == "unsigned char" and op in ("neg", "square", "abs", "scale"))]
    out += [{"rank": 3, "perm": p, "dtype": t, "op": op}
            for p in ((0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))
            for t in ("float", "double", "int") for op in ("copy", "scale", "add", "abs", "square")]
    return out


def _tval(op: str, dtype: str, src: str, other: str, bias: str) -> str:
    return {"copy": src, "scale": f"{lit(1.5, dtype)} * {src}", "neg": f"-{src}", "square": f"{src} * {src}",
            "abs": f"({src} < 0 ? -{src} : {src})", "add": f"{src} + {other}", "bias": f"{src} + {bias}"}[op]


def _transpose_nest(v: dict[str, Any]) -> LoopNest:
    t, op = v["dtype"], v["op"]
    if v["rank"] == 2:
        n = "ny*nx"
        params = [arr("src", t, "in", n)] + ([arr("other", t, "in", n)] if op == "add" else []) + \
                 ([arr("bias", t, "in", "ny")] if op == "bias" else []) + \
                 [arr("dst", t, "out", n), scalar("ny"), scalar("nx")]
        val = _tval(op, t, "src[y * nx + x]", "other[x * ny + y]", "bias[y]")
        return LoopNest("transpose2d", tuple(params), (("y", "ny"), ("x", "nx")), f"dst[x * ny + y] = {val};")
    dims, names = ("d0", "d1", "d2"), ("i0", "i1", "i2")
    p = v["perm"]  # output axis a is input axis p[a]
    n = "d0*d1*d2"
    params = [arr("src", t, "in", n)] + ([arr("other", t, "in", n)] if op == "add" else []) + \
             [arr("dst", t, "out", n), scalar("d0"), scalar("d1"), scalar("d2")]
    out_dims = [dims[a] for a in p]
    loops = tuple((names[p[a]], out_dims[a]) for a in range(3))
    src_idx = "(i0 * d1 + i1) * d2 + i2"
    dst_idx = f"({names[p[0]]} * {out_dims[1]} + {names[p[1]]}) * {out_dims[2]} + {names[p[2]]}"
    val = _tval(op, t, f"src[{src_idx}]", f"other[{dst_idx}]", "")
    return LoopNest("permute3d", tuple(params), loops, f"dst[{dst_idx}] = {val};")


def _transpose_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    inputs = {p.name: value_gen(v["dtype"]) for p in nest.params if p.kind.value == "in"}
    if v["rank"] == 2:
        cfgs = configs({"ny": 48, "nx": 80}, {"ny": 8192, "nx": 4096}, {"ny": 1999, "nx": 3001})
    else:
        cfgs = configs({"d0": 6, "d1": 20, "d2": 34}, {"d0": 64, "d1": 512, "d2": 512},
                       {"d0": 7, "d1": 333, "d2": 515})
    what = "transpose" if v["rank"] == 2 else f"permutation {tuple(v['perm'])} of a 3-D array"
    return nest_task(nest, "transpose", inputs, cfgs, tolerance(v["dtype"]), f"Matrix {what} ({v['op']}).",
                     ("memory_bound",))


def _transpose_tiled(v: dict[str, Any], nest: LoopNest, pad: int) -> tuple[str, str]:
    """32x32 tile read with coalesced rows, written back transposed with coalesced rows."""
    t, op = v["dtype"], v["op"]
    val = _tval(op, t, "tile[threadIdx.x][threadIdx.y + k]", "other[yo * ny + xo]", "bias[xo]")
    src = f"""
#define TILE 32
extern "C" __global__ void transpose_tiled({decls(nest.params)}) {{
    __shared__ {t} tile[TILE][TILE + {pad}];
    int x = blockIdx.x * TILE + threadIdx.x;
    for (int k = 0; k < TILE; k += 8) {{
        int y = blockIdx.y * TILE + threadIdx.y + k;
        if (x < nx && y < ny) tile[threadIdx.y + k][threadIdx.x] = src[y * nx + x];
    }}
    __syncthreads();
    int xo = blockIdx.y * TILE + threadIdx.x;  /* output column = input row */
    for (int k = 0; k < TILE; k += 8) {{
        int yo = blockIdx.x * TILE + threadIdx.y + k;  /* output row = input column */
        if (xo < ny && yo < nx) dst[yo * ny + xo] = {val};
    }}
}}
"""
    launch = f"mod.transpose_tiled(((nx + 31) // 32, (ny + 31) // 32), (32, 8), {args(nest.params)})"
    return src, launch


def _transpose_extra(v: dict[str, Any], nest: LoopNest) -> dict[str, tuple[str, str]]:
    if v["rank"] != 2:
        return {}
    return {"smem_tiled": _transpose_tiled(v, nest, 0), "smem_tiled_padded": _transpose_tiled(v, nest, 1)}


TRANSPOSE = nest_family("transpose", _transpose_variants, _transpose_nest, _transpose_task, _transpose_extra)


# ------------------------------------------------------------------------------------------------
# matrix products

_EPI = ("", "relu", "tanh", "bias_row", "bias_col", "axpby", "clamp", "gelu", "scale_rows", "sigmoid")


def _matmul_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"layout": lay, "dtype": t, "epi": e, "batched": b}
            for lay in ("NN", "NT", "TN", "TT") for t in FLOATS for e in _EPI for b in (False, True)]


def _epilogue(epi: str, t: str, i: str, j: str, cidx: str) -> tuple[str, list]:
    f = fs(t)
    return {
        "": ("acc", []), "relu": (f"fmax{f}(acc, 0)", []), "tanh": (f"tanh{f}(acc)", []),
        "bias_row": ("acc + bias[" + j + "]", [arr("bias", t, "in", "n")]),
        "bias_col": ("acc + bias[" + i + "]", [arr("bias", t, "in", "m")]),
        "axpby": (f"alpha * acc + beta * c[{cidx}]", []),
        "clamp": (f"fmin{f}(fmax{f}(acc, {lit(-1.0, t)}), {lit(1.0, t)})", []),
        "gelu": ((f"{lit(0.5, t)} * acc * (1 + tanh{f}({lit(0.7978845608, t)} * (acc + {lit(0.044715, t)}"
                 f" * acc * acc * acc)))"), []),
        "scale_rows": (f"acc * scale[{i}]", [arr("scale", t, "in", "m")]),
        "sigmoid": (f"1 / (1 + exp{f}(-acc))", []),
    }[epi]


def _matmul_nest(v: dict[str, Any]) -> LoopNest:
    t, lay = v["dtype"], v["layout"]
    a_idx = "i * kk + p" if lay[0] == "N" else "p * m + i"
    b_idx = "p * n + j" if lay[1] == "N" else "j * kk + p"
    boff = "b * " if v["batched"] else ""
    sa, sb, sc = ("m*kk", "kk*n", "m*n")
    a_idx = f"{boff}{sa} + {a_idx}" if v["batched"] else a_idx
    b_idx = f"{boff}{sb} + {b_idx}" if v["batched"] else b_idx
    cidx = f"b * {sc} + i * n + j" if v["batched"] else "i * n + j"
    expr, extra = _epilogue(v["epi"], t, "i", "j", cidx)
    cnt = "bt*" if v["batched"] else ""
    params = [arr("a", t, "in", f"{cnt}m*kk"), arr("bm", t, "in", f"{cnt}kk*n"), *extra]
    if v["epi"] == "axpby":
        params += [arr("c", t, "inout", f"{cnt}m*n"), scalar("alpha", t), scalar("beta", t)]
    else:
        params.append(arr("c", t, "out", f"{cnt}m*n"))
    params += ([scalar("bt")] if v["batched"] else []) + [scalar("m"), scalar("n"), scalar("kk")]
    body = (f"{t} acc = 0;\nfor (int p = 0; p < kk; ++p) acc += a[{a_idx}] * bm[{b_idx}];\n"
            f"c[{cidx}] = {expr};")
    dims = (("b", "bt"),) if v["batched"] else ()
    return LoopNest("matmul", tuple(params), (*dims, ("i", "m"), ("j", "n")), body)


def _matmul_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    inputs = {p.name: ArrayGen("uniform", -1.0, 1.0) for p in nest.params if p.kind.value in ("in", "inout")}
    if "scale" in inputs:
        inputs["scale"] = ArrayGen("uniform", 0.5, 2.0)
    ab = {"alpha": 1.25, "beta": -0.5} if v["epi"] == "axpby" else {}
    bt = (lambda b: {"bt": b}) if v["batched"] else (lambda b: {})
    cfgs = configs({"m": 32, "n": 48, "kk": 40, **ab, **bt(2)},
                   {"m": 1024 if not v["batched"] else 256, "n": 1024 if not v["batched"] else 256,
                    "kk": 512, **ab, **bt(8)},
                   {"m": 333, "n": 517, "kk": 259, **ab, **bt(3)})
    return nest_task(nest, "matmul", inputs, cfgs, tolerance(v["dtype"], 10.0),
                     f"{'Batched m' if v['batched'] else 'M'}atrix product ({v['layout']} layout"
                     f"{', epilogue ' + v['epi'] if v['epi'] else ''}).", ("compute_bound",))


def _matmul_tiled(v: dict[str, Any], nest: LoopNest, pad: int) -> tuple[str, str]:
    """16x16 shared-memory tiles of A and B (any layout), one output per thread, the same epilogue."""
    t, lay = v["dtype"], v["layout"]
    a_at = "a[aoff + row * kk + (k0 + tx)]" if lay[0] == "N" else "a[aoff + (k0 + tx) * m + row]"
    b_at = "bm[boff + (k0 + ty) * n + col]" if lay[1] == "N" else "bm[boff + col * kk + (k0 + ty)]"
    cidx = "b * m * n + i * n + j" if v["batched"] else "i * n + j"
    expr, _ = _epilogue(v["epi"], t, "i", "j", cidx)
    bsel = "int b = blockIdx.z;" if v["batched"] else "int b = 0;"
    src = f"""
#define TS 16
extern "C" __global__ void matmul_tiled({decls(nest.params)}) {{
    __shared__ {t} As[TS][TS + {pad}];
    __shared__ {t} Bs[TS][TS + {pad}];
    {bsel}
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TS + ty, col = blockIdx.x * TS + tx;
    long long aoff = (long long)b * m * kk, boff = (long long)b * kk * n;
    {t} acc = 0;
    for (int k0 = 0; k0 < kk; k0 += TS) {{
        As[ty][tx] = (row < m && k0 + tx < kk) ? {a_at} : 0;
        Bs[ty][tx] = (col < n && k0 + ty < kk) ? {b_at} : 0;
        __syncthreads();
#pragma unroll
        for (int p = 0; p < TS; ++p) acc += As[ty][p] * Bs[p][tx];
        __syncthreads();
    }}
    int i = row, j = col;
    if (i < m && j < n) c[{cidx}] = {expr};
}}
"""
    grid = "((n + 15) // 16, (m + 15) // 16" + (", bt)" if v["batched"] else ")")
    return src, f"mod.matmul_tiled({grid}, (16, 16), {args(nest.params)})"


def _matmul_tensor_core(v: dict[str, Any], nest: LoopNest) -> tuple[str, str]:
    """Tensor-core tiles (`tensor_core.py`: TF32 with the 3xTF32 split for float, DMMA for double), any
    layout, the same epilogue."""
    lay, t = v["layout"], v["dtype"]
    a_at = "a[aoff + (long long)row * kk + p]" if lay[0] == "N" else "a[aoff + (long long)p * m + row]"
    b_at = "bm[boff + (long long)p * n + col]" if lay[1] == "N" else "bm[boff + (long long)col * kk + p]"
    cidx = "b * m * n + i * n + j" if v["batched"] else "i * n + j"
    expr, _ = _epilogue(v["epi"], t, "i", "j", cidx)
    setup = (f"int b = {'blockIdx.z' if v['batched'] else '0'}, k = kk;\n"
             "    long long aoff = (long long)b * m * kk, boff = (long long)b * kk * n;")
    kernel = wmma_tf32_kernel if t == "float" else wmma_f64_kernel
    src = kernel("matmul_tc", decls(nest.params), setup, a_at, b_at, f"{t} acc = v; c[{cidx}] = {expr};")
    grid = f"((n + {TILE - 1}) // {TILE}, (m + {TILE - 1}) // {TILE}" + (", bt)" if v["batched"] else ")")
    return src, f"mod.matmul_tc({grid}, (16, 16), {args(nest.params)})"


def _matmul_extra(v: dict[str, Any], nest: LoopNest) -> dict[str, tuple[str, str]]:
    return {"smem_tiled": _matmul_tiled(v, nest, 0), "smem_tiled_padded": _matmul_tiled(v, nest, 1),
            "tensor_core": _matmul_tensor_core(v, nest)}


MATMUL = nest_family("matmul", _matmul_variants, _matmul_nest, _matmul_task, _matmul_extra)


def _gemv_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"trans": tr, "dtype": t, "epi": e} for tr in (False, True) for t in FLOATS
            for e in ("", "relu", "tanh", "bias_col", "axpby", "clamp", "sigmoid", "scale_rows")]


def _gemv_nest(v: dict[str, Any]) -> LoopNest:
    t = v["dtype"]
    expr, extra = _epilogue(v["epi"], t, "i", "i", "i")
    aidx = "p * m + i" if v["trans"] else "i * kk + p"
    params = [arr("a", t, "in", "m*kk"), arr("xv", t, "in", "kk"), *extra]
    if v["epi"] == "axpby":
        params += [arr("c", t, "inout", "m"), scalar("alpha", t), scalar("beta", t)]
    else:
        params.append(arr("c", t, "out", "m"))
    params += [scalar("m"), scalar("kk")]
    body = f"{t} acc = 0;\nfor (int p = 0; p < kk; ++p) acc += a[{aidx}] * xv[p];\nc[i] = {expr};"
    return LoopNest("gemv", tuple(params), (("i", "m"),), body)


def _gemv_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    inputs = {p.name: ArrayGen("uniform", -1.0, 1.0) for p in nest.params if p.kind.value in ("in", "inout")}
    ab = {"alpha": 0.75, "beta": 1.5} if v["epi"] == "axpby" else {}
    return nest_task(nest, "gemv", inputs,
                     configs({"m": 64, "kk": 100, **ab}, {"m": 8192, "kk": 8192, **ab},
                             {"m": 3001, "kk": 2047, **ab}),
                     tolerance(v["dtype"], 10.0),
                     f"Matrix-vector product{' with A transposed' if v['trans'] else ''}"
                     f"{', epilogue ' + v['epi'] if v['epi'] else ''}.", ("memory_bound",))


def _gemv_warp(v: dict[str, Any], nest: LoopNest) -> dict[str, tuple[str, str]]:
    """One warp per output row: lanes stride over k (coalesced for row-major A), shuffle reduction."""
    if v["trans"]:
        return {}
    t = v["dtype"]
    expr, _ = _epilogue(v["epi"], t, "i", "i", "i")
    src = f"""
extern "C" __global__ void gemv_warp({decls(nest.params)}) {{
    int i = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (i >= m) return;
    {t} acc = 0;
    for (int p = lane; p < kk; p += 32) acc += a[(long long)i * kk + p] * xv[p];
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) c[i] = {expr};
}}
"""
    return {"warp_shuffle": (src, f"mod.gemv_warp(((m * 32 + 255) // 256,), (256,), {args(nest.params)})")}


GEMV = nest_family("gemv", _gemv_variants, _gemv_nest, _gemv_task, _gemv_warp, group="matmul_vec")


# ------------------------------------------------------------------------------------------------
# CSR sparse matrix-vector product


def _spmv_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"dtype": t, "epi": e, "absval": a} for t in FLOATS
            for e in ("", "relu", "tanh", "bias_col", "axpby", "clamp", "sigmoid", "scale_rows")
            for a in (False, True)]


def _spmv_nest(v: dict[str, Any]) -> LoopNest:
    t = v["dtype"]
    expr, extra = _epilogue(v["epi"], t, "i", "i", "i")
    extra = [arr(p.name, p.ctype, p.kind.value, "rows") for p in extra]
    val = f"fabs{fs(t)}(vals[p])" if v["absval"] else "vals[p]"
    params = [arr("row_ptr", "int", "in", "rows+1"), arr("col_idx", "int", "in", "nnz"),
              arr("vals", t, "in", "nnz"), arr("xv", t, "in", "cols"), *extra]
    if v["epi"] == "axpby":
        params += [arr("c", t, "inout", "rows"), scalar("alpha", t), scalar("beta", t)]
    else:
        params.append(arr("c", t, "out", "rows"))
    params += [scalar("rows"), scalar("cols"), scalar("nnz")]
    body = (f"{t} acc = 0;\nfor (int p = row_ptr[i]; p < row_ptr[i + 1]; ++p) acc += {val} * "
            "xv[col_idx[p]];\n"
            f"c[i] = {expr};")
    return LoopNest("spmv_csr", tuple(params), (("i", "rows"),), body)


def _spmv_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    inputs = {p.name: ArrayGen("uniform", -1.0, 1.0) for p in nest.params if p.kind.value in ("in", "inout")}
    inputs["row_ptr"] = ArrayGen("csr_row_ptr")
    inputs["col_idx"] = ArrayGen("csr_col_idx")
    if "scale" in inputs:
        inputs["scale"] = ArrayGen("uniform", 0.5, 2.0)
    ab = {"alpha": 0.75, "beta": 1.5} if v["epi"] == "axpby" else {}
    return nest_task(nest, "spmv", inputs,
                     configs({"rows": 100, "cols": 120, "nnz": 800, **ab},
                             {"rows": 1 << 20, "cols": 1 << 20, "nnz": 1 << 24, **ab},
                             {"rows": 99991, "cols": 77777, "nnz": 1_000_003, **ab}),
                     tolerance(v["dtype"], 10.0), "Sparse (CSR) matrix-vector product with uneven rows.",
                     ("memory_bound", "irregular"))


def _spmv_vector(v: dict[str, Any], nest: LoopNest, lanes: int) -> tuple[str, str]:
    """`lanes` threads per row stride over its nonzeros, then a shuffle reduction within the group."""
    t = v["dtype"]
    expr, _ = _epilogue(v["epi"], t, "i", "i", "i")
    val = f"fabs{fs(t)}(vals[p])" if v["absval"] else "vals[p]"
    src = f"""
#define LANES {lanes}
extern "C" __global__ void spmv_vec({decls(nest.params)}) {{
    int i = (blockIdx.x * blockDim.x + threadIdx.x) / LANES;
    int lane = threadIdx.x % LANES;
    {t} acc = 0;
    if (i < rows)
        for (int p = row_ptr[i] + lane; p < row_ptr[i + 1]; p += LANES) acc += {val} * xv[col_idx[p]];
    for (int off = LANES / 2; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off, LANES);
    if (i < rows && lane == 0) c[i] = {expr};
}}
"""
    return src, f"mod.spmv_vec(((rows * {lanes} + 255) // 256,), (256,), {args(nest.params)})"


SPMV = nest_family("spmv", _spmv_variants, _spmv_nest, _spmv_task,
                   lambda v, n: {"warp_shuffle": _spmv_vector(v, n, 32), "subwarp": _spmv_vector(v, n, 4)})


# ------------------------------------------------------------------------------------------------
# n-body


def _nbody_variants(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [{"dim": d, "dtype": t, "eps": e, "out": o, "g": g}
            for d in (2, 3) for t in FLOATS for e in (1e-3, 1e-2, 0.1) for o in ("acc", "potential")
            for g in (1.0, 0.5, 2.0)]


def _nbody_nest(v: dict[str, Any]) -> LoopNest:
    t, d = v["dtype"], v["dim"]
    f = fs(t)
    ax = ["px", "py", "pz"][:d]
    params = [arr(a, t, "in", "n") for a in ax] + [arr("mass", t, "in", "n")]
    diff = "\n".join(f"    {t} d{a[1]} = {a}[j] - {a}[i];" for a in ax)
    r2 = " + ".join(f"d{a[1]} * d{a[1]}" for a in ax) + f" + {lit(v['eps'] ** 2, t)}"
    if v["out"] == "acc":
        params += [arr(f"a{a[1]}", t, "out", "n") for a in ax]
        accs = "\n".join(f"{t} s{a[1]} = 0;" for a in ax)
        upd = "\n".join(f"    s{a[1]} += w * d{a[1]};" for a in ax)
        body = (f"{accs}\nfor (int j = 0; j < n; ++j) {{\n{diff}\n    {t} r2 = {r2};\n"
                f"    {t} inv = 1 / sqrt{f}(r2);\n    {t} w = mass[j] * inv * inv * inv;\n{upd}\n}}\n" +
                "\n".join(f"a{a[1]}[i] = {lit(v['g'], t)} * s{a[1]};" for a in ax))
    else:
        params.append(arr("phi", t, "out", "n"))
        body = (f"{t} s = 0;\nfor (int j = 0; j < n; ++j) {{\n    if (j == i) continue;\n{diff}\n"
                f"    s += mass[j] / sqrt{f}({r2});\n}}\nphi[i] = -{lit(v['g'], t)} * s;")
    params.append(scalar("n"))
    return LoopNest("nbody", tuple(params), (("i", "n"),), body)


def _nbody_task(v: dict[str, Any], nest: LoopNest) -> CTask:
    inputs = {p.name: ArrayGen("uniform", -1.0, 1.0) for p in nest.params if p.kind.value == "in"}
    inputs["mass"] = ArrayGen("uniform", 0.1, 1.0)
    return nest_task(nest, "nbody", inputs, configs({"n": 256}, {"n": 16384}, {"n": 3001}),
                     tolerance(v["dtype"], 10.0),
                     f"All-pairs {v['dim']}-D "
                     f"gravitational {'accelerations' if v['out'] == 'acc' else 'potential'}"
                     f" with softening {v['eps']}.", ("compute_bound",))


def _nbody_tiled(v: dict[str, Any], nest: LoopNest) -> dict[str, tuple[str, str]]:
    """Positions and masses of 256 bodies staged in shared memory per step (the classic tiling)."""
    t, d = v["dtype"], v["dim"]
    ax = ["px", "py", "pz"][:d]
    f = fs(t)
    shared = "\n".join(f"    __shared__ {t} s_{a}[256];" for a in ax + ["mass"])
    loads = "\n".join(f"        s_{a}[threadIdx.x] = j < n ? {a}[j] : 0;" for a in ax + ["mass"])
    mine = "\n".join(f"    {t} my{a[1]} = i < n ? {a}[i] : 0;" for a in ax)
    diff = "\n".join(f"            {t} d{a[1]} = s_{a}[q] - my{a[1]};" for a in ax)
    r2 = " + ".join(f"d{a[1]} * d{a[1]}" for a in ax) + f" + {lit(v['eps'] ** 2, t)}"
    if v["out"] == "acc":
        acc0 = "\n".join(f"    {t} s{a[1]} = 0;" for a in ax)
        step = (f"            {t} inv = 1 / sqrt{f}({r2});\n"
                f"            {t} w = s_mass[q] * inv * inv * inv;\n" +
                "\n".join(f"            s{a[1]} += w * d{a[1]};" for a in ax))
        store = "\n".join(f"        a{a[1]}[i] = {lit(v['g'], t)} * s{a[1]};" for a in ax)
    else:
        acc0 = f"    {t} s = 0;"
        step = f"            if (base + q != i) s += s_mass[q] / sqrt{f}({r2});"
        store = f"        phi[i] = -{lit(v['g'], t)} * s;"
    src = f"""
extern "C" __global__ void nbody_tiled({decls(nest.params)}) {{
{shared}
    int i = blockIdx.x * blockDim.x + threadIdx.x;
{mine}
{acc0}
    for (int base = 0; base < n; base += 256) {{
        int j = base + threadIdx.x;
{loads}
        __syncthreads();
        int cnt = min(256, n - base);
        for (int q = 0; q < cnt; ++q) {{
{diff}
{step}
        }}
        __syncthreads();
    }}
    if (i < n) {{
{store}
    }}
}}
"""
    return {"smem_tiled": (src, f"mod.nbody_tiled(((n + 255) // 256,), (256,), {args(nest.params)})")}


NBODY = nest_family("nbody", _nbody_variants, _nbody_nest, _nbody_task, _nbody_tiled)

LOOP_FAMILIES = (MAP, STENCIL1D, STENCIL2D, STENCIL3D, IMAGE, CONV1D, CONV2D, TRANSPOSE, MATMUL, GEMV, SPMV,
                 NBODY)
