"""The timing lead: the write and clean read queued before each timed call, as one persistent kernel.

Covers `Lead` (the flush buffer, its counters and the kernel; calling it queues one full write of the
buffer on torch's current stream), `LEAD_SOURCE` and `LEAD_CHUNK_BYTES`. timing.py uses it as step 1 of
its protocol: the write evicts L2 and keeps the GPU busy while the host runs the function's host path.

What the kernel does, and why (figures: dev/LOG.md, evaluation: timing):

- it leaves L2 clean for the timed call: after the write, it reads the buffer's first `clean_bytes`
  (2x L2 in timing.py) back. That start of the buffer left L2 long ago, so the read fills L2 with clean
  lines and the write's last dirty lines go back to memory during the lead, not during the timed call
  (after a plain write a read-only kernel runs up to 1.24x slower; after this lead, at most 1.02x:
  benchmarks/flush_state.py);
- the write and the clean read are one launch, so the host's part of the lead is one launch;
- the grid is the number of SMs times the blocks of `LEAD_THREADS` the occupancy calculator fits on one
  SM (`__launch_bounds__` keeps it at 32 registers, so those blocks hold all 2,048 thread slots of an
  sm_90 SM), and work is handed out in `LEAD_CHUNK_BYTES` chunks from an atomic ticket fetched one chunk
  ahead, so blocks run out of work within about one chunk's time; with `exit_together` (as timing.py
  uses it) a grid barrier makes them leave within about a microsecond of each other;
- the last block to exit resets the counters, so the next launch needs no host work;
- diagnostics for benchmarks/lead_probe.py: a per-block trace (entry, exit, SM) and a pinned host word
  set once every block is resident (`wait_resident_s`).

Holding every SM slot does not keep out kernels that a call queues on a stream that does not wait for the
timing stream: they still gain time (they delay the start event queued behind the lead and take the SMs
as the lead leaves), and a DMA copy on such a stream uses copy engines, which no kernel holds. Such work is
caught elsewhere, as an error: the static rule `stream_created` and the profiler's stream check
(anticheat.coverage).

If cuda-core or NVRTC is missing, or the occupancy calculator cannot fill the SM, the lead falls back to
`buffer.zero_()` and says so (`Lead.kind` is "memset" instead of "persistent").

Not covered: other processes or MPS clients sharing the GPU.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import torch

LEAD_THREADS = 256  # threads per block: several blocks per SM, so any SM size is filled exactly
LEAD_STORES = 4  # 16-byte stores per thread per chunk
LEAD_CHUNK_BYTES = LEAD_THREADS * LEAD_STORES * 16  # 16 KiB: one ticket's work for one block
LEAD_KERNEL = "cudaperf_lead"

LEAD_SOURCE = r"""
#define LEAD_THREADS %(threads)d
#define LEAD_STORES %(stores)d
/* Chunks [0, n_write) are written; tickets n_write .. n_write + n_read - 1 read chunks [0, n_read) back,
   the start of the buffer, long since evicted: clean lines that push the last dirty ones out of L2. */
extern "C" __global__ void __launch_bounds__(LEAD_THREADS, 2048 / LEAD_THREADS)
cudaperf_lead(uint4* buf, unsigned long long n_write, unsigned long long n_read, unsigned long long* counters,
              unsigned int value, unsigned long long* trace, unsigned int* gate, unsigned int together)
{
    /* trace (NULL in timing): per block, globaltimer at entry and exit and the SM it ran on */
    if (trace != 0 && threadIdx.x == 0) {
        unsigned long long t; unsigned int sm;
        asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(t));
        asm volatile("mov.u32 %%0, %%%%smid;" : "=r"(sm));
        trace[3 * blockIdx.x] = t;
        trace[3 * blockIdx.x + 2] = sm;
    }
    /* gate (NULL in timing): host-visible memory that gets `value` once every block is resident */
    if (gate != 0 && threadIdx.x == 0 && atomicAdd(&counters[3], 1ULL) == gridDim.x - 1) {
        *((volatile unsigned int*)gate) = value;
        __threadfence_system();
    }
    __shared__ unsigned long long ticket[2];
    const uint4 v = make_uint4(value, value, value, value);
    const unsigned long long total = n_write + n_read;
    unsigned int acc = 0;
    if (threadIdx.x == 0) ticket[0] = atomicAdd(&counters[0], 1ULL);
    __syncthreads();
    for (unsigned int it = 0;; ++it) {
        const unsigned long long chunk = ticket[it & 1];
        if (chunk >= total) break;  /* the same value in every thread: the block leaves together */
        unsigned long long next = 0;
        if (threadIdx.x == 0) next = atomicAdd(&counters[0], 1ULL);  /* in flight during the memory work */
        if (chunk < n_write) {
            uint4* p = buf + chunk * (LEAD_THREADS * LEAD_STORES) + threadIdx.x;
#pragma unroll
            for (int s = 0; s < LEAD_STORES; ++s) p[s * LEAD_THREADS] = v;
        } else {
            const uint4* q = buf + (chunk - n_write) * (LEAD_THREADS * LEAD_STORES) + threadIdx.x;
#pragma unroll
            for (int s = 0; s < LEAD_STORES; ++s) {
                const uint4 x = __ldcg(q + s * LEAD_THREADS);
                acc ^= x.x ^ x.y ^ x.z ^ x.w;
            }
        }
        if (threadIdx.x == 0) ticket[(it + 1) & 1] = next;  /* the other slot: read after the barrier */
        __syncthreads();
    }
    if (acc == 0x9e3779b9u) counters[2] = acc;  /* keeps the loads; harmless if it ever happens */
    /* together: a grid barrier, so no block frees its SM slots before the last one is done. Every block
       is resident (the grid is what the occupancy calculator fits), so it cannot wait for a block that
       never starts; a 20 ms globaltimer limit still lets it go if one ever does. counters[4] counts the
       arrivals (the last one resets it), counters[5] gets this launch's `value` as the release. */
    if (together && threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&counters[4], 1ULL) == gridDim.x - 1) {
            counters[4] = 0;
            __threadfence();
            atomicExch(&counters[5], (unsigned long long)value);
        } else {
            unsigned long long t0, t;
            asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(t0));
            do {
                asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(t));
            } while (*((volatile unsigned long long*)&counters[5]) != value && t - t0 < 20000000ULL);
        }
    }
    __syncthreads();
    if (trace != 0 && threadIdx.x == 0) {
        unsigned long long t;
        asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(t));
        trace[3 * blockIdx.x + 1] = t;
    }
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&counters[1], 1ULL) == gridDim.x - 1) {  /* last block out: ready for the next launch */
            counters[0] = 0;
            counters[1] = 0;
            counters[3] = 0;
            __threadfence();
        }
    }
}
""" % {"threads": LEAD_THREADS, "stores": LEAD_STORES}  # noqa: UP031 - the CUDA braces would need doubling


@dataclass(frozen=True)
class LeadShape:
    """How a persistent lead is launched on one device."""

    grid_blocks: int
    blocks_per_sm: int
    resident_threads_per_sm: int  # what those blocks hold
    max_threads_per_sm: int  # what the SM has


def lead_chunks(flush_bytes: int) -> int:
    """Chunks the buffer holds: `flush_bytes` rounded up to whole chunks."""
    return max(math.ceil(flush_bytes / LEAD_CHUNK_BYTES), 1)


def lead_shape(sm_count: int, blocks_per_sm: int, max_threads_per_sm: int) -> LeadShape:
    return LeadShape(sm_count * blocks_per_sm, blocks_per_sm, blocks_per_sm * LEAD_THREADS,
                     max_threads_per_sm)


class Lead:
    """The flush buffer of `flush_bytes` (rounded up to whole chunks) on `device` and the kernel that
    writes it, then reads its first `clean_bytes` back (at most the whole buffer); `lead()` queues one
    such pass on torch's current stream."""

    def __init__(self, device: torch.device, flush_bytes: int, clean_bytes: int = 0,
                 exit_together: bool = False):
        self.chunks = lead_chunks(flush_bytes)
        self.clean_chunks = min(math.ceil(max(clean_bytes, 0) / LEAD_CHUNK_BYTES), self.chunks)
        self.flush_bytes = self.chunks * LEAD_CHUNK_BYTES
        self.buffer = torch.empty(self.flush_bytes // 4, dtype=torch.int32, device=device)
        # ticket, blocks out, sink, blocks in, blocks at the exit barrier, the barrier's release value
        self.counters = torch.zeros(6, dtype=torch.int64, device=device)
        self.exit_together = exit_together
        self.shape: LeadShape | None = None
        self.fallback_reason = ""
        self._kernel = None
        self._value = 0
        self._gate: torch.Tensor | None = None  # pinned host word the kernel sets when all blocks are in
        try:
            self._kernel, self.shape = _persistent_kernel(str(device))
        except Exception as exc:  # noqa: BLE001 - no cuda-core/NVRTC, or the SM cannot be filled
            self.fallback_reason = f"{type(exc).__name__}: {exc}"

    @property
    def kind(self) -> str:
        return "persistent" if self._kernel is not None else "memset"

    def __call__(self, trace: torch.Tensor | None = None, wait_resident_s: float = 0.0) -> float | None:
        """Queue one pass. `trace`: an int64 tensor of 3 x grid_blocks that receives, per block, the
        globaltimer (ns) at entry and at exit and the SM id (benchmarks/lead_probe.py). `wait_resident_s`
        > 0: return only once every block of this pass is on an SM (at most that long), and say how
        long that took (s; None when it did not happen in time). Persistent only (the fallback returns
        None at once)."""
        if self._kernel is None:
            self.buffer.zero_()
            return None
        # the call count, never 0: each write differs from the last
        self._value = self._value % 0xFFFFFFFF + 1
        gate = self._gate_pointer() if wait_resident_s > 0 else None
        self._kernel(self.shape.grid_blocks, LEAD_THREADS, self.buffer, self.chunks, self.clean_chunks,
                     self.counters, self._value, trace, gate, int(self.exit_together))
        return self._wait_gate(wait_resident_s) if gate is not None else None

    def _gate_pointer(self) -> int:
        if self._gate is None:  # pinned: with unified addressing the device writes it at this address
            self._gate = torch.zeros(1, dtype=torch.int64).pin_memory()
            self._gate_view = self._gate.numpy().view("uint32")
        return self._gate.data_ptr()

    def _wait_gate(self, limit_s: float) -> float | None:
        start = time.perf_counter()
        view, value = self._gate_view, self._value
        while view[0] != value:
            if time.perf_counter() - start > limit_s:
                return None
        return time.perf_counter() - start


@functools.cache
def _persistent_kernel(device: str):
    """The compiled lead kernel and its launch shape, once per process and device; raises when it cannot
    hold every thread slot."""
    from cudaperf import cuda

    with torch.cuda.device(torch.device(device)):
        kernel = cuda.harness_kernel(LEAD_SOURCE, LEAD_KERNEL)
        per_sm = kernel.max_active_blocks_per_sm(LEAD_THREADS)
    props = torch.cuda.get_device_properties(device)
    shape = lead_shape(props.multi_processor_count, per_sm, props.max_threads_per_multi_processor)
    if shape.resident_threads_per_sm < shape.max_threads_per_sm:
        raise RuntimeError(f"{per_sm} blocks of {LEAD_THREADS} threads hold "
                           f"{shape.resident_threads_per_sm} of "
                           f"{shape.max_threads_per_sm} thread slots per SM")
    return kernel, shape
