"""The state of a device, for the code that runs candidate or generated kernels.

Covers: `synchronize(device)` (a no-op on the CPU), and `context_alive(device)`, used after an error to tell
a sticky CUDA error (the context is gone and the process must be replaced) from one that left the context
usable. Not covered: what to do about it
(the worker session and the dataset measurement decide).
"""

from __future__ import annotations

import torch


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
