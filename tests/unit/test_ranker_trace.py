"""The launch trace (cudaperf.ranker.trace) and the task view it runs on (cudaperf.ranker.problem):
real dataset tasks and implementations, torch meta tensors, no GPU."""

from __future__ import annotations

import sys

import pytest

from cudaperf.datasets import registry
from cudaperf.ranker.problem import Problem
from cudaperf.ranker.trace import MAX_LAUNCHES, trace_solution


@pytest.fixture(scope="module")
def index():
    return registry.build_index(0, families=["stencil1d", "histogram", "softmax", "sort", "spmv"])


def _task(index, family):
    return next(t for t in index if t.family == family)


def _impl(task, strategy):
    return next(i for i in registry.implementations(task) if i.strategy == strategy)


LOOP_SOURCE = '''
from cudaperf import cuda
SOURCE = r"""extern "C" __global__ void step(float* x, int n, int k) { }"""
def stencil1d(src, dst, n):
    mod = cuda.load(SOURCE)
    for k in range(STAGES):
        mod.step((4,), (128,), dst, n, k)
'''


def test_trace_records_launch_shape_and_scalars_by_parameter_name(index):
    task = _task(index, "stencil1d")
    problem = Problem.of(task)
    n = problem.task.spec["configs"][0]["scalars"]["n"] if problem.task.spec else None
    trace = trace_solution(_impl(task, "grid_stride").source, problem, "small")
    assert trace.ok and len(trace.launches) == 1
    launch = trace.launches[0]
    assert launch.block == (256, 1, 1)
    assert launch.scalars["n"] == float(n)
    assert launch.grid[0] == max(1, min((n + 255) // 256, 1056))


def test_trace_records_tensor_lengths_by_parameter_name(index):
    task = _task(index, "spmv")
    problem = Problem.of(task)
    trace = trace_solution(_impl(task, "naive").source, problem, "odd")
    sizes = problem.sizes("odd").scalars
    assert trace.ok and trace.launches[0].tensors["vals"] == sizes["nnz"]
    assert trace.launches[0].tensors["row_ptr"] == sizes["rows"] + 1


def test_trace_counts_every_launch_of_a_host_loop(index):
    problem = Problem.of(_task(index, "stencil1d"))
    trace = trace_solution(LOOP_SOURCE.replace("STAGES", "7"), problem, "small")
    assert trace.ok and [x.scalars["k"] for x in trace.launches] == [float(k) for k in range(7)]


def test_trace_stops_recording_at_the_launch_limit(index):
    problem = Problem.of(_task(index, "stencil1d"))
    trace = trace_solution(LOOP_SOURCE.replace("STAGES", str(MAX_LAUNCHES + 10)), problem, "small")
    assert trace.truncated and len(trace.launches) == MAX_LAUNCHES


def test_trace_failure_is_a_value_with_the_launches_before_it(index):
    problem = Problem.of(_task(index, "stencil1d"))
    source = (
        LOOP_SOURCE.replace("STAGES", "2") + "    total = src.sum().item()  # meta tensors have no data\n"
    )
    trace = trace_solution(source, problem, "small")
    assert not trace.ok and len(trace.launches) == 2 and trace.error


def test_trace_leaves_the_real_cuda_helper_in_place(index):
    import cudaperf.cuda as real

    problem = Problem.of(_task(index, "softmax"))
    trace_solution(_impl(_task(index, "softmax"), "warp_shuffle").source, problem, "large")
    assert sys.modules["cudaperf.cuda"] is real


def test_pytorch_sizes_come_from_meta_inputs_and_the_reference_output(index):
    problem = Problem.of(_task(index, "softmax"))
    small, large = problem.sizes("small"), problem.sizes("large")
    assert small.out_elems == small.in_elems > 0  # softmax keeps its input's shape
    assert large.in_elems > small.in_elems


def test_c_sizes_carry_the_integer_inputs_value_range(index):
    sizes = Problem.of(_task(index, "histogram")).sizes("small")
    assert sizes.value_span is not None and sizes.value_span > 0


def test_isolated_trace_runs_the_candidate_in_a_sandboxed_worker(index):
    from cudaperf.execute import StageTimeouts, WorkerPool
    from cudaperf.ranker.trace import trace_isolated

    task = _task(index, "stencil1d")
    source = _impl(task, "grid_stride").source
    with WorkerPool(None, timeouts=StageTimeouts(default_s=60.0, start_s=60.0), preload=("torch",)) as pool:
        isolated = trace_isolated(source, task, "large", pool)
    assert isolated == trace_solution(source, Problem.of(task), "large")
