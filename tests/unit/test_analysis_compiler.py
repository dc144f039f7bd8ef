"""Compiler facts: SASS feature counts (with the HFMA2.MMA trap), mangled names, NVRTC + ptxas."""

from __future__ import annotations

import pytest

from cudaperf.analysis.compiler import compile_unit, find_disassembler, parse_sass

SASS = """
	code for sm_90
		Function : _Z4tileILi16EEvPKfPf
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                      /* 0x00000a00ff017b82 */
        /*0010*/                   HFMA2.MMA R3, -RZ, RZ, 0, 0 ;              /* 0x000000ffff037435 */
        /*0020*/                   LDG.E.128 R4, desc[UR4][R2.64] ;           /* 0x0000000402047981 */
        /*0030*/              @!P0 STG.E.128 desc[UR4][R6.64], R8 ;           /* 0x0000000806007986 */
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;              /* 0x0000000000007b1d */
        /*0050*/                   STL [R1], R4 ;                              /* 0x0000000401007387 */
        /*0060*/                   EXIT ;                                      /* 0x000000000000794d */
		Function : wm
        /*0000*/                   HMMA.16816.F32 R16, R4, R12, RZ ;           /* 0x0000000c0410723c */
        /*0010*/                   REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R2.64], R5 ;
"""


def test_hfma2_mma_is_not_tensor_core_use():
    assert "hmma" not in parse_sass(SASS)["tile"]


def test_hmma_counts_as_tensor_core_use():
    assert parse_sass(SASS)["wm"]["hmma"] == 1


def test_vector_accesses_barriers_local_and_predicated_instructions_are_counted():
    tile = parse_sass(SASS)["tile"]
    assert (tile["ldg128"], tile["stg128"], tile["bar"], tile["local"],
            tile["instructions"]) == (1, 1, 1, 1, 7)


def test_reductions_count_as_atomics():
    assert parse_sass(SASS)["wm"]["atom"] == 1


LOCAL = '''extern "C" __global__ void k(const float* in, const int* sel, float* out) {
    float buf[64];
    for (int j = 0; j < 64; ++j) buf[(sel[0] + j) & 63] = in[j];
    out[threadIdx.x] = buf[sel[threadIdx.x] & 63];
}'''


def test_nvrtc_reports_registers_and_a_stack_frame_for_a_dynamic_array():
    unit = compile_unit(LOCAL, sass=False, use_cache=False)
    (r,) = unit.resources
    assert unit.ok and r.kernel == "k" and r.registers > 0 and r.stack_frame_bytes >= 256


def test_compile_errors_become_diagnostics():
    unit = compile_unit('extern "C" __global__ void k() { undeclared(); }', sass=False, use_cache=False)
    assert not unit.ok and "NVRTC compile failed" in unit.diagnostics[0]


@pytest.mark.skipif(find_disassembler() is None,
                    reason="cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
def test_sass_of_a_compiled_kernel_shows_local_memory():
    unit = compile_unit(LOCAL, sass=True, use_cache=False)
    assert unit.sass["k"].get("local", 0) > 0
