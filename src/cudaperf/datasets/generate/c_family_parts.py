"""Shared pieces of the C→CUDA families: C literals per element type, tolerances, configurations,
family construction from a loop nest, and the generic shared-memory tiling of stencil-like nests.

Stencil-like bodies read their main input through an accessor macro (`IN(ii)` in 1-D, `IN(yy, xx)` in
2-D) that the serial C defines with the task's boundary rule; the tiled CUDA strategy loads a tile
(with halo) through that same macro, then redefines it to read the tile, so one body serves all.

Not covered: the families themselves (c_parallel_families.py, c_dependent_families.py).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

from cudaperf.datasets.generate.loop_nest import (
    LoopNest,
    args,
    cuda_prelude,
    decls,
    loop_implementations,
    serial_c,
)
from cudaperf.datasets.records import Family, Implementation
from cudaperf.tasks.ctask import ArrayGen, CConfig, CParam, CTask, ParamKind
from cudaperf.types import TaskKind, Tolerance

FLOATS = ("float", "double")


def fs(dtype: str) -> str:
    """Suffix of the C math functions for this type (`expf` vs `exp`)."""
    return "f" if dtype == "float" else ""


def lit(value: float, dtype: str) -> str:
    """A C literal of `dtype` (floats keep a decimal point; `float` gets its suffix)."""
    if dtype not in FLOATS:
        return str(int(value))
    text = repr(round(float(value), 6))
    return text + ("f" if dtype == "float" else "")


def tolerance(dtype: str, scale: float = 1.0) -> Tolerance:
    """float: 1e-4 (reordered sums, FMA contraction on the GPU); double: 1e-9; integers: exact."""
    if dtype == "float":
        return Tolerance(atol=1e-4 * scale, rtol=1e-4 * scale)
    if dtype == "double":
        return Tolerance(atol=1e-9 * scale, rtol=1e-9 * scale)
    return Tolerance(atol=0.0, rtol=0.0)


def configs(small: dict[str, Any], large: dict[str, Any], odd: dict[str, Any]) -> tuple[CConfig, ...]:
    """The three standard configurations: small, large, and sizes that are multiples of no block size."""
    return (CConfig("small", small), CConfig("large", large), CConfig("odd", odd))


def arr(name: str, dtype: str, kind: str, length: str) -> CParam:
    return CParam(name, dtype, ParamKind(kind), length)


def scalar(name: str, dtype: str = "int") -> CParam:
    return CParam(name, dtype, ParamKind.SCALAR)


def value_gen(dtype: str, dist: str = "normal") -> ArrayGen:
    if dtype == "unsigned char":
        return ArrayGen("randint", 0, 256)
    if dtype in ("int", "long long"):
        return ArrayGen("randint", -1000, 1000)
    if dtype == "unsigned int":
        return ArrayGen("randint", 0, 1 << 20)
    return ArrayGen("uniform", -2.0, 2.0) if dist == "uniform" else ArrayGen("normal", 0.0, 1.0)


def nest_task(nest: LoopNest, family: str, inputs: dict[str, ArrayGen], cfgs: tuple[CConfig, ...],
              tol: Tolerance, description: str, tags: tuple[str, ...] = ()) -> CTask:
    return CTask(task_id="", family=family, entry=nest.entry, source=serial_c(nest), params=nest.params,
                 inputs=inputs, configs=cfgs, tolerance=tol, description=description, tags=tags)


def nest_family(name: str, variants: Callable[[Any], list[dict[str, Any]]],
                nest: Callable[[dict[str, Any]], LoopNest], task: Callable[[dict[str, Any], LoopNest], CTask],
                extra: Callable[[dict[str, Any], LoopNest], dict[str, tuple[str, str]]] | None = None,
                group: str = "", description: str = "") -> Family:
    """A family whose tasks are loop nests: implementations = mechanical strategies + `extra` ones."""

    def implementations(variant: dict[str, Any], task_id: str) -> list[Implementation]:
        n = nest(variant)
        return loop_implementations(n, task_id, extra(variant, n) if extra else None)

    return Family(name=name, kind=TaskKind.C, variants=variants, make=lambda v: task(v, nest(v)),
                  implementations=implementations, group=group or name, description=description)


# ------------------------------------------------------------------------------------------------
# Generic shared-memory tiling of stencil-like nests


def tiled_1d(nest: LoopNest, elem: str, radius: int, block: int = 256) -> tuple[str, str]:
    """1-D tile of `block + 2*radius` inputs loaded through IN(), body reads the tile."""
    (i, n), = nest.dims
    body = textwrap.indent(textwrap.dedent(nest.body).strip(), "        ")
    src = cuda_prelude(nest.helpers) + f"""
#define BLK {block}
#define RAD {radius}
extern "C" __global__ void {nest.entry}_tiled({decls(nest.params)}) {{
    __shared__ {elem} tile[BLK + 2 * RAD];
    int base = blockIdx.x * BLK;
    for (int t = threadIdx.x; t < BLK + 2 * RAD; t += BLK) tile[t] = IN(base + t - RAD);
    __syncthreads();
    int {i} = base + threadIdx.x;
#undef IN
#define IN(ii) tile[(ii) - base + RAD]
    if ({i} < {n}) {{
{body}
    }}
}}
"""
    launch = f"mod.{nest.entry}_tiled(((({n}) + {block - 1}) // {block},), ({block},), {args(nest.params)})"
    return src, launch


def tiled_2d(nest: LoopNest, elem: str, radius: int, pad: int = 0, bx: int = 32,
             by: int = 8) -> tuple[str, str]:
    """2-D tile of `(by + 2r) x (bx + 2r [+ pad])` inputs loaded through IN(yy, xx)."""
    (y, ny), (x, nx) = nest.dims
    body = textwrap.indent(textwrap.dedent(nest.body).strip(), "        ")
    name = f"{nest.entry}_tiled{'_pad' if pad else ''}"
    src = cuda_prelude(nest.helpers) + f"""
#define BX {bx}
#define BY {by}
#define RAD {radius}
#define TW (BX + 2 * RAD)
extern "C" __global__ void {name}({decls(nest.params)}) {{
    __shared__ {elem} tile[BY + 2 * RAD][TW + {pad}];
    int x0 = blockIdx.x * BX, y0 = blockIdx.y * BY;
    for (int t = threadIdx.y * BX + threadIdx.x; t < (BY + 2 * RAD) * TW; t += BX * BY) {{
        int ty = t / TW, tx = t % TW;
        tile[ty][tx] = IN(y0 + ty - RAD, x0 + tx - RAD);
    }}
    __syncthreads();
    int {x} = x0 + threadIdx.x, {y} = y0 + threadIdx.y;
#undef IN
#define IN(yy, xx) tile[(yy) - y0 + RAD][(xx) - x0 + RAD]
    if ({x} < {nx} && {y} < {ny}) {{
{body}
    }}
}}
"""
    launch = (f"mod.{name}(((({nx}) + {bx - 1}) // {bx}, (({ny}) + {by - 1}) // {by}), ({bx}, {by}), "
              f"{args(nest.params)})")
    return src, launch


def boundary_macro_1d(bc: str, src: str = "src", n: str = "n") -> str:
    if bc == "clamp":
        return f"#define IN(ii) {src}[clampi((ii), 0, {n} - 1)]"
    if bc == "periodic":
        return f"#define IN(ii) {src}[(((ii) % {n}) + {n}) % {n}]"
    return f"#define IN(ii) (((ii) >= 0 && (ii) < {n}) ? {src}[(ii)] : 0)"


def boundary_macro_2d(bc: str, src: str = "src", ny: str = "ny", nx: str = "nx") -> str:
    if bc == "clamp":
        return f"#define IN(yy, xx) {src}[clampi((yy), 0, {ny} - 1) * {nx} + clampi((xx), 0, {nx} - 1)]"
    return (f"#define IN(yy, xx) (((yy) >= 0 && (yy) < {ny} && (xx) >= 0 && (xx) < {nx}) ? "
            f"{src}[(yy) * {nx} + (xx)] : 0)")


CLAMPI = "HD int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }"
