"""Speed-of-light: the fastest a task could possibly run on this device, and flags for times below it.

Covers:
- `min_bytes(inputs, outputs)`: bytes a solution must at least move (read every input, write every output;
  views of one storage and broadcast dimensions counted once);
- `count_flops(model, inputs)`: FLOPs of the reference's matmuls/convolutions/attention through
  `torch.utils.flop_counter.FlopCounterMode` (elementwise work is not counted: a lower bound);
- device ceilings measured once per process and cached: bandwidth from a large device-to-device copy
  (read + write counted), peak from a large matmul in the task dtype;
- `speed_of_light(bytes_moved, flops, dtype, device) -> (floor_ms, bandwidth_gbps, peak_tflops)`,
  `estimate(...)` with the memory and compute floors apart, and `speed_flags(...)`.

Why the fp32 peak is measured WITH TF32 on (the reference itself runs with TF32 off): the floor must be a
true lower bound on time. Kernels that reach fp32 accuracy on tensor cores (3xTF32 splitting) run faster
than the fp32 SIMT peak; a floor from the SIMT peak would call them impossible.

Why only the memory floor gives an ERROR (`impossible_speed`) and the compute floor a WARNING
(`below_compute_floor`): FlopCounter counts the reference's dense work, and a candidate may legitimately
do less when the inputs have structure (a triangular or diagonal matrix multiplied densely by the
reference). Every correct answer must still read its inputs and write its outputs, which the checked,
rotated inputs of timing.py make unavoidable. Both floors are skipped when the reference itself runs
below them (`sol_floor_unreliable`): then the byte count is wrong for the task (it reads a slice).

Not covered: timing (timing.py), L2-resident working sets (a floor from HBM bandwidth is meant for
inputs larger than L2; smaller ones are flushed from L2 before every timed call, so it still holds).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from cudaperf.correctness import flatten_tensors
from cudaperf.types import Flag, Severity

IMPOSSIBLE_MARGIN = 0.8  # a time below 0.8x the floor is impossible: measured ceilings are not exact
COPY_BYTES = 1 << 30  # 1 GiB: far above any L2, long enough (~0.5 ms on an H200) for events
MATMUL_SIZE = {torch.float16: 8192, torch.bfloat16: 8192, torch.float32: 8192, torch.float64: 4096}


class SpeedOfLight(NamedTuple):
    floor_ms: float | None
    bandwidth_gbps: float | None
    peak_tflops: float | None


@dataclass(frozen=True)
class SolEstimate:
    """The floor and its two parts (None where not measurable, e.g. on CPU)."""

    floor_ms: float | None
    memory_floor_ms: float | None
    compute_floor_ms: float | None
    bandwidth_gbps: float | None
    peak_tflops: float | None
    bytes_moved: float
    flops: float | None


# --------------------------------------------------------------------------------------------------
# What the task must do


def _distinct_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor addresses: broadcast (stride 0) dimensions count once."""
    return t.element_size() * math.prod(n for n, s in zip(t.shape, t.stride(), strict=True) if s != 0)


def min_bytes(inputs: Any, outputs: Any) -> float:
    """Bytes read (every input tensor) plus bytes written (every output).

    Views of one storage count as the largest of them (an underestimate when views are disjoint, which
    keeps the floor a lower bound)."""
    per_storage: dict[int, int] = {}
    for t in flatten_tensors([inputs, outputs]):
        key = t.untyped_storage().data_ptr() if t.numel() else id(t)
        per_storage[key] = max(per_storage.get(key, 0), _distinct_bytes(t))
    return float(sum(per_storage.values()))


def count_flops(model: torch.nn.Module, inputs: list) -> float | None:
    """FLOPs of one forward of a trusted (reference) model, or None when the counter fails."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(*inputs)
    except Exception:  # noqa: BLE001 - a model the counter cannot trace: no compute floor, not an error
        return None
    return float(counter.get_total_flops())


def dominant_dtype(tensors: Any) -> torch.dtype | None:
    """The floating dtype holding the most bytes (the dtype the task computes in), None if none."""
    sizes: dict[torch.dtype, int] = {}
    for t in flatten_tensors(tensors):
        if t.dtype.is_floating_point:
            sizes[t.dtype] = sizes.get(t.dtype, 0) + t.numel() * t.element_size()
    return max(sizes, key=sizes.__getitem__) if sizes else None


# --------------------------------------------------------------------------------------------------
# Device ceilings (measured once per process)


def _best_ms(fn, repeats: int) -> float:
    """Shortest event-timed run of `fn` after two warm-ups (the best case is the ceiling)."""
    for _ in range(2):
        fn()
    best = math.inf
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


@functools.cache
def bandwidth_gbps(device: str) -> float | None:
    """Device memory bandwidth in GB/s from a copy (read + write), None on CPU."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    with torch.cuda.device(dev):
        free_bytes, _ = torch.cuda.mem_get_info(dev)
        nbytes = min(COPY_BYTES, free_bytes // 4) // 4 * 4
        src = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
        dst = torch.empty_like(src)
        ms = _best_ms(lambda: dst.copy_(src), repeats=10)
    return 2 * nbytes / (ms * 1e-3) / 1e9


@functools.cache
def peak_tflops(device: str, dtype: torch.dtype) -> float | None:
    """Matmul peak in TFLOP/s for `dtype` (fp32 with TF32 allowed: see the module docstring)."""
    dev = torch.device(device)
    if dev.type != "cuda" or dtype not in MATMUL_SIZE:
        return None
    n = MATMUL_SIZE[dtype]
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        with torch.cuda.device(dev):
            a = torch.randn(n, n, dtype=dtype, device=dev)
            b = torch.randn(n, n, dtype=dtype, device=dev)
            ms = _best_ms(lambda: a @ b, repeats=5)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * n**3 / (ms * 1e-3) / 1e12


# --------------------------------------------------------------------------------------------------
# Floors and flags


def estimate(bytes_moved: float, flops: float | None, dtype: torch.dtype | None,
             device: str | torch.device) -> SolEstimate:
    """Memory floor bytes/bandwidth, compute floor flops/peak, floor = the larger (None on CPU)."""
    device = str(torch.device(device))
    bandwidth = bandwidth_gbps(device)
    peak = peak_tflops(device, dtype) if (dtype is not None and flops) else None
    memory_ms = bytes_moved / (bandwidth * 1e9) * 1e3 if bandwidth else None
    compute_ms = flops / (peak * 1e12) * 1e3 if (peak and flops) else None
    parts = [x for x in (memory_ms, compute_ms) if x is not None]
    return SolEstimate(max(parts) if parts else None, memory_ms, compute_ms, bandwidth, peak,
                       bytes_moved, flops)


def speed_of_light(bytes_moved: float, flops: float | None, dtype: torch.dtype | None,
                   device: str | torch.device) -> SpeedOfLight:
    """(floor_ms, bandwidth_gbps, peak_tflops) for the device; Nones where not measurable."""
    sol = estimate(bytes_moved, flops, dtype, device)
    return SpeedOfLight(sol.floor_ms, sol.bandwidth_gbps, sol.peak_tflops)


def speed_flags(candidate_ms: float, reference_ms: float | None, sol: SolEstimate, *,
                config: str | None = None, margin: float = IMPOSSIBLE_MARGIN) -> tuple[Flag, ...]:
    """`impossible_speed` (ERROR) below margin x the memory floor, `below_compute_floor` (WARNING) below
    margin x the compute floor; `sol_floor_unreliable` (INFO) instead when the reference is below them."""
    if sol.floor_ms is None:
        return ()
    if reference_ms is not None and reference_ms < margin * sol.floor_ms:
        return (Flag("sol_floor_unreliable", f"the reference ({reference_ms:.4g} ms) runs below the "
                     f"speed-of-light floor ({sol.floor_ms:.4g} ms): the byte/FLOP count does not fit "
                     "this task", Severity.INFO, config),)
    flags = []
    if sol.memory_floor_ms is not None and candidate_ms < margin * sol.memory_floor_ms:
        flags.append(Flag("impossible_speed", f"{candidate_ms:.4g} ms is below {margin} x the memory "
                          f"floor {sol.memory_floor_ms:.4g} ms ({sol.bytes_moved:.3g} bytes at "
                          f"{sol.bandwidth_gbps:.0f} GB/s)", Severity.ERROR, config))
    if sol.compute_floor_ms is not None and candidate_ms < margin * sol.compute_floor_ms:
        flags.append(Flag("below_compute_floor", f"{candidate_ms:.4g} ms is below {margin} x the compute "
                          f"floor {sol.compute_floor_ms:.4g} ms ({sol.flops:.3g} FLOPs at "
                          f"{sol.peak_tflops:.0f} TFLOP/s)", Severity.WARNING, config))
    return tuple(flags)
