"""Which scaled-dot-product-attention kernels a local model's `generate` may use.

`attention_kernels(choice, device_type)` is the context `generate` runs in:
- "no_cudnn" (the default of every generator): on a CUDA device, PyTorch's flash, memory-efficient and
  math kernels, not cuDNN's. PyTorch's cuDNN attention builds an execution plan per input shape and keeps
  it in a cache keyed by that shape; in decoding the key length grows by one every step, so every step
  of a call over lengths not seen before builds a new plan, on the host. The real runs' decoding probes
  (H100, session 32, benchmarks/results/2026-12-06-s32-h100/) show what that costs: 1.8-2.8 ms of host
  time per attention call, 30 calls a step, half of a 90-105 ms step whose kernels took 6.5 ms, against
  72-96 us per call when the same shapes came again. Left padding (every batch of the rollouts and the
  comparison) gives the attention a mask, which the flash kernel does not take, so the memory-efficient
  one serves those calls; on a CPU the context changes nothing.
- "any": PyTorch's own choice (cuDNN first on Hopper where it applies).
The result of the attention is the same function either way (each kernel computes softmax(QK^T/sqrt(d) +
mask)V, up to its rounding), so the choice is about time, not about what is sampled.

Covers: the choice, validated (`check_attention`), and the context. Not covered: attention that does not
go through `torch.nn.functional.scaled_dot_product_attention` (a model loaded with
`attn_implementation="eager"` or a custom kernel is not affected).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

DECODING_ATTENTION = ("no_cudnn", "any")


def check_attention(choice: str) -> str | None:
    """Why `choice` is not a decoding attention choice, or None when it is."""
    if choice in DECODING_ATTENTION:
        return None
    return f"attention={choice!r}: use one of {DECODING_ATTENTION}"


@contextlib.contextmanager
def attention_kernels(choice: str, device_type: str) -> Iterator[None]:
    """The SDPA kernels `choice` allows, around one `generate` call on `device_type` ('cuda', 'cpu')."""
    why = check_attention(choice)
    if why:
        raise ValueError(why)
    if choice == "any" or device_type != "cuda":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        yield
