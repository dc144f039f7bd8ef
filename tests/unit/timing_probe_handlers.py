"""Job handler for tests/unit/test_referee_timing_answers.py and its GPU twin: the real evaluation, with a
probe standing in for native code of the candidate, run just before each of the candidate's calls in the
timing stage (inside its timed call, where a candidate's own code would run).

The probe computes the right answer on the call's inputs with the timing stage's model (the first timing
seed's reference model, which the eager baseline runs), then looks for it where a candidate could find it:
- live: every plain tensor the garbage collector tracks (`gc.get_objects`: what a Python-level scan, or
  native code walking the heap's objects, sees), other than the probe's own;
- freed: fresh allocations of the answer's size, held together (what an uninitialised output would hold:
  on the GPU the caching allocator's freed blocks of that size; on the CPU the C library's reused chunks,
  whose first bytes its free lists overwrite, so a block counts when all but its first 8 elements match),
  and on the CPU also chunks of that size from glibc's `malloc` itself (`freed_cache`: its per-thread
  cache, which torch's aligned allocations reach only on some glibc versions);
- on the GPU only, with `scan_device=True`: every inactive block of the caching allocator, read back raw
  (`cuMemcpyDtoH`), searched at every 512-byte offset for the answer's bytes.
The probe's own answer (its whole storage) is overwritten before it is dropped, and it is computed the
way the baselines run (`TorchSession.baseline_memory` routes it and overwrites what it freed), so that its
own temporaries are never what a later probe finds. Each overwrite of a baseline output
(`TorchSession.overwrite_baseline_output`; `dispose_baseline_output` in trees without it) is checked
afterwards: is any tensor of it still readable (not NaN or zero everywhere)? The tasks these tests use
return no alias of an input or a weight.
"""

from __future__ import annotations

import gc
import time

SKIP_ELEMENTS = 8  # a freed CPU chunk's first 16 bytes hold the C library's free-list words


def probe_right_answers(job, report, scan_device=False):
    from cudaperf.execute import dispatch
    from cudaperf.execute.torch_session import TorchSession

    found = {"calls": 0, "live": 0, "freed": 0, "freed_cache": 0, "device_blocks": 0, "disposed": 0,
             "left_readable": 0, "dispose_s": 0.0}
    patched = {name: getattr(TorchSession, name) for name in ("time_config", "_scoped_call")}
    overwrite = "overwrite_baseline_output" if hasattr(TorchSession, "overwrite_baseline_output") else \
        "dispose_baseline_output"
    dispose = getattr(TorchSession, overwrite, None)

    def time_config(self, config):
        self.probe_state = {"model": self.reference(config, self.timing_seeds[0]).model, "like": None}
        try:
            return patched["time_config"](self, config)
        finally:
            self.probe_state = None

    def scoped_call(self, model, inputs):
        state = getattr(self, "probe_state", None)
        if state is not None:
            _probe(state, inputs, found, scan_device, self.baseline_memory)
        return patched["_scoped_call"](self, model, inputs)

    def disposing(self, out, *args):
        began = time.perf_counter()
        dispose(self, out, *args)
        found["dispose_s"] += time.perf_counter() - began  # the output's fill (queued, on CUDA)
        found["disposed"] += 1
        found["left_readable"] += _readable(out)

    TorchSession.time_config, TorchSession._scoped_call = time_config, scoped_call
    if dispose is not None:
        setattr(TorchSession, overwrite, disposing)
    try:
        payload = dispatch.run_eval_job(job, report)
    finally:
        for name, original in patched.items():
            setattr(TorchSession, name, original)
        if dispose is not None:
            setattr(TorchSession, overwrite, dispose)
    payload["probe"] = found
    return payload


def probe_right_answers_on_device(job, report):
    """`probe_right_answers` with the raw scan of the allocator's inactive blocks (GPU)."""
    return probe_right_answers(job, report, scan_device=True)


def _probe(state: dict, inputs: list, found: dict, scan_device: bool, memory) -> None:
    import contextlib

    import torch

    from cudaperf.correctness import clone_inputs
    from cudaperf.execute.torch_judge import scrub

    like = state["like"]  # the answer's shape, dtype and device, from an earlier call
    held = [torch.empty(like[0], dtype=like[1], device=like[2]) for _ in range(8)] if like else []
    cached = _GlibcChunks(like) if like and like[2].type == "cpu" else None
    with torch.no_grad(), memory.routed() if memory is not None else contextlib.nullcontext():
        answer = state["model"](*clone_inputs(inputs))
    if memory is not None:  # what the probe's forward freed, as after a baseline's call
        memory.scrub()
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
    if type(answer) is not torch.Tensor:
        if cached is not None:
            cached.release()
        return
    state["like"] = (answer.shape, answer.dtype, answer.device)
    found["calls"] += 1
    flat = answer.reshape(-1)
    own = answer.untyped_storage().data_ptr()  # the answer and its views (`flat`, `tail`) are the probe's
    found["live"] += any(_same(t, flat) for t in gc.get_objects()
                         if type(t) is torch.Tensor and t.untyped_storage().data_ptr() != own)
    tail = flat[SKIP_ELEMENTS:]
    found["freed"] += any(torch.equal(t.reshape(-1)[SKIP_ELEMENTS:], tail) for t in held)
    if cached is not None:  # compared in place: a host copy of the answer would be freed as it is
        in_cache = cached.holds(flat.view(torch.uint8), SKIP_ELEMENTS * answer.element_size())
        found["freed_cache"] += in_cache
        found["freed"] += in_cache
    if scan_device and answer.is_cuda:
        found["device_blocks"] += _in_inactive_blocks(answer)
    answer.untyped_storage().fill_(0xFF)  # all of it: the answer may be a view of a larger temporary
    scrub([answer, held])
    if answer.is_cuda:
        torch.cuda.synchronize(answer.device)
    del answer, flat, tail, held


class _GlibcChunks:
    """Chunks of the answer's size straight from the C library's `malloc` (its per-thread cache first),
    taken before the probe computes its answer, compared in place, then overwritten and freed."""

    COUNT = 16  # more than glibc's cache holds per size (7 by default)

    def __init__(self, like):
        import ctypes

        import torch

        libc = ctypes.CDLL(None)
        self.malloc, self.free, self.memset = libc.malloc, libc.free, libc.memset
        self.malloc.restype, self.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        self.free.restype, self.free.argtypes = None, [ctypes.c_void_p]
        self.memset.restype = ctypes.c_void_p
        self.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        self.nbytes = torch.Size(like[0]).numel() * torch.empty((), dtype=like[1]).element_size()
        self.chunks = [self.malloc(self.nbytes) for _ in range(self.COUNT)] if self.nbytes else []

    def holds(self, answer_bytes, skip_bytes: int) -> int:
        """1 when a chunk holds the answer's bytes (a uint8 view) from `skip_bytes` on (its first bytes
        are the free list's); every chunk is released afterwards."""
        import ctypes

        import torch

        try:
            if answer_bytes.numel() != self.nbytes:
                return 0
            want = answer_bytes[skip_bytes:]
            return int(any(torch.equal(torch.frombuffer((ctypes.c_char * self.nbytes).from_address(c),
                                                        dtype=torch.uint8)[skip_bytes:], want)
                           for c in self.chunks if c))
        finally:
            self.release()

    def release(self) -> None:
        for c in self.chunks:
            if c:
                self.memset(c, 0, self.nbytes)
                self.free(c)
        self.chunks = []


def _same(t, flat) -> bool:
    import torch

    if t.numel() != flat.numel() or t.dtype != flat.dtype or t.device != flat.device or t.data_ptr() == 0:
        return False
    return bool(torch.equal(t.reshape(-1), flat))


def _readable(out) -> int:
    """1 when a disposed output still holds values (a tensor neither NaN nor zero everywhere)."""
    import torch

    from cudaperf.correctness import flatten_tensors

    for t in flatten_tensors(out):
        if type(t) is torch.Tensor and t.numel():
            gone = torch.isnan(t) if (t.is_floating_point() or t.is_complex()) else t == 0
            if not bool(gone.all()):
                return 1
    return 0


def _in_inactive_blocks(answer) -> int:
    """1 when the answer's bytes start at a 512-byte offset of any inactive block of the allocator."""
    import numpy as np
    import torch
    from cuda.bindings import driver

    want = answer.detach().contiguous().view(torch.uint8).reshape(-1).cpu().numpy()
    n = want.size
    index = answer.device.index if answer.device.index is not None else torch.cuda.current_device()
    torch.cuda.synchronize(answer.device)
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device") != index:
            continue
        address = segment["address"]
        for block in segment.get("blocks", []):  # in address order from the segment's start
            size, address = block["size"], block.get("address", address)
            if block.get("state") == "inactive" and n <= size <= 1 << 30:
                host = np.empty(size, dtype=np.uint8)
                (error,) = driver.cuMemcpyDtoH(host.ctypes.data, address, size)
                if error == driver.CUresult.CUDA_SUCCESS and _holds(host, want):
                    return 1
            address += size
    return 0


def _holds(host, want) -> bool:
    starts = range(0, host.size - want.size + 1, 512)
    return any(host[s] == want[0] and (host[s:s + want.size] == want).all() for s in starts)
