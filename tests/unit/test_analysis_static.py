"""Static memory analysis: coalescing classes, bank conflicts, padding, scoping, macros and templates."""

from __future__ import annotations

import pytest

from cudaperf.analysis import cst
from cudaperf.analysis.static import analyze_cuda
from cudaperf.types import CoalescingClass as C


def kernel(body: str, params: str = "const float* a, float* out, int n", prelude: str = "", **kw):
    unit = analyze_cuda(f'{prelude}extern "C" __global__ void k({params}) {{\n{body}\n}}\n', **kw)
    assert unit.kernels, unit.diagnostics
    return unit.kernels[0]


def access(k, array: str, kind: str = "load"):
    return next(a for a in k.accesses if a.array == array and a.kind == kind)


GID = "int i = blockIdx.x * blockDim.x + threadIdx.x;"


def test_unit_stride_is_coalesced():
    assert access(kernel(f"{GID} out[i] = a[i];"), "a").coalescing is C.COALESCED


def test_constant_stride_is_strided_by_that_many_elements():
    a = access(kernel(f"{GID} out[i] = a[32 * i];"), "a")
    assert (a.coalescing, a.stride_elements) == (C.STRIDED, 32)


def test_symbolic_stride_is_uncoalesced_and_named():
    s = access(kernel(f"{GID} out[i * n] = a[i];"), "out", "store")
    assert (s.coalescing, s.stride_text) == (C.UNCOALESCED, "n")


def test_block_index_only_is_a_broadcast():
    assert access(kernel(f"{GID} out[i] = a[blockIdx.x];"), "a").coalescing is C.BROADCAST


def test_index_loaded_from_memory_is_unknown():
    k = kernel(f"{GID} out[i] = a[idx[i]];", "const float* a, const int* idx, float* out")
    assert access(k, "a").coalescing is C.UNKNOWN and access(k, "idx").coalescing is C.COALESCED


def test_local_pointer_offsets_are_followed():
    k = kernel("const float* row = a + blockIdx.x * n; out[threadIdx.x] = row[threadIdx.x];")
    assert access(k, "a").coalescing is C.COALESCED


def test_grid_stride_loop_variable_keeps_its_lane_stride():
    k = kernel("for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) "
               "out[i] = a[i];")
    assert access(k, "a").coalescing is C.COALESCED


def test_float4_cast_is_a_coalesced_vector_access():
    a = access(kernel(f"{GID} float4 v = reinterpret_cast<const float4*>(a)[i]; out[i] = v.x;"), "a")
    assert (a.coalescing, a.vector_width, a.vectorized) == (C.COALESCED, 4, True)


def test_warp_spanning_two_tile_rows_is_coalesced_through_concrete_lanes():
    # lanes 0-15 read 16 consecutive floats of one row, lanes 16-31 the next row: 4 sectors, as ncu counts
    k = kernel("int m = threadIdx.x / 16, c = threadIdx.x % 16; "
               "out[threadIdx.x] = a[(blockIdx.y * 16 + m) * n + c];")
    a = access(k, "a")
    assert a.coalescing is C.COALESCED and a.sectors == 4


def test_reused_loop_variable_names_are_scoped_per_loop():
    k = kernel("for (int i = threadIdx.x; i < n; i += 32) out[i] = 1.0f;\n"
               "for (int i = 0; i < n; ++i) out[threadIdx.x * n + i] = 2.0f;")
    first, second = [x for x in k.accesses if x.kind == "store"]
    assert first.coalescing is C.COALESCED and second.coalescing is C.UNCOALESCED


def test_transposed_shared_read_is_a_32_way_conflict():
    k = kernel("__shared__ float t[32][32]; t[threadIdx.y][threadIdx.x] = a[threadIdx.x]; __syncthreads();"
               " out[threadIdx.x] = t[threadIdx.x][threadIdx.y];")
    assert access(k, "t").bank_conflict_degree == 32
    assert k.shared_arrays[0].padded is False


def test_padded_tile_has_no_conflict():
    k = kernel("__shared__ float t[32][33]; t[threadIdx.y][threadIdx.x] = a[threadIdx.x]; __syncthreads();"
               " out[threadIdx.x] = t[threadIdx.x][threadIdx.y];")
    assert access(k, "t").bank_conflict_degree == 1 and k.shared_arrays[0].padded is True


def test_symbolic_padding_t_plus_one_is_detected():
    k = kernel("__shared__ float t[TILE][TILE + 1]; t[threadIdx.y][threadIdx.x] = a[0];", prelude="")
    assert k.shared_arrays[0].padded is True


@pytest.mark.parametrize(("stride", "degree"), [(1, 1), (2, 2), (4, 4), (32, 32), (33, 1), (0, 1)])
def test_bank_conflict_degree_is_32_over_gcd(stride, degree):
    k = kernel(f"__shared__ float s[2048]; s[{stride} * threadIdx.x] = a[0];")
    assert access(k, "s", "store").bank_conflict_degree == degree


def test_doubles_at_unit_stride_do_not_conflict():
    k = kernel("__shared__ double s[256]; s[threadIdx.x] = 1.0;")
    assert access(k, "s", "store").bank_conflict_degree == 1


def test_template_argument_from_launch_site_binds_the_tile():
    src = ("template <int T> __global__ void k(float* out) { __shared__ float s[T][T];"
           " out[threadIdx.x] = s[threadIdx.x][0]; }\n void host(float* o) { k<16><<<1, 32>>>(o); }")
    k = analyze_cuda(src).kernels[0]
    assert access(k, "s").bank_conflict_degree == 16


def test_kernels_hidden_by_macros_are_found_after_preprocessing():
    src = ("#define KERNEL(name) extern \"C\" __global__ void name(float* o) { o[threadIdx.x] = 1.0f; }\n"
           "KERNEL(hidden)\n")
    unit = analyze_cuda(src)
    assert [k.name for k in unit.kernels] == ["hidden"]
    assert access(unit.kernels[0], "o", "store").coalescing is C.COALESCED


def test_object_macro_with_trailing_comment_is_evaluated():
    k = kernel("__shared__ float t[W][W + PAD]; t[threadIdx.x][0] = a[0];",
               prelude="#define W 32\n#define PAD 1 // pad\n")
    assert access(k, "t", "store").bank_conflict_degree == 1


def test_device_only_text_blanks_host_code_and_keeps_lines():
    src = ("#include <torch/extension.h>\n__global__ void k(float* x) { x[0] = 1; }\n"
           "torch::Tensor f(torch::Tensor t) { return t; }\n")
    out = cst.device_only_text(src)
    assert "torch" not in out and "__global__ void k" in out and out.count("\n") == src.count("\n")


def test_pragma_between_loop_header_and_body_does_not_break_parsing():
    k = kernel("float acc[4];\n#pragma unroll\nfor (int j = 0; j < 4; ++j)\n#pragma unroll\n"
               "for (int q = 0; q < 4; ++q) acc[q] = 0;\n"
               "out[threadIdx.x] = acc[1];")
    assert not analyze_cuda('extern "C" __global__ void k(float* out) { float acc[4];\n#pragma unroll\n'
                            'for (int j = 0; j < 4; ++j) acc[j] = 0; out[0] = acc[1]; }').error_lines
    assert access(k, "out", "store").coalescing is C.COALESCED


# -- accesses through the address of an element (`&a[i]`: atomics, __ldg) ------------------------------


def test_an_atomic_on_the_address_of_an_element_is_classified_by_that_element():
    a = access(kernel(f"{GID} atomicAdd(&out[i], a[i]);"), "out", "atomic")
    assert (a.coalescing, a.sectors) == (C.COALESCED, 4)


def test_an_atomic_on_the_address_of_element_zero_is_a_broadcast():
    assert access(kernel(f"{GID} atomicAdd(&out[0], a[i]);"), "out", "atomic").coalescing is C.BROADCAST


def test_ldg_of_an_element_address_is_a_coalesced_load():
    assert access(kernel(f"{GID} out[i] = __ldg(&a[i]);"), "a").coalescing is C.COALESCED


def test_an_atomic_on_a_data_dependent_element_address_is_unknown():
    k = kernel(f"{GID} atomicAdd(&out[idx[i]], 1.0f);", "const int* idx, float* out")
    assert access(k, "out", "atomic").coalescing is C.UNKNOWN


@pytest.mark.parametrize(("width", "degree"), [(32, 32), (33, 1)])
def test_the_address_of_a_shared_element_down_a_column_conflicts_unless_padded(width, degree):
    k = kernel(f"__shared__ float s[64][{width}]; atomicAdd(&s[threadIdx.x][0], 1.0f); out[0] = s[0][0];")
    assert access(k, "s", "atomic").bank_conflict_degree == degree
