"""Coverage bookkeeping on the CPU: which kernel names are the candidate's, how time is split, the flags."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cudaperf.anticheat import coverage
from cudaperf.anticheat.coverage import CoverageReport, KernelTime, coverage_flags
from cudaperf.anticheat.policy import Policy

TORCH_KERNELS = [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
    "{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, "
    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
    "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)"),
    "ampere_sgemm_128x64_nn",
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_"
    "warpgroupsize1x1x1_execute_segment_k_off_kernel"),
    "nvjet_tst_128x64_64x4_1x2_h_bz_NNT",
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>"
    "(cutlass_80_simt_sgemm_128x128_8x4_nn_align1::Params)"),
    "triton_poi_fused_add_relu_0",
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>"
    "(float*, float const*, int, int, int, bool const*, int, bool)"),
    "void cub::CUB_200200_900_NS::DeviceReduceKernel<cub::DeviceReducePolicy>(float*, float*, int)",
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
    "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, float> >(float, float)"),
]
HONEST_KERNELS = ["relu_kernel", "gemm_tiled", "softmax_kernel", "reduce_rows", "layernorm_block_rows",
                  "void relu_vec4<256>(float const*, float*, int)", "matmul_sm90_style"]


@pytest.mark.parametrize("name", TORCH_KERNELS)
def test_library_kernels_are_recognised(name):
    assert coverage.is_library_kernel(name)


@pytest.mark.parametrize("name", HONEST_KERNELS)
def test_honest_kernel_names_are_not_library_kernels(name):
    assert not coverage.is_library_kernel(name)


def test_known_names_decide_ownership():
    names = {"relu_vec4"}
    assert coverage.is_own_kernel("void relu_vec4<256>(float const*, float*, int)", names)
    assert not coverage.is_own_kernel("some_other_kernel", names)
    assert coverage.is_own_kernel("some_other_kernel", None)


def test_declared_name_cannot_claim_a_library_kernel():
    assert not coverage.is_own_kernel("ampere_sgemm_128x64_nn", {"ampere_sgemm_128x64_nn"})


def test_kernel_names_from_source():
    source = '''
SRC = r"""
extern "C" __global__ void __launch_bounds__(256) relu_vec4(const float* x, float* y, int n) {}
template <int BLOCK>
__global__ void tiled(float* a) {}
__device__ float helper(float v) { return v; }
"""
'''
    assert coverage.kernel_names_from_source(source) == {"relu_vec4", "tiled"}


def _event(name, us, stream=7):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(elapsed_us=lambda: us, start=0.0),
                           device_resource_id=stream)


def test_summary_splits_own_and_library_time_per_call():
    events = [_event("relu_kernel", 30.0), _event("relu_kernel", 30.0), _event(TORCH_KERNELS[2], 60.0),
              _event("Memcpy DtoD (Device -> Device)", 500.0)]
    report = coverage._summarise(events, {"relu_kernel"}, repeats=2)
    assert report.own_ms == pytest.approx(0.030) and report.total_ms == pytest.approx(0.060)
    assert report.coverage == pytest.approx(0.5) and report.excluded_ms == pytest.approx(0.25)
    assert report.kernels[0] == KernelTime("relu_kernel", pytest.approx(0.03), True)


def test_summary_records_streams():
    report = coverage._summarise([_event("a", 1.0, 7), _event("b", 1.0, 13)], None, repeats=1)
    assert report.streams == (7, 13)


def test_summary_records_the_streams_of_copies():
    report = coverage._summarise([_event("a", 1.0, 7), _event("Memcpy DtoD (Device -> Device)", 1.0, 13)],
                                 None, repeats=1)
    assert report.streams == (7, 13)


def test_marker_gives_the_current_stream_and_is_not_counted():
    marker = _event("void at::native::vectorized_elementwise_kernel<4, MulFunctor>(int)", 2.0, 7)
    marker.time_range.start = 0.0
    own = _event("relu_kernel", 30.0, 21)
    own.time_range.start = 10.0
    current, rest = coverage._split_marker([own, marker])
    report = coverage._summarise(rest, None, repeats=1, current_stream=current)
    assert current == 7 and [k.name for k in report.kernels] == ["relu_kernel"]
    assert [f.code for f in coverage_flags(report)] == ["stream_created"]


def test_own_kernels_on_the_current_stream_raise_no_stream_flag():
    report = CoverageReport(1.0, 1.0, 1.0, (KernelTime("mine", 1.0, True),), streams=(7,), current_stream=7)
    assert coverage_flags(report) == ()


def test_summary_without_kernels_has_zero_coverage():
    report = coverage._summarise([], None, repeats=1)
    assert report.coverage == 0.0 and report.message


def test_measure_coverage_is_none_without_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    report = coverage.measure_coverage(lambda: None)
    assert report.coverage is None and "no CUDA device" in report.message


def _report(own_ms, other_ms, streams=(7,), renamed=()):
    kernels = (KernelTime("mine", own_ms, True), KernelTime("ampere_sgemm_128x64_nn", other_ms, False))
    total = own_ms + other_ms
    return CoverageReport(own_ms / total if total else 0.0, own_ms, total, kernels, streams=streams,
                          renamed=renamed)


def test_flags_low_coverage():
    (flag,) = coverage_flags(_report(0.1, 0.9))
    assert flag.code == "low_coverage" and "ampere_sgemm" in flag.message


def test_no_flag_above_min_coverage():
    assert coverage_flags(_report(0.9, 0.1)) == ()


def test_flags_no_gpu_work():
    assert [f.code for f in coverage_flags(_report(0.0, 1.0))] == ["no_gpu_work"]


def test_flags_side_streams():
    assert "stream_created" in [f.code for f in coverage_flags(_report(1.0, 0.0, streams=(7, 21)))]


def test_coverage_rules_off_when_torch_ops_allowed():
    assert coverage_flags(_report(0.1, 0.9), Policy(allow_torch_ops=True)) == ()


def test_unmeasured_coverage_gives_no_flags():
    assert coverage_flags(CoverageReport(None, 0.0, 0.0)) == ()
