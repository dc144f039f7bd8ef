"""Candidate outputs in transit from the worker to the referee: their description, the shared region, the
worker's shipper and the referee's assembler.

Covers:
- `describe(value)`: a JSON description (the "spec") of what a candidate returned, plus its tensors in
  order, read without running candidate code (`type(x) is torch.Tensor`, never `isinstance` on its
  class's hooks). Anything that is not a plain dense tensor, a list/tuple of outputs, a Python number or
  None is described by its type name only (a `torch.Tensor` subclass, a sparse tensor, a view whose
  storage is too small...), and `rebuild` turns it into a stand-in of the same name, so that
  `correctness.compare` gives the referee the same verdict and flag it would give on the object itself.
- `Region`: the shared memory region (a sealed memfd of fixed size, so neither side can shrink it under
  the other and no read can fault) through which output bytes travel; the parent creates it
  (`referee.create_region_fd`, no torch there) and both the worker and the referee map it. Each side
  pins its own mapping for its CUDA context (`Region.pin`, `cuMemHostRegister`: the worker at its first
  device output, the referee at start), so the copies are DMA from and to the region, asynchronous, one
  `settle` per message; where pinning fails the copies stay pageable and `pin_note` says why (each
  result's `environment["region"]`). `Moved`: bytes copied and the time, as `referee_ms` figures.
- `Shipper` (worker side): each output's bytes copied device->host in region-sized chunks, each chunk
  announced to the referee through the parent (`exchange`, a frame on the worker's reply pipe answered
  on its job pipe) and overwritten only after the referee has taken it. No JSON for bytes, no copy of a
  whole output on the host: a multi-gigabyte output costs one device->host and one host->device copy.
  Each message carries the worker's account of filling the region (`fill_bytes`, `fill_ms`, `pin`).
- `Assembler` (referee side): the announced chunks into tensors on the referee's device, with every
  announcement checked (sizes, order, the job's keys): a malformed one raises `Malformed`.
- `TimedOutputs` (worker side, timing stage): the outputs the bench re-checks (`timing.bench_interleaved`'s
  `check`): the candidate's first one on each input set is kept (a copy) and, after the configuration's
  bench, shipped to the referee (`Shipper.ship_timed`, messages of type "timed" keyed by `TimedKey`,
  re-check index 0), which judges it against its own reference outputs under the task's tolerance. A
  later one on that set that is bit for bit the first passes here (it is what the referee judged); one
  that differs at all is compared here with the first, and kept and shipped the same way with its
  re-check index (at most `KEPT_RECHECKS` per set, within the memory plan's spare bytes: the farthest
  from the first and one drawn at random), so the referee judges it against its reference under the
  same tolerance. A baseline's output is compared with the candidate's first on its set. A baseline's
  output (the reference model's, eager or compiled: a right answer) is never kept: the worker overwrites
  each one after its call (`torch_session.TorchSession.overwrite_baseline_output`), so no right answer on
  a timing input set is held in the worker while the candidate's code runs.

Not covered: what is shipped when (the sessions), what the referee does with an output (`judge.py`), the
forwarding and its deadlines (`sandbox.py`). Of the candidate's later re-checked outputs that differ from
its first on their set, those beyond the kept ones are judged only here, against that first output:
within the tolerance of an output the referee found within the tolerance of its reference, so up to
twice the tolerance from the reference (the session reports such a partial check,
`timed_recheck_partial`); a candidate wrong on a few re-checks only, each nearer its first than the
farthest, can go unjudged by the referee. Native code in the worker can leave out or replace any of them
(the worker's word). Pinning is for speed only: it changes neither who can write the region nor what the
referee judges (the bytes it copied to its own tensors, after they landed).
"""

from __future__ import annotations

import math
import mmap
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# The dtypes an output may have on the wire (torch names); anything else is described as "other".
_DTYPES = {name: getattr(torch, name) for name in (
    "float64", "float32", "float16", "bfloat16", "complex64", "complex128", "int64", "int32", "int16",
    "int8", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn", "float8_e5m2",
) if isinstance(getattr(torch, name, None), torch.dtype)}
MAX_DEPTH = 8  # nesting of lists/tuples in one output
MAX_LEAVES = 4096  # tensors and values in one output
KEPT_RECHECKS = 2  # later re-checked outputs per input set kept for the referee (`TimedOutputs`)


class Malformed(ValueError):
    """An announcement the worker's own code would never send: the referee counts it as a forgery."""


@dataclass(frozen=True)
class TimedKey:
    """Which re-checked timing output: configuration name, index of the input set in the job's timing
    seeds, the timed function ("candidate" or a baseline's name), and which of its re-checked calls on
    that set (`recheck`: 0 the first, n the n-th after it; a later one travels only when it is not bit
    for bit the first, `TimedOutputs`)."""

    config: str
    input_set: int
    function: str
    recheck: int = 0

    def wire(self) -> list:
        return [self.config, self.input_set, self.function, self.recheck]

    @classmethod
    def parse(cls, value: Any) -> TimedKey:
        if (not isinstance(value, list) or len(value) != 4 or type(value[0]) is not str
                or type(value[1]) is not int or type(value[2]) is not str or type(value[3]) is not int):
            raise Malformed("a timed output key must be [config, input set, function, re-check]: "
                            f"{str(value)[:200]}")
        return cls(*value)


@dataclass(frozen=True)
class Key:
    """Which output: configuration name, index of the seed in the job's seeds, and the run (1 or 2)."""

    config: str
    seed_index: int
    run: int

    def wire(self) -> list:
        return [self.config, self.seed_index, self.run]

    @classmethod
    def parse(cls, value: Any) -> Key:
        if (not isinstance(value, list) or len(value) != 3 or type(value[0]) is not str
                or type(value[1]) is not int or type(value[2]) is not int):
            raise Malformed(f"an output key must be [config, seed index, run], got {str(value)[:200]}")
        return cls(*value)


# --------------------------------------------------------------------------------------------------
# Describing and rebuilding a value


def describe(value: Any) -> tuple[dict, list[torch.Tensor]]:
    """(spec, tensors): the structure of `value` and its tensors, contiguous, in the order of the spec."""
    tensors: list[torch.Tensor] = []
    return _describe(value, tensors, 0), tensors


def _describe(value: Any, tensors: list[torch.Tensor], depth: int) -> dict:
    kind = type(value)  # identity checks only: `==` or isinstance could run a metaclass of the candidate's
    if kind is torch.Tensor:
        problem = _tensor_problem(value)
        if problem:
            return {"t": "other", "type": f"torch.Tensor ({problem})", "tensor": False}
        tensors.append(value.detach().contiguous())
        return {"t": "tensor", "dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                "device": value.device.type}
    if (kind is list or kind is tuple) and depth < MAX_DEPTH and len(value) <= MAX_LEAVES:
        return {"t": "list" if kind is list else "tuple",
                "items": [_describe(v, tensors, depth + 1) for v in value]}
    if value is None:
        return {"t": "none"}
    if kind is bool or kind is int or kind is float:
        finite = kind is not float or math.isfinite(value)
        name = "bool" if kind is bool else "int" if kind is int else "float"
        return {"t": "number", "type": name, "value": value if finite else repr(value)}
    # The type's own slots, read without its metaclass (which candidate code may define).
    module = type.__dict__["__module__"].__get__(kind)
    qualname = type.__dict__["__qualname__"].__get__(kind)
    return {"t": "other", "type": f"{module}.{qualname}", "tensor": issubclass(kind, torch.Tensor)}


def _tensor_problem(t: torch.Tensor) -> str:
    """Why a plain torch.Tensor cannot travel as bytes ('' when it can): not dense, or a view that reads
    outside its storage (compare() refuses both)."""
    if t.layout != torch.strided or t.is_meta:
        return f"layout {t.layout} on {t.device}"
    if str(t.dtype).removeprefix("torch.") not in _DTYPES:
        return f"dtype {t.dtype}"
    try:
        storage = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return "no storage"
    if t.numel() == 0:
        return ""
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    if min(t.stride(), default=0) < 0 or storage < (last + 1) * t.element_size():
        return "storage smaller than its shape and strides need"
    return ""


def leaves(spec: dict) -> list[dict]:
    """The tensor leaves of a spec, in stream order."""
    if spec.get("t") == "tensor":
        return [spec]
    if spec.get("t") in ("list", "tuple"):
        return [leaf for item in spec["items"] for leaf in leaves(item)]
    return []


def nbytes_of(leaf: dict) -> int:
    return math.prod(leaf["shape"]) * _DTYPES[leaf["dtype"]].itemsize


def validate(spec: Any) -> int:
    """The stream length in bytes of a spec that came off the wire; raises `Malformed`."""
    count = [0]

    def walk(node: Any, depth: int) -> int:
        count[0] += 1
        if not isinstance(node, dict) or count[0] > MAX_LEAVES or depth > MAX_DEPTH + 1:
            raise Malformed("an output description that is too deep, too large or not an object")
        kind = node.get("t")
        if kind == "tensor":
            shape = node.get("shape")
            if (node.get("dtype") not in _DTYPES or node.get("device") not in ("cpu", "cuda")
                    or not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape)
                    or len(shape) > 16):
                raise Malformed(f"a tensor description that is not valid: {str(node)[:200]}")
            return nbytes_of(node)
        if kind in ("list", "tuple") and isinstance(node.get("items"), list):
            return sum(walk(item, depth + 1) for item in node["items"])
        if kind == "none" or (kind == "other" and isinstance(node.get("type"), str)):
            return 0
        if kind == "number" and node.get("type") in ("bool", "int", "float"):
            return 0
        raise Malformed(f"an output description of unknown kind: {str(node)[:200]}")

    return walk(spec, 0)


def rebuild(spec: dict, tensors: list[torch.Tensor]) -> Any:
    """The value a spec describes, with `tensors` (in stream order) at its tensor leaves."""
    it = iter(tensors)
    return _rebuild(spec, it)


def _rebuild(node: dict, tensors) -> Any:
    kind = node["t"]
    if kind == "tensor":
        return next(tensors)
    if kind in ("list", "tuple"):
        items = [_rebuild(item, tensors) for item in node["items"]]
        return items if kind == "list" else tuple(items)
    if kind == "none":
        return None
    if kind == "number":
        value = node["value"]
        cast = {"bool": bool, "int": int, "float": float}[node["type"]]
        return cast(value) if not isinstance(value, str) else float(value)
    return stand_in(node["type"], bool(node.get("tensor")))


def stand_in(type_name: str, tensor: bool) -> Any:
    """An object whose type has the given name (a torch.Tensor subclass when `tensor`): what compare()
    sees in place of an output that could not travel, so that it reports it as it would the original."""
    module, _, qualname = type_name[:300].rpartition(".")
    if tensor:
        cls = type("StandIn", (torch.Tensor,), {"__module__": module, "__qualname__": qualname})
        return torch.empty(0).as_subclass(cls)
    cls = type("StandIn", (), {"__module__": module, "__qualname__": qualname})
    return cls()


# --------------------------------------------------------------------------------------------------
# The region


class Region:
    """A fixed-size shared memory region, mapped read-write (the worker writes, the referee reads).

    `pin()` page-locks this process's mapping for its CUDA context (`cuMemHostRegister`), once: copies
    between the region and the device then go by DMA straight from it, asynchronously (`copy_` with
    `non_blocking`, one `settle` per message), instead of through the driver's pageable staging buffer,
    one synchronous piece at a time. Pinning changes neither who can write the region nor what it holds.
    When it fails (no GPU, no cuda-bindings, a driver or sandbox that refuses: gVisor, RLIMIT_MEMLOCK),
    the copies stay pageable and `pin_note` says why."""

    def __init__(self, fd: int, size_bytes: int):
        self.fd, self.size_bytes = fd, size_bytes
        self._map = mmap.mmap(fd, size_bytes)
        self.tensor = torch.frombuffer(self._map, dtype=torch.uint8)
        self.pinned = False
        self.pin_note = "not tried"  # "pinned", or why the copies are pageable

    def pin(self) -> bool:
        """Register the mapping with the current CUDA context (first call only); whether it is pinned."""
        if self.pin_note == "not tried":
            self.pin_note = _register(self.tensor.data_ptr(), self.size_bytes) or "pinned"
            self.pinned = self.pin_note == "pinned"
        return self.pinned

    def close(self) -> None:
        """Unregister (when pinned) and unmap."""
        if self.pinned:
            _unregister(self.tensor.data_ptr())
            self.pinned, self.pin_note = False, "closed"
        del self.tensor
        try:
            self._map.close()
        except BufferError:  # a view of it is still alive somewhere: the mapping goes with the process
            pass


def _register(address: int, size_bytes: int) -> str:
    """'' once `size_bytes` at `address` are page-locked for the current context, else why not."""
    if not torch.cuda.is_available():
        return "no GPU"
    try:
        from cuda.bindings import driver

        torch.cuda.current_device()  # the primary context is current on this thread (driver calls need it)
        (error,) = driver.cuMemHostRegister(address, size_bytes, 0)
    except Exception as exc:  # noqa: BLE001 - no driver library, an old binding: pageable copies then
        return f"cuMemHostRegister unavailable: {type(exc).__name__}: {exc}"[:300]
    if error != driver.CUresult.CUDA_SUCCESS:
        return f"cuMemHostRegister: {getattr(error, 'name', error)}; RLIMIT_MEMLOCK {_memlock()}"[:300]
    return ""


def _unregister(address: int) -> None:
    try:
        from cuda.bindings import driver

        driver.cuMemHostUnregister(address)
    except Exception:  # noqa: BLE001 - the process is ending or the context is gone: nothing to give back
        pass


def _memlock() -> str:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "/".join("unlimited" if v == resource.RLIM_INFINITY else str(v) for v in (soft, hard))


def settle(tensors: list[torch.Tensor]) -> None:
    """Wait for the asynchronous copies issued on the current stream of each device among `tensors`
    (one synchronise per device per message, not per chunk)."""
    for device in {t.device for t in tensors if t.is_cuda}:
        settle_device(device)


def settle_device(device: torch.device) -> None:
    """Wait for what was issued on `device`'s current stream (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


@dataclass
class Moved:
    """Bytes copied between the region and tensors, and the seconds it took (instrumentation)."""

    nbytes: int = 0
    seconds: float = 0.0

    def add(self, nbytes: int, seconds: float) -> None:
        self.nbytes += nbytes
        self.seconds += seconds

    def figures(self, name: str) -> dict[str, float]:
        """`{name}_ms`, `{name}_bytes`, `{name}_gbps` (10^9 bytes per second; 0 when nothing took time)."""
        gbps = self.nbytes / self.seconds / 1e9 if self.seconds > 0 else 0.0
        return {f"{name}_ms": round(1e3 * self.seconds, 3), f"{name}_bytes": float(self.nbytes),
                f"{name}_gbps": float(f"{gbps:.4g}")}  # four significant digits: tiny CPU-mode rates too


# --------------------------------------------------------------------------------------------------
# The worker's side


@dataclass
class _Pending:
    """An output waiting in the worker for its bytes to go into the region."""

    meta: dict[str, Any]  # key, spec, mutated
    flats: list[torch.Tensor]  # its tensors as bytes, in stream order
    total: int


class Shipper:
    """Sends outputs to the referee: `exchange(message) -> reply` is the child's round trip through the
    parent (it raises when the channel breaks, which the session treats as a harness fault).

    Why batches: a round trip costs about a millisecond and a small task has a dozen outputs, so outputs
    that fit the region together wait (they are alive anyway: the worker keeps them for its claim) and go
    in one message, each at its own offset. `batch=False` sends each at once (when the worker cannot keep
    them). An output larger than the region goes alone, in region-sized chunks."""

    def __init__(self, exchange: Callable[[dict], dict], region: Region):
        self.exchange, self.region = exchange, region
        self.batch = True
        self.queue: list[_Pending] = []
        self.queued_bytes = 0
        self.kind = "output"  # the message type of what is queued ("timed": re-checked timing outputs)
        self.moved = Moved()  # the region filled, in all (each message carries its own share)

    def ship(self, key: Key | TimedKey, item: dict[str, Any], kind: str = "output") -> None:
        """Send (or queue) one item (`{"output": value, "inputs_after": value or None, "mutated": str}`)."""
        if kind != self.kind:
            self.flush()
            self.kind = kind
        spec, tensors = describe((item.get("output"), item.get("inputs_after")))
        flats = [t.reshape(-1).view(torch.uint8) for t in tensors]
        meta = {"key": key.wire(), "spec": spec, "mutated": str(item.get("mutated") or "")[:2000]}
        pending = _Pending(meta, flats, sum(f.numel() for f in flats))
        if pending.total > self.region.size_bytes:
            self.flush()
            self._stream(pending)
            return
        if self.queued_bytes + pending.total > self.region.size_bytes:
            self.flush()
        self.queue.append(pending)
        self.queued_bytes += pending.total
        if not self.batch:
            self.flush()

    def flush(self) -> None:
        """Every queued output into the region, one after the other, in one message."""
        if not self.queue:
            return
        parts, offset, began = [], 0, time.perf_counter()
        for pending in self.queue:
            self._fill(pending.flats, 0, pending.total, offset)
            parts.append({**pending.meta, "start": 0, "nbytes": pending.total, "offset": offset})
            offset += pending.total
        settle([f for pending in self.queue for f in pending.flats])
        self.queue.clear()
        self.queued_bytes = 0
        self.exchange({"type": self.kind, "parts": parts, **self._filled(offset, began)})

    def _stream(self, pending: _Pending) -> None:
        start, meta = 0, pending.meta
        while start < pending.total:
            size, began = min(self.region.size_bytes, pending.total - start), time.perf_counter()
            self._fill(pending.flats, start, size, 0)
            settle(pending.flats)
            part = {**meta, "start": start, "nbytes": size, "offset": 0}
            self.exchange({"type": self.kind, "parts": [part], **self._filled(size, began)})
            meta = {"key": meta["key"]}
            start += size

    def _filled(self, nbytes: int, began: float) -> dict[str, Any]:
        """What a message says of its filling (instrumentation for the referee's `referee_ms`): bytes,
        milliseconds, and whether this side's mapping is pinned ("pinned") or why not."""
        seconds = time.perf_counter() - began
        self.moved.add(nbytes, seconds)
        return {"fill_bytes": nbytes, "fill_ms": round(1e3 * seconds, 3), "pin": self.region.pin_note}

    def _fill(self, flats: list[torch.Tensor], start: int, size: int, at: int) -> None:
        """Copy stream bytes [start, start + size) to region[at:] (device->host where on a GPU:
        asynchronous when the region is pinned; the caller settles before announcing)."""
        offset, filled = 0, at
        for flat in flats:
            n = flat.numel()
            lo, hi = max(start - offset, 0), min(start + size - offset, n)
            if lo < hi:
                fast = flat.is_cuda and self.region.pin()
                self.region.tensor[filled:filled + hi - lo].copy_(flat[lo:hi], non_blocking=fast)
                filled += hi - lo
            offset += n

    def failed(self, key: Key) -> dict:
        """The candidate raised on `key`: whether the reference works there (a derived configuration
        whose reference fails is dropped, not blamed on the candidate)."""
        self.flush()
        return self.exchange({"type": "failed", "key": key.wire()})

    def sync(self) -> dict:
        """Wait until the referee holds this job's references (it answers once they exist): the worker's
        memory plan then sees the memory they take on the shared device. The answer gives, per
        configuration, the sizes of its first seed's reference and whether it works in place
        (`referee.RefereeJob.reference_sizes`), so that the worker needs no reference output to plan."""
        return self.exchange({"type": "sync"})

    def ship_timed(self, config: str, outputs: dict[tuple, Any]) -> None:
        """The re-checked timing outputs of one configuration (`TimedOutputs.to_ship`: keyed (function,
        input set, re-check), or (function, input set) for a first one), in as few messages as the region
        allows, in key order (a set's first before its later ones)."""
        for (function, input_set, *recheck), value in sorted(outputs.items()):
            key = TimedKey(config, input_set, function, *recheck)
            self.ship(key, {"output": value, "inputs_after": None}, "timed")
        self.flush()
        self.kind = "output"

    def done(self) -> dict:
        """Every output is shipped; the reply says whether the referee found them all correct."""
        self.flush()
        return self.exchange({"type": "done"})

    def ready(self) -> dict:
        """After a `done` that said proceed: the worker is about to time. The sandbox answers once the job
        may take the GPU (a scheduler's exclusive turn, `sandbox.Worker.run`'s `on_proceed`); the referee
        never sees this message."""
        self.flush()
        return self.exchange({"type": "ready"})


@dataclass(frozen=True)
class _Slot:
    """A later output kept for the referee: its re-check index on its set, a copy of it, its bytes."""

    recheck: int
    value: Any
    nbytes: int


@dataclass
class _Later:
    """The candidate's later re-checked outputs on one input set (after its first): how many there were,
    how many were not bit for bit the first, and those kept for the referee (`KEPT_RECHECKS` slots): the
    farthest from the first (with its distance) and one drawn at random among those that differed."""

    calls: int = 0
    differing: int = 0
    farthest: _Slot | None = None
    farthest_distance: float = -1.0
    sampled: _Slot | None = None

    def kept(self) -> dict[int, Any]:
        return {slot.recheck: slot.value for slot in (self.farthest, self.sampled) if slot is not None}


class TimedOutputs:
    """The timing stage's `check` with a referee (see the module docstring). The candidate's first output
    on each input set is kept (`first`, keyed (candidate, input set)); each later one on that set passes
    here when it is bit for bit that first one (then it is what the referee judges), and otherwise is
    compared with it under the task's tolerances (a failure counts here at once) and may be kept for the
    referee too (`to_ship`, each with its re-check index), which judges it against its own reference
    under the task's tolerance, as it judges the first. A baseline's output is compared with the
    candidate's first on its set and never kept (one before that first is not compared: True).

    Which later outputs are kept, per input set (`KEPT_RECHECKS`, two): the farthest from the first (by
    the comparison's `max_rel_error`) and one drawn uniformly at random among those that differed
    (reservoir sampling from this process's own random source), so that neither a candidate's first
    differing outputs nor its mildest ones decide what the referee sees; in all, no more device bytes than
    `budget_bytes` (what the memory plan leaves free). A deterministic candidate keeps and ships nothing
    beyond its first output per set. Beyond what is kept, a differing output is judged only here, against
    the first: within the tolerance of an output the referee found within the tolerance of its reference,
    so within twice the tolerance of that reference; `unjudged` counts those (the session reports the
    check as partial when there are any).

    Why never against the reference model's own output (the eager baseline's): kept here, it would be a
    right answer that the candidate's native code could copy and return. `compare(out, expected)` is the
    session's comparison under the task's tolerances (a `correctness.Comparison`, or a bool);
    `candidate` the candidate's name among the timed functions; `rng` the random source (tests)."""

    def __init__(self, compare: Callable[[Any, Any], Any], candidate: str = "candidate", *,
                 budget_bytes: int = 1 << 62, rng: random.Random | None = None):
        self.compare, self.candidate, self.budget_bytes = compare, candidate, budget_bytes
        self.rng = rng or random.Random(int.from_bytes(os.urandom(8), "little"))
        self.first: dict[tuple[str, int], Any] = {}
        self.later: dict[int, _Later] = {}
        self.kept_bytes = 0

    def check(self, name: str, input_set: int, out: Any) -> bool:
        first = self.first.get((self.candidate, input_set))
        if name != self.candidate:
            return first is None or _ok(self.compare(out, first))
        if first is None:
            self.first[(self.candidate, input_set)] = snapshot(out)
            return True  # the referee judges it
        later = self.later.setdefault(input_set, _Later())
        later.calls += 1
        if identical(out, first):
            return True  # exactly what the referee judges
        later.differing += 1
        result = self.compare(out, first)
        self._keep(later, out, _distance(result))
        return _ok(result)

    def _keep(self, later: _Later, out: Any, distance: float) -> None:
        """`out` (the set's `later.calls`-th re-check) into the slots it wins, within `budget_bytes`."""
        wins = {"farthest": distance > later.farthest_distance,
                "sampled": self.rng.randrange(later.differing) == 0}  # each kept with chance 1/n
        if not any(wins.values()):
            return
        spec, tensors = describe(out)
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        old = {name: getattr(later, name) for name in wins}
        staying = [slot for name, slot in old.items() if slot is not None and not wins[name]]
        losing = {id(slot): slot for name, slot in old.items() if slot is not None and wins[name]}
        freed = sum(slot.nbytes for slot in losing.values() if all(slot is not s for s in staying))
        if self.kept_bytes - freed + nbytes > self.budget_bytes:
            return  # no room left by the memory plan: this one is judged here only
        for name, won in wins.items():  # the copies it replaces go first: never both held beyond the budget
            if won:
                setattr(later, name, None)
        del old, staying, losing
        slot = _Slot(later.calls, rebuild(spec, [t.clone() for t in tensors]), nbytes)
        self.kept_bytes += nbytes - freed
        if wins["farthest"]:
            later.farthest, later.farthest_distance = slot, distance
        if wins["sampled"]:
            later.sampled = slot

    def to_ship(self) -> dict[tuple[str, int, int], Any]:
        """What the referee judges after the bench: (function, input set, re-check) -> output."""
        shipped = {(name, input_set, 0): value for (name, input_set), value in self.first.items()}
        for input_set, later in self.later.items():
            shipped.update({(self.candidate, input_set, recheck): value
                            for recheck, value in later.kept().items()})
        return shipped

    def unjudged(self) -> tuple[int, int]:
        """(later outputs that differed from the first on their set and are judged only here, all later
        outputs that differed)."""
        differing = sum(later.differing for later in self.later.values())
        return differing - sum(len(later.kept()) for later in self.later.values()), differing

    def clear(self) -> None:
        self.first.clear()
        self.later.clear()
        self.kept_bytes = 0


def _ok(result: Any) -> bool:
    return bool(getattr(result, "ok", result))


def _distance(result: Any) -> float:
    """How far a differing output is from the first: the comparison's `max_rel_error` (infinite when it
    has none: a structure, shape or type that differs)."""
    value = getattr(result, "max_rel_error", None)
    if type(result) is bool:
        return 0.0 if result else math.inf
    return math.inf if value is None or math.isnan(value) else float(value)


def identical(value: Any, kept: Any) -> bool:
    """Whether `value` is bit for bit `kept` (a `snapshot`): the same description (structure, types,
    dtypes, shapes, devices, numbers) and the same bytes in every tensor (NaN payloads included)."""
    spec, tensors = describe(value)
    kept_spec, kept_tensors = describe(kept)
    return spec == kept_spec and all(
        a.device == b.device and _same_bytes(a, b) for a, b in zip(tensors, kept_tensors, strict=True))


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The bytes of two contiguous tensors, compared block by block: `torch.equal` on a CUDA tensor
    allocates a mask of its size (an output-sized temporary for a multi-GB output, which the memory plan
    does not count: it counts `COMPARE_BYTES`)."""
    from cudaperf.correctness import COMPARE_CHUNK_BYTES

    x, y = _bytes(a), _bytes(b)
    if x.numel() != y.numel():
        return False
    step = COMPARE_CHUNK_BYTES // 2
    return all(torch.equal(x[i:i + step], y[i:i + step]) for i in range(0, x.numel(), step))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def snapshot(value: Any) -> Any:
    """A copy of an output, read without running candidate code (`describe`, then a clone of each plain
    tensor; anything else becomes its stand-in): later calls may overwrite what the candidate returned."""
    spec, tensors = describe(value)
    return rebuild(spec, [t.clone() for t in tensors])


# --------------------------------------------------------------------------------------------------
# The referee's side


class Assembler:
    """One output's stream, announced chunk by chunk, into tensors on `device`.

    An output larger than `limit_bytes` (more than the reference needs: its shapes cannot all be right)
    is not stored: its bytes are counted and dropped, and its tensors rebuilt as zero-size stand-ins of
    the announced shapes and dtypes, so that the comparison reports what is wrong with them."""

    def __init__(self, spec: Any, device: torch.device, limit_bytes: int):
        self.total = validate(spec)
        self.spec = spec
        self.received = 0
        self.copied = 0  # bytes copied out of the region (0 for an output too large to store)
        self.stored = self.total <= limit_bytes
        make = _destination if self.stored else _shape_only
        self.tensors = [make(leaf, device) for leaf in leaves(spec)]
        self._flats = [t.reshape(-1).view(torch.uint8) for t in self.tensors] if self.stored else []

    def take(self, region: Region, start: Any, nbytes: Any, at: Any = 0) -> bool:
        """Copy region[at:at + nbytes] to stream bytes [start, start + nbytes); True when the stream is
        whole. From a pinned region the copies to the device are asynchronous: `settle_device` before the
        answer that lets the worker overwrite the region, and before judging."""
        if type(start) is not int or type(nbytes) is not int or type(at) is not int or start != self.received:
            raise Malformed(f"a chunk at {start!r} where {self.received} was expected")
        if nbytes < 0 or at < 0 or at + nbytes > region.size_bytes or start + nbytes > self.total:
            raise Malformed(f"a chunk of {nbytes!r} bytes at {start} of a {self.total} byte output, region "
                            f"offset {at}")
        if nbytes == 0 and self.total > 0:
            raise Malformed("an empty chunk in the middle of an output")
        offset, taken = 0, at
        for flat in self._flats:
            n = flat.numel()
            lo, hi = max(start - offset, 0), min(start + nbytes - offset, n)
            if lo < hi:
                fast = flat.is_cuda and region.pinned
                flat[lo:hi].copy_(region.tensor[taken:taken + hi - lo], non_blocking=fast)
                taken += hi - lo
            offset += n
        self.received += nbytes
        self.copied += taken - at
        return self.received == self.total

    def value(self) -> Any:
        return rebuild(self.spec, self.tensors)


def _shape_only(leaf: dict, device: torch.device) -> torch.Tensor:
    """A tensor of the announced shape and dtype that holds one element (a broadcast view)."""
    target = device if leaf["device"] == device.type else torch.device("cpu")
    return torch.zeros((), dtype=_DTYPES[leaf["dtype"]], device=target).expand(leaf["shape"])


def _destination(leaf: dict, device: torch.device) -> torch.Tensor:
    """Where a tensor leaf's bytes land: on the referee's device when the worker's output was on a device
    of the same kind, else on the CPU (then compare() reports the device)."""
    if leaf["device"] == device.type:
        target = device
    elif leaf["device"] == "cpu":
        target = torch.device("cpu")
    else:
        raise Malformed(f"an output on {leaf['device']} announced to a referee on {device}")
    try:
        return torch.empty(leaf["shape"], dtype=_DTYPES[leaf["dtype"]], device=target)
    except (RuntimeError, MemoryError) as exc:  # out of memory: the announced size is the worker's doing
        raise Malformed(f"an output the referee cannot hold ({nbytes_of(leaf)} bytes): {exc}"[:500]) from None
