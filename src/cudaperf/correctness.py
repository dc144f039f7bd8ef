"""Correctness checks run inside the GPU worker: tolerances, output validation, input mutation,
degenerate outputs, allocator poisoning and secret seeds.

Covers:
- `tolerance_for(dtype, overrides)`: the default bounds per dtype (fp32 1e-4, fp16/bf16 1e-2, fp64 1e-7,
  integers and bool exact) and the task's overrides.
- `compare(output, reference, tol)`: exact `torch.Tensor` type (hack #6), strided layout with real storage,
  device, dtype, shape, NaN/Inf positions, and a scale-aware error bound (see `_bound`); tuples and lists
  element-wise. Returns a `Comparison` record, never raises for a bad candidate output.
- `degenerate_flags(...)`: outputs that are constant or do not depend on the input, telling a degenerate
  TASK (its reference is already like that: `task_*` flags, WARNING) from a degenerate CANDIDATE
  (`candidate_*` flags, ERROR).
- `clone_inputs`, `inputs_mutated`, `mutated_positions` (hack #2).
- `poison_allocator(device, nbytes)` and the sentinel helpers (hack #1): free caching-allocator blocks are
  filled with 0xFF bytes, which read as NaN in every floating format and -1 in signed integers, so a
  candidate that returns an uninitialised `torch.empty` returns NaN.
- `derive_seed(public_seed, secret)` (hack #9): an HMAC, so public seeds do not reveal the inputs.

Not covered: running the models (execute/session.py), timing (timing.py), static or runtime anti-cheat
(anticheat/). `poison_allocator` is best effort: it poisons the blocks PyTorch's caching allocator holds,
not memory a candidate obtains from cudaMalloc directly (a fresh cudaMalloc has whatever the driver left).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from cudaperf.types import Flag, Severity, Tolerance

# --------------------------------------------------------------------------------------------------
# Tolerances

# Why these numbers: KernelBench's fp32 bound is atol=rtol=1e-4 and fp16/bf16 1e-2 (docs/evaluation.md);
# fp64 gets 1e-7, well above its 1e-16 epsilon but tight enough that an fp32 computation of an fp64 task
# (precision downgrade, hack #11) fails. Integers and bool must match exactly.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(atol=1e-7, rtol=1e-7),
    "complex128": Tolerance(atol=1e-7, rtol=1e-7),
    "float32": Tolerance(atol=1e-4, rtol=1e-4),
    "complex64": Tolerance(atol=1e-4, rtol=1e-4),
    "float16": Tolerance(atol=1e-2, rtol=1e-2),
    "bfloat16": Tolerance(atol=1e-2, rtol=1e-2),
}
# fp8 and other narrow floats: three mantissa bits or fewer, 1e-2 would reject exact-rounding answers.
NARROW_FLOAT_TOLERANCE = Tolerance(atol=1.25e-1, rtol=1.25e-1)
EXACT = Tolerance(atol=0.0, rtol=0.0)

_ALIASES = {
    "fp64": "float64", "double": "float64", "fp32": "float32", "float": "float32",
    "fp16": "float16", "half": "float16", "bf16": "bfloat16",
}


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.float32` -> "float32" (the key used in `Task.tolerances`)."""
    return str(dtype).removeprefix("torch.")


def _override_key(name: str) -> str:
    name = name.strip().lower().removeprefix("torch.")
    return _ALIASES.get(name, name)


def _as_tolerance(value: Any) -> Tolerance:
    if isinstance(value, Tolerance):
        return value
    if isinstance(value, (list, tuple)):
        return Tolerance(atol=float(value[0]), rtol=float(value[1]))
    return Tolerance(atol=float(value["atol"]), rtol=float(value["rtol"]),
                     int_atol=int(value.get("int_atol", 0)))


def tolerance_for(dtype: torch.dtype, overrides: Mapping[str, Any] | None = None) -> Tolerance:
    """The bound for outputs of `dtype`: a task override (keys like "float32", "fp32", or "*"/"default"
    for every floating dtype; values `Tolerance`, {"atol", "rtol"} or [atol, rtol]) wins over the
    defaults."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return EXACT  # integers and bool: exact, whatever the task says
    wanted = dtype_name(dtype)
    for key, value in (overrides or {}).items():
        if _override_key(key) == wanted:
            return _as_tolerance(value)
    for key in ("*", "default"):  # "default": C tasks carry one tolerance for every output
        if key in (overrides or {}):
            return _as_tolerance(overrides[key])
    return DEFAULT_TOLERANCES.get(wanted, NARROW_FLOAT_TOLERANCE)


# --------------------------------------------------------------------------------------------------
# Sentinel (poison) values

POISON_BYTE = 0xFF  # 0xFF.. is NaN in fp64/fp32/fp16/bf16/fp8 and -1 in signed integers


def fill_sentinel_(tensor: torch.Tensor) -> torch.Tensor:
    """Fill a contiguous tensor's bytes with the poison byte, in place."""
    if not tensor.is_contiguous():
        raise ValueError("fill_sentinel_ needs a contiguous tensor")
    tensor.reshape(-1).view(torch.uint8).fill_(POISON_BYTE)
    return tensor


def sentinel_mask(tensor: torch.Tensor) -> torch.Tensor:
    """Elements whose every byte is the poison byte (bool tensor of `tensor`'s shape)."""
    if tensor.numel() == 0:
        return torch.zeros(tensor.shape, dtype=torch.bool, device=tensor.device)
    raw = tensor.contiguous().reshape(-1).view(torch.uint8).reshape(tensor.numel(), tensor.element_size())
    return (raw == POISON_BYTE).all(dim=1).reshape(tensor.shape)


def poison_allocator(device: str | torch.device, nbytes: int = 0) -> int:
    """Fill the free blocks of PyTorch's CUDA caching allocator with the poison byte, plus one extra
    poisoned block of `nbytes` (the expected output size) so the next `torch.empty` of that size returns
    NaN-filled memory (hack #1: an uninitialised output landing on the freed reference output).

    Returns the bytes poisoned (0 on CPU, whose allocator does not cache). Best effort: the allocator's
    best-fit may hand out different blocks than the free list shows; every block taken is poisoned.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    sizes = _free_block_sizes(device) + ([int(nbytes)] if nbytes > 0 else [])
    held: list[torch.Tensor] = []
    for size in sorted(sizes, reverse=True):  # largest first, all held at once: each takes a distinct block
        try:
            held.append(torch.empty(size, dtype=torch.uint8, device=device).fill_(POISON_BYTE))
        except torch.cuda.OutOfMemoryError:
            continue
    poisoned = sum(t.numel() for t in held)
    torch.cuda.synchronize(device)  # the fills must land before a candidate on another stream reads them
    del held  # back to the cache (not to the driver), now holding 0xFF bytes
    return poisoned


def _free_block_sizes(device: torch.device) -> list[int]:
    index = device.index if device.index is not None else torch.cuda.current_device()
    return [block["size"] for segment in torch.cuda.memory_snapshot() if segment.get("device") == index
            for block in segment.get("blocks", []) if block.get("state") == "inactive"]


# --------------------------------------------------------------------------------------------------
# Comparing outputs


@dataclass(frozen=True)
class Comparison:
    """The verdict on one output against its reference."""

    ok: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None  # max |out-ref| / bound; <= 1 passes (see _bound)
    mismatch_fraction: float | None = None  # share of elements outside the bound
    message: str = ""
    flags: tuple[Flag, ...] = ()


def _fail(message: str, *flags: Flag) -> Comparison:
    return Comparison(ok=False, message=message, flags=tuple(flags))


def compare(
    output: Any,
    reference: Any,
    tol: Tolerance | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    nan_policy: str = "match",
    path: str = "output",
) -> Comparison:
    """Check a candidate output against the reference output.

    `tol=None` picks `tolerance_for(dtype, overrides)` per tensor (outputs with mixed dtypes);
    a given `tol` applies to every floating tensor; integers stay exact unless it sets `int_atol`
    (then |out - ref| <= int_atol, absolute); bool is always exact.
    `nan_policy`: "match" (default) accepts NaN/Inf only where the reference has the same non-finite value
    at the same position; "forbid" rejects any non-finite output value.
    """
    if isinstance(reference, torch.Tensor):
        return _compare_tensor(output, reference, tol, overrides, nan_policy, path)
    if isinstance(reference, (list, tuple)):
        return _compare_sequence(output, reference, tol, overrides, nan_policy, path)
    if reference is None:
        return Comparison(ok=True) if output is None else _fail(f"{path}: expected None, got {_kind(output)}")
    if isinstance(reference, (bool, int, float)):
        return _compare_number(output, reference, tol or tolerance_for(torch.float64, overrides), path)
    return _fail(f"{path}: the reference is a {type(reference).__name__}, which cudaperf cannot compare")


def _kind(value: Any) -> str:
    return type(value).__module__ + "." + type(value).__qualname__


def _compare_sequence(output, reference, tol, overrides, nan_policy, path) -> Comparison:
    if type(output) not in (list, tuple):
        expected = f"a {type(reference).__name__} of {len(reference)}"
        return _fail(f"{path}: expected {expected}, got {_kind(output)}")
    if len(output) != len(reference):
        return _fail(f"{path}: expected {len(reference)} outputs, got {len(output)}")
    parts = [compare(o, r, tol, overrides=overrides, nan_policy=nan_policy, path=f"{path}[{i}]")
             for i, (o, r) in enumerate(zip(output, reference, strict=True))]
    failed = [p for p in parts if not p.ok]
    return Comparison(
        ok=not failed,
        max_abs_error=_max(p.max_abs_error for p in parts),
        max_rel_error=_max(p.max_rel_error for p in parts),
        mismatch_fraction=_max(p.mismatch_fraction for p in parts),
        message=failed[0].message if failed else "",
        flags=tuple(f for p in parts for f in p.flags),
    )


def _max(values) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _compare_number(output, reference, tol: Tolerance, path: str) -> Comparison:
    if type(output) is not type(reference):
        return _fail(f"{path}: expected a Python {type(reference).__name__}, got {_kind(output)}")
    error = abs(float(output) - float(reference))
    bound = tol.atol + tol.rtol * abs(float(reference))
    ok = output == reference or error <= bound
    return Comparison(ok=ok, max_abs_error=error, message="" if ok else f"{path}: {output} != {reference}")


def _compare_tensor(output, reference, tol, overrides, nan_policy, path) -> Comparison:
    problem = _validate_tensor(output, reference, path)
    if problem is not None:
        return problem
    if reference.numel() == 0:
        return Comparison(ok=True, max_abs_error=0.0, max_rel_error=0.0, mismatch_fraction=0.0)
    if not (reference.dtype.is_floating_point or reference.dtype.is_complex):
        levels = tol.int_atol if tol is not None and reference.dtype != torch.bool else 0
        return _compare_exact(output, reference, path, levels)
    tol = tol or tolerance_for(reference.dtype, overrides)
    return _compare_float(output, reference, tol, nan_policy, path)


def _validate_tensor(output, reference: torch.Tensor, path: str) -> Comparison | None:
    """Type, layout, storage, device, dtype and shape; None when all are right."""
    if type(output) is not torch.Tensor:
        if isinstance(output, torch.Tensor):  # hack #6: a subclass can compute lazily at comparison time
            return _fail(f"{path}: is a {_kind(output)}, a torch.Tensor subclass; only exact torch.Tensor "
                         "outputs are accepted", Flag("tensor_subclass_output", f"{path} is {_kind(output)}",
                                                      Severity.ERROR))
        return _fail(f"{path}: expected a torch.Tensor, got {_kind(output)}")
    if output.layout != torch.strided or output.is_meta:
        where = f"layout {output.layout} on {output.device}"
        return _fail(f"{path}: {where}: a dense tensor with storage is required")
    if output.device != reference.device:
        return _fail(f"{path}: on device {output.device}, expected {reference.device}")
    if output.dtype != reference.dtype:
        return _fail(f"{path}: dtype {dtype_name(output.dtype)}, expected {dtype_name(reference.dtype)}")
    if output.shape != reference.shape:
        return _fail(f"{path}: shape {tuple(output.shape)}, expected {tuple(reference.shape)}")
    if not _has_real_storage(output):
        return _fail(f"{path}: its storage is smaller than its shape and strides need")
    if output.numel() and output.untyped_storage().data_ptr() == reference.untyped_storage().data_ptr():
        return _fail(f"{path}: shares memory with the reference output", Flag(
            "output_aliases_reference", f"{path} is the reference's own output memory", Severity.ERROR))
    return None


def _has_real_storage(t: torch.Tensor) -> bool:
    try:
        storage_bytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return False
    if t.numel() == 0:
        return True
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    return min(t.stride(), default=0) >= 0 and storage_bytes >= (last + 1) * t.element_size()


def _compare_exact(output: torch.Tensor, reference: torch.Tensor, path: str, levels: int = 0) -> Comparison:
    """Integers and bool: equal, or within `levels` units when the task allows it (`Tolerance.int_atol`)."""
    if levels <= 0:
        differ = output != reference
    else:  # int64 differences: no wrap-around for unsigned or narrow types
        differ = (output.to(torch.int64) - reference.to(torch.int64)).abs() > levels
    count = int(differ.sum())
    if count == 0 and levels <= 0:  # equal: nothing to measure
        return Comparison(ok=True, max_abs_error=0.0, max_rel_error=0.0, mismatch_fraction=0.0)
    error = float((output.to(torch.float64) - reference.to(torch.float64)).abs().max())
    if count == 0:
        return Comparison(ok=True, max_abs_error=error, max_rel_error=0.0 if error == 0 else None,
                          mismatch_fraction=0.0)
    rule = f"|out-ref| <= {levels}" if levels > 0 else "exact match"
    return Comparison(ok=False, max_abs_error=error, mismatch_fraction=count / reference.numel(),
                      message=f"{path}: {count} of {reference.numel()} elements differ ({rule} required "
                              f"for {dtype_name(reference.dtype)}); max abs error {error:.3g}")


def _real_view(t: torch.Tensor) -> torch.Tensor:
    wide = torch.float64 if t.dtype in (torch.float64, torch.complex128) else torch.float32
    if t.is_complex():
        return torch.view_as_real(t.to(torch.complex128 if wide == torch.float64 else torch.complex64))
    return t.to(wide)


def _bound(ref: torch.Tensor, tol: Tolerance, finite: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Per-element bound |out - ref| <= atol * scale + rtol * |ref|, scale = rms(ref) over finite elements.

    Why rms(ref) and not 1 (plain allclose): with a fixed atol, an all-zeros answer passes whenever
    max|ref| < atol, which happens on softmax over a huge axis or normalised outputs (KernelBench
    issue #165). Scaling atol by the output's own magnitude makes the bound relative, so zeros fail at
    any magnitude, while for unit-scale outputs (rms ~ 1, the common case) it equals KernelBench's
    allclose. rms rather than max|ref| so that a few huge outliers do not loosen the bound on the rest.
    Why not max(1, rms): that floor brings #165 back. The floor at the dtype's smallest normal number
    only matters for an all-zero reference (then the answer must be zero too).
    """
    values = ref[finite]
    rms = float(values.square().mean().sqrt()) if values.numel() else 0.0
    scale = max(rms, torch.finfo(ref.dtype).tiny)
    return tol.atol * scale + tol.rtol * ref.abs(), scale


def _compare_float(output, reference, tol: Tolerance, nan_policy: str, path: str) -> Comparison:
    out, ref = _real_view(output), _real_view(reference)
    out_finite, ref_finite = torch.isfinite(out), torch.isfinite(ref)
    if nan_policy == "forbid":
        nonfinite_ok = torch.zeros_like(ref_finite)
    else:  # "match": NaN where the reference has NaN, the same infinity where it has that infinity
        nonfinite_ok = ~ref_finite & ((out.isnan() & ref.isnan()) | (out == ref))
    bound, scale = _bound(ref, tol, ref_finite)
    both_finite = out_finite & ref_finite
    diff = torch.where(both_finite, (out - ref).abs(), torch.zeros_like(ref))
    safe_bound = bound.clamp_min(torch.finfo(bound.dtype).tiny)  # atol=0 override on a zero reference
    ratio = torch.where(both_finite, diff / safe_bound, torch.zeros_like(ref))
    nonfinite_bad = ~both_finite & ~nonfinite_ok
    bad = (both_finite & (diff > bound)) | nonfinite_bad
    count = int(bad.sum())
    max_abs = float(diff.max())
    max_rel = float("inf") if bool(nonfinite_bad.any()) else float(ratio.max())
    if count == 0:
        return Comparison(ok=True, max_abs_error=max_abs, max_rel_error=max_rel, mismatch_fraction=0.0)
    message = _mismatch_message(output, out, ref, bad, diff, tol, scale, path)
    return Comparison(ok=False, max_abs_error=max_abs, max_rel_error=max_rel,
                      mismatch_fraction=count / ref.numel(), message=message)


def _mismatch_message(raw_out, out, ref, bad, diff, tol, scale, path) -> str:
    count, total = int(bad.sum()), ref.numel()
    where = torch.where(bad, diff.nan_to_num(nan=float("inf")), torch.full_like(diff, -1.0))
    index = tuple(int(i) for i in torch.unravel_index(where.argmax(), ref.shape))
    text = (f"{path}: {count} of {total} elements ({100 * count / total:.3g}%) outside "
            f"|out-ref| <= {tol.atol:g}*{scale:.3g} + {tol.rtol:g}*|ref|; worst at {index}: "
            f"got {float(out[index]):.6g}, expected {float(ref[index]):.6g}")
    nan_where_finite = int((out.isnan() & torch.isfinite(ref)).sum())
    if nan_where_finite:
        poisoned = int(sentinel_mask(raw_out).sum())
        text += f"; NaN at {nan_where_finite} positions where the reference is finite"
        if poisoned:
            text += f" ({poisoned} hold the allocator poison: uninitialised memory?)"
    elif bool((out == 0).all()) and bool((ref != 0).any()):
        text += "; the output is all zeros"
    return text


# --------------------------------------------------------------------------------------------------
# Degenerate outputs


def flatten_tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor in a nested list/tuple/dict, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in flatten_tensors(x)]
    if isinstance(obj, Mapping):
        return [t for x in obj.values() for t in flatten_tensors(x)]
    return []


def tensor_bytes(*values: Any) -> int:
    """Bytes held by every tensor in `values` (nested lists, tuples and dicts as `flatten_tensors` reads)."""
    return sum(t.numel() * t.element_size() for t in flatten_tensors(list(values)))


def _is_constant(t: torch.Tensor) -> bool:
    if t.numel() < 2:
        return False  # a scalar output (a loss) is not "constant" by itself
    flat = t.reshape(-1)
    return bool((flat == flat[0]).all())


def _identical(tensors: Sequence[torch.Tensor]) -> bool:
    first = tensors[0]
    return all(t.shape == first.shape and torch.equal(t, first) for t in tensors[1:])


def _is_tiny(t: torch.Tensor) -> bool:
    if not (t.dtype.is_floating_point or t.dtype.is_complex) or t.numel() == 0:
        return False
    return float(t.abs().max()) < tolerance_for(t.dtype).atol


def degenerate_flags(
    outputs: Sequence[Any], references: Sequence[Any], inputs_differ: bool, *, config: str | None = None
) -> tuple[Flag, ...]:
    """Flags for outputs that carry no information, from one output/reference per seed.

    Task flags (`task_*`, WARNING: the task is at fault, the candidate is not):
    - `task_constant_output`: a reference output holds a single value in every seed;
    - `task_input_independent`: the reference output is the same for different inputs;
    - `task_tiny_output`: max|ref| is below the dtype's atol, so a plain absolute tolerance would accept
      zeros (compare() does not: its bound is scale-aware).
    Candidate flags (`candidate_*`, ERROR), raised only where the reference is NOT already degenerate:
    - `candidate_constant_output`, `candidate_input_independent`.
    """
    refs = [flatten_tensors(r) for r in references]
    outs = [flatten_tensors(o) for o in outputs]
    flags: list[Flag] = []
    for k in range(min(len(r) for r in refs) if refs else 0):
        ref_k = [r[k] for r in refs]
        out_k = [o[k] for o in outs if len(o) > k and type(o[k]) is torch.Tensor]
        flags += _degenerate_one(f"output[{k}]", out_k, ref_k, inputs_differ, config)
    return tuple(flags)


def _degenerate_one(name, out_k, ref_k, inputs_differ, config) -> list[Flag]:
    flags = []
    ref_constant = all(_is_constant(r) for r in ref_k)
    ref_fixed = inputs_differ and len(ref_k) > 1 and _identical(ref_k)
    if ref_constant:
        flags.append(Flag("task_constant_output", f"{name}: the reference output is a single value for "
                          "every seed; a constant answer passes", Severity.WARNING, config))
    if ref_fixed:
        flags.append(Flag("task_input_independent", f"{name}: the reference output does not change with "
                          "the input; a memorised answer passes", Severity.WARNING, config))
    if all(_is_tiny(r) for r in ref_k):
        flags.append(Flag("task_tiny_output", f"{name}: max|reference| is below the absolute tolerance; a "
                          "plain allclose would accept zeros", Severity.WARNING, config))
    if len(out_k) == len(ref_k):
        if not ref_constant and all(_is_constant(o) for o in out_k):
            flags.append(Flag("candidate_constant_output", f"{name}: the candidate returns a single value "
                              "while the reference varies", Severity.ERROR, config))
        if inputs_differ and len(out_k) > 1 and not _identical(ref_k) and _identical(out_k):
            flags.append(Flag("candidate_input_independent", f"{name}: the candidate returns the same output "
                              "for different inputs", Severity.ERROR, config))
    return flags


# --------------------------------------------------------------------------------------------------
# Inputs


def clone_inputs(inputs: Any) -> Any:
    """A deep copy of the tensors in `inputs` (lists, tuples, dicts), strides kept; other values shared."""
    if isinstance(inputs, torch.Tensor):
        return inputs.clone()
    if isinstance(inputs, (list, tuple)):
        return type(inputs)(clone_inputs(x) for x in inputs)
    if isinstance(inputs, dict):
        return {k: clone_inputs(v) for k, v in inputs.items()}
    return inputs


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe), plus shape/dtype: an in-place resize is a mutation too."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(_raw_bytes(a), _raw_bytes(b))


def _raw_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def mutated_positions(before: Any, after: Any, path: str = "inputs") -> tuple[str, ...]:
    """Paths (e.g. "inputs[0]") of the tensors whose value, shape or dtype changed."""
    if isinstance(before, torch.Tensor):
        same = isinstance(after, torch.Tensor) and _same_tensor(before, after)
        return () if same else (path,)
    if isinstance(before, (list, tuple)):
        if not isinstance(after, (list, tuple)) or len(after) != len(before):
            return (path,)
        return tuple(p for i, (b, a) in enumerate(zip(before, after, strict=True))
                     for p in mutated_positions(b, a, f"{path}[{i}]"))
    if isinstance(before, dict):
        if not isinstance(after, dict) or after.keys() != before.keys():
            return (path,)
        return tuple(p for k in before for p in mutated_positions(before[k], after[k], f"{path}[{k!r}]"))
    return ()


def inputs_mutated(before: Any, after: Any) -> bool:
    """True when any tensor of `after` differs from the saved copy `before` (hack #2)."""
    return bool(mutated_positions(before, after))


# --------------------------------------------------------------------------------------------------
# Seeds


def _secret_bytes(secret: bytes | str) -> bytes:
    if isinstance(secret, bytes):
        return secret
    try:
        return bytes.fromhex(secret)
    except ValueError:
        return secret.encode()


def derive_seed(public_seed: int, secret: bytes | str) -> int:
    """The seed actually used for inputs and weights: HMAC-SHA256(secret, public_seed), 63 bits.

    Why an HMAC: the public seed is known to whoever wrote the candidate; without the secret neither the
    seed nor the inputs can be reproduced (hack #9), and different public seeds give unrelated seeds.
    """
    digest = hmac.new(_secret_bytes(secret), f"cudaperf-seed:{int(public_seed)}".encode(), hashlib.sha256)
    return int.from_bytes(digest.digest()[:8], "big") & (2**63 - 1)
