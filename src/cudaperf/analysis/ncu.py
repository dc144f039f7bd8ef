"""Dynamic kernel features from Nsight Compute: the command line, its CSV, and `KernelFeatures.dynamic`.

Covers: `ncu_command` (one ncu run over a Python script, `--clock-control none`, region-limited with
`--profile-from-start off` around `torch.cuda.profiler.start()/stop()` or cudaProfilerStart/Stop, kernel
names filtered with `-k regex:`), `available_metrics` (what this ncu knows, so an unknown name cannot sink
a run), `parse_csv` (`--csv --page raw`: lines before the header that starts with "ID" skipped, the units
row applied, thousands separators removed), `to_dynamic` (the metrics as the features the analysis and
the reward use: achieved/theoretical occupancy, sectors per request, DRAM throughput and bytes, bank
conflicts, divergence, FLOPs, measured intensity, % of roofline), and `profile` (run + parse, where a
missing ncu or unreadable counters become diagnostics, never exceptions).

Not covered: launching kernels (the profiled script does), choosing what to profile, SASS-level source
correlation. Metric names are Nsight Compute's (docs/structure.md; verified on the H200 with ncu 2025.3.1);
names marked "checked at run time" are dropped when `available_metrics` does not list them.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from cudaperf.analysis.roofline import H200_BANDWIDTH_BYTES_PER_S, H200_FP32_FLOPS, H200_TENSOR_FLOPS
from cudaperf.types import KernelFeatures

_FLOP_OPS = [f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum"
             for p in "fdh" for op in ("add", "mul", "fma")]

VERIFIED_METRICS: tuple[str, ...] = (
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks", "launch__occupancy_limit_barriers",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__sass_branch_targets_threads_divergent.sum",
    "smsp__average_thread_inst_executed_per_inst_executed.ratio",
    *_FLOP_OPS,
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__sass_inst_executed_op_local_ld.sum", "smsp__sass_inst_executed_op_local_st.sum",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
)
CHECKED_METRICS: tuple[str, ...] = (  # checked at run time
    "sm__maximum_warps_per_active_cycle_pct", "gpu__time_duration.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum",
    "smsp__sass_inst_executed_op_global_ld.sum", "smsp__sass_inst_executed_op_global_st.sum",
    "smsp__sass_inst_executed_op_global_atom.sum", "smsp__sass_inst_executed_op_global_red.sum",
    "smsp__sass_inst_executed_op_shared_atom.sum",
    "launch__registers_per_thread", "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",  # useful bytes per sector (vectorised)
)
DEFAULT_METRICS = VERIFIED_METRICS + CHECKED_METRICS

_UNIT_SCALE = {  # units row -> factor to base units (bytes, seconds as nanoseconds, plain counts)
    "byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
    "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
    "k": 1e3, "m": 1e6, "g": 1e9,
}


@dataclass(frozen=True)
class KernelMetrics:
    id: int
    kernel: str
    metrics: dict[str, float]
    block: str = ""
    grid: str = ""


@dataclass(frozen=True)
class ProfileResult:
    ok: bool
    kernels: tuple[KernelMetrics, ...] = ()
    diagnostics: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    returncode: int | None = None
    dropped_metrics: tuple[str, ...] = field(default_factory=tuple)


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu"):
        if shutil.which(candidate):
            return candidate
    return None


def ncu_command(program: Sequence[str], *, kernels: Iterable[str] | None = None,
                metrics: Iterable[str] = DEFAULT_METRICS, ncu: str = "ncu", log_file: str | None = None,
                profile_from_start: bool = False, extra: Sequence[str] = ()) -> list[str]:
    """The ncu command line that profiles `program` (e.g. ["python3", "script.py"]).

    `kernels`: exact kernel names to profile (one `-k regex:^(a|b)$`); None profiles every kernel.
    Clock control is off: kernels run at the clocks they would run at unprofiled (docs/structure.md).
    """
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--print-units", "base",
           "--csv", "--page", "raw", "--metrics", ",".join(dict.fromkeys(metrics))]
    if not profile_from_start:
        cmd += ["--profile-from-start", "off"]
    names = list(kernels or [])
    if names:
        cmd += ["-k", "regex:^(" + "|".join(re.escape(n) for n in names) + ")$"]
    if log_file:
        cmd += ["--log-file", log_file]
    return [*cmd, *extra, *program]


def available_metrics(ncu: str = "ncu", chip: str | None = None, timeout_s: float = 120.0) -> set[str] | None:
    """Base metric names this ncu can collect on this GPU (or `chip`); None when the query fails."""
    cmd = [ncu, "--query-metrics"] + (["--chip", chip] if chip else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    names = {m.group(1) for m in re.finditer(r"^\s*([a-z0-9]+__[a-z0-9_]+)", out.stdout, re.MULTILINE)}
    return names or None


# Launch statistics and the occupancy section's metrics are computed by ncu, not read from counters, so
# `ncu --query-metrics` does not list them (ncu 2025.3 on an H200): they are always kept.
SECTION_METRICS = ("launch__", "sm__maximum_warps_per_active_cycle_pct")


def usable_metrics(wanted: Iterable[str], available: set[str] | None) -> tuple[list[str], list[str]]:
    """(kept, dropped): verified and section metrics are always kept; others only when `available` lists
    their base (or, when the query failed, `gpu__time_duration`)."""
    kept, dropped = [], []
    for m in dict.fromkeys(wanted):
        base = m.split(".")[0]
        if m in VERIFIED_METRICS or m.startswith(SECTION_METRICS) or (
                available is not None and base in available) or (
                available is None and m.startswith("gpu__time_duration")):
            kept.append(m)
        else:
            dropped.append(m)
    return kept, dropped


def parse_csv(text: str) -> list[KernelMetrics]:
    """Per-kernel metrics from `ncu --csv --page raw` output (extra lines before the header ignored)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(('"ID"', "ID,"))), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    if len(rows) < 2:
        return []
    header, body = rows[0], rows[1:]
    units = [""] * len(header)
    if body and not _looks_like_data(body[0]):  # the units row
        units, body = body[0], body[1:]
    name_col = next((header.index(c) for c in ("Kernel Name", "Function Name", "Demangled Name")
                     if c in header), None)
    out = []
    for row in body:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue
        metrics = {}
        for col, (name, unit, raw) in enumerate(zip(header, units, row)):
            if "__" not in name:
                continue
            value = _number(raw, unit)
            if value is not None:
                metrics[name] = value
        out.append(KernelMetrics(
            id=int(row[0]), kernel=row[name_col] if name_col is not None else "", metrics=metrics,
            block=_field(header, row, "Block Size"), grid=_field(header, row, "Grid Size"),
        ))
    return out


def _looks_like_data(row: list[str]) -> bool:
    return bool(row) and row[0].strip().isdigit()


def _field(header: list[str], row: list[str], name: str) -> str:
    return row[header.index(name)] if name in header else ""


def _number(raw: str, unit: str) -> float | None:
    s = raw.strip().replace(",", "")
    if not s or s.lower() in ("n/a", "nan", "-"):
        return None
    try:
        value = float(s)
    except ValueError:
        return None
    return value * _UNIT_SCALE.get(unit.strip().lower(), 1)


def to_dynamic(m: dict[str, float], *, tensor: bool = False) -> dict[str, float]:
    """ncu metrics -> the `KernelFeatures.dynamic` keys (absent inputs leave their keys out)."""
    out: dict[str, float] = {}

    def put(key: str, metric: str, scale: float = 1.0) -> None:
        if metric in m:
            out[key] = m[metric] * scale

    put("achieved_occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active", 0.01)
    put("theoretical_occupancy", "sm__maximum_warps_per_active_cycle_pct", 0.01)
    put("sectors_per_request_ld", "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio")
    put("sectors_per_request_st", "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio")
    put("dram_throughput_pct", "dram__throughput.avg.pct_of_peak_sustained_elapsed")
    put("bank_conflicts_ld", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum")
    put("bank_conflicts_st", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
    put("divergent_branch_targets", "smsp__sass_branch_targets_threads_divergent.sum")
    put("tensor_pipe_pct", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
    put("barrier_stall_ratio", "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio")
    put("duration_ms", "gpu__time_duration.sum", 1e-6)
    put("gpu_time_ms", "gpu__time_duration.sum", 1e-6)  # the key cudaperf.reward reads (launch evidence)
    if "gpu_time_ms" in out:
        out["launches"] = 1.0
    if "bank_conflicts_ld" in out or "bank_conflicts_st" in out:
        out["bank_conflicts"] = out.get("bank_conflicts_ld", 0.0) + out.get("bank_conflicts_st", 0.0)
    threads = m.get("smsp__average_thread_inst_executed_per_inst_executed.ratio")
    if threads is not None:
        out["thread_efficiency"] = threads / 32
        out["divergence_ratio"] = 1 - threads / 32
    local = [m.get(f"smsp__sass_inst_executed_op_local_{k}.sum") for k in ("ld", "st")]
    if any(v is not None for v in local):
        out["local_instructions"] = sum(v or 0.0 for v in local)
    atomics = [m.get(f"smsp__sass_inst_executed_op_{s}.sum")
               for s in ("global_atom", "global_red", "shared_atom")]
    if any(v is not None for v in atomics):
        out["atomic_instructions"] = sum(v or 0.0 for v in atomics)
    _add_work(out, m, tensor)
    return out


def _add_work(out: dict[str, float], m: dict[str, float], tensor: bool) -> None:
    if any(op in m for op in _FLOP_OPS):
        out["flops"] = sum(m.get(op, 0.0) * (2 if op.endswith("fma_pred_on.sum") else 1) for op in _FLOP_OPS)
    if "dram__bytes_read.sum" in m or "dram__bytes_write.sum" in m:
        out["dram_bytes"] = m.get("dram__bytes_read.sum", 0.0) + m.get("dram__bytes_write.sum", 0.0)
    flops, nbytes, ms = out.get("flops"), out.get("dram_bytes"), out.get("duration_ms")
    if flops is not None and nbytes:
        out["measured_intensity"] = flops / nbytes
    if ms and nbytes is not None and flops is not None:
        seconds = ms * 1e-3
        peak = H200_TENSOR_FLOPS if tensor else H200_FP32_FLOPS
        intensity = flops / nbytes if nbytes else float("inf")
        attainable = min(peak, intensity * H200_BANDWIDTH_BYTES_PER_S)
        if flops > 0:
            out["roofline_pct"] = 100 * (flops / seconds) / attainable
        else:  # pure data movement: the roof is bandwidth
            out["roofline_pct"] = 100 * (nbytes / seconds) / H200_BANDWIDTH_BYTES_PER_S
        out["roofline_fraction"] = min(1.0, out["roofline_pct"] / 100)  # the key cudaperf.reward reads


def with_dynamic(features: KernelFeatures,
                 metrics: dict[str, float] | list[dict[str, float]]) -> KernelFeatures:
    """The same features with `dynamic` filled from one kernel's ncu metrics (a list: one per launch; times
    and launches add up, the rest is taken from the longest launch)."""
    tensor = features.sass.get("hmma", 0) + features.sass.get("hgmma", 0) > 0
    launches = [metrics] if isinstance(metrics, dict) else list(metrics)
    if not launches:
        return features
    dynamic = [to_dynamic(m, tensor=tensor) for m in launches]
    merged = dict(max(dynamic, key=lambda d: d.get("gpu_time_ms", 0.0)))
    if any("gpu_time_ms" in d for d in dynamic):
        merged["gpu_time_ms"] = sum(d.get("gpu_time_ms", 0.0) for d in dynamic)
        merged["launches"] = float(len(dynamic))
    return replace(features, dynamic={**features.dynamic, **merged})


def profile(program: Sequence[str], *, kernels: Iterable[str] | None = None,
            metrics: Iterable[str] = DEFAULT_METRICS, timeout_s: float = 600.0, check_metrics: bool = True,
            log_file: str | None = None, launcher: Sequence[str] = ()) -> ProfileResult:
    """Run `program` under ncu once and parse the per-kernel metrics; failures become diagnostics.

    `launcher`: a command prefix that starts ncu itself (e.g. `cudaperf.execute.netns_exec`)."""
    ncu = find_ncu()
    if ncu is None:
        return ProfileResult(False,
                             diagnostics=("ncu not found: dynamic features unavailable on this machine",))
    dropped: list[str] = []
    wanted = list(metrics)
    if check_metrics:
        wanted, dropped = usable_metrics(wanted, available_metrics(ncu))
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cudaperf-ncu-") as d:
        log = log_file or f"{d}/ncu.csv"
        cmd = [*launcher, *ncu_command(program, kernels=kernels, metrics=wanted, ncu=ncu, log_file=log)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return ProfileResult(False, diagnostics=(f"ncu timed out after {timeout_s:.0f} s",),
                                 command=tuple(cmd), dropped_metrics=tuple(dropped))
        except OSError as exc:
            return ProfileResult(False, diagnostics=(f"ncu failed to start: {exc}",), command=tuple(cmd))
        try:
            with open(log) as fh:
                text = fh.read()
        except OSError:
            text = ""
        if '"ID"' not in text:  # an ncu that printed its results to stdout despite --log-file
            text = text + "\n" + proc.stdout
    kernels_found = parse_csv(text)
    diagnostics = _diagnose(text + "\n" + proc.stdout + "\n" + proc.stderr, proc.returncode, kernels_found)
    return ProfileResult(bool(kernels_found), tuple(kernels_found), tuple(diagnostics), tuple(cmd),
                         proc.returncode, tuple(dropped))


def _diagnose(output: str, returncode: int, kernels: list[KernelMetrics]) -> list[str]:
    out = []
    if "ERR_NVGPUCTRPERM" in output:
        out.append("ncu cannot read performance counters (ERR_NVGPUCTRPERM: counters restricted to admin "
                   "users on this machine); static features stand")
    errors = [ln.strip() for ln in output.splitlines() if ln.startswith("==ERROR==")]
    out.extend(errors[:5])
    if not kernels:
        out.append(f"ncu profiled no kernel (exit code {returncode})")
        own = [ln.rstrip() for ln in output.splitlines() if ln.strip() and not ln.startswith("==")]
        if own:  # the profiled program's own last words, e.g. the exception that stopped it
            out.append("program output: " + " | ".join(own[-6:])[:1500])
    return out
