"""Coverage: the share of GPU kernel time a candidate spends in its own kernels (Dr. Kernel's metric).

Covers: `measure_coverage(run, candidate_kernel_names)`, which profiles `run()` with `torch.profiler`
(CUDA activity) and splits GPU kernel time into *own* and *other*; `coverage_flags(report, policy)`, which
turns a report into flags (`low_coverage`, `no_gpu_work`, `stream_created`, `vendor_kernel_name`);
`kernel_names_from_source(source)`, the `__global__` names a solution declares.

Which kernels are own (the heuristic, in this order):
1. A kernel whose demangled name looks like a library kernel (`at::`/`c10::` namespaces = PyTorch,
   `cublas`/`nvjet`/`xmma`/`sm90_`/`ampere_` = cuBLAS, `cudnn`, `cutlass`, `flash::`/`fmha`, `triton_`
   = Inductor, `cub::`/`thrust::` device-wide algorithms...) is never own, even when the candidate declares
   a kernel of that name: naming cannot buy coverage (flag `vendor_kernel_name`).
2. With `candidate_kernel_names` (recommended: `kernel_names_from_source(solution.source)`), a kernel is
   own iff its identifier (name without return type, namespaces, template arguments and parameters) is
   one of them.
3. Without names, every kernel not matched by (1) is own. This is weaker: it trusts that what is not a
   known library kernel was written by the candidate.

Memcpy and memset activity is excluded from both sides (reported as `excluded_ms`): the candidate's only
way to issue copies through torch is a copy op, which `runtime.TorchOpMonitor` already flags, an honest
kernel zeroing an accumulator would otherwise be penalised on small inputs, and copies are data movement,
not the computation coverage is about. PyTorch fill kernels (`torch.zeros`) are kernels and count as not own.

Kernels and copies are also grouped by the stream they ran on. Before the profiled calls a marker kernel
is launched on torch's current stream (the stream the candidate must use); a kernel or copy on any other
stream means the candidate used a stream of its own (hack #4), even if all its work went there. Copies
count here (not in the time split): a DMA copy on a stream that does not wait for the timing stream runs
during the timing lead, which holds SM slots but not copy engines (cudaperf.lead).

Not covered: timing (coverage runs are profiled, so absolute times are inflated; only the ratio is used);
work done on the host; kernels launched by another process. Without a CUDA GPU, coverage is None.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from cudaperf.anticheat.policy import Policy, make_flag
from cudaperf.kernel_names import kernel_identifier
from cudaperf.types import Flag


class KernelTime(NamedTuple):
    """GPU time of one kernel (by demangled name) per call of `run`, and whether it is the candidate's."""

    name: str
    ms: float
    own: bool


@dataclass(frozen=True)
class CoverageReport:
    """Own vs total GPU kernel time per call of the profiled function."""

    coverage: float | None  # own_ms / total_ms; None without a GPU or when profiling failed
    own_ms: float
    total_ms: float
    kernels: tuple[KernelTime, ...] = ()
    excluded_ms: float = 0.0  # memcpy + memset time, counted on neither side
    streams: tuple[int, ...] = ()  # distinct streams the kernels ran on (marker excluded)
    current_stream: int | None = None  # the profiler's id of torch's current stream (from the marker)
    renamed: tuple[str, ...] = ()  # declared candidate kernels whose names look like library kernels
    message: str = ""


# Library kernel names (demangled). Anchored on namespaces and vendor prefixes so that honest names such as
# `gemm_tiled`, `softmax_kernel` or `reduce_rows` do not match.
_LIBRARY_PATTERNS = (
    r"\bat::", r"\bc10::", r"\bcutlass", r"\bcublas", r"\bcudnn", r"\bcufft", r"\bcusparse", r"\bcusolver",
    r"\bnvjet", r"xmma", r"\bsm\d+_", r"^(?:void\s+)?(?:ampere|volta|turing|maxwell|hopper|blackwell)_",
    r"\bgemmk?SN_", r"\bgemv2[NT]_", r"\bsplitKreduce_kernel", r"\bflash::", r"\bfmha", r"pytorch_flash",
    r"^(?:void\s+)?triton_", r"\bcunn_", r"\(anonymous namespace\)::softmax_warp_", r"\bcub::",
    r"\bthrust::", r"\bimplicit_convolve", r"\bregular_fft", r"\bvector_fft",
)
_LIBRARY = re.compile("|".join(_LIBRARY_PATTERNS))
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_GLOBAL_DECL = re.compile(r"__global__\b[^;{(]*?\b([A-Za-z_]\w*)\s*(?:<[^;{(]*>)?\s*\(")


def is_library_kernel(name: str) -> bool:
    return bool(_LIBRARY.search(name))



def is_own_kernel(name: str, candidate_kernel_names: set[str] | None) -> bool:
    if is_library_kernel(name):
        return False
    return candidate_kernel_names is None or kernel_identifier(name) in candidate_kernel_names


def kernel_names_from_source(source: str) -> set[str]:
    """Names of the `__global__` functions declared in a solution's string constants (no execution)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
            text = _LAUNCH_BOUNDS.sub(" ", node.value)
            names.update(m.group(1) for m in _GLOBAL_DECL.finditer(text))
    return names


# --------------------------------------------------------------------------------------------------
# Profiling


def _is_copy_activity(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset", "memcpy", "memset"))


def _device_events(prof) -> list:
    """GPU activity (kernels, memcpy, memset); GPU-side user annotations (record_function ranges drawn on
    the GPU timeline) are spans over kernels, not work, and are dropped."""
    return [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")
            and not getattr(e, "is_user_annotation", False)]


def _split_marker(events: list) -> tuple[int | None, list]:
    """The first kernel in time is the marker launched on the current stream: (its stream, the rest)."""
    ordered = sorted(events, key=lambda e: e.time_range.start)
    for i, e in enumerate(ordered):
        if not _is_copy_activity(e.name):
            return int(getattr(e, "device_resource_id", 0) or 0), ordered[:i] + ordered[i + 1:]
    return None, ordered


def _summarise(events: Iterable, names: set[str] | None, repeats: int, current_stream: int | None = None
               ) -> CoverageReport:
    per_kernel: dict[str, float] = {}
    streams: set[int] = set()
    excluded_us = 0.0
    for e in events:
        us = float(e.time_range.elapsed_us())
        streams.add(int(getattr(e, "device_resource_id", 0) or 0))  # copies too: a DMA copy on a side
        # stream overlaps the timing lead, which holds SM slots but not copy engines (cudaperf.lead)
        if _is_copy_activity(e.name):
            excluded_us += us
            continue
        per_kernel[e.name] = per_kernel.get(e.name, 0.0) + us
    kernels = tuple(sorted((KernelTime(n, us / 1000.0 / repeats, is_own_kernel(n, names))
                            for n, us in per_kernel.items()), key=lambda k: -k.ms))
    own_ms = sum(k.ms for k in kernels if k.own)
    total_ms = sum(k.ms for k in kernels)
    renamed = tuple(sorted(n for n in (names or ()) if is_library_kernel(n)))
    message = "" if kernels else "no GPU kernel ran during the profiled calls"
    return CoverageReport(coverage=own_ms / total_ms if total_ms > 0 else 0.0, own_ms=own_ms,
                          total_ms=total_ms, kernels=kernels, excluded_ms=excluded_us / 1000.0 / repeats,
                          streams=tuple(sorted(streams)), current_stream=current_stream, renamed=renamed,
                          message=message)


def measure_coverage(run: Callable[[], object], candidate_kernel_names: set[str] | None = None, *,
                     warmup: int = 1, repeats: int = 3) -> CoverageReport:
    """Profile `repeats` calls of `run` (after `warmup` unprofiled ones) and split kernel time own/other.

    Exceptions raised by `run` propagate (they are the caller's: a candidate failure); a failure of the
    profiler itself gives `coverage=None` with the reason in `message`.
    """
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError as e:
        return CoverageReport(None, 0.0, 0.0, message=f"torch profiler unavailable: {e}")
    if not torch.cuda.is_available():
        return CoverageReport(None, 0.0, 0.0, message="no CUDA device: coverage not measured")
    for _ in range(max(0, warmup)):
        run()
    torch.cuda.synchronize()
    repeats = max(1, repeats)
    marker = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        marker.mul_(2.0)  # one torch kernel on the current stream, before anything else
        torch.cuda.synchronize()
        for _ in range(repeats):
            run()
        torch.cuda.synchronize()
    try:
        current, events = _split_marker(_device_events(prof))
    except Exception as e:  # noqa: BLE001 -- a profiler post-processing fault is not the candidate's
        return CoverageReport(None, 0.0, 0.0, message=f"profiler failed: {type(e).__name__}: {e}")
    names = set(candidate_kernel_names) if candidate_kernel_names is not None else None
    return _summarise(events, names, repeats, current)


# --------------------------------------------------------------------------------------------------
# Verdict


def _foreign_streams(report: CoverageReport) -> tuple[int, ...]:
    """Streams other than the current one; without a marker, any second stream is foreign."""
    if report.current_stream is not None:
        return tuple(s for s in report.streams if s != report.current_stream)
    return report.streams[1:] if len(report.streams) > 1 else ()


def coverage_flags(report: CoverageReport, policy: Policy | None = None, *, config: str | None = None
                   ) -> tuple[Flag, ...]:
    """Flags for one coverage report under `policy` (none when coverage was not measured)."""
    policy = policy or Policy()
    if report.coverage is None:
        return ()
    found: list[tuple[str, str]] = []
    if report.own_ms <= 0.0:
        others = ", ".join(k.name[:60] for k in report.kernels[:3]) or "none at all"
        found.append(("no_gpu_work", f"none of the candidate's kernels ran (kernels seen: {others})"))
    elif report.coverage < policy.min_coverage:
        top = next((k for k in report.kernels if not k.own), None)
        largest = f"{top.name[:80]} ({top.ms:.3f} ms)" if top else "?"
        message = (f"own kernels account for {report.coverage:.0%} of GPU time (at least "
                   f"{policy.min_coverage:.0%} required); largest other kernel: {largest}")
        found.append(("low_coverage", message))
    foreign = _foreign_streams(report)
    if foreign:
        message = (f"kernels ran on stream(s) {list(foreign)}, not on the current stream "
                   f"{report.current_stream}: the candidate launched off the current stream")
        found.append(("stream_created", message))
    if report.renamed:
        message = f"declared kernels named like library kernels (not own): {', '.join(report.renamed)}"
        found.append(("vendor_kernel_name", message))
    return tuple(make_flag(code, msg, config=config) for code, msg in found if policy.active(code))
