"""`execute.baseline_memory` on the CPU (glibc): a chunk freed by routed work holds the fill, a small one
(glibc's per-thread cache, which the perturbation skips) once `scrub` drained the cache; work outside the
routing is left alone; and the pure parts (GLIBC_TUNABLES, the CUDA snapshot's free blocks). Freed memory
is read with `memmove` into a buffer made beforehand: reading it through a new Python object would
allocate, and could be handed that very chunk. The CUDA pool: tests/gpu/test_referee_timing_answers_gpu.py.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from cudaperf.execute.baseline_memory import (
    FILL_BYTE,
    BaselineMemory,
    GlibcHeap,
    free_blocks,
    tcache_shape,
)

LARGE = 4096  # float32 elements: 16 KiB, above glibc's per-thread cache, below its mmap threshold
SMALL = 64  # 256 bytes: a per-thread cache size
SKIP_BYTES = 32  # a freed chunk's first words belong to glibc's free lists


@pytest.fixture(scope="module")
def memory() -> GlibcHeap:
    heap = BaselineMemory.for_device(torch.device("cpu"))
    if not heap.available:
        pytest.skip(f"not glibc here: {heap.failure}")
    return heap


def _freed_bytes(make, elements: int, memory: GlibcHeap | None = None, scrub: bool = False) -> bytes:
    """The bytes, past the free-list words, of a tensor `make()` freed (routed by `memory` when given,
    then `scrub` when asked), read raw."""
    size = elements * 4
    seen = ctypes.create_string_buffer(size)
    if memory is None:
        t = make()
        address = t.data_ptr()
        del t
    else:
        with memory.routed():
            t = make()
            address = t.data_ptr()
            del t
        if scrub:
            memory.scrub()
    ctypes.memmove(seen, address, size)
    return seen.raw[SKIP_BYTES:]


def _values(elements: int) -> bytes:
    return (torch.arange(elements, dtype=torch.float32) + 1).numpy().tobytes()[SKIP_BYTES:]


def test_glibc_s_perturbation_is_in_effect_on_this_machine(memory):
    assert memory.available and memory.failure == "" and "M_PERTURB" in memory.describe()


def test_a_large_tensor_freed_by_routed_work_holds_the_fill(memory):
    seen = _freed_bytes(lambda: torch.arange(LARGE, dtype=torch.float32) + 1, LARGE, memory)
    assert seen == bytes([FILL_BYTE]) * len(seen)


def test_a_large_tensor_freed_outside_routed_work_keeps_its_values(memory):
    seen = _freed_bytes(lambda: torch.arange(LARGE, dtype=torch.float32) + 1, LARGE)
    assert seen == _values(LARGE)


def test_a_small_tensor_freed_by_routed_work_is_overwritten_by_the_scrub(memory):
    # glibc's per-thread cache takes it unperturbed (the reason for the drain). In a fresh thread, whose
    # cache is empty, so that it surely has room; the drain runs on the thread that freed (as in the worker).
    seen = {}

    def work():
        make = lambda: torch.arange(SMALL, dtype=torch.float32) + 1  # noqa: E731
        seen["before"] = _freed_bytes(make, SMALL, memory)
        seen["after"] = _freed_bytes(make, SMALL, memory, scrub=True)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen["before"] == _values(SMALL)
    assert seen["after"] == bytes([FILL_BYTE]) * len(seen["after"])


def test_the_perturbation_is_off_again_after_a_routed_call_that_raises(memory):
    def fails(inputs):
        raise ValueError("the baseline failed")

    with pytest.raises(ValueError):
        memory.around(fails)([])
    seen = _freed_bytes(lambda: torch.arange(LARGE, dtype=torch.float32) + 1, LARGE)
    assert seen == _values(LARGE)


def test_nested_routed_work_keeps_the_perturbation_on_until_the_outer_block_ends(memory):
    with memory.routed():
        with memory.routed():
            pass
        seen = ctypes.create_string_buffer(LARGE * 4)
        t = torch.arange(LARGE, dtype=torch.float32) + 1
        address = t.data_ptr()
        del t
        ctypes.memmove(seen, address, LARGE * 4)
    assert seen.raw[SKIP_BYTES:] == bytes([FILL_BYTE]) * (LARGE * 4 - SKIP_BYTES)


def test_each_scrub_is_counted_with_the_chunks_it_overwrote(memory):
    calls, chunks = memory.calls, memory.blocks
    memory.scrub()
    assert memory.calls == calls + 1
    assert memory.blocks - chunks == memory.tcache_count * 64  # 64 cache sizes, 24 to 1032 bytes


def test_tcache_shape_reads_glibc_tunables_and_defaults_to_glibc_s_own():
    assert tcache_shape("") == (7, 1032)
    assert tcache_shape("glibc.malloc.tcache_count=0:glibc.malloc.check=3") == (0, 1032)
    assert tcache_shape("glibc.malloc.tcache_max=512,glibc.malloc.tcache_count=20") == (20, 512)


def test_free_blocks_lists_inactive_and_pending_blocks_of_the_device_at_their_addresses():
    segments = [
        {"device": 0, "address": 1000, "blocks": [
            {"size": 100, "state": "active_allocated"}, {"size": 50, "state": "inactive"},
            {"size": 30, "state": "active_pending_free"}, {"size": 20, "state": "inactive"}]},
        {"device": 0, "address": 5000, "blocks": [
            {"size": 64, "state": "inactive", "address": 5000}, {"size": 0, "state": "inactive"}]},
        {"device": 1, "address": 9000, "blocks": [{"size": 8, "state": "inactive"}]},
    ]
    assert free_blocks(segments, 0) == [(1100, 50), (1150, 30), (1180, 20), (5000, 64)]


def test_the_probe_sees_glibc_s_per_thread_cache_where_it_is_on(memory):
    assert memory.libc.tcache_caches_frees()


_CACHE_OFF = """
from cudaperf.execute.baseline_memory import GlibcHeap
heap = GlibcHeap()
print(heap.libc.tcache_caches_frees(), heap.tcache_count, heap._scrub(), heap.kind)
"""


def _heap_in_a_process(tunables: str) -> str:
    env = {**os.environ, "GLIBC_TUNABLES": tunables}
    return subprocess.run([sys.executable, "-c", _CACHE_OFF], env=env, capture_output=True, text=True,
                          check=True, timeout=120).stdout


def test_with_the_cache_off_the_scrub_has_nothing_to_drain():
    out = _heap_in_a_process("glibc.malloc.tcache_count=0")
    assert out.startswith("False 0 (0, 0) ") and "the per-thread cache off" in out


def test_a_tunable_that_names_no_cache_count_leaves_the_drain_on():
    out = _heap_in_a_process("glibc.malloc.check=0")
    assert out.startswith("True 7 ")


def test_a_refereed_cpu_worker_starts_with_the_cache_off_and_others_as_they_are():
    from cudaperf.execute.sandbox import Worker

    assert Worker._heap_settings(SimpleNamespace(device=None, referee=object())) == {
        "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}
    assert Worker._heap_settings(SimpleNamespace(device=0, referee=object())) == {}
    assert Worker._heap_settings(SimpleNamespace(device=None, referee=None)) == {}
