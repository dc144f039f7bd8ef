"""Accesses through `__device__` helpers and function-like macros, selects (`?:`, min/max), per-thread
windows of consecutive elements, and barrier executions per thread."""

from __future__ import annotations

from cudaperf.analysis import analyze_source, cst
from cudaperf.analysis.static import analyze_cuda
from cudaperf.types import CoalescingClass as C

GID = "int i = blockIdx.x * blockDim.x + threadIdx.x;"
CLAMP = ("__device__ __forceinline__ int clampi(int v, int lo, int hi) "
         "{ return v < lo ? lo : (v > hi ? hi : v); }\n")


def kernel(body: str, prelude: str = "", params: str = "const float* a, float* out, int n"):
    unit = analyze_cuda(f'{prelude}extern "C" __global__ void k({params}) {{\n{body}\n}}\n')
    assert unit.kernels, unit.diagnostics
    return unit.kernels[0]


def loads(k, array: str = "a"):
    return [a for a in k.accesses if a.array == array and a.kind == "load"]


def test_load_inside_a_function_like_macro_is_attributed():
    k = kernel(f"{GID} if (i < n) out[i] = IN(i - 1) + IN(i + 1);", prelude="#define IN(j) a[(j) + 1]\n")
    assert [a.coalescing for a in loads(k)] == [C.COALESCED, C.COALESCED]


def test_macro_redefined_after_undef_takes_its_second_meaning():
    body = (f"__shared__ float t[256]; {GID}\n#undef IN\n#define IN(j) t[(j) % 256]\n"
            "out[i] = IN(threadIdx.x);")
    k = kernel(body, prelude="#define IN(j) a[j]\n")
    assert [a.space for a in k.accesses if a.kind == "load"] == ["shared"]


def test_only_invoked_function_like_macros_ask_for_the_preprocessor():
    assert cst.needs_preprocessing("#define SQ(x) ((x) * (x))\nint y = SQ(3);\n", 1)
    assert not cst.needs_preprocessing("#define N 4\n#define SQ(x) ((x) * (x))\nint y = N;\n", 1)


def test_index_through_a_device_clamp_helper_is_coalesced():
    k = kernel(f"{GID} if (i < n) out[i] = a[clampi(i - 1, 0, n - 1)];", prelude=CLAMP)
    assert loads(k)[0].coalescing is C.COALESCED


def test_index_helper_with_locals_is_inlined_with_its_arguments():
    helper = "__device__ int at(int r, int c, int w) { int base = r * w; return base + c; }\n"
    k = kernel(f"{GID} out[i] = a[at(i, 0, n)];", prelude=helper)
    a = loads(k)[0]
    assert (a.coalescing, a.stride_text) == (C.UNCOALESCED, "n")


def test_clamped_index_through_a_helper_bounds_the_footprint():
    src = CLAMP + ('extern "C" __global__ void k(const float* a, float* out, int n) {\n'
                   f"{GID} if (i < n)\n out[i] = a[clampi(i - 1, 0, n - 1)] + a[clampi(i + 1, 0, n - 1)];"
                   "\n}\n")
    d = analyze_source(src, kind="cuda", compile=False, sass=False, sizes={"n": 1 << 20},
                       launch={"grid": (4096,), "block": (256,)}).details[0]
    # the span may reach one element past each end: a select's range is the union of its branches
    assert abs(d.bytes_footprint - (1 << 20) * 4 * 2) <= 8 and d.bytes_requested == (1 << 20) * 4 * 3


def test_min_of_a_thread_index_and_a_bound_keeps_the_thread_stride():
    k = kernel(f"{GID} out[i] = a[min(2 * i, n - 1)];")
    assert (loads(k)[0].coalescing, loads(k)[0].stride_elements) == (C.STRIDED, 2)


def test_select_between_two_thread_indices_stays_unknown():
    k = kernel(f"{GID} out[i] = a[i % 2 ? i : 2 * i];")
    assert loads(k)[0].coalescing is C.UNKNOWN


def test_periodic_wrap_bounds_the_footprint():
    src = ('extern "C" __global__ void k(const float* a, float* out, int n) {\n'
           f"{GID} if (i < n) out[i] = a[((i - 3) % n + n) % n];\n}}\n")
    d = analyze_source(src, kind="cuda", compile=False, sass=False, sizes={"n": 1 << 20},
                       launch={"grid": (4096,), "block": (256,)}).details[0]
    assert d.bytes_footprint == (1 << 20) * 4 * 2


def test_unrolled_loop_over_a_per_thread_window_is_a_window():
    k = kernel(f"{GID} float s = 0.0f;\nfor (int k = 0; k < 4; ++k) s += a[4 * i + k];\nout[i] = s;")
    a = loads(k)[0]
    assert (a.coalescing, a.window, a.window_sectors) == (C.STRIDED, 4, 4.0)


def test_window_with_halo_costs_about_a_coalesced_request():
    k = kernel(f"{GID} float s = 0.0f;\nfor (int k = 0; k < 5; ++k) s += a[4 * i + k];\nout[i] = s;")
    assert loads(k)[0].window == 5 and loads(k)[0].window_sectors <= 4


def test_window_written_as_statements_is_a_window():
    k = kernel(f"{GID} out[i] = a[2 * i] + a[2 * i + 1];")
    assert [a.window for a in loads(k)] == [2, 2]


def test_partial_window_leaving_sectors_half_used_is_not_a_window():
    k = kernel(f"{GID} float s = 0.0f;\nfor (int k = 0; k < 2; ++k) s += a[4 * i + k];\nout[i] = s;")
    assert loads(k)[0].window == 1


def test_large_stride_loop_is_not_a_window():
    k = kernel(f"{GID} float s = 0.0f;\nfor (int k = 0; k < 4; ++k) s += a[32 * i + 8 * k];\nout[i] = s;")
    assert loads(k)[0].window == 1


def test_window_feedback_does_not_call_it_uncoalesced_traffic():
    src = ('extern "C" __global__ void k(const float* a, float* out, int n) {\n'
           f"{GID} float s = 0.0f;\nfor (int k = 0; k < 4; ++k) s += a[4 * i + k];\nout[i] = s;\n}}\n")
    feedback = analyze_source(src, kind="cuda", compile=False, sass=False).feedback
    assert any("per-thread window" in f for f in feedback)
    assert not any("transactions of a coalesced access" in f for f in feedback)


def test_barriers_per_thread_count_the_loop_trips():
    src = ('extern "C" __global__ void k(const float* a, float* out, int n) {\n'
           "__shared__ float t[256];\nfor (int c = 0; c < n; ++c) {\n"
           "t[threadIdx.x] = a[c * 256 + threadIdx.x]; __syncthreads();\n"
           "out[threadIdx.x] += t[255 - threadIdx.x]; __syncthreads();\n}\n}\n")
    d = analyze_source(src, kind="cuda", compile=False, sass=False, sizes={"n": 10},
                       launch={"grid": (1,), "block": (256,)}).details[0]
    assert d.barriers_per_thread == 20


LOAD = "__device__ __forceinline__ float load(const float* p, int j) { return p[j]; }\n"


def test_load_inside_a_helper_is_attributed_to_the_array_passed():
    k = kernel(f"{GID} out[i] = load(a, i) + load(a, 2 * i);", prelude=LOAD)
    found = [(x.coalescing, x.via) for x in loads(k)]
    assert found == [(C.COALESCED, "load"), (C.STRIDED, "load")]


def test_helper_store_through_a_pointer_is_a_store_at_the_call_line():
    helper = "__device__ void put(float* p, int j, float v) { p[j] = v; }\n"
    k = kernel(f"{GID}\nput(out, i * n, 1.0f);", prelude=helper)
    store = next(x for x in k.accesses if x.array == "out" and x.kind == "store")
    assert (store.coalescing, store.line) == (C.UNCOALESCED, 4)  # the call's line, not the helper's


def test_helper_with_an_indirect_index_stays_unknown():
    k = kernel(f"{GID} out[i] = load(a, (int)out[i]);", prelude=LOAD)
    assert loads(k)[0].coalescing is C.UNKNOWN


def test_helper_loads_count_in_the_bytes_requested():
    src = LOAD + ('extern "C" __global__ void k(const float* a, float* out, int n) {\n'
                  f"{GID} if (i < n) out[i] = load(a, i);\n}}\n")
    d = analyze_source(src, kind="cuda", compile=False, sass=False, sizes={"n": 1 << 20},
                       launch={"grid": (4096,), "block": (256,)}).details[0]
    assert d.bytes_requested == (1 << 20) * 4 * 2


def _details(body: str, sizes: dict, grid: int):
    src = f'extern "C" __global__ void k(const float* a, float* out, int n, int w) {{\n{body}\n}}\n'
    return analyze_source(src, kind="cuda", compile=False, sass=False, sizes=sizes,
                          launch={"grid": (grid,), "block": (256,)}).details[0]


def test_divisions_by_a_runtime_divisor_are_counted_per_thread():
    d = _details(f"{GID} if (i < n) out[i] = a[i / w] + a[i % w];", {"n": 1024, "w": 7}, 4)
    assert d.divisions_per_thread == 2


def test_divisions_by_constants_and_float_divisions_are_not_counted():
    d = _details(f"{GID} if (i < n) out[i] = a[i / 32] / 3.0f + a[i % 7];", {"n": 1024, "w": 7}, 4)
    assert d.divisions_per_thread == 0


def test_divisions_in_a_loop_count_its_trips():
    d = _details(f"{GID} float s = 0.0f;\nfor (int k = 0; k < 8; ++k) s += a[(i + k) % n];\nout[i] = s;",
                 {"n": 1024, "w": 7}, 4)
    assert d.divisions_per_thread == 8
