"""The state of a device, for the code that runs candidate or generated kernels.

Covers: `synchronize(device)` (a no-op on the CPU), `context_alive(device)`, used after an error to tell
a sticky CUDA error (the context is gone and the process must be replaced) from one that left the context
usable, and a forward's transient memory (`start_peak`, `forward_bytes`: the worker's and the referee's
references both measure it for the memory plan), and `initialise_cpu_math`, which makes the CPU's vector
math library initialise on one thread before torch runs it on several. Not covered: what to do about it
(the worker session and the dataset measurement decide).
"""

from __future__ import annotations

from typing import Any

import torch

from cudaperf.correctness import tensor_bytes

VML_WARM_ELEMENTS = 64  # below ATen's parallel grain for VML calls (2,048 elements): stays on this thread
VML_WARM_OPS = (torch.exp, torch.log, torch.sin, torch.atan, torch.tanh)  # ops ATen routes to MKL's VML


def synchronize(device: torch.device) -> None:
    """Wait for the device; nothing to wait for on the CPU (where the recipes run in the unit tests)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def context_alive(device: torch.device) -> bool:
    """False when the CUDA context is gone (a sticky error: every later call fails); True on the CPU."""
    if device.type != "cuda":
        return True
    try:
        torch.cuda.synchronize(device)
        return float(torch.ones(1, device=device).add_(1).item()) == 2.0
    except Exception:  # noqa: BLE001 - any failure here means the context cannot be used
        return False


def start_peak(device: torch.device) -> int:
    """Reset the allocator's peak before a forward; the bytes allocated now (0 on the CPU)."""
    if device.type != "cuda":
        return 0
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def forward_bytes(device: torch.device, before: int, outputs: Any) -> int:
    """Transient bytes a forward used beyond its outputs: the allocator's peak since `start_peak`."""
    if device.type != "cuda":
        return 0
    return max(0, torch.cuda.max_memory_allocated(device) - before - tensor_bytes(outputs))


def initialise_cpu_math() -> None:
    """Call MKL's vector math library (VML) once on this thread, before any CPU op runs it on several.

    Why: torch's MKL builds send float ops such as exp, sin and atan to VML, split over the intra-op
    threads. The first VML call of a process, made from two threads at once, can leave the second thread's
    half computed with errors up to 2e-4 relative (the task's own model judged incorrect against its
    reference; measured on the 2-core machine, torch 2.13: 17 of 60 fresh processes, first call only). A
    single-threaded call first initialises it: 0 of 80 processes after a small `torch.exp`. Called at the
    start of every process that computes references, baselines or candidates (`preload_lazy_modules`)."""
    values = torch.linspace(0.1, 0.9, VML_WARM_ELEMENTS)
    for op in VML_WARM_OPS:
        op(values)
