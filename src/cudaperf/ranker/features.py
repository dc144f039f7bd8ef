"""Features of one solution on one input configuration: what the feature ranker and its baselines read.

`config_features(source, problem, config) -> ConfigFeatures` joins four kinds of facts, every one
computed from the code and the task, never from a measurement:
- the problem on this configuration (`p_*`): elements in and out, element width, inputs per output, the
  value range of integer inputs (histogram keys: how many threads collide on one bin);
- the launches the host code makes here (`l_*`, from `trace.trace_solution`): how many, threads against
  output and input elements (coarsening, grid-stride), blocks, waves of the H200's 132 SMs at the
  kernel's theoretical occupancy, the idle share of the last wave, under-filled launches, dynamic shared
  memory; a host loop of launches (two-pass, sorting networks) shows as the launch count;
- the structural analysis with this configuration's launch and kernel arguments bound (`a_*`,
  `cudaperf.analysis.analyze_source`): FLOPs and bytes summed over the launches, bytes per output
  element, bytes requested against the footprint (how often each byte is re-read from global memory:
  what shared-memory tiling and register windows remove), intensity, registers, spills, shared memory,
  occupancy, barriers, global and shared atomics and their contention (threads per atomic target),
  coalescing classes, bank conflicts, vector accesses, and the existing structural score
  (`cudaperf.reward.structural_score`, which counts a per-thread window as coalesced); per-thread windows
  (strided requests that share their sectors: their share, and the sectors a request costs over the
  ideal, weighted by requests), bytes requested per
  SM a launch can use (a one-block pass stands out), barrier executions per thread and FLOPs per barrier,
  integer divisions by runtime divisors per output element;
- what the CUDA text says about the algorithm (`s_*`): warp shuffles, tensor-core fragments, unrolled
  loops, loop nests, shared-memory tiles, `__ldg`/`__restrict__`, early exits;
- a roofline cost model of this configuration (`c_*`, `cost_values`): launches x a launch's fixed cost
  + max(compulsory bytes through HBM at the bandwidth the resident threads' requests can keep busy,
  requested sectors through L1, bytes per usable SM, FLOPs and runtime integer divisions, atomics: their
  throughput and the updates of the busiest address) + barrier waits, each against the problem's ideal
  time (its bytes once through HBM plus one launch), so values compare across tasks; the ranker uses the
  whole estimate as its prior (`feature_ranker`).

Deliberately absent: the source's length, token counts, the strategy name or tags. The generated dataset
has the naive template always shortest, so length predicts its winners without saying anything about
performance; model-written kernels do not share that artefact (issue 20). Length is kept beside the
features (`ConfigFeatures.source_chars`) only for the "longer source wins" baseline and for building
length-controlled pairs.

Compiler facts (registers, static shared memory, spills: `CompilerFacts`) come from one NVRTC + ptxas
build per source (`compiler_facts`), or from the dataset's committed static features, which hold the same
summary of the same build (`facts_from_static`: no recompilation of 15,709 sources). Occupancy and waves
are then computed for the launch the trace found, not for a default block.

Not covered: compiler facts beyond ptxas (no SASS: its disassembly costs ~0.3 s per unit), dynamic
(ncu) counters, inputs' values beyond their declared ranges.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cudaperf.ranker.problem import Problem, ProblemSizes
from cudaperf.ranker.trace import LaunchRecord, TraceResult, trace_solution

SCHEMA_VERSION = 12  # bump when a feature's meaning changes: stored models of another schema refuse to load
H200_SMS = 132

PROBLEM = (
    "p_log_in_elems",
    "p_log_out_elems",
    "p_elem_bytes",
    "p_log_in_per_out",
    "p_log_value_span",
    "p_is_c",
)
LAUNCH = (
    "l_trace_ok",
    "l_launches",
    "l_log_launches",
    "l_kernels",
    "l_log_threads",
    "l_log_blocks_max",
    "l_block_threads",
    "l_log_threads_per_out",
    "l_log_threads_per_in",
    "l_waves",
    "l_log_waves",
    "l_tail_idle",
    "l_underfilled_launches",
    "l_smem_dyn_bytes",
    "l_grid_dims",
    "l_block_dims",
)
ANALYSIS = (
    "a_ok",
    "a_log_flops",
    "a_log_bytes",
    "a_log_bytes_per_out",
    "a_log_bytes_per_in",
    "a_log_flops_per_out",
    "a_intensity",
    "a_registers",
    "a_spill_bytes",
    "a_smem_static_bytes",
    "a_occupancy",
    "a_blocks_per_sm",
    "a_barriers",
    "a_divergent_barriers",
    "a_atomics",
    "a_global_atomics",
    "a_shared_atomics",
    "a_log_atomic_contention",
    "a_log_shared_atomic_contention",
    "a_log_requested_per_out",
    "a_log_reuse",
    "a_vectorized",
    "a_global",
    "a_coalesced_share",
    "a_strided_share",
    "a_uncoalesced_share",
    "a_broadcast_share",
    "a_shared",
    "a_bank_conflict_max",
    "a_structural",
    "a_window_share",
    "a_log_sector_excess",
    "a_log_sm_bytes_per_out",
    "a_log_barriers_per_thread",
    "a_log_flops_per_barrier",
    "a_log_divisions_per_out",
)
SOURCE = (
    "s_shuffles",
    "s_wmma",
    "s_unroll",
    "s_loops",
    "s_max_loop_depth",
    "s_shared_arrays",
    "s_ldg",
    "s_restrict",
    "s_early_return",
    "s_float4",
    "s_kernels",
    "s_device_functions",
)
COST = (
    "c_log_est",
    "c_log_dram",
    "c_log_l1",
    "c_log_sm",
    "c_log_compute",
    "c_log_launch",
    "c_log_barrier",
    "c_log_atomic",
    "c_log_inflight_share",
)
FEATURE_NAMES: tuple[str, ...] = PROBLEM + LAUNCH + ANALYSIS + SOURCE + COST
NAN = float("nan")


@dataclass(frozen=True)
class ConfigFeatures:
    """One solution on one configuration: `values` follow `FEATURE_NAMES` (NaN = unknown)."""

    values: tuple[float, ...]
    source_chars: int  # baselines only: never a feature
    structural_score: float  # the reward's structural score, for the baseline (a_structural: see _analysis)
    notes: tuple[str, ...] = field(default_factory=tuple)  # why some values are unknown

    def as_dict(self) -> dict[str, float]:
        return dict(zip(FEATURE_NAMES, self.values, strict=True))


@dataclass(frozen=True)
class CompilerFacts:
    """ptxas facts of a solution, worst over its kernels (the summary `compact_features` commits)."""

    registers: int | None
    smem_static_bytes: int
    spill_bytes: int


def compiler_facts(source: str, arch: str = "sm_90") -> CompilerFacts | None:
    """One NVRTC + ptxas build (cached on disk by the toolchain); None when nothing compiled."""
    from cudaperf.analysis.analyze import analyze_source

    report = analyze_source(source, arch=arch, compile=True, sass=False)
    res = [k.resources for k in report.kernels if k.resources is not None]
    if not res:
        return None
    return CompilerFacts(
        max(r.registers for r in res),
        max(r.smem_static_bytes or 0 for r in res),
        sum((r.spill_store_bytes or 0) + (r.spill_load_bytes or 0) for r in res),
    )


def facts_from_static(row: Mapping[str, Any] | None) -> CompilerFacts | None:
    """The same facts from a committed `features*.jsonl` row's `features` (stats.compact_features)."""
    if not row or row.get("registers_max") is None:
        return None
    return CompilerFacts(
        int(row["registers_max"]),
        int(row.get("smem_static_bytes_max") or 0),
        int(row.get("spill_bytes") or 0),
    )


def config_features(
    source: str,
    problem: Problem | Any,
    config: str,
    *,
    facts: CompilerFacts | None = None,
    compile: bool = True,
    tracer=trace_solution,
) -> ConfigFeatures:
    """Features of `source` on `config` of `problem` (a `Problem`, `Task` or dataset task). Never raises.

    `facts`: the source's compiler facts when known; otherwise built here when `compile` (cached on disk).
    `tracer`: how the launches are found (`trace.trace_solution` in this process; pass a function that
    calls `trace.trace_isolated` for untrusted candidates)."""
    problem = Problem.of(problem)
    notes: list[str] = []
    if facts is None and compile:
        facts = compiler_facts(source)
    try:
        sizes = problem.sizes(config)
    except Exception as exc:  # noqa: BLE001 - a task whose sizes cannot be read still gets code features
        sizes = ProblemSizes(0, 0, 4, 0)
        notes.append(f"sizes: {type(exc).__name__}: {exc}"[:200])
    trace = tracer(source, problem, config)
    if not trace.ok:
        notes.append(f"trace: {trace.error}")
    values: dict[str, float] = {}
    values.update(problem_values(sizes, problem))
    report, score = _analysis(source, trace, facts, notes)
    text = source_values(source)
    values.update(analysis_values(report, trace, sizes, score, tensor=text["s_wmma"] > 0))
    values.update(launch_values(trace, sizes, _blocks_per_sm(report)))
    values.update(text)
    return ConfigFeatures(
        tuple(float(values.get(n, NAN)) for n in FEATURE_NAMES), len(source), score, tuple(notes)
    )


def _l2(x: float | None) -> float:
    return math.log2(1.0 + x) if x is not None and x >= 0 else NAN


def _ratio_l2(a: float | None, b: float | None) -> float:
    return math.log2(a / b) if a and b and a > 0 and b > 0 else NAN


def problem_values(s: ProblemSizes, problem: Problem) -> dict[str, float]:
    from cudaperf.types import TaskKind

    return {
        "p_log_in_elems": _l2(s.in_elems),
        "p_log_out_elems": _l2(s.out_elems),
        "p_elem_bytes": float(s.elem_bytes),
        "p_log_in_per_out": _ratio_l2(s.in_elems, s.out_elems),
        "p_log_value_span": _l2(s.value_span),
        "p_is_c": float(problem.kind is TaskKind.C),
    }


# --------------------------------------------------------------------------------------------------
# Launches


def _main_launch(launches: tuple[LaunchRecord, ...]) -> LaunchRecord | None:
    """The launch with the most threads: the one that does the bulk of the work."""
    return max(launches, key=lambda x: x.blocks * x.threads_per_block, default=None)


def launch_values(trace: TraceResult, s: ProblemSizes, blocks_per_sm: dict[str, int]) -> dict[str, float]:
    launches = trace.launches
    main = _main_launch(launches)
    out = {
        "l_trace_ok": float(trace.ok and bool(launches)),
        "l_launches": float(len(launches)),
        "l_log_launches": _l2(len(launches)),
        "l_kernels": float(len({x.kernel for x in launches})),
    }
    if main is None:
        return out
    threads = main.blocks * main.threads_per_block
    per_sm = blocks_per_sm.get(main.kernel) or max(1, 2048 // max(32, main.threads_per_block))
    waves = main.blocks / (per_sm * H200_SMS)
    out.update(
        {
            "l_log_threads": _l2(sum(x.blocks * x.threads_per_block for x in launches)),
            "l_log_blocks_max": _l2(main.blocks),
            "l_block_threads": float(main.threads_per_block),
            "l_log_threads_per_out": _ratio_l2(threads, s.out_elems),
            "l_log_threads_per_in": _ratio_l2(threads, s.in_elems),
            "l_waves": waves,
            "l_log_waves": _ratio_l2(waves, 1.0) if waves > 0 else NAN,
            "l_tail_idle": (math.ceil(waves) - waves) / math.ceil(waves) if waves > 0 else NAN,
            "l_underfilled_launches": float(sum(x.blocks < H200_SMS for x in launches)),
            "l_smem_dyn_bytes": float(max(x.smem_bytes for x in launches)),
            "l_grid_dims": float(sum(d > 1 for d in main.grid)),
            "l_block_dims": float(sum(d > 1 for d in main.block)),
        }
    )
    return out


# --------------------------------------------------------------------------------------------------
# Structural analysis with this configuration's launch bound


def _analysis(source: str, trace: TraceResult, facts: CompilerFacts | None, notes: list[str]):
    from cudaperf.analysis.analyze import analyze_source
    from cudaperf.reward import structural_score

    sizes: dict[str, float] = {}
    launch: dict[str, dict[str, Any]] = {}
    for x in trace.launches:
        sizes.update({k: v for k, v in x.scalars.items() if k not in sizes})
        # array lengths bind the mean trip of a segment loop (`p = off[i]; p < off[i + 1]`: intensity)
        sizes.update({f"numel({k})": float(v) for k, v in x.tensors.items() if f"numel({k})" not in sizes})
        launch.setdefault(x.kernel, {"grid": x.grid, "block": x.block, "smem_bytes": x.smem_bytes})
    report = analyze_source(source, sizes=sizes, launch=launch or None, compile=False, sass=False)
    failed = [d for d in report.diagnostics if d.startswith("analysis failed")]
    notes.extend(failed[:1])
    if facts is not None:
        report = dataclasses.replace(
            report, kernels=tuple(_with_facts(k, facts, launch) for k in report.kernels)
        )
    if not report.kernels:
        return report, NAN
    return report, structural_score(report.kernels)[0]


def _with_facts(k, facts: CompilerFacts, launch: Mapping[str, Mapping[str, Any]]):
    """The kernel's features with the compiler facts and the occupancy of its traced launch (256 threads
    when the trace did not see it launched)."""
    from cudaperf.analysis.occupancy import theoretical_occupancy
    from cudaperf.types import ResourceUsage

    seen = launch.get(k.kernel, {})
    block = seen.get("block", (256, 1, 1))
    threads = block[0] * block[1] * block[2]
    res = ResourceUsage(
        k.kernel, "sm_90", facts.registers or 0, facts.smem_static_bytes, 0, facts.spill_bytes, 0
    )
    occ = theoretical_occupancy(
        "sm_90", threads, facts.registers or 0, facts.smem_static_bytes, int(seen.get("smem_bytes", 0))
    )
    return dataclasses.replace(k, resources=res, occupancy=occ)


def _blocks_per_sm(report) -> dict[str, int]:
    return {
        k.kernel: k.occupancy.active_blocks_per_sm
        for k in report.kernels
        if k.occupancy is not None and k.occupancy.active_blocks_per_sm
    }


def _launch_counts(trace: TraceResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for x in trace.launches:
        counts[x.kernel] = counts.get(x.kernel, 0) + 1
    return counts


def _requested(report, trace: TraceResult) -> tuple[float | None, float | None]:
    """Bytes requested (every global access x trip counts x threads) and compulsory footprint bytes, each
    summed over the launches; None when the analysis could not bind them."""
    counts = _launch_counts(trace)
    req = foot = 0.0
    known_req = known_foot = False
    for d in report.details:
        n = counts.get(d.kernel, 0 if counts else 1)
        if d.bytes_requested is not None:
            req, known_req = req + n * d.bytes_requested, True
        if d.bytes_footprint is not None:
            foot, known_foot = foot + n * d.bytes_footprint, True
    return (req if known_req else None), (foot if known_foot else None)


def _work(report, trace: TraceResult) -> tuple[float | None, float | None]:
    """FLOPs and bytes over the launches: each kernel's estimate times its number of launches (a kernel
    that the trace never saw launched counts once: a trace that failed still says something)."""
    counts = _launch_counts(trace)
    flops = bytes_ = 0.0
    known = False
    for k in report.kernels:
        n = counts.get(k.kernel, 0 if counts else 1)
        if k.flops_estimate is not None:
            flops += n * k.flops_estimate
            known = True
        if k.bytes_estimate is not None:
            bytes_ += n * k.bytes_estimate
    return (flops if known else None), (bytes_ if known or bytes_ else None)


def _dram_bytes(report, trace: TraceResult, s: ProblemSizes, footprint: float | None) -> float | None:
    """Compulsory bytes over the launches: each launch's footprint, capped by the bytes of the tensors it
    was passed (elements x the problem's element width): a launch cannot have to move more than its
    arguments hold, even where the analysis cannot bound an index (`e / OW % OH`) and falls back to the
    bytes requested. The analysis' footprint when the trace saw no tensors."""
    sizes = {k.kernel: k.bytes_estimate for k in report.kernels}
    if not trace.launches or not any(x.tensor_elems for x in trace.launches):
        return footprint
    total = 0.0
    for x in trace.launches:
        cap = sum(x.tensor_elems) * s.elem_bytes if x.tensor_elems else None
        own = sizes.get(x.kernel)
        known = [v for v in (own, cap) if v is not None]
        total += min(known) if known else 0.0
    return total


def analysis_values(
    report, trace: TraceResult, s: ProblemSizes, score: float, tensor: bool = False
) -> dict[str, float]:
    """The `a_*` and `c_*` features; `tensor`: the source runs its FLOPs on tensor cores."""
    ks = report.kernels
    if not ks:
        return {"a_ok": 0.0, "a_structural": score}
    flops, bytes_ = _work(report, trace)
    res = [k.resources for k in ks if k.resources is not None]
    occ = [k.occupancy for k in ks if k.occupancy is not None]
    glob = [a for k in ks for a in k.accesses if a.space == "global"]
    shared = [a for k in ks for a in k.accesses if a.space == "shared"]
    atomics = sum(k.atomics for k in ks)
    g_atomics = sum(a.kind == "atomic" for a in glob)
    s_atomics = sum(a.kind == "atomic" for a in shared)
    main = _main_launch(trace.launches)
    threads = main.blocks * main.threads_per_block if main else None
    requested, footprint = _requested(report, trace)
    out = {
        "a_ok": 1.0,
        "a_log_flops": _l2(flops),
        "a_log_bytes": _l2(bytes_),
        "a_log_bytes_per_out": _ratio_l2(bytes_, s.out_elems * s.elem_bytes),
        "a_log_bytes_per_in": _ratio_l2(bytes_, s.in_elems * s.elem_bytes),
        "a_log_flops_per_out": _ratio_l2(flops, s.out_elems) if flops else 0.0,
        "a_intensity": flops / bytes_ if flops is not None and bytes_ else NAN,
        "a_registers": max((r.registers or 0 for r in res), default=NAN),
        "a_spill_bytes": float(sum((r.spill_store_bytes or 0) + (r.spill_load_bytes or 0) for r in res)),
        "a_smem_static_bytes": max((r.smem_static_bytes or 0 for r in res), default=NAN),
        "a_occupancy": min((o.occupancy for o in occ), default=NAN),
        "a_blocks_per_sm": min((o.active_blocks_per_sm for o in occ), default=NAN),
        "a_barriers": float(sum(k.barriers for k in ks)),
        "a_divergent_barriers": float(sum(len(k.divergent_barriers) for k in ks)),
        "a_atomics": float(atomics),
        "a_global_atomics": float(g_atomics),
        "a_shared_atomics": float(s_atomics),
        "a_log_atomic_contention": _contention(g_atomics, threads, s),
        "a_log_shared_atomic_contention": _contention(s_atomics, main.threads_per_block if main else None, s),
        "a_log_requested_per_out": _ratio_l2(requested, s.out_elems * s.elem_bytes),
        "a_log_reuse": _ratio_l2(requested, footprint),
        "a_vectorized": float(sum(k.vectorized_accesses for k in ks)),
        "a_global": float(len(glob)),
        "a_shared": float(len(shared)),
        "a_bank_conflict_max": float(max((a.bank_conflict_degree or 1 for a in shared), default=0)),
        "a_structural": score,
    }
    windows = sum(g["window"] > 1 for d in report.details for g in d.global_accesses)
    out.update(_coalescing_shares(glob, windows))
    out.update(_sector_values(report))
    balance, work = _balance_values(report, trace, s, flops)
    out.update(balance)
    out.update(cost_values(CostInputs(
        launches=len(trace.launches) or 1, flops=flops, footprint_bytes=_dram_bytes(report, trace, s, bytes_),
        requested_bytes=requested,
        sector_excess=2.0 ** out["a_log_sector_excess"] if math.isfinite(out["a_log_sector_excess"]) else 1.0,
        sm_bytes=work["sm_bytes"], divisions=work["divisions"], barrier_warp_execs=work["barrier_execs"] / 32,
        tensor=tensor, sizes=s,
        bytes_per_thread=requested / threads if requested is not None and threads else None,
        occupancy=out["a_occupancy"] if math.isfinite(out["a_occupancy"]) else 1.0,
        atomics=atomic_updates(report, trace, s),
    )))
    return out


def _sector_values(report) -> dict[str, float]:
    """Per-thread windows and sectors: the share of global accesses that form a window (strided requests
    that share their sectors, `analysis.memory.mark_windows`), and log2 of the mean sectors a request
    costs over the ideal, weighted by requests per thread (a window's requests at its shared rate)."""
    rows = [g for d in report.details for g in d.global_accesses]
    if not rows:
        return {"a_window_share": NAN, "a_log_sector_excess": NAN}
    share = sum(g["window"] > 1 for g in rows) / len(rows)
    num = den = 0.0
    for g in rows:
        sectors = g["window_sectors"] if g["window"] > 1 else g["sectors"]
        if sectors is None:
            continue
        weight = g["requests"] if g["requests"] and g["requests"] > 0 else 1.0
        num += weight * sectors / g["ideal_sectors"]
        den += weight
    return {"a_window_share": share, "a_log_sector_excess": math.log2(num / den) if den else NAN}


def _balance_values(report, trace: TraceResult, s: ProblemSizes, flops: float | None):
    """How the work spreads over SMs and barriers:
    - a_log_sm_bytes_per_out: bytes requested per SM a launch can use (a launch of b blocks uses
      min(b, 132) SMs), summed over the launches, against the output's bytes spread over all SMs: a
      one-block pass over the whole input (a serial scan between two parallel passes) shows here;
    - a_log_barriers_per_thread: block barriers each thread executes (loop trip counts bound);
    - a_log_flops_per_barrier: FLOPs between two barriers (a shared-memory tile that feeds only a few
      FLOPs per barrier costs more in synchronisation than it saves); NaN without barriers;
    - a_log_divisions_per_out: integer divisions by runtime divisors (index arithmetic such as
      `e / OW % OH`, a periodic wrap `(i % n + n) % n`) per output element, over the launches: each is
      a long instruction sequence, and coarsening or a tile pays it once for many elements.
    Also returns the raw sums (bytes per usable SM, divisions, barrier executions) for `cost_values`."""
    details = {d.kernel: d for d in report.details}
    sm_bytes = 0.0
    known = False
    barrier_execs = per_thread = divisions = 0.0
    for x in trace.launches:
        d = details.get(x.kernel)
        if d is None:
            continue
        divisions += (d.divisions_per_thread or 0.0) * x.blocks * x.threads_per_block
        if d.bytes_requested is not None:
            sm_bytes += d.bytes_requested / max(1, min(x.blocks, H200_SMS))
            known = True
        if d.barriers_per_thread:
            per_thread = max(per_thread, d.barriers_per_thread)
            barrier_execs += d.barriers_per_thread * x.blocks * x.threads_per_block
    out_bytes = s.out_elems * s.elem_bytes / H200_SMS
    return {
        "a_log_sm_bytes_per_out": _ratio_l2(sm_bytes, out_bytes) if known else NAN,
        "a_log_barriers_per_thread": _l2(per_thread),
        "a_log_flops_per_barrier": _ratio_l2(flops, barrier_execs) if barrier_execs else NAN,
        "a_log_divisions_per_out": _l2(divisions / s.out_elems) if trace.launches and s.out_elems else NAN,
    }, {"sm_bytes": sm_bytes if known else None, "divisions": divisions, "barrier_execs": barrier_execs}


# --------------------------------------------------------------------------------------------------
# A roofline cost model of the configuration


# Rates of the H200 (132 SMs at 1.98 GHz boost; spec-sheet arithmetic, not measured here) and the fixed
# cost of a launch. They set how the terms below weigh against each other, so the model can say that 26
# runtime divisions per output cost more than the bytes a tile saves, or that four launches of a tiny
# problem cost more than one: facts no single family teaches the trees.
LAUNCH_S = 2.5e-6  # a launch's fixed cost on the H200 (driver + the shortest kernel), order of magnitude
L1_BYTES_PER_S = H200_SMS * 128 * 1.98e9  # 128 bytes per clock per SM from L1/shared memory
FP64_FLOPS = 33.5e12  # H200 FP64 on CUDA cores (half the FP32 rate)
DIVISION_INSTRUCTIONS = 30  # a 32-bit integer division by a runtime divisor compiles to ~20-40 instructions
INT_OPS_PER_S = H200_SMS * 64 * 1.98e9  # 64 integer lanes per SM per clock
BARRIER_CLOCKS = 24  # a warp's wait at a block barrier when no warp lags, per scheduler
SCHEDULERS_PER_S = H200_SMS * 4 * 1.98e9
# Little's law: HBM keeps its bandwidth only with bandwidth x latency bytes in flight, spread over the SMs.
# A thread has at most the bytes it requests in flight; fewer resident threads, or threads that request
# a few bytes each (one load, then a barrier), leave the bandwidth idle. Latency under load, order of
# magnitude (not measured here).
DRAM_LATENCY_S = 800e-9
RESIDENT_THREADS_PER_SM = 2048
# Atomics (orders of magnitude, not measured here): global ones are served by the L2's atomic units, about
# one pass per clock per L2 slice, and updates of one address serialise at its slice (about one per
# clock); a pass serves the lanes of one warp request that fall in one 32-byte sector, so a request whose
# lanes update consecutive words (a privatised histogram's merge, `hist[threadIdx.x]`) takes its sectors'
# passes, not one per lane; lanes whose addresses are unknown (data-dependent) count one pass each. Shared
# ones at the 32 banks of each SM, an update a read and a write, and the lanes of a warp that update one
# address serialise.
GLOBAL_ATOMICS_PER_S = 1.5e11
SAME_ADDRESS_ATOMICS_PER_S = 2.0e9
SHARED_ATOMICS_PER_S = H200_SMS * 32 * 1.98e9 / 2


@dataclass(frozen=True)
class CostInputs:
    """What the cost model reads of one solution on one configuration, summed over its launches."""

    launches: int
    flops: float | None
    footprint_bytes: float | None  # compulsory bytes (DRAM)
    requested_bytes: float | None  # bytes the threads request (L1 traffic, no cache)
    sector_excess: float  # sectors a request costs over the ideal (1 = perfectly coalesced)
    sm_bytes: float | None  # bytes requested per SM a launch can use, summed over launches
    divisions: float  # integer divisions by runtime divisors, all threads
    barrier_warp_execs: float  # block-barrier executions, counted per warp
    tensor: bool  # the FLOPs run on tensor cores (wmma / mma in the source)
    sizes: ProblemSizes
    bytes_per_thread: float | None = None  # requested bytes over the main launch's threads (None: unknown)
    occupancy: float = 1.0  # resident threads over the SM's 2048 (the kernels' lowest)
    atomics: AtomicUpdates | None = None  # None: no atomics


@dataclass(frozen=True)
class AtomicUpdates:
    """Atomic updates the launches execute (threads x requests x the share of threads their `if`s let
    through): global ones, those of the busiest global address (uniform over the targets: the output's
    elements, or the integer inputs' value range when narrower), and shared ones times the lanes of a warp
    that collide on one address."""

    global_updates: float
    busiest_address_updates: float
    shared_update_slots: float
    global_passes: float = 0.0  # L2 passes of the global updates: a warp request's sectors, or one per lane


def atomic_updates(report, trace: TraceResult, s: ProblemSizes) -> AtomicUpdates | None:
    """`AtomicUpdates` over the traced launches (`analysis` per-atomic requests and thread shares); None
    without atomics or launches."""
    details = {d.kernel: d for d in report.details}
    targets = atomic_targets(s)
    global_updates = global_passes = shared_slots = 0.0
    for x in trace.launches:
        d = details.get(x.kernel)
        for a in d.atomic_accesses if d is not None else ():
            share = a["thread_share"] if a["thread_share"] is not None else 1.0
            n = x.blocks * x.threads_per_block * (a["requests"] if a["requests"] is not None else 1.0) * share
            if a["space"] == "global":
                global_updates += n
                global_passes += n * min(32, a.get("warp_passes") or 32) / 32
            else:
                shared_slots += n * 32 / min(32, targets) if targets else n
    if not global_updates and not shared_slots:
        return None
    busiest = global_updates / targets if targets else global_updates
    return AtomicUpdates(global_updates, busiest, shared_slots, global_passes)


def _atomic_s(u: AtomicUpdates | None) -> float:
    if u is None:
        return 0.0
    return max(u.global_passes / GLOBAL_ATOMICS_PER_S,
               u.busiest_address_updates / SAME_ADDRESS_ATOMICS_PER_S,
               u.shared_update_slots / SHARED_ATOMICS_PER_S)


def inflight_share(c: CostInputs) -> float:
    """The share of HBM bandwidth the resident threads can keep busy: their bytes in flight per SM (at
    most what each requests) over bandwidth x latency per SM, capped at 1. An upper bound: a loop issues
    its requests an iteration at a time. 1 when the bytes per thread are unknown."""
    from cudaperf.analysis.roofline import H200_BANDWIDTH_BYTES_PER_S

    if not c.bytes_per_thread or c.bytes_per_thread <= 0:
        return 1.0
    needed = H200_BANDWIDTH_BYTES_PER_S * DRAM_LATENCY_S / H200_SMS
    return min(1.0, max(1e-3, c.occupancy * RESIDENT_THREADS_PER_SM * c.bytes_per_thread / needed))


def cost_values(c: CostInputs) -> dict[str, float]:
    """log2 of estimated times against the problem's ideal time (its input and output bytes once through
    HBM, plus one launch): the whole estimate, launches + max(DRAM over the bandwidth share the bytes in
    flight allow, L1, per-SM, compute, atomics) + barriers, and each term (DRAM at full bandwidth). A
    per-configuration roofline: it weighs sizes against the launch shape, so it changes with the
    configuration where a winner does. NaN when the analysis gave no bytes."""
    from cudaperf.analysis.roofline import H200_BANDWIDTH_BYTES_PER_S, H200_FP32_FLOPS, H200_TENSOR_FLOPS

    s = c.sizes
    if c.footprint_bytes is None and c.requested_bytes is None:
        return {n: NAN for n in COST}
    ideal = (s.in_elems + s.out_elems) * s.elem_bytes / H200_BANDWIDTH_BYTES_PER_S + LAUNCH_S
    peak = H200_TENSOR_FLOPS if c.tensor else (FP64_FLOPS if s.elem_bytes >= 8 else H200_FP32_FLOPS)
    terms = {
        "c_log_dram": (c.footprint_bytes or 0.0) / H200_BANDWIDTH_BYTES_PER_S,
        "c_log_l1": (c.requested_bytes or 0.0) * c.sector_excess / L1_BYTES_PER_S,
        "c_log_sm": (c.sm_bytes or 0.0) * H200_SMS / L1_BYTES_PER_S,
        "c_log_compute": (c.flops or 0.0) / peak + c.divisions * DIVISION_INSTRUCTIONS / INT_OPS_PER_S,
        "c_log_launch": c.launches * LAUNCH_S,
        "c_log_barrier": c.barrier_warp_execs * BARRIER_CLOCKS / SCHEDULERS_PER_S,
        "c_log_atomic": _atomic_s(c.atomics),
    }
    share = inflight_share(c)
    dram = terms["c_log_dram"] / share
    body = max(dram, terms["c_log_l1"], terms["c_log_sm"], terms["c_log_compute"], terms["c_log_atomic"])
    est = terms["c_log_launch"] + body + terms["c_log_barrier"]
    out = {n: math.log2((t + 1e-9) / ideal) for n, t in terms.items()}  # 1 ns: a term of 0 stays finite
    out["c_log_est"] = math.log2(est / ideal)
    out["c_log_inflight_share"] = math.log2(share)  # what the DRAM term was divided by
    return out


def _contention(atomics: int, threads: int | None, s: ProblemSizes) -> float:
    """log2 of threads per atomic target: `threads` (the launch's for global atomics, a block's for shared
    ones) over the output elements, or over the integer inputs' value range when that is narrower
    (histogram keys); 0 without atomics."""
    if not atomics:
        return 0.0
    targets = atomic_targets(s)
    return _ratio_l2(threads, targets) if threads and targets else NAN


def atomic_targets(s: ProblemSizes) -> int:
    """Addresses atomics update: the output's elements, or the integer inputs' value range when that is
    narrower (histogram keys); 0 when neither is known."""
    return min((x for x in (s.out_elems, s.value_span) if x), default=0)


def _coalescing_shares(glob, windows: int = 0) -> dict[str, float]:
    """Shares of the coalescing classes over global accesses, by the sectors memory serves: `windows` of
    the strided ones form per-thread windows, whose requests share their sectors (as many per request as
    a coalesced access over the window), so they count as coalesced here, not strided; `a_window_share`
    keeps them apart (see `_sector_values`)."""
    names = ("coalesced", "strided", "uncoalesced", "broadcast")
    if not glob:
        return {f"a_{n}_share": NAN for n in names}
    classes = [getattr(a.coalescing, "value", a.coalescing) for a in glob]
    out = {f"a_{n}_share": classes.count(n) / len(classes) for n in names}
    windows = min(windows, classes.count("strided"))
    out["a_strided_share"] = (classes.count("strided") - windows) / len(classes)
    out["a_coalesced_share"] = (classes.count("coalesced") + windows) / len(classes)
    return out


# --------------------------------------------------------------------------------------------------
# What the CUDA text says


_PATTERNS = {
    "s_shuffles": r"__shfl\w*_sync",
    "s_wmma": r"\bwmma::|\bmma_sync\b|\bmma\.sync",
    "s_unroll": r"#pragma\s+unroll",
    "s_loops": r"\b(?:for|while)\s*\(",
    "s_shared_arrays": r"__shared__",
    "s_ldg": r"__ldg\s*\(",
    "s_restrict": r"__restrict__",
    "s_early_return": r"\breturn\s*;",
    "s_float4": r"\b(?:float4|double2|int4)\b",
    "s_kernels": r"__global__",
    "s_device_functions": r"__device__",
}
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def cuda_text(source: str) -> str:
    """The CUDA units of a solution (fast, load_inline or .cu), comments removed; the source itself when
    no unit is found."""
    from cudaperf.analysis.sources import solution_sources

    try:
        units = solution_sources(source, "auto").units
    except Exception:  # noqa: BLE001 - an unreadable solution: count on its text
        units = ()
    text = "\n".join(u.text for u in units) if units else source
    return _COMMENTS.sub("", text)


def source_values(source: str) -> dict[str, float]:
    text = cuda_text(source)
    out = {k: float(len(re.findall(p, text))) for k, p in _PATTERNS.items()}
    out["s_max_loop_depth"] = float(_max_loop_depth(text))
    return out


def _max_loop_depth(text: str) -> int:
    """Deepest nest of `for`/`while` loops by brace depth (a loop without braces counts one level)."""
    depth, best, stack = 0, 0, []
    pending = False
    for tok in re.finditer(r"\b(?:for|while)\s*\(|[{}]", text):
        t = tok.group(0)
        if t == "{":
            depth += 1
            if pending:
                stack.append(depth)
                pending = False
        elif t == "}":
            if stack and stack[-1] == depth:
                stack.pop()
            depth -= 1
        else:
            best = max(best, len(stack) + 1)
            pending = True
    return best
