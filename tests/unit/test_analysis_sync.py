"""Barriers: thread-dependence taint to a fixpoint, early exits, redundancy, barrier forms."""

from __future__ import annotations

from cudaperf.analysis.static import analyze_cuda


def barriers(body: str, params: str = "const float* a, float* out, int n"):
    unit = analyze_cuda(f'extern "C" __global__ void k({params}) {{\n__shared__ float s[256];\n{body}\n}}\n')
    return unit.kernels[0].barriers


def divergent(body: str) -> list[bool]:
    return [b.divergent_reason is not None for b in barriers(body)]


def redundant(body: str) -> list[bool]:
    return [b.redundant for b in barriers(body)]


def test_barrier_under_thread_index_condition_is_divergent():
    assert divergent("if (threadIdx.x < 16) __syncthreads();") == [True]


def test_barrier_under_block_index_condition_is_uniform():
    assert divergent("if (blockIdx.x > 0) __syncthreads();") == [False]


def test_taint_follows_a_chain_of_locals():
    assert divergent("int a1 = threadIdx.x; int b1 = a1 * 2; int c1 = b1 + 1; "
                     "if (c1 > 5) __syncthreads();") == [True]


def test_taint_reaches_a_fixpoint_across_loop_iterations():
    # v is used before its thread-dependent write in the source: one pass in order would miss it
    body = "int v = 0; for (int t = 0; t < n; ++t) { if (v > 3) __syncthreads(); v = threadIdx.x; }"
    assert divergent(body) == [True]


def test_assignment_under_thread_dependent_condition_taints_through_control_dependence():
    assert divergent("int f = 0; if (threadIdx.x == 0) f = 1; if (f) __syncthreads();") == [True]


def test_shared_memory_written_by_one_thread_is_read_back_uniformly():
    body = "__shared__ int go; if (threadIdx.x == 0) go = 1; __syncthreads(); if (go) __syncthreads();"
    assert divergent(body) == [False, False]


def test_shared_read_at_a_thread_index_is_thread_dependent():
    assert divergent("s[threadIdx.x] = a[0]; if (s[threadIdx.x] > 0) __syncthreads();") == [True]


def test_early_return_under_thread_condition_makes_later_barriers_divergent():
    body = ("int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return; s[threadIdx.x] = a[i]; "
            "__syncthreads();")
    assert divergent(body) == [True]


def test_early_return_of_whole_blocks_is_uniform():
    assert divergent("if (blockIdx.x >= n) return; s[threadIdx.x] = a[0]; __syncthreads();") == [False]


def test_barrier_before_a_thread_dependent_return_is_uniform():
    assert divergent("__syncthreads(); if (threadIdx.x > 3) return; out[0] = 1;") == [False]


def test_break_under_thread_condition_makes_loop_barriers_divergent():
    body = ("for (int t = 0; t < n; ++t) { if (a[threadIdx.x] > t) break; s[threadIdx.x] = t; "
            "__syncthreads(); }")
    assert divergent(body) == [True]


def test_loop_with_thread_dependent_bound_makes_its_barriers_divergent():
    assert divergent("for (int i = threadIdx.x; i < n; i += blockDim.x) "
                     "{ s[threadIdx.x] = a[i]; __syncthreads(); }") == [True]


def test_uniform_loop_barriers_are_not_divergent():
    assert divergent("for (int t = 0; t < n; ++t) { s[threadIdx.x] = a[t]; __syncthreads(); }") == [False]


def test_back_to_back_barriers_flag_the_second_as_redundant():
    assert redundant("s[threadIdx.x] = a[0]; __syncthreads(); __syncthreads(); "
                     "out[0] = s[1];") == [False, True]


def test_barriers_separated_by_a_shared_access_are_not_redundant():
    assert redundant("s[threadIdx.x] = a[0]; __syncthreads(); s[threadIdx.x] += 1.0f; "
                     "__syncthreads();") == [False, False]


def test_barrier_at_kernel_entry_is_redundant():
    assert redundant("__syncthreads(); s[threadIdx.x] = a[0];") == [True]


def test_tiled_loop_barriers_are_needed_on_every_iteration():
    body = ("for (int t = 0; t < n; ++t) { s[threadIdx.x] = a[t]; __syncthreads();"
            " out[threadIdx.x] += s[(threadIdx.x + 1) & 255]; __syncthreads(); }")
    assert redundant(body) == [False, False]


def test_barrier_that_opens_a_loop_after_a_barrier_is_kept_for_later_iterations():
    body = ("s[threadIdx.x] = a[0]; __syncthreads(); "
            "for (int t = 0; t < n; ++t) { __syncthreads(); s[threadIdx.x] += t; }")
    assert redundant(body) == [False, False]


def test_trailing_barrier_after_a_loop_ending_in_a_barrier_is_redundant():
    body = ("for (int t = 0; t < n; ++t) { s[threadIdx.x] += t; __syncthreads(); } __syncthreads(); "
            "out[0] = s[0];")
    assert redundant(body) == [False, True]


def test_cooperative_groups_block_sync_and_ptx_bar_count_as_barriers():
    body = 'auto block = cg::this_thread_block(); block.sync(); asm volatile("bar.sync 0;"); __syncwarp();'
    assert len(barriers(body)) == 2


def test_value_barriers_are_never_redundant():
    assert redundant("__syncthreads(); int any = __syncthreads_or(a[threadIdx.x] > 0); "
                     "out[0] = any;") == [True, False]


def test_barriers_inside_called_device_functions_count_at_the_call_site():
    src = ("__device__ void sync_all() { __syncthreads(); }\n"
           "__device__ float reduce_block(float v) { sync_all(); return v; }\n"
           'extern "C" __global__ void k(float* out) {\n'
           "  if (threadIdx.x < 32) out[0] = reduce_block(1.0f);\n}\n")
    (b,) = analyze_cuda(src).kernels[0].barriers
    assert "reduce_block" in b.text and b.divergent_reason is not None
