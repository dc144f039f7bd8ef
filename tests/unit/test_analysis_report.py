"""analyze_source: solution formats, feedback that points at file lines, work estimates, bad input."""

from __future__ import annotations

import pytest

from cudaperf.analysis import analyze_source, render_feedback

FAST = '''import torch
from cudaperf import cuda

SRC = r"""
extern "C" __global__ void colmajor(const float* a, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i * n] = a[i];
}
"""

class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.k = cuda.compile(SRC, "colmajor")

    def forward(self, a):
        out = torch.empty_like(a)
        self.k((a.numel() // 128,), (128,), a, out, a.numel())
        return out
'''

INLINE = '''import torch
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const int threads = 512;
    scale<<<(x.numel() + threads - 1) / threads, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                                            x.numel());
    return y;
}
"""
mod = load_inline(name="m", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=cuda_src,
                  functions=["run"])
'''

ELEMENTWISE = 'extern "C" __global__ void k(const float* a, float* b, int n) {\n' \
              '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) b[i] = a[i] * 3.0f + 1.0f;\n}\n'


def test_fast_format_feedback_points_at_the_python_file_line():
    report = analyze_source(FAST, compile=False)
    assert report.format == "fast"
    assert any(f.startswith("line 7: store to out strided by n along threadIdx.x — uncoalesced")
               for f in report.feedback)


def test_fast_format_launch_shape_is_read_from_the_python_call():
    report = analyze_source(FAST, compile=False)
    assert report.details[0].launch.block == (128, 1, 1)


def test_inline_format_uses_the_host_launch_and_compiles_device_code_only():
    report = analyze_source(INLINE, sass=False)
    (k,) = report.kernels
    assert report.format == "inline" and k.kernel == "scale"
    assert report.details[0].launch.block == (512, 1, 1)
    assert k.resources is not None and k.occupancy is not None


def test_elementwise_work_uses_the_guard_bound():
    (k,) = analyze_source(ELEMENTWISE, kind="cuda", sizes={"n": 1000}, compile=False).kernels
    assert (k.flops_estimate, k.bytes_estimate, k.roofline_regime) == (2000.0, 8000.0, "memory")


def test_grid_stride_work_does_not_depend_on_the_launch():
    src = ('extern "C" __global__ void k(const float* a, float* b, int n) {\n'
           '  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) '
           'b[i] = a[i] + 1.0f;\n}')
    k1 = analyze_source(src, kind="cuda", sizes={"n": 4096}, launch=((8,), (128,)), compile=False).kernels[0]
    k2 = analyze_source(src, kind="cuda", sizes={"n": 4096}, launch=((2,), (256,)), compile=False).kernels[0]
    assert k1.flops_estimate == k2.flops_estimate == 4096


def test_tail_guard_after_a_grid_stride_loop_does_not_bound_the_loops_threads():
    src = ('extern "C" __global__ void k(const float4* a, float4* b, const float* c, float* d, int n) {\n'
           '  int nq = n / 4, tid = blockIdx.x * blockDim.x + threadIdx.x;\n'
           '  for (int q = tid; q < nq; q += blockDim.x * gridDim.x) b[q] = a[q];\n'
           '  int i = nq * 4 + tid;\n'
           '  if (i < n) d[i] = c[i];\n}')
    report = analyze_source(src, kind="cuda", sizes={"n": 1 << 20}, launch=((64,), (256,)), compile=False)
    # the loop moves n/4 float4 each way; the tail at most one float each way per launched thread
    assert report.details[0].bytes_requested <= 2 * 4 * (1 << 20) + 2 * 4 * 64 * 256


def test_naive_matmul_is_compute_bound_with_compulsory_bytes():
    src = ('extern "C" __global__ void mm(const float* A, const float* B, float* C, int N) {\n'
           '  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;\n'
           '  if (r < N && c < N) { float s = 0; for (int k = 0; k < N; ++k) '
           's += A[r * N + k] * B[k * N + c]; C[r * N + c] = s; }\n}')
    report = analyze_source(src, kind="cuda", sizes={"N": 512}, launch=((16, 512), (32, 1)), compile=False)
    (k,) = report.kernels
    assert k.flops_estimate == 2 * 512**3
    assert k.bytes_estimate == 3 * 4 * 512 * 512
    assert k.roofline_regime == "compute"
    assert report.details[0].bytes_requested > 100 * k.bytes_estimate


def test_missing_sizes_are_named_in_a_diagnostic():
    (k,) = analyze_source(ELEMENTWISE, kind="cuda", compile=False).kernels
    assert k.flops_estimate is None and any("n" in d and "sizes" in d for d in k.diagnostics)


def test_ptxas_facts_and_occupancy_come_from_nvrtc():
    (k,) = analyze_source(ELEMENTWISE, kind="cuda", launch=((1,), (256,)), sass=False).kernels
    assert k.resources.registers > 0 and k.occupancy.block_size == 256


@pytest.mark.parametrize("text", ["", "\x00\x01garbage{{{", "def f(:\n",
                                  "__global__ void k(float* a) { a[threadIdx.x] = ", "import torch\nx = 1\n"])
def test_bad_input_gives_diagnostics_not_exceptions(text):
    report = analyze_source(text, compile=False)
    assert report.diagnostics or report.kernels or report.feedback == ()


def test_partial_kernel_still_yields_the_features_that_parse():
    src = ('extern "C" __global__ void k(const float* a, float* b, int n) {\n'
           '  b[threadIdx.x * n] = a[threadIdx.x];\n  if (n > 3 {\n')
    report = analyze_source(src, kind="cuda", compile=False)
    assert report.kernels and any("uncoalesced" in f for f in report.feedback)
    assert any("parse errors" in d for d in report.diagnostics)


def test_forced_fast_kind_on_non_python_is_a_diagnostic():
    report = analyze_source("__global__ void k() {}", kind="fast", compile=False)
    assert not report.kernels and "not valid Python" in report.diagnostics[0]


def test_render_feedback_lists_findings_then_notes():
    text = render_feedback(analyze_source(FAST, compile=False))
    assert text.splitlines()[0].startswith("line 7:") and "note" in text


def test_report_round_trips_to_json_types():
    import json

    data = analyze_source(FAST, compile=False).to_dict()
    assert json.loads(json.dumps(data))["kernels"][0]["accesses"][0]["coalescing"] in ("coalesced",
                                                                                       "uncoalesced")


TEMPLATED_INLINE = '''from torch.utils.cpp_extension import load_inline
src = r"""
#include <torch/extension.h>
template <typename scalar_t, int BLOCK>
__global__ void fill(scalar_t* y, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = (scalar_t)INFINITY;
}
torch::Tensor run(torch::Tensor y) {
    AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "fill", ([&] {
        fill<scalar_t, 128><<<(y.numel() + 127) / 128, 128>>>(y.data_ptr<scalar_t>(), y.numel());
    }));
    return y;
}
"""
m = load_inline(name="f", cpp_sources="torch::Tensor run(torch::Tensor y);", cuda_sources=src,
                functions=["run"])
'''


def test_template_kernels_of_inline_solutions_are_instantiated_for_ptxas():
    (k,) = analyze_source(TEMPLATED_INLINE, sass=False).kernels
    assert k.resources is not None and k.occupancy.block_size == 128


CONCATENATED = '''from torch.utils.cpp_extension import load_inline
HEADER = r"""
#include <torch/extension.h>
"""

# some Python in between


KERNELS = r"""
extern "C" __global__ void colmajor(const float* a, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i * n] = a[i];
}
"""
m = load_inline(name="x", cpp_sources="", cuda_sources=HEADER + KERNELS, functions=[])
'''


def test_concatenated_inline_sources_map_back_to_their_file_lines():
    report = analyze_source(CONCATENATED, compile=False)
    assert any(f.startswith("line 12: store to out strided by n") for f in report.feedback), report.feedback


def test_a_python_solution_with_a_syntax_error_is_reported_as_python_not_parsed_as_cuda():
    broken = FAST.replace("class ModelNew", "class ModelNew(:")
    report = analyze_source(broken, compile=False)
    assert report.kernels == () and "not valid Python" in report.diagnostics[0]


def test_raw_cuda_text_is_still_analysed_as_cuda():
    report = analyze_source('extern "C" __global__ void k(float* x) { x[threadIdx.x] = 0.f; }',
                            compile=False)
    assert [k.kernel for k in report.kernels] == ["k"]
