"""`analyze_source`: a solution's text -> `KernelFeatures` per kernel plus feedback that points at lines.

The recipe: find the CUDA units (`sources`), analyse each unit's source (`static`), compile it with
NVRTC for ptxas facts and SASS (`compiler`), resolve each kernel's launch (the caller's `launch`, a host
`<<<>>>` site, a Python launch with literal shapes, `__launch_bounds__`, else 256 threads with a
diagnostic), compute theoretical occupancy (`occupancy`), bind sizes to get FLOPs, bytes, intensity and
regime (`intensity`), and render one feedback line per finding. Every step's failure becomes a
diagnostic: `analyze_source` never raises (issue: bad input).

Not covered: dynamic features (`ncu.py` fills `KernelFeatures.dynamic` on a GPU machine), scoring
(`cudaperf.reward`).

Fields that `KernelFeatures` lacks (shared arrays and padding, local arrays, requested vs footprint
bytes, the launch used) travel in `AnalysisReport.details`, one `KernelDetail` per kernel.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cudaperf.analysis.compiler import CompiledUnit, compile_unit
from cudaperf.analysis.intensity import evaluate_log_terms, evaluate_segment_terms
from cudaperf.analysis.intervals import footprints
from cudaperf.analysis.lanes import ideal_sectors
from cudaperf.analysis.occupancy import theoretical_occupancy
from cudaperf.analysis.roofline import ridge_flops_per_byte
from cudaperf.analysis.sources import CudaSource, PythonLaunch, solution_sources
from cudaperf.analysis.static import LaunchSite, StaticKernel, StaticUnit, analyze_cuda
from cudaperf.analysis.symbolic import Poly
from cudaperf.types import CoalescingClass, KernelFeatures, ResourceUsage, to_dict

DEFAULT_BLOCK = 256
DIMS = ("x", "y", "z")


@dataclass(frozen=True)
class Launch:
    """A launch configuration; None fields are unknown."""

    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    smem_bytes: int = 0
    source: str = ""  # where it came from: "caller", "<<<>>> line 40", "python line 12", "__launch_bounds__"

    @staticmethod
    def coerce(value: Any) -> Launch | None:
        """From a Launch, a dict {"grid", "block", "smem_bytes"}, or a (grid, block[, smem]) tuple."""
        if value is None or isinstance(value, Launch):
            return value
        if isinstance(value, Mapping):
            return Launch(_dim3(value.get("grid")), _dim3(value.get("block")),
                          int(value.get("smem_bytes", 0) or 0), "caller")
        if isinstance(value, (tuple, list)) and 2 <= len(value) <= 3:
            smem = int(value[2]) if len(value) == 3 else 0
            return Launch(_dim3(value[0]), _dim3(value[1]), smem, "caller")
        return None

    @property
    def threads_per_block(self) -> int | None:
        return None if self.block is None else self.block[0] * self.block[1] * self.block[2]


def _dim3(v: Any) -> tuple[int, int, int] | None:
    if v is None:
        return None
    vals = [int(x) for x in v] if isinstance(v, (tuple, list)) else [int(v)]
    vals = (vals + [1, 1, 1])[:3]
    return vals[0], vals[1], vals[2]


@dataclass(frozen=True)
class KernelDetail:
    """Per-kernel findings that `KernelFeatures` has no field for (yet)."""

    kernel: str
    line: int | None  # file line of the kernel's definition
    launch: Launch | None
    shared_arrays: tuple[dict[str, Any], ...] = ()  # name, line, dims, elem_bytes, padded, dynamic
    local_arrays: tuple[dict[str, Any], ...] = ()  # name, line
    bytes_requested: float | None = None  # every global access x trip counts x threads (no caching)
    bytes_footprint: float | None = None  # bytes spanned per array, summed (compulsory traffic)
    flops_expression: str = ""
    bytes_expression: str = ""
    ridge_flops_per_byte: float | None = None
    unbound_symbols: tuple[str, ...] = ()  # give these in `sizes` to get numbers
    thread_dependent_conditions: tuple[int, ...] = ()  # lines where threads of a block may diverge
    # per global access, in the order of `KernelFeatures.accesses` filtered to global: line, kind, sectors
    # and ideal sectors per request (None: not computed), window (requests sharing sectors, 1 = none),
    # window_sectors (distinct sectors per request over the window), requests (trip-count weight per thread)
    global_accesses: tuple[dict[str, Any], ...] = ()
    # per atomic (global or shared): line, space, requests (trip-count weight per thread), thread_share
    # (the share of a block's threads its enclosing `if`s let through; None: depends on the block) and
    # warp_passes (a global one's L2 passes per warp request, `Access.warp_passes`; None: lanes unknown)
    atomic_accesses: tuple[dict[str, Any], ...] = ()
    barriers_per_thread: float | None = None  # barrier executions per thread (loop trip counts bound)
    divisions_per_thread: float | None = None  # integer `/` `%` by runtime divisors per thread
    threads: float | None = None  # threads the work estimate counts (the launch's, or a guard's bound)


@dataclass(frozen=True)
class AnalysisReport:
    kernels: tuple[KernelFeatures, ...]
    feedback: tuple[str, ...]
    diagnostics: tuple[str, ...]
    details: tuple[KernelDetail, ...] = ()
    format: str = ""

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def analyze_source(text: str, *, kind: str = "auto", arch: str = "sm_90", launch: Any = None,
                   sizes: Mapping[str, float] | None = None, compile: bool = True, sass: bool = True,
                   use_cache: bool = True) -> AnalysisReport:
    """Structural features and feedback for every kernel of a solution (fast, load_inline or .cu).

    `launch`: one launch for every kernel, or {kernel name: launch}; a launch is a `Launch`, a dict
    {"grid": (x, y, z), "block": (x, y, z), "smem_bytes": n} or a (grid, block[, smem]) tuple.
    `sizes`: values of symbols in loop bounds and guards (kernel parameters such as `n`, macros).
    `compile`: run NVRTC + ptxas (registers, smem, spills -> occupancy); `sass`: also disassemble.
    """
    try:
        return _analyze(text, kind, arch, launch, dict(sizes or {}), compile, sass, use_cache)
    except Exception as exc:  # noqa: BLE001 - the contract: failures are values (issue: bad input)
        return AnalysisReport((), (), (f"analysis failed: {type(exc).__name__}: {exc}",))


def _analyze(text, kind, arch, launch, sizes, do_compile, sass, use_cache) -> AnalysisReport:
    found = solution_sources(text, kind)
    diagnostics = list(found.diagnostics)
    features, details, feedback = [], [], []
    for index, unit in enumerate(found.units):
        static = analyze_cuda(unit.text, template_args=_template_args(unit), sizes=sizes,
                              blocks=_caller_blocks(launch))
        diagnostics.extend(f"unit {index + 1}: {d}" for d in static.diagnostics)
        compiled = None
        if do_compile and static.kernels:
            exprs = unit.name_expressions or _instantiations(static)
            compiled = compile_unit(unit.compile_text, arch=arch, options=unit.options,
                                    name_expressions=exprs, sass=sass, use_cache=use_cache)
            if not compiled.ok and exprs and not unit.name_expressions:  # our guess did not compile
                compiled = compile_unit(unit.compile_text, arch=arch, options=unit.options, sass=sass,
                                        use_cache=use_cache)
            diagnostics.extend(f"unit {index + 1}: {d}" for d in compiled.diagnostics)
        for kernel in static.kernels:
            ctx = _KernelContext(unit, static, kernel, compiled, arch, sizes, found.launches, launch)
            f, d = ctx.features(), ctx.detail()
            features.append(f)
            details.append(d)
            feedback.extend(render_kernel_feedback(ctx, f, d))
    return AnalysisReport(tuple(features), tuple(feedback), tuple(diagnostics), tuple(details), found.format)


_CUDA_TYPES = {"float", "double", "int", "unsigned", "half", "__half", "__nv_bfloat16", "int64_t", "uint32_t",
               "int32_t", "long", "char", "bool", "float2", "float4", "half2", "__half2", "uint8_t", "int8_t"}


def _instantiations(static: StaticUnit) -> tuple[str, ...]:
    """Name expressions for template kernels launched from host code (load_inline, .cu), so ptxas reports
    them: the first launch site's arguments, with dispatch type names (`scalar_t`) taken as float."""
    out = []
    for kernel in static.kernels:
        if not kernel.template_params:
            continue
        site = next((s for s in static.launches if s.kernel == kernel.name and s.template_args), None)
        if site is None:
            continue
        args = [a if (a in _CUDA_TYPES or not re.fullmatch(r"[A-Za-z_]\w*", a) or a.isupper()) else "float"
                for a in site.template_args]
        out.append(f"{kernel.name}<{', '.join(args)}>")
    return tuple(out)


def _caller_blocks(launch: Any) -> dict[str, tuple[int, int, int]]:
    """kernel -> block shape given by the caller ("*" for one launch given for every kernel)."""
    if isinstance(launch, Mapping) and not {"grid", "block", "smem_bytes"} & set(launch):
        out = {}
        for name, value in launch.items():
            coerced = Launch.coerce(value)
            if coerced is not None and coerced.block is not None:
                out[name] = coerced.block
        return out
    coerced = Launch.coerce(launch)
    return _AllKernels(coerced.block) if coerced is not None and coerced.block is not None else {}


class _AllKernels(dict):
    """A mapping that gives the same block to every kernel name."""

    def __init__(self, block: tuple[int, int, int]):
        super().__init__()
        self.block = block

    def get(self, key, default=None):
        return self.block


def _template_args(unit: CudaSource) -> dict[str, tuple[str, ...]]:
    out = {}
    for expr in unit.name_expressions:
        m = re.match(r"\s*([\w:]+)\s*<(.*)>\s*$", expr)
        if m:
            out[m.group(1).split("::")[-1]] = tuple(a.strip() for a in _split_args(m.group(2)))
    return out


def _split_args(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + ([cur] if cur.strip() else [])


class _KernelContext:
    """Everything known about one kernel while its features are assembled."""

    def __init__(self, unit: CudaSource, static: StaticUnit, kernel: StaticKernel,
                 compiled: CompiledUnit | None, arch: str, sizes: dict[str, float],
                 py_launches: tuple[PythonLaunch, ...], launch: Any):
        self.unit, self.static, self.kernel, self.compiled, self.arch = unit, static, kernel, compiled, arch
        self.sizes = sizes
        self.diagnostics: list[str] = list(kernel.diagnostics)
        self.resources = self._resources()
        self.launch = self._launch(launch, py_launches)
        self.bindings = self._bindings()
        self._work = None

    # lines -----------------------------------------------------------------------------------------
    def file_line(self, line: int) -> int:
        if self.static.line_map is not None and 0 < line <= len(self.static.line_map):
            line = self.static.line_map[line - 1] or line
        mapped = self.unit.line_map
        if mapped is not None and 0 < line <= len(mapped) and mapped[line - 1]:
            return mapped[line - 1]
        return line

    # compiler facts --------------------------------------------------------------------------------
    def _resources(self) -> ResourceUsage | None:
        if self.compiled is None:
            return None
        matches = [r for r in self.compiled.resources if r.kernel == self.kernel.name]
        if not matches and self.compiled.ok:
            reason = "template not instantiated" if self.kernel.template_params else "not in the ptxas report"
            self.diagnostics.append(f"no ptxas facts for {self.kernel.name} ({reason})")
        return matches[0] if matches else None

    def sass(self) -> dict[str, int]:
        if self.compiled is None:
            return {}
        return dict(self.compiled.sass.get(self.kernel.name, {}))

    # launch ----------------------------------------------------------------------------------------
    def _launch(self, given: Any, py_launches: tuple[PythonLaunch, ...]) -> Launch:
        if isinstance(given, Mapping) and self.kernel.name in given:
            given = given[self.kernel.name]
        elif isinstance(given, Mapping) and not {"grid", "block", "smem_bytes"} & set(given):
            given = None
        chosen = Launch.coerce(given)
        if chosen is not None and chosen.block is not None:
            return chosen
        site = next((s for s in self.static.launches if s.kernel == self.kernel.name), None)
        if site is not None:
            from_site = self._site_launch(site)
            if from_site.block is not None:
                return _merge(chosen, from_site)
        py = next((p for p in py_launches if p.kernel == self.kernel.name and p.block is not None), None)
        if py is not None:
            return _merge(chosen, Launch(None, py.block, py.smem_bytes or 0, f"python line {py.line}"))
        if self.kernel.launch_bounds:
            block = (self.kernel.launch_bounds[0], 1, 1)
            return _merge(chosen, Launch(None, block, 0, "__launch_bounds__"))
        self.diagnostics.append(f"block size unknown: assumed {DEFAULT_BLOCK} threads (pass launch=...)")
        return _merge(chosen, Launch(None, (DEFAULT_BLOCK, 1, 1), 0, "default"))

    def _site_launch(self, site: LaunchSite) -> Launch:
        b = self.sizes

        def num(v):
            if isinstance(v, Poly):
                x = v.evaluate(b)
                return None if x is None else max(1, math.ceil(x))
            return None

        block = tuple(num(v) for v in site.block)
        grid = tuple(num(v) for v in site.grid)
        smem = num(site.smem_bytes) if site.smem_bytes is not None else 0
        return Launch(grid if None not in grid else None, block if None not in block else None,
                      int(smem or 0), f"<<<>>> line {self.file_line(site.line)}")

    def _bindings(self) -> dict[str, float]:
        out = {k: float(v) for k, v in self.sizes.items()}
        for i, d in enumerate(DIMS):
            used = d in self.kernel.uses_dims
            if self.launch.block is not None:
                out.setdefault(f"blockDim.{d}", float(self.launch.block[i]))
            elif not used:
                out.setdefault(f"blockDim.{d}", 1.0)
            if self.launch.grid is not None:
                out.setdefault(f"gridDim.{d}", float(self.launch.grid[i]))
            elif not used:
                out.setdefault(f"gridDim.{d}", 1.0)
        out.setdefault("warpSize", 32.0)
        return out

    # features --------------------------------------------------------------------------------------
    def occupancy(self):
        r = self.resources
        threads = self.launch.threads_per_block
        if r is None or threads is None:
            return None
        if self.kernel.launch_bounds and threads > self.kernel.launch_bounds[0]:
            self.diagnostics.append(f"block of {threads} threads exceeds "
                                    f"__launch_bounds__({self.kernel.launch_bounds[0]}): the launch fails")
        return theoretical_occupancy(self.arch, threads, r.registers, r.smem_static_bytes,
                                     self.launch.smem_bytes)

    def work(self) -> dict[str, Any]:
        if self._work is None:
            self._work = self._evaluate_work()
        return self._work

    def work_values(self) -> dict[str, float]:
        w = self.kernel.work
        values = dict(self.bindings)
        if w is not None:
            values.update(evaluate_log_terms(w.log_terms, values))
            values.update(evaluate_segment_terms(w.segment_terms, values))
        return values

    def _evaluate_work(self) -> dict[str, Any]:
        w = self.kernel.work
        out: dict[str, Any] = {"flops": None, "requested": None, "footprint": None, "unbound": (),
                               "barriers": None, "divisions": None, "threads": None}
        if w is None:
            return out
        values = self.work_values()
        out["flops"] = w.flops.evaluate(values)
        out["barriers"] = w.barriers_per_thread.evaluate(values)
        out["divisions"] = w.divisions_per_thread.evaluate(values)
        out["threads"] = w.threads.evaluate(values)
        out["requested"] = w.bytes_requested.evaluate(values)
        out["footprint"] = self._footprint(w, values)
        missing = set()
        for p in (w.flops, w.bytes_requested):
            missing |= {s for s in p.symbols if s not in values}
        out["unbound"] = tuple(sorted(re.sub(r"#\d+", "", s) for s in missing))
        if out["unbound"]:
            self.diagnostics.append("FLOPs/bytes need values for " + ", ".join(out["unbound"])
                                    + " (sizes=...)")
        return out

    def _footprint(self, w, values: dict[str, float]) -> float | None:
        """Sum over global arrays of min(span of offsets, bytes requested)."""
        k = self.kernel
        spans: dict[str, float | None] = {}
        if k.scope is not None:
            dims = {f"{v}.{d}": values.get(f"{v}.{d}") for v in ("blockDim", "gridDim") for d in DIMS}
            guards = {}
            if self.launch.grid is None:
                for d, n in k.guards.items():
                    x = n.evaluate(values)
                    if x is not None:
                        guards[d] = x
            try:
                spans = footprints(k.scope, k.accesses, self.sizes, dims, guards)
            except Exception as exc:  # noqa: BLE001 - bounds are best effort; the request still stands
                self.diagnostics.append(f"footprint failed: {type(exc).__name__}: {exc}")
        total = 0.0
        for array, requested in w.requested_by_array.items():
            req = requested.evaluate(values)
            span = spans.get(array)
            candidates = [x for x in (req, span) if x is not None]
            if not candidates:
                return None
            total += min(candidates)
        return total

    def features(self) -> KernelFeatures:
        occ = self.occupancy()
        work = self.work()
        flops = work["flops"]
        bytes_est = work["footprint"] if work["footprint"] is not None else work["requested"]
        intensity = flops / bytes_est if flops is not None and bytes_est else None
        sass = self.sass()
        regime = None
        if intensity is not None:
            regime = "compute" if intensity >= self.ridge(sass) else "memory"
        k = self.kernel
        return KernelFeatures(
            kernel=k.name,
            resources=self.resources,
            occupancy=occ,
            accesses=tuple(dataclasses.replace(a.record(), line=self.file_line(a.line)) for a in k.accesses),
            barriers=len(k.barriers),
            divergent_barriers=tuple(self.file_line(b.line) for b in k.barriers if b.divergent_reason),
            redundant_barriers=tuple(self.file_line(b.line) for b in k.barriers if b.redundant),
            atomics=k.atomics,
            vectorized_accesses=sum(1 for a in k.accesses if a.vectorized),
            sass=sass,
            flops_estimate=flops,
            bytes_estimate=bytes_est,
            arithmetic_intensity=intensity,
            roofline_regime=regime,
            diagnostics=tuple(self.diagnostics),
        )

    def ridge(self, sass: dict[str, int]) -> float:
        return ridge_flops_per_byte(sass.get("hmma", 0) + sass.get("hgmma", 0) + sass.get("imma", 0) > 0)

    def detail(self) -> KernelDetail:
        k, w = self.kernel, self.kernel.work
        work = self.work()
        return KernelDetail(
            kernel=k.name,
            line=self.file_line(k.line),
            launch=self.launch,
            shared_arrays=tuple({"name": s.name, "line": self.file_line(s.line), "dims": list(s.dims),
                                 "elem_bytes": s.elem_bytes, "padded": s.padded, "dynamic": s.dynamic}
                                for s in k.shared_arrays),
            local_arrays=tuple({"name": n, "line": self.file_line(ln)} for n, ln in k.local_arrays),
            bytes_requested=work["requested"],
            bytes_footprint=work["footprint"],
            flops_expression=_plain(w.flops) if w else "",
            bytes_expression=_plain(w.bytes_requested) if w else "",
            ridge_flops_per_byte=self.ridge(self.sass()),
            unbound_symbols=work["unbound"],
            thread_dependent_conditions=tuple(self.file_line(x) for x in k.thread_dependent_conditions),
            global_accesses=tuple(self._global_access(a, i) for i, a in enumerate(k.accesses)
                                  if a.space == "global"),
            atomic_accesses=tuple(self._atomic_access(a, i) for i, a in enumerate(k.accesses)
                                  if a.kind == "atomic"),
            barriers_per_thread=work["barriers"],
            divisions_per_thread=work["divisions"],
            threads=work["threads"],
        )

    def _requests(self, index: int) -> float | None:
        w = self.kernel.work
        weight = w.access_requests[index] if w is not None and index < len(w.access_requests) else None
        return weight.evaluate(self.work_values()) if weight is not None else None

    def _global_access(self, a, index: int) -> dict[str, Any]:
        return {"line": self.file_line(a.line), "kind": a.kind, "sectors": a.sectors,
                "ideal_sectors": ideal_sectors(a.access_bytes), "window": a.window,
                "window_sectors": a.window_sectors, "requests": self._requests(index)}

    def _atomic_access(self, a, index: int) -> dict[str, Any]:
        return {"line": self.file_line(a.line), "space": a.space, "requests": self._requests(index),
                "thread_share": a.thread_share, "warp_passes": a.warp_passes}


def _merge(caller: Launch | None, found: Launch) -> Launch:
    if caller is None:
        return found
    return Launch(caller.grid or found.grid, caller.block or found.block,
                  caller.smem_bytes or found.smem_bytes, caller.source or found.source)


def _plain(p: Poly) -> str:
    return re.sub(r"#\d+", "", str(p))


# --------------------------------------------------------------------------------------------------
# Feedback


def render_kernel_feedback(ctx: _KernelContext, f: KernelFeatures, d: KernelDetail) -> list[str]:
    k = ctx.kernel
    out: list[str] = []
    for a in k.accesses:
        line = ctx.file_line(a.line)
        prep = "to" if a.kind == "store" else ("on" if a.kind == "atomic" else "from")
        if a.space == "global" and a.coalescing is CoalescingClass.UNCOALESCED:
            out.append(f"line {line}: {a.kind} {prep} {a.array} strided by {a.stride_text} along "
                       f"threadIdx.x — uncoalesced: each lane needs its own 32-byte sector; let threadIdx.x "
                       f"index the contiguous dimension")
        elif a.space == "global" and a.coalescing is CoalescingClass.STRIDED and a.window > 1:
            out.append(f"line {line}: {a.kind} {prep} {a.array}: a per-thread window ({a.window} requests "
                       f"strided by {a.stride_elements} elements that share their sectors, "
                       f"{a.window_sectors:.1f} sectors per request over the window) — the repeats find "
                       f"their sectors already fetched; vector accesses (float4) need fewer instructions")
        elif a.space == "global" and a.coalescing is CoalescingClass.STRIDED:
            out.append(f"line {line}: {a.kind} {prep} {a.array} strided by {a.stride_elements} elements "
                       f"along threadIdx.x — {min(a.stride_elements, 8)}x the memory transactions of a "
                       f"coalesced access")
        elif a.space == "shared" and a.bank_conflict_degree and a.bank_conflict_degree > 1:
            pad = _padding_hint(k, a.array)
            out.append(f"line {line}: shared {a.kind} {a.text} has a {a.bank_conflict_degree}-way bank "
                       f"conflict (stride {a.stride_text} along threadIdx.x){pad}")
        elif a.kind == "atomic" and a.space == "global" and a.coalescing is CoalescingClass.BROADCAST and \
                not _guarded(a):
            out.append(f"line {line}: every thread of a warp issues an atomic on the same {a.array} "
                       f"address — serialised; reduce within the warp/block first")
    for b in k.barriers:
        if b.divergent_reason:
            out.append(f"line {ctx.file_line(b.line)}: {b.text} {b.divergent_reason} — threads that skip a "
                       f"barrier make it undefined behaviour (hang or race)")
        if b.redundant:
            out.append(f"line {ctx.file_line(b.line)}: {b.text} follows another barrier with no memory "
                       f"access in between — likely redundant")
    out.extend(_resource_feedback(ctx, f, d))
    return out


def _guarded(a) -> bool:
    parent = a.node.parent
    while parent is not None and parent.type != "function_definition":
        if parent.type == "if_statement":
            return True
        parent = parent.parent
    return False


def _padding_hint(k: StaticKernel, array: str) -> str:
    arr = next((s for s in k.shared_arrays if s.name == array), None)
    if arr is not None and arr.padded is False and len(arr.dims) == 2:
        return f"; pad the row: {array}[{arr.dims[0]}][{arr.dims[1]} + 1]"
    return ""


def _resource_feedback(ctx: _KernelContext, f: KernelFeatures, d: KernelDetail) -> list[str]:
    out = []
    name, r = f.kernel, f.resources
    if r is not None and (r.spill_store_bytes or r.spill_load_bytes):
        out.append(f"kernel {name}: {r.spill_store_bytes} bytes spilled to local memory "
                   f"({r.registers} registers)")
    elif r is not None and r.stack_frame_bytes and d.local_arrays:
        names = ", ".join(x["name"] for x in d.local_arrays)
        out.append(f"kernel {name}: {r.stack_frame_bytes}-byte stack frame: per-thread array {names} lives "
                   f"in local memory (indexed dynamically); use registers (constant indices) or shared "
                   f"memory")
    occ = f.occupancy
    if occ is not None and occ.occupancy < 0.5:
        out.append(f"kernel {name}: theoretical occupancy {occ.occupancy:.0%} on {occ.arch} "
                   f"({occ.active_blocks_per_sm} blocks of {occ.block_size} threads per SM), limited by "
                   f"{', '.join(occ.limiting_factors) or 'nothing'}")
    if f.arithmetic_intensity is not None:
        req = d.bytes_requested
        reuse = req / f.bytes_estimate if req and f.bytes_estimate else None
        line = (f"kernel {name}: ~{_si(f.flops_estimate)}FLOP over ~{_si(f.bytes_estimate)}B -> "
                f"{f.arithmetic_intensity:.2f} FLOP/byte, {f.roofline_regime}-bound on H200 "
                f"(ridge {d.ridge_flops_per_byte:.1f})")
        if reuse is not None and reuse >= 4 and not d.shared_arrays:
            line += f"; global memory is requested {reuse:.0f}x per byte: stage reused data in shared memory"
        out.append(line)
    scalar_coalesced = [a for a in f.accesses
                        if a.space == "global" and a.coalescing is CoalescingClass.COALESCED
                        and a.vector_width == 1]
    if f.roofline_regime == "memory" and scalar_coalesced and not f.vectorized_accesses:
        out.append(f"kernel {name}: memory-bound with scalar accesses only — 128-bit loads/stores "
                   f"(float4) cut instructions per byte")
    return out


def _si(x: float | None) -> str:
    if x is None:
        return "?"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} "


def render_feedback(report: AnalysisReport) -> str:
    """The feedback as text for a model or a person: findings first, then diagnostics."""
    lines = list(report.feedback)
    if not lines and report.kernels:
        lines.append("no structural problems found")
    if report.diagnostics:
        lines.append("")
        lines.extend(f"note: {d}" for d in report.diagnostics)
    for k in report.kernels:
        for diag in k.diagnostics:
            lines.append(f"note ({k.kernel}): {diag}")
    return "\n".join(lines).strip()


__all__ = ["AnalysisReport", "KernelDetail", "Launch", "analyze_source", "render_feedback"]

