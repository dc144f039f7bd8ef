"""Anti-cheat runtime pieces on a real GPU: coverage from the profiler, the aten-op monitor around CUDA
kernels (Python and C++ callers), and the process watch's stream check.

Candidates here are built in-process from small NVRTC kernels through `cudaperf.cuda` (no evaluator), so
each test isolates one mechanism. The full evaluator on the adversarial fixtures is in
tests/adversarial/test_adversarial.py.
"""

from __future__ import annotations

import pytest
import torch

from cudaperf.anticheat import coverage, runtime
from cudaperf.anticheat.policy import Policy

pytestmark = pytest.mark.gpu

SRC = r"""
extern "C" __global__ void own_relu(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

extern "C" __global__ void own_scale(float* __restrict__ y, float s, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= s;
}
"""
NAMES = {"own_relu", "own_scale"}


@pytest.fixture(scope="module")
def kernels():
    from cudaperf import cuda

    return cuda.load(SRC)


def _relu(kernels, x):
    y = torch.empty_like(x)
    n = x.numel()
    kernels.own_relu(((n + 255) // 256,), (256,), x, y, n)
    return y


def _lazy_matmul(kernels, a, b):
    """Torch does the product; the own kernel scales 16 elements (a negligible sub-op)."""
    c = a @ b
    kernels.own_scale((1,), (32,), c, 1.0, 16)
    return c


@pytest.fixture(scope="module")
def big_vector():
    return torch.randn(1 << 24, device="cuda")


@pytest.fixture(scope="module")
def matrices():
    return torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda")


# -- coverage -----------------------------------------------------------------------------------------


def test_own_kernel_doing_all_the_work_has_full_coverage(kernels, big_vector):
    report = coverage.measure_coverage(lambda: _relu(kernels, big_vector), NAMES)
    assert report.coverage is not None and report.coverage > 0.9, report
    assert coverage.coverage_flags(report, Policy()) == ()


def test_full_coverage_without_kernel_names(kernels, big_vector):
    report = coverage.measure_coverage(lambda: _relu(kernels, big_vector), None)
    assert report.coverage > 0.9, report


def test_lazy_candidate_has_low_coverage(kernels, matrices):
    report = coverage.measure_coverage(lambda: _lazy_matmul(kernels, *matrices), NAMES)
    assert report.coverage is not None and report.coverage < 0.5, report
    assert "low_coverage" in [f.code for f in coverage.coverage_flags(report, Policy())]


def test_lazy_candidate_is_caught_by_the_library_heuristic_too(kernels, matrices):
    report = coverage.measure_coverage(lambda: _lazy_matmul(kernels, *matrices), None)
    assert report.coverage < 0.5, report


def test_decoy_candidate_runs_no_own_kernel(matrices):
    report = coverage.measure_coverage(lambda: torch.matmul(*matrices), NAMES)
    assert report.own_ms == 0.0 and report.total_ms > 0.0, report
    assert [f.code for f in coverage.coverage_flags(report, Policy())] == ["no_gpu_work"]


def test_memcpy_is_excluded_from_coverage(kernels, big_vector):
    def run():
        y = _relu(kernels, big_vector)
        return y.clone()  # a device-to-device copy: torch's copy kernel or a memcpy, never own

    report = coverage.measure_coverage(run, NAMES)
    copies_seen = report.excluded_ms > 0 or any(not k.own for k in report.kernels)
    assert report.own_ms > 0 and copies_seen, report
    assert all(not k.name.startswith(("Memcpy", "Memset")) for k in report.kernels)


def test_kernels_on_a_side_stream_are_flagged(kernels, big_vector):
    side = torch.cuda.Stream()

    def run():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = _relu(kernels, big_vector)
        torch.cuda.current_stream().wait_stream(side)
        return y

    report = coverage.measure_coverage(run, NAMES)
    assert (report.current_stream is not None and report.streams
            and report.current_stream not in report.streams)
    assert "stream_created" in [f.code for f in coverage.coverage_flags(report, Policy())]


def test_a_copy_on_an_unjoined_side_stream_is_flagged(kernels, big_vector):
    """A device-to-device copy (a DMA copy, no kernel) on a stream that does not wait for the current one:
    the timing lead cannot hold it back (copy engines are not SM slots), so the profiler must see it."""
    side = torch.cuda.Stream()
    dst = torch.empty_like(big_vector)

    def run():
        y = _relu(kernels, big_vector)
        with torch.cuda.stream(side):
            dst.copy_(big_vector)
        return y

    report = coverage.measure_coverage(run, NAMES)
    assert "stream_created" in [f.code for f in coverage.coverage_flags(report, Policy())], report


def test_kernels_on_the_current_stream_are_not_flagged(kernels, big_vector):
    report = coverage.measure_coverage(lambda: _relu(kernels, big_vector), NAMES)
    assert report.streams == (report.current_stream,), report


# -- the aten-op monitor on CUDA tensors --------------------------------------------------------------


def test_monitor_sees_no_op_around_an_own_kernel(kernels, big_vector):
    with runtime.TorchOpMonitor(Policy()) as monitor:
        _relu(kernels, big_vector.view(4096, -1).contiguous())
    assert monitor.flags() == (), monitor.ops


def test_monitor_flags_cublas_matmul(kernels, matrices):
    with runtime.TorchOpMonitor(Policy()) as monitor:
        _lazy_matmul(kernels, *matrices)
    assert "mm" in monitor.compute_ops


def test_monitor_allows_upload_of_host_constants():
    with runtime.TorchOpMonitor(Policy()) as monitor:
        torch.tensor([1.0, 2.0, 3.0]).to("cuda")
    assert monitor.compute_ops == {}, monitor.ops


def test_monitor_flags_download_to_host(big_vector):
    with runtime.TorchOpMonitor(Policy()) as monitor:
        big_vector[:10].cpu()
    assert "_to_copy" in monitor.compute_ops


@pytest.mark.slow
def test_monitor_sees_torch_ops_called_from_cpp(tmp_path):
    """A load_inline extension calling torch::matmul from C++ still goes through the dispatcher."""
    from torch.utils.cpp_extension import load_inline

    cpp = ("#include <torch/extension.h>\n"
           "torch::Tensor mm(torch::Tensor a, torch::Tensor b) { return torch::matmul(a, b); }\n")
    ext = load_inline(name="cudaperf_anticheat_cpp_mm", cpp_sources=cpp, functions=["mm"],
                      build_directory=str(tmp_path), verbose=False)
    a = torch.randn(64, 64, device="cuda")
    with runtime.TorchOpMonitor(Policy()) as monitor:
        ext.mm(a, a)
    assert "mm" in monitor.compute_ops, monitor.ops


# -- process watch ------------------------------------------------------------------------------------


def test_watch_flags_a_changed_current_stream():
    side = torch.cuda.Stream()
    before = torch.cuda.current_stream()
    try:
        with runtime.ProcessWatch() as watch:
            torch.cuda.set_stream(side)
    finally:
        torch.cuda.set_stream(before)
    assert "stream_changed" in [f.code for f in watch.flags()]


def test_watch_quiet_around_an_own_kernel(kernels, big_vector):
    _relu(kernels, big_vector)  # warm: module load and launch machinery initialised outside the window
    with runtime.ProcessWatch() as watch:
        _relu(kernels, big_vector)
        torch.cuda.synchronize()
    assert [f.code for f in watch.flags() if f.severity.value == "error"] == []
