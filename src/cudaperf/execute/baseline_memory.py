"""The memory a refereed worker's baselines free: kept apart from the candidate's and overwritten after each
call, so that no temporary of a baseline is readable when the candidate's code runs.

Why: in a refereed PyTorch worker (`torch_session`) the baselines (the reference model, eager and
compiled) run in the candidate's process, interleaved with it in the timing stage. Their outputs are
overwritten after each call (`TorchSession.overwrite_baseline_output`), but a forward frees its temporaries
as it goes, and one of them can hold the answer (an output that is a copy, a view, a cast or a cheap last
step of one); native code of the candidate can read freed memory.

`BaselineMemory.for_device(device)` (one per job) gives `around(fn)` (`fn` whose calls allocate apart),
`routed()` (the same around any other baseline work: the compiled baseline's compile and first call, the
re-check of a baseline's output), and `scrub()`, called before the candidate's next call once for the
baseline calls since its last one (the bench's `timing.Disposed.settle`, outside the timed window), which
overwrites what the calls freed. On CUDA the writes are only queued, on the current stream: the settle's
device synchronisation, after them and the outputs' own fills, makes them complete before the
candidate's code runs again (one wait for all).

- CUDA: the calls allocate from a private pool of the caching allocator (`torch.cuda.MemPool`, routed to
  by `torch.cuda.use_mem_pool`, this thread only: Inductor's code runs on it too), so the candidate's
  allocations are not given its blocks (except when the allocator would otherwise run out of memory,
  `use_on_oom`: then the block it gets was overwritten after the baselines' last call). `scrub` writes
  0xFF bytes (NaN in floating types) over every block of that pool that no tensor holds: inactive ones and
  ones freed but waiting on another stream's work (the bench's device synchronisation after each call has
  finished that work), from the pool's snapshot, with `cuMemsetD8Async` on the raw addresses (no tensor,
  no allocation). Split and merged blocks need nothing of their own: the snapshot lists the pool's blocks
  as they are at that moment. All of the pool's free blocks each time, not only those freed since the
  last scrub: the allocator says which blocks are free, not which were written since (that takes its
  allocation history, which records the candidate's allocations too). Without `MemPool` (torch older
  than the versions the project runs), every free block of the device's allocator is overwritten instead.
- CPU (glibc malloc, under `malloc` of torch's CPU allocator): around each call `mallopt(M_PERTURB,
  0xFF)`, so every chunk freed into the heap's bins or top is overwritten at its free (chunks from mmap are
  unmapped at free); glibc's per-thread cache (tcache: up to 7 chunks per size up to 1032 bytes by
  default; `GLIBC_TUNABLES` read for other counts) is not perturbed, so `scrub` drains it (each size taken,
  overwritten and freed again: 0.4 to 0.7 ms per call on the 2-core CI machine). A refereed CPU-mode
  worker starts with the cache off (`GLIBC_TUNABLES=glibc.malloc.tcache_count=0`, set by the sandbox),
  checked by a probe (`tcache_caches_frees`): then nothing is left to drain. Checked once per
  process (a chunk malloc'd under the perturbation holds its fill): another allocator (jemalloc or
  tcmalloc preloaded, musl) leaves `failure` set and nothing is done.
  The cost, inside the window: the perturbation fills every heap chunk at its malloc and at its free, so
  the baselines' CPU samples include those fills. `benchmarks/baseline_memory.py` (median of 7 benches,
  2-core CI machine) measured the eager median 1.1x to 1.5x with temporaries of KBs, 1.5x to 4.3x with
  temporaries of MBs (an elementwise chain on 1 MiB tensors: 4.3x), against 1.0 +- 0.02 between two
  identical functions. That is kept, and said in every result's environment (`describe`), because
  nothing sound was found outside the window: glibc lists no free chunks (`malloc_trim` clears only the
  whole pages inside them), so the fill has to happen at the free. The CPU timings are not the reported
  GPU figures (`cudaperf.timing`, CPU fallback); a CPU result's speedup over eager is inflated by this.

Not covered: temporaries freed after the call's scrub (tensors a forward leaves in reference cycles,
freed when the garbage collector runs; what the model keeps and frees later is freed during its next
call, which is covered); memory kept by libraries for reuse rather than freed (cuBLAS/cuBLASLt
workspaces, allocated once per handle and stream and shared with the candidate's torch calls; oneDNN and
MKL scratchpads on the CPU) or allocated outside torch's allocator (a library's own cudaMalloc), and on
the CPU chunks freed by other threads into their own tcaches (torch's intra-op workers: per-thread
partial results, not outputs) and, with `glibc.malloc.tcache_max` raised above 1032 bytes, cached chunks
above that size. On CUDA a baseline call cannot be given the general pool's cached free blocks (the
allocator releases those only when no allocation is routed to a pool), so near the device's memory a
baseline can run out where it would not have (then it is dropped and flagged, `eager_baseline_failed`),
and the pool's reserved bytes (the baselines' working set) stay out of the candidate's reach for the
job's timing stage.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

FILL_BYTE = 0xFF  # 0xFF.. is NaN in fp64/fp32/fp16/bf16 and -1 in signed integers
M_PERTURB = -6  # glibc's mallopt parameter (malloc.h)
TCACHE_COUNT = 7  # glibc's default chunks per tcache size (glibc.malloc.tcache_count)
TCACHE_MAX_BYTES = 1032  # glibc's default largest tcache request (glibc.malloc.tcache_max)
PERTURB_CHECK_BYTES = 4096  # above the tcache, below the mmap threshold: served by _int_malloc


class BaselineMemory:
    """Where one job's baseline calls allocate, and the overwrite of what they freed (module docstring).

    `failure` is '' while the mechanism is in effect and every scrub succeeded, else why not (the first
    reason); `calls`, `blocks`, `nbytes` and `seconds` add up the scrubs (host time: the snapshot and the
    launches, or the drain)."""

    kind = "none"
    note = ""  # what the mechanism does to the baselines' samples, when anything

    def __init__(self) -> None:
        self.available = True  # False: the mechanism cannot run here (`failure` says why); nothing is done
        self.failure = ""
        self.calls = self.blocks = self.nbytes = 0
        self.seconds = 0.0
        self._depth = 0  # nested routed work enters the mechanism once

    @staticmethod
    def for_device(device: torch.device) -> BaselineMemory:
        """The mechanism for `device`: a private CUDA pool, or glibc's perturbation on the CPU."""
        if device.type == "cuda":
            return CudaPool(device)
        return GlibcHeap()

    # -- the calls -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def routed(self) -> Iterator[None]:
        """Baseline work inside: its allocations go where `scrub` overwrites them."""
        entered = self._begin()
        try:
            yield
        finally:
            self._end(entered)

    def around(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """`fn` with each call routed (the bench times this call: the routing is inside the window, the
        scrub outside). No context manager object per call: on the CPU its cost would be in the sample."""
        def call(inputs: Any) -> Any:
            entered = self._begin()
            try:
                return fn(inputs)
            finally:
                self._end(entered)
        return call

    def _begin(self) -> bool:
        if self._depth or not self.available:
            return False
        self._enter()
        self._depth = 1
        return True

    def _end(self, entered: bool) -> None:
        if entered:
            self._depth = 0
            self._exit()

    def scrub(self) -> None:
        """Overwrite what the routed calls freed (on CUDA queued only: the caller synchronises). A failure
        is kept in `failure` (the first one) and the next call tries again."""
        if not self.available:
            return
        began = time.perf_counter()
        try:
            blocks, nbytes = self._scrub()
        except Exception as exc:  # noqa: BLE001 - the harness's protection failed: said, not raised
            self.failure = self.failure or f"scrub: {type(exc).__name__}: {exc}"[:300]
            return
        self.calls += 1
        self.blocks += blocks
        self.nbytes += nbytes
        self.seconds += time.perf_counter() - began

    def close(self) -> None:
        """Nothing more is routed or scrubbed; what the mechanism holds is given back."""
        self.available = False

    def describe(self) -> str:
        """One line for the result's environment: the mechanism and what its scrubs cost."""
        head = self.kind if not self.failure else f"{self.kind}; failed: {self.failure}"
        if not self.calls:
            return f"{head}; no baseline call scrubbed{self.note}"
        per = self.calls
        return (f"{head}; {per} scrubs (one per settle of the baseline calls before a candidate call), "
                f"{self.blocks / per:.1f} blocks and {self.nbytes / per / 1e6:.3f} MB each, "
                f"{1e6 * self.seconds / per:.0f} us each (host time; the wait is the settle's){self.note}")

    # -- per mechanism ---------------------------------------------------------------------------
    def _enter(self) -> None:
        raise NotImplementedError

    def _exit(self) -> None:
        raise NotImplementedError

    def _scrub(self) -> tuple[int, int]:
        """(blocks or chunks overwritten, their bytes)."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------------------
# CUDA: a private pool of the caching allocator


class CudaPool(BaselineMemory):
    """The baselines' calls in a private pool; `scrub` overwrites its free blocks (module docstring)."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device = device
        self.index = device.index if device.index is not None else torch.cuda.current_device()
        self.pool: Any = None
        self._routing: Any = None
        try:
            with torch.cuda.device(self.index):  # a pool belongs to the device current at its creation
                self.pool = _new_pool()
        except Exception as exc:  # noqa: BLE001 - an older torch: every free block is overwritten instead
            why = f"{type(exc).__name__}: {exc}"[:200]
            self.pool, self.kind = None, f"cuda allocator, every free block (no private pool: {why})"
        else:
            self.kind = "cuda private pool"
        self._snapshot = _snapshot_function(self.pool)

    def _enter(self) -> None:
        if self.pool is not None:
            self._routing = torch.cuda.use_mem_pool(self.pool, self.index)
            self._routing.__enter__()

    def _exit(self) -> None:
        routing, self._routing = self._routing, None
        if routing is not None:
            routing.__exit__(None, None, None)

    def _scrub(self) -> tuple[int, int]:
        from cuda.bindings import driver

        blocks = free_blocks(self._snapshot(), self.index)
        if not blocks:
            return 0, 0
        stream = driver.CUstream(torch.cuda.current_stream(self.index).cuda_stream)
        for address, size in blocks:
            (error,) = driver.cuMemsetD8Async(address, FILL_BYTE, size, stream)
            if error != driver.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuMemsetD8Async({size} bytes): {getattr(error, 'name', error)}")
        return len(blocks), sum(size for _, size in blocks)

    def close(self) -> None:
        """Drop the pool: its destructor gives its free segments back to the driver (blocks still held,
        a compiled baseline's constants say, keep theirs until they are freed)."""
        super().close()
        self.pool = None
        self._snapshot = list  # the last reference to the pool was in the snapshot's closure


def _new_pool() -> Any:
    try:
        return torch.cuda.MemPool(use_on_oom=True)
    except TypeError:  # a MemPool without the option: the pool only
        return torch.cuda.MemPool()


def _snapshot_function(pool: Any) -> Callable[[], list[dict]]:
    """The allocator's segments: the pool's only, or every segment without a pool; without the trace
    entries where torch can leave them out (they are recorded only while history is on, and not needed)."""
    snapshot = torch.cuda.memory_snapshot
    lean = "include_traces" in inspect.signature(snapshot).parameters
    if pool is None:
        return (lambda: snapshot(include_traces=False)) if lean else snapshot
    if lean:
        return lambda: snapshot(pool.id, include_traces=False)
    return lambda: snapshot(pool.id)


def free_blocks(segments: list[dict], device_index: int) -> list[tuple[int, int]]:
    """(address, bytes) of every block no tensor holds in `segments` (a `torch.cuda.memory_snapshot`) on
    the device: inactive, or freed and waiting on another stream's work (safe to write once the device was
    synchronised after the call that freed it). Blocks are listed in address order from their segment's
    start (older torch gives no block address)."""
    found = []
    for segment in segments:
        if segment.get("device") != device_index:
            continue
        address = segment["address"]
        for block in segment.get("blocks", []):
            size, address = block["size"], block.get("address", address)
            if size and block.get("state") in ("inactive", "active_pending_free"):
                found.append((address, size))
            address += size
    return found


# --------------------------------------------------------------------------------------------------
# CPU: glibc malloc


class GlibcHeap(BaselineMemory):
    """glibc's perturbation around the calls, its per-thread cache drained by `scrub` (module docstring)."""

    kind = "glibc M_PERTURB"
    note = ("; the baselines' CPU samples include glibc's fill of each heap chunk at its malloc and free: "
            "slower baselines (benchmarks/baseline_memory.py: eager medians 1.1x to 1.5x with KB-sized "
            "temporaries, up to 4.3x with MB-sized ones)")

    def __init__(self) -> None:
        super().__init__()
        self.libc = _libc()
        self.tcache_count, self.tcache_max_bytes = tcache_shape(os.environ.get("GLIBC_TUNABLES", ""))
        self.failure = self.libc.failure if self.libc is not None else "no mallopt: not glibc"
        self.available = not self.failure
        if self.available and self.tcache_count == 0 and self.libc.tcache_caches_frees():
            self.tcache_count = TCACHE_COUNT  # the tunable did not take (e.g. a secure-mode process): drain
        if not self.available:
            self.note = ""  # nothing is done to the samples either
        else:
            largest = min(self.tcache_max_bytes, TCACHE_MAX_BYTES)
            self.kind = (f"glibc M_PERTURB=0x{FILL_BYTE:02X} around the calls, " + (
                "the per-thread cache off" if self.tcache_count == 0 else
                f"the tcache ({self.tcache_count} chunks per size up to {largest} bytes) drained after each"))

    def _enter(self) -> None:
        self.libc.mallopt(M_PERTURB, FILL_BYTE)

    def _exit(self) -> None:
        self.libc.mallopt(M_PERTURB, 0)

    def _scrub(self) -> tuple[int, int]:
        if self.tcache_count == 0:  # no per-thread cache: every freed chunk was perturbed at its free
            return 0, 0
        return self.libc.drain_tcache(self.tcache_count, min(self.tcache_max_bytes, TCACHE_MAX_BYTES))


class _Libc:
    """glibc's malloc, free, memset and mallopt through ctypes; `failure` says why not usable."""

    def __init__(self, lib: ctypes.CDLL):
        self.malloc = _function(lib.malloc, ctypes.c_void_p, [ctypes.c_size_t])
        self.free = _function(lib.free, None, [ctypes.c_void_p])
        self.memset = _function(lib.memset, ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t])
        self.mallopt = _function(lib.mallopt, ctypes.c_int, [ctypes.c_int, ctypes.c_int])
        self.failure = self.perturbation_works()

    def perturbation_works(self) -> str:
        """'' when glibc's perturbation fills a chunk served by its own malloc (another allocator in front
        of it, or a libc without M_PERTURB, leaves the chunk as it was); else why not."""
        probe = 0xA5  # a byte of its own: a fresh chunk holds its complement, 0x5A
        if not self.mallopt(M_PERTURB, probe):
            return "mallopt(M_PERTURB) refused"
        try:
            chunk = self.malloc(PERTURB_CHECK_BYTES)
            seen = ctypes.string_at(chunk, 64) if chunk else b""
            self.free(chunk)
        finally:
            self.mallopt(M_PERTURB, 0)
        if seen != bytes([probe ^ 0xFF]) * 64:
            return "malloc is not glibc's, or ignores M_PERTURB (a chunk malloc'd under it was not filled)"
        return ""

    def tcache_caches_frees(self) -> bool:
        """Whether a small chunk freed under the perturbation escapes it (glibc's per-thread cache took it):
        a probe chunk is filled, freed under M_PERTURB and looked at past its list words (a chunk the
        cache holds keeps its contents; one in a bin is overwritten at its free)."""
        probe = 0xA5
        size = 48  # a tcache size and a fastbin size; bytes 16.. are past both lists' link words
        chunk = self.malloc(size)
        if not chunk:
            return True  # cannot tell: assume the cache, and drain
        self.memset(chunk, 0x11, size)
        self.mallopt(M_PERTURB, probe)
        try:
            self.free(chunk)
            kept = ctypes.string_at(chunk + 16, size - 16)
        finally:
            self.mallopt(M_PERTURB, 0)
        return kept == bytes([0x11]) * (size - 16)

    def drain_tcache(self, count: int, max_bytes: int) -> tuple[int, int]:
        """Take `count` chunks of every tcache size (the cache's, most recently freed first, then others),
        overwrite them and free them again: the cache then holds only the fill (but its list words).
        Returns (chunks, bytes)."""
        malloc, memset, free = self.malloc, self.memset, self.free
        chunks = nbytes = 0
        for size in range(24, max_bytes + 1, 16):  # one request per tcache bin: chunk sizes 32, 48, ...
            held = [malloc(size) for _ in range(count)]
            for chunk in held:
                if chunk:
                    memset(chunk, FILL_BYTE, size)
                    chunks, nbytes = chunks + 1, nbytes + size
            for chunk in held:
                free(chunk)
        return chunks, nbytes


def _function(fn: Any, restype: Any, argtypes: list) -> Any:
    fn.restype, fn.argtypes = restype, argtypes
    return fn


_LIBC: list[_Libc | None] = []  # checked once per process


def _libc() -> _Libc | None:
    if not _LIBC:
        try:
            _LIBC.append(_Libc(ctypes.CDLL(None)))
        except (OSError, AttributeError):  # no mallopt: not glibc
            _LIBC.append(None)
    return _LIBC[0]


def tcache_shape(tunables: str) -> tuple[int, int]:
    """(chunks per size, largest request in bytes) of glibc's tcache from `GLIBC_TUNABLES` (its
    defaults where the variable does not set them)."""
    count, max_bytes = TCACHE_COUNT, TCACHE_MAX_BYTES
    for item in tunables.replace(",", ":").split(":"):
        name, _, value = item.partition("=")
        if not value.strip().isdigit():
            continue
        if name.strip() == "glibc.malloc.tcache_count":
            count = int(value)
        elif name.strip() == "glibc.malloc.tcache_max":
            max_bytes = int(value)
    return count, max_bytes
