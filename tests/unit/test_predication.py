"""The share of a block's threads that reach an atomic through the `if`s around it (`predication`)."""

from __future__ import annotations

import pytest

from cudaperf.analysis import cst
from cudaperf.analysis.lanes import LaneEnv
from cudaperf.analysis.memory import collect_accesses
from cudaperf.analysis.predication import thread_share
from cudaperf.analysis.scope import KernelScope, collect_file_scope

KERNEL = r'''
__global__ void k(float* out, const float* x, int* hist, int n) {
    int tid = threadIdx.x;
    int lane = tid & 31;
    float v = x[blockIdx.x * blockDim.x + tid];
    if (lane == 0) atomicAdd(out, v);
    if (tid == 0) atomicAdd(out + 1, v);
    if (x[tid] > 0.f) atomicAdd(out + 2, v);
    atomicAdd(out + 3, v);
    if (blockIdx.x == 0) atomicAdd(out + 4, v);
    if (tid < 16) { atomicAdd(&hist[tid], 1); } else { atomicAdd(&hist[0], 2); }
    int i = blockIdx.x * blockDim.x + tid;
    if (i < n) atomicAdd(out + 5, v);
}
'''


@pytest.fixture(scope="module")
def shares() -> dict[str, float | None]:
    tree = cst.parse(KERNEL)
    root = getattr(tree, "root_node", tree)
    fn = next(n for n in cst.walk(root) if n.type == "function_definition")
    scope = KernelScope(fn, collect_file_scope(root))
    env = LaneEnv({"n": 1 << 20}, (256, 1, 1))
    atomics = [a for a in collect_accesses(scope, env) if a.kind == "atomic"]
    return {a.text: thread_share(scope, a.node, env) for a in atomics}


def test_one_lane_per_warp_is_a_32nd_of_the_block(shares):
    assert shares["atomicAdd(out, v)"] == 1 / 32


def test_one_thread_per_block_is_one_over_the_block_size(shares):
    assert shares["atomicAdd(out + 1, v)"] == 1 / 256


def test_a_condition_on_loaded_data_counts_as_taken(shares):
    assert shares["atomicAdd(out + 2, v)"] == 1.0


def test_an_unguarded_atomic_is_made_by_every_thread(shares):
    assert shares["atomicAdd(out + 3, v)"] == 1.0


def test_a_condition_on_the_block_index_is_not_a_per_block_share(shares):
    assert shares["atomicAdd(out + 4, v)"] is None


def test_the_else_branch_gets_the_other_threads(shares):
    assert shares["atomicAdd(&hist[tid], 1)"] == 16 / 256 and shares["atomicAdd(&hist[0], 2)"] == 240 / 256


def test_a_bounds_guard_on_a_large_problem_lets_every_thread_through(shares):
    assert shares["atomicAdd(out + 5, v)"] == 1.0
