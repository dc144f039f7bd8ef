"""The timing lead's pure parts and its compiled kernel (NVRTC, no GPU)."""

from __future__ import annotations

from cudaperf.lead import LEAD_CHUNK_BYTES, LEAD_KERNEL, LEAD_SOURCE, LEAD_THREADS, lead_chunks, lead_shape
from cudaperf.toolchain.nvrtc import compile_cuda


def test_a_buffer_is_rounded_up_to_whole_chunks():
    assert lead_chunks(LEAD_CHUNK_BYTES + 1) == 2


def test_an_empty_buffer_still_has_one_chunk():
    assert lead_chunks(0) == 1


def test_the_shape_fills_every_sm_with_resident_blocks():
    shape = lead_shape(sm_count=132, blocks_per_sm=2048 // LEAD_THREADS, max_threads_per_sm=2048)
    assert (shape.grid_blocks, shape.resident_threads_per_sm) == (132 * 8, 2048)


def _resources():
    (usage,) = compile_cuda(LEAD_SOURCE, arch="sm_90", use_cache=False).resources
    return usage


def test_the_kernel_fits_2048_threads_per_sm_in_registers():
    usage = _resources()
    assert usage.kernel == LEAD_KERNEL and usage.registers * 2048 <= 65536


def test_the_kernel_does_not_spill():
    usage = _resources()
    assert (usage.spill_store_bytes, usage.spill_load_bytes, usage.stack_frame_bytes) == (0, 0, 0)
