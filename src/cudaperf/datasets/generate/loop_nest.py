"""Loop-nest kernels: one C loop body rendered as the serial C reference, as the naive
one-thread-per-iteration CUDA port (the C→CUDA baseline) and as other mechanical strategies
(grid-stride, thread coarsening, a deliberately uncoalesced thread mapping), plus the writer of
fast-format solution modules (see `cudaperf.tasks.ctask` for the candidate contract).

A `LoopNest` is a perfectly parallel loop nest (1 to 3 dimensions, outermost first) whose body writes
only the outputs of its own iteration; helper functions are declared with the `HD` macro, which is
`static inline` in C and `__device__ __forceinline__` in CUDA, so one text serves both.

Not covered: loops with carried dependencies (reductions, scans, sorting): their families write
dedicated templates; running or timing anything.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from cudaperf.datasets.records import Implementation
from cudaperf.tasks.ctask import CParam

SM_COUNT_H200 = 132
GRID_STRIDE_BLOCKS = SM_COUNT_H200 * 8


@dataclass(frozen=True)
class LoopNest:
    entry: str
    params: tuple[CParam, ...]
    dims: tuple[tuple[str, str], ...]  # (loop variable, extent expression over scalars), outermost first
    body: str
    helpers: str = ""


def decls(params: tuple[CParam, ...]) -> str:
    return ", ".join(p.c_decl() for p in params)


def args(params: tuple[CParam, ...]) -> str:
    return ", ".join(p.name for p in params)


def serial_c(nest: LoopNest) -> str:
    loops, indent = [], "    "
    for depth, (var, extent) in enumerate(nest.dims):
        loops.append(f"{indent * (depth + 1)}for (int {var} = 0; {var} < {extent}; ++{var})")
    inner = textwrap.indent(textwrap.dedent(nest.body).strip(), indent * (len(nest.dims) + 1))
    helpers = textwrap.dedent(nest.helpers).strip()
    return (f"#include <math.h>\n#define HD static inline\n{helpers}\n\n"
            f"void {nest.entry}({decls(nest.params)}) {{\n" + "\n".join(loops) + " {\n"
            f"{inner}\n{indent * len(nest.dims)}}}\n}}\n")


def cuda_prelude(helpers: str) -> str:
    return f"#define HD __device__ __forceinline__\n{textwrap.dedent(helpers).strip()}\n"


def solution_module(entry: str, params: tuple[CParam, ...], cuda_src: str, launch: str, doc: str) -> str:
    """A fast-format solution: SOURCE (CUDA), a lazily loaded module, and `entry(<params>)`."""
    body = textwrap.indent(textwrap.dedent(launch).strip(), "    ")
    return (f'"""{doc}"""\n\nfrom cudaperf import cuda\n\nSOURCE = r"""\n{cuda_src.strip()}\n"""\n\n'
            "_module = None\n\n\ndef _mod():\n    global _module\n    if _module is None:\n"
            "        _module = cuda.load(SOURCE)\n    return _module\n\n\n"
            f"def {entry}({args(params)}):\n    mod = _mod()\n{body}\n")


def _kernel(nest: LoopNest, index_code: str, guard: str, wrap: tuple[str, str] = ("", "")) -> str:
    body = textwrap.indent(textwrap.dedent(nest.body).strip(), "        ")
    return (cuda_prelude(nest.helpers) +
            f'\nextern "C" __global__ void {nest.entry}_k({decls(nest.params)}) {{\n'
            f"{textwrap.indent(textwrap.dedent(index_code).strip(), '    ')}\n"
            f"    {wrap[0]}\n    if ({guard}) {{\n{body}\n    }}\n    {wrap[1]}\n}}\n")


def _ceil(extent: str, block: int) -> str:
    return f"(({extent}) + {block - 1}) // {block}"


def _strategies_1d(nest: LoopNest) -> dict[str, tuple[str, str]]:
    (i, n), = nest.dims
    call = f"mod.{nest.entry}_k"
    a = args(nest.params)
    return {
        "naive": (_kernel(nest, f"int {i} = blockIdx.x * blockDim.x + threadIdx.x;", f"{i} < {n}"),
                  f"{call}(({_ceil(n, 256)},), (256,), {a})"),
        "grid_stride": (
            _kernel(nest, "", f"{i} < {n}",
                    ((f"for (int {i} = blockIdx.x * blockDim.x + threadIdx.x; {i} < {n}; "
                     f"{i} += gridDim.x * blockDim.x) {{"), "}")),
            f"{call}((max(1, min({_ceil(n, 256)}, {GRID_STRIDE_BLOCKS})),), (256,), {a})"),
        "coarsened": (
            _kernel(nest, "int base = blockIdx.x * blockDim.x * 4 + threadIdx.x;", f"{i} < {n}",
                    (f"#pragma unroll\n    for (int k = 0; k < 4; ++k) {{ int {i} = base + k * blockDim.x;",
                     "}")),
            f"{call}(({_ceil(n, 1024)},), (256,), {a})"),
    }


def _strategies_2d(nest: LoopNest) -> dict[str, tuple[str, str]]:
    (y, ny), (x, nx) = nest.dims
    call, a = f"mod.{nest.entry}_k", args(nest.params)
    guard = f"{x} < {nx} && {y} < {ny}"
    return {
        "naive": (_kernel(nest, f"int {x} = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                f"int {y} = blockIdx.y * blockDim.y + threadIdx.y;", guard),
                  f"{call}(({_ceil(nx, 32)}, {_ceil(ny, 8)}), (32, 8), {a})"),
        "uncoalesced": (_kernel(nest, f"int {y} = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                      f"int {x} = blockIdx.y * blockDim.y + threadIdx.y;", guard),
                        f"{call}(({_ceil(ny, 32)}, {_ceil(nx, 8)}), (32, 8), {a})"),
        "coarsened": (_kernel(nest, f"int {x} = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                    f"int y0 = blockIdx.y * blockDim.y * 4 + threadIdx.y;", guard,
                              (f"#pragma unroll\n    for (int k = 0; k < 4; ++k) {{ int {y} = y0 + "
                               "k * blockDim.y;",
                               "}")),
                      f"{call}(({_ceil(nx, 32)}, {_ceil(ny, 32)}), (32, 8), {a})"),
        "grid_stride": (_kernel(nest, "long long total = (long long)" f"({ny}) * ({nx});", guard,
                                (("for (long long t = blockIdx.x * (long long)blockDim.x + "
                                  "threadIdx.x; t < total; "
                                 f"t += (long long)gridDim.x * blockDim.x) {{ int {y} = (int)(t / ({nx})); "
                                 f"int {x} = (int)(t % ({nx}));"), "}")),
                        f"{call}(({GRID_STRIDE_BLOCKS},), (256,), {a})"),
    }


def _strategies_3d(nest: LoopNest) -> dict[str, tuple[str, str]]:
    (z, nz), (y, ny), (x, nx) = nest.dims
    call, a = f"mod.{nest.entry}_k", args(nest.params)
    guard = f"{x} < {nx} && {y} < {ny} && {z} < {nz}"
    return {
        "naive": (_kernel(nest, f"int {x} = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                f"int {y} = blockIdx.y * blockDim.y + threadIdx.y;\n"
                                f"int {z} = blockIdx.z * blockDim.z + threadIdx.z;", guard),
                  f"{call}(({_ceil(nx, 32)}, {_ceil(ny, 4)}, {_ceil(nz, 2)}), (32, 4, 2), {a})"),
        "uncoalesced": (_kernel(nest, f"int {z} = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                      f"int {y} = blockIdx.y * blockDim.y + threadIdx.y;\n"
                                      f"int {x} = blockIdx.z * blockDim.z + threadIdx.z;", guard),
                        f"{call}(({_ceil(nz, 32)}, {_ceil(ny, 4)}, {_ceil(nx, 2)}), (32, 4, 2), {a})"),
        "coarsened": (_kernel(nest, f"int {x} = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                    f"int {y} = blockIdx.y * blockDim.y + threadIdx.y;", guard,
                              (f"for (int {z} = 0; {z} < {nz}; ++{z}) {{", "}")),
                      f"{call}(({_ceil(nx, 32)}, {_ceil(ny, 8)}), (32, 8), {a})"),
    }


def loop_strategies(nest: LoopNest) -> dict[str, tuple[str, str]]:
    """strategy -> (CUDA source, launch code) for the mechanical strategies of this nest."""
    return {1: _strategies_1d, 2: _strategies_2d, 3: _strategies_3d}[len(nest.dims)](nest)


def loop_implementations(nest: LoopNest, task_id: str, extra: dict[str, tuple[str, str]] | None = None,
                         tags: dict[str, tuple[str, ...]] | None = None) -> list[Implementation]:
    """Implementations of a loop nest: the mechanical strategies plus family-specific `extra` ones."""
    strategies = {**loop_strategies(nest), **(extra or {})}
    out = []
    for strategy, (cuda_src, launch) in strategies.items():
        doc = f"{strategy} CUDA implementation of {task_id} (generated by cudaperf.datasets)."
        out.append(Implementation(
            impl_id=f"{task_id}/{strategy}", task_id=task_id, strategy=strategy,
            source=solution_module(nest.entry, nest.params, cuda_src, launch, doc),
            tags=(strategy, f"dims{len(nest.dims)}", *(tags or {}).get(strategy, ())),
            baseline=strategy == "naive"))
    return out


def naive_port(nest: LoopNest, task_id: str) -> Implementation:
    """The naive one-thread-per-iteration CUDA port of the serial loop nest (the C→CUDA baseline)."""
    return next(i for i in loop_implementations(nest, task_id) if i.strategy == "naive")
