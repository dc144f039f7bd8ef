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

Every whole-tensor check (the tolerance comparison, exact comparison, byte equality for mutation, the
degenerate-output tests) works over blocks of the tensors in row-major order, so its temporaries stay
under `COMPARE_CHUNK_BYTES` whatever the tensor's size (a 6.4 GB output would otherwise need about seven
times its size); the verdicts and figures are those of the whole-tensor formulas (`_blocks`). A block
finite on both sides (the common case) takes a short path of a few passes without masks
(`_FloatTally.add_finite`, and the scale's unmasked sum), with the same figures; any NaN, infinity or
overflowing difference takes the masked formulas.

Not covered: running the models (execute/session.py), timing (timing.py), static or runtime anti-cheat
(anticheat/). `poison_allocator` is best effort: it poisons the blocks PyTorch's caching allocator holds,
not memory a candidate obtains from cudaMalloc directly (a fresh cudaMalloc has whatever the driver left).
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterator, Mapping, Sequence
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
    _dense(tensor).view(torch.uint8).fill_(POISON_BYTE)
    return tensor


def _dense(t: torch.Tensor) -> torch.Tensor:
    """`t` flat with unit stride (a copy only when not contiguous). Why `as_strided`: torch calls a
    one-element tensor contiguous whatever its stride, and a byte view needs stride 1."""
    flat = t.contiguous().reshape(-1)
    return flat if flat.stride(0) == 1 else flat.as_strided((flat.numel(),), (1,))


def sentinel_mask(tensor: torch.Tensor) -> torch.Tensor:
    """Elements whose every byte is the poison byte (bool tensor of `tensor`'s shape)."""
    if tensor.numel() == 0:
        return torch.zeros(tensor.shape, dtype=torch.bool, device=tensor.device)
    raw = _dense(tensor).view(torch.uint8).reshape(tensor.numel(), tensor.element_size())
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


# --------------------------------------------------------------------------------------------------
# Blocks: bounded temporaries

# The most bytes of temporaries one step of a whole-tensor check allocates (each check sizes its blocks
# from its own per-element cost below). Why a bound: the checks run beside the task's own tensors, and on
# full-size problems (KernelBench level 1: 6.4 GB outputs, 8.6 GB inputs) temporaries the size of the
# tensor ran the device out of memory. 256 MiB keeps a block's kernels long enough that the per-block
# synchronisation costs little (a 6.4 GB fp32 comparison is about 400 blocks).
COMPARE_CHUNK_BYTES = 256 << 20
# Temporaries per element of the float comparison, in units of its wide element (fp32 or fp64 lanes):
# both operands widened, the bound, its clamped copy, the difference, the ratio and their transients
# (`_float_block`), plus about 16 one-byte masks.
_FLOAT_WIDE_TEMPORARIES = 12
_MASK_BYTES = 16


def _chunk_elements(bytes_per_element: int) -> int:
    """Elements per block so that `bytes_per_element` of temporaries each stay under the bound."""
    return max(1, COMPARE_CHUNK_BYTES // max(1, bytes_per_element))


def _block_indices(shape: Sequence[int], limit: int) -> Iterator[tuple]:
    """Index tuples whose views cover a tensor of `shape` in row-major order, in order, each holding at
    most `limit` elements (at least one). Views, not a flattened copy: `reshape(-1)` of a non-contiguous
    tensor would copy all of it at once."""
    if len(shape) == 0 or math.prod(shape) <= limit:
        yield ()
        return
    row = math.prod(shape[1:])
    if row <= limit:
        step = max(1, limit // row)
        for start in range(0, shape[0], step):
            yield (slice(start, min(start + step, shape[0])),)
        return
    for i in range(shape[0]):
        for rest in _block_indices(shape[1:], limit):
            yield (i, *rest)


def _blocks(limit: int, *tensors: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
    """The same block of each tensor (all of one shape), flattened: a copy of at most `limit` elements
    each where the block is not contiguous."""
    for index in _block_indices(tuple(tensors[0].shape), limit):
        yield tuple(t[index].reshape(-1) for t in tensors)


def _unravel(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The row-major index of element `flat` in `shape`."""
    index = []
    for size in reversed(shape):
        flat, rest = divmod(flat, size)
        index.append(rest)
    return tuple(reversed(index))


def _compare_exact(output: torch.Tensor, reference: torch.Tensor, path: str, levels: int = 0) -> Comparison:
    """Integers and bool: equal, or within `levels` units when the task allows it (`Tolerance.int_atol`)."""
    # int64 (or fp64) copies of both, their difference and its absolute value, two masks, the block copies
    limit = _chunk_elements(4 * 8 + 2 + 2 * reference.element_size())
    count = int(sum(_exact_differ(o, r, levels).sum() for o, r in _blocks(limit, output, reference)))
    if count == 0 and levels <= 0:  # equal: nothing to measure
        return Comparison(ok=True, max_abs_error=0.0, max_rel_error=0.0, mismatch_fraction=0.0)
    error = max(float((o.to(torch.float64) - r.to(torch.float64)).abs().max())
                for o, r in _blocks(limit, output, reference))
    if count == 0:
        return Comparison(ok=True, max_abs_error=error, max_rel_error=0.0 if error == 0 else None,
                          mismatch_fraction=0.0)
    rule = f"|out-ref| <= {levels}" if levels > 0 else "exact match"
    return Comparison(ok=False, max_abs_error=error, mismatch_fraction=count / reference.numel(),
                      message=f"{path}: {count} of {reference.numel()} elements differ ({rule} required "
                              f"for {dtype_name(reference.dtype)}); max abs error {error:.3g}")


def _exact_differ(output: torch.Tensor, reference: torch.Tensor, levels: int) -> torch.Tensor:
    if levels <= 0:
        return output != reference
    return (output.to(torch.int64) - reference.to(torch.int64)).abs() > levels  # no wrap-around


def _wide(dtype: torch.dtype) -> torch.dtype:
    """The real dtype a comparison computes in: fp64 for fp64 and complex128, fp32 otherwise."""
    return torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32


def _real_view(t: torch.Tensor) -> torch.Tensor:
    wide = _wide(t.dtype)
    if t.is_complex():
        return torch.view_as_real(t.to(torch.complex128 if wide == torch.float64 else torch.complex64))
    return t.to(wide)


def _flat_real(t: torch.Tensor) -> torch.Tensor:
    """A flat block as real lanes of the comparison's width (a complex element is two lanes)."""
    return _real_view(t).reshape(-1)


def _float_limit(reference: torch.Tensor) -> int:
    wide = _wide(reference.dtype).itemsize
    lanes = 2 if reference.is_complex() else 1
    return _chunk_elements(lanes * (_FLOAT_WIDE_TEMPORARIES * wide + _MASK_BYTES)
                           + 2 * reference.element_size())


def _rms(square_sum: float, count: int) -> float:
    return math.sqrt(square_sum / count) if count else 0.0


def _square_sum(values: torch.Tensor, finite: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of squares of the finite values in fp64, their count), as tensors on the values' device (no
    synchronisation per block). fp64: exact squares of fp32 values, and a sum that hardly depends on
    the order the blocks add up in."""
    wide = torch.where(finite, values.to(torch.float64), 0.0)
    return wide.square().sum(), finite.sum()


def _scale_of(reference: torch.Tensor, limit: int) -> float:
    """rms of the reference's finite real lanes, by blocks; at least the dtype's smallest normal number.

    Why two ways: the common reference is finite everywhere, and then the fp64 sum of squares is finite
    too (an fp32 square is at most 1.2e77) and the finite count is every lane, so the masks are not
    needed. A sum that is not finite (a NaN or infinity in the reference, or fp64 squares overflowing)
    sends it to the masked sums, whose figures are the same on a finite reference."""
    square_sum: Any = 0.0
    lanes = 0
    for (ref,) in _blocks(limit, reference):
        values = _flat_real(ref)
        square_sum, lanes = values.to(torch.float64).square().sum() + square_sum, lanes + values.numel()
    total = float(square_sum)
    if not math.isfinite(total):
        return _masked_scale_of(reference, limit)
    return max(_rms(total, lanes), torch.finfo(_wide(reference.dtype)).tiny)


def _masked_scale_of(reference: torch.Tensor, limit: int) -> float:
    """`_scale_of` over the finite lanes only (a reference with NaN or infinities)."""
    square_sum: Any = 0.0
    count: Any = 0
    for (ref,) in _blocks(limit, reference):
        values = _flat_real(ref)
        block_sum, block_count = _square_sum(values, torch.isfinite(values))
        square_sum, count = block_sum + square_sum, block_count + count
    return max(_rms(float(square_sum), int(count)), torch.finfo(_wide(reference.dtype)).tiny)


def _bound(ref: torch.Tensor, tol: Tolerance, finite: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Per-element bound |out - ref| <= atol * scale + rtol * |ref|, scale = rms(ref) over finite elements.

    Why rms(ref) and not 1 (plain allclose): with a fixed atol, an all-zeros answer passes whenever
    max|ref| < atol, which happens on softmax over a huge axis or normalised outputs (KernelBench
    issue #165). Scaling atol by the output's own magnitude makes the bound relative, so zeros fail at
    any magnitude, while for unit-scale outputs (rms ~ 1, the common case) it equals KernelBench's
    allclose. rms rather than max|ref| so that a few huge outliers do not loosen the bound on the rest.
    Why not max(1, rms): that floor brings #165 back. The floor at the dtype's smallest normal number
    only matters for an all-zero reference (then the answer must be zero too).
    Whole-tensor form (`ref` a real view, `finite` its finite mask); `_compare_float` uses the same
    scale and formula block by block.
    """
    square_sum, count = _square_sum(ref, finite)
    scale = max(_rms(float(square_sum), int(count)), torch.finfo(ref.dtype).tiny)
    return tol.atol * scale + tol.rtol * ref.abs(), scale


@dataclass
class _FloatTally:
    """What the blocks of one float comparison add up to (device scalars until the end: one sync)."""

    count: Any = 0
    max_abs: Any = 0.0
    max_rel: Any = 0.0
    nonfinite_bad: Any = False

    def add(self, bad: torch.Tensor, diff: torch.Tensor, ratio: torch.Tensor, nonfinite_bad: torch.Tensor):
        self.count = bad.sum() + self.count
        self.max_abs = torch.clamp_min(diff.max(), self.max_abs) if diff.numel() else self.max_abs
        self.max_rel = torch.clamp_min(ratio.max(), self.max_rel) if ratio.numel() else self.max_rel
        self.nonfinite_bad = nonfinite_bad.any() | self.nonfinite_bad

    def add_finite(self, out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, scale: float) -> bool:
        """One block where both sides are finite everywhere, in a few passes: what `add(*_float_block(...))`
        adds for it (no mask is needed: every element is `both_finite`). False, adding nothing, when the
        block has a NaN or infinity on either side (then |out - ref| has one: NaN - x, inf - x and x - inf
        are not finite) or the difference overflows; the caller then takes the masked formulas."""
        diff = (out - ref).abs_()
        top = diff.max()  # NaN or infinity when any difference is
        if not math.isfinite(float(top)):
            return False
        bound = ref.abs().mul_(tol.rtol).add_(tol.atol * scale)  # the same operations as _float_block's
        self.count = torch.count_nonzero(diff > bound) + self.count
        self.max_abs = torch.clamp_min(top, self.max_abs)
        self.max_rel = torch.clamp_min(diff.div_(bound.clamp_min_(torch.finfo(bound.dtype).tiny)).max(),
                                       self.max_rel)
        return True


def _float_block(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, scale: float, nan_policy: str):
    """One block's (bad, diff, ratio, nonfinite_bad), element for element the whole-tensor formulas."""
    out_finite, ref_finite = torch.isfinite(out), torch.isfinite(ref)
    if nan_policy == "forbid":
        nonfinite_ok = torch.zeros_like(ref_finite)
    else:  # "match": NaN where the reference has NaN, the same infinity where it has that infinity
        nonfinite_ok = ~ref_finite & ((out.isnan() & ref.isnan()) | (out == ref))
    bound = tol.atol * scale + tol.rtol * ref.abs()
    both_finite = out_finite & ref_finite
    del out_finite, ref_finite
    diff = torch.where(both_finite, (out - ref).abs(), torch.zeros_like(ref))
    safe_bound = bound.clamp_min(torch.finfo(bound.dtype).tiny)  # atol=0 override on a zero reference
    ratio = torch.where(both_finite, diff / safe_bound, torch.zeros_like(ref))
    del safe_bound
    nonfinite_bad = ~both_finite & ~nonfinite_ok
    bad = (both_finite & (diff > bound)) | nonfinite_bad
    return bad, diff, ratio, nonfinite_bad


def _compare_float(output, reference, tol: Tolerance, nan_policy: str, path: str, *,
                   finite_path: bool = True) -> Comparison:
    """The tolerance comparison; `finite_path=False` takes the masked formulas on every block (the
    figures are the same: the tests check it)."""
    limit = _float_limit(reference)
    scale = _scale_of(reference, limit) if finite_path else _masked_scale_of(reference, limit)
    tally = _FloatTally()
    for raw_out, raw_ref in _blocks(limit, output, reference):
        out, ref = _flat_real(raw_out), _flat_real(raw_ref)
        if not (finite_path and tally.add_finite(out, ref, tol, scale)):
            tally.add(*_float_block(out, ref, tol, scale, nan_policy))
    count = int(tally.count)
    max_abs = float(tally.max_abs)
    max_rel = float("inf") if bool(tally.nonfinite_bad) else float(tally.max_rel)
    if count == 0:
        return Comparison(ok=True, max_abs_error=max_abs, max_rel_error=max_rel, mismatch_fraction=0.0)
    total = reference.numel() * (2 if reference.is_complex() else 1)
    message = _mismatch_message(output, reference, tol, scale, nan_policy, path, count, limit)
    return Comparison(ok=False, max_abs_error=max_abs, max_rel_error=max_rel,
                      mismatch_fraction=count / total, message=message)


def _mismatch_message(output, reference, tol, scale, nan_policy, path, count, limit) -> str:
    """The failure's text, from a second pass over the blocks (only failing comparisons pay for it)."""
    lanes = 2 if reference.is_complex() else 1
    total = reference.numel() * lanes
    worst, worst_at, start = -math.inf, 0, 0
    nan_where_finite = poisoned = 0
    out_all_zero, ref_any_nonzero = True, False
    for raw_out, raw_ref in _blocks(limit, output, reference):
        out, ref = _flat_real(raw_out), _flat_real(raw_ref)
        bad, diff, _, _ = _float_block(out, ref, tol, scale, nan_policy)
        where = torch.where(bad, diff.nan_to_num(nan=float("inf")), torch.full_like(diff, -1.0))
        at = int(where.argmax())  # the first of equal maxima, as over the whole tensor
        value = float(where[at])
        if value > worst:  # strictly: an earlier block keeps a tie
            worst, worst_at = value, start + at
        nan_where_finite += int((out.isnan() & torch.isfinite(ref)).sum())
        poisoned += int(sentinel_mask(raw_out).sum())
        out_all_zero = out_all_zero and bool((out == 0).all())
        ref_any_nonzero = ref_any_nonzero or bool((ref != 0).any())
        start += out.numel()
    element, lane = divmod(worst_at, lanes)
    at = _unravel(element, reference.shape)
    index = at + ((lane,) if lanes == 2 else ())
    got = float(_flat_real(output[at].reshape(-1))[lane])
    expected = float(_flat_real(reference[at].reshape(-1))[lane])
    text = (f"{path}: {count} of {total} elements ({100 * count / total:.3g}%) outside "
            f"|out-ref| <= {tol.atol:g}*{scale:.3g} + {tol.rtol:g}*|ref|; worst at {index}: "
            f"got {got:.6g}, expected {expected:.6g}")
    if nan_where_finite:
        text += f"; NaN at {nan_where_finite} positions where the reference is finite"
        if poisoned:
            text += f" ({poisoned} hold the allocator poison: uninitialised memory?)"
    elif out_all_zero and ref_any_nonzero:
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
    first = t[(0,) * t.dim()]
    limit = _chunk_elements(1 + 2 * t.element_size())
    return all(bool((block == first).all()) for (block,) in _blocks(limit, t))


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """`torch.equal` (same shape, equal values: NaN differs from itself) block by block."""
    if a.shape != b.shape:
        return False
    limit = _chunk_elements(1 + 2 * max(a.element_size(), b.element_size()))
    return all(torch.equal(x, y) for x, y in _blocks(limit, a, b))


def _identical(tensors: Sequence[torch.Tensor]) -> bool:
    first = tensors[0]
    return all(_equal(t, first) for t in tensors[1:])


def _is_tiny(t: torch.Tensor) -> bool:
    if not (t.dtype.is_floating_point or t.dtype.is_complex) or t.numel() == 0:
        return False
    limit = _chunk_elements(4 * t.element_size())
    largest = [float(block.abs().max()) for (block,) in _blocks(limit, t)]
    return not any(math.isnan(v) for v in largest) and max(largest) < tolerance_for(t.dtype).atol  # NaN: no


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
    """Bitwise equality (NaN-safe), plus shape/dtype: an in-place resize is a mutation too. Block by
    block: an 8.6 GB input's byte view compared at once needed 8 GiB more."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.numel() == 0:
        return True
    limit = _chunk_elements(4 * a.element_size())  # two contiguous copies, the byte-wise mask, slack
    return all(torch.equal(_raw_bytes(x), _raw_bytes(y)) for x, y in _blocks(limit, a, b))


def _raw_bytes(t: torch.Tensor) -> torch.Tensor:
    return _dense(t).view(torch.uint8)


def mutated_positions(before: Any, after: Any, path: str = "inputs") -> tuple[str, ...]:
    """Paths (e.g. "inputs[0]") of the tensors whose value, shape or dtype changed."""
    if before is after:  # one object cannot differ from itself (a judge given no inputs after the call)
        return ()
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
