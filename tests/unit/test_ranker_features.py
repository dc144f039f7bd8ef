"""Per-configuration features (cudaperf.ranker.features) on real dataset implementations, no GPU.
Compiler facts are passed in (as the dataset's committed static features hold them) so no test compiles."""

from __future__ import annotations

import math

import pytest

from cudaperf.datasets import registry
from cudaperf.ranker.features import FEATURE_NAMES, CompilerFacts, config_features, source_values
from cudaperf.ranker.problem import Problem

FACTS = CompilerFacts(registers=32, smem_static_bytes=0, spill_bytes=0)


GENERATED = {}


@pytest.fixture(scope="module")
def tasks():
    index = registry.build_index(0, families=["map", "histogram", "softmax"])
    GENERATED.update({f: next(t for t in index if t.family == f) for f in ("map", "histogram", "softmax")})
    return {f: Problem.of(t) for f, t in GENERATED.items()}


def _source(problem, strategy):
    return next(
        i.source for i in registry.implementations(GENERATED[problem.family]) if i.strategy == strategy
    )


def _features(problem, strategy, config="large"):
    return config_features(_source(problem, strategy), problem, config, facts=FACTS).as_dict()


def test_feature_names_leave_out_source_length_and_strategy():
    assert not [n for n in FEATURE_NAMES if any(w in n for w in ("len", "chars", "strategy", "tag"))]


def test_every_feature_is_a_float_in_schema_order(tasks):
    f = config_features(_source(tasks["map"], "naive"), tasks["map"], "small", facts=FACTS)
    assert len(f.values) == len(FEATURE_NAMES) and all(isinstance(v, float) for v in f.values)


def test_coarsening_shows_as_fewer_threads_per_output(tasks):
    naive, coarse = _features(tasks["map"], "naive"), _features(tasks["map"], "coarsened")
    assert coarse["l_log_threads_per_out"] < naive["l_log_threads_per_out"]


def test_problem_sizes_follow_the_configuration(tasks):
    small = _features(tasks["softmax"], "warp_shuffle", "small")
    large = _features(tasks["softmax"], "warp_shuffle", "large")
    assert large["p_log_in_elems"] > small["p_log_in_elems"] and large["l_waves"] > small["l_waves"]


def test_atomic_contention_is_threads_per_bin(tasks):
    f = _features(tasks["histogram"], "atomic")
    assert f["a_atomics"] > 0 and f["a_log_atomic_contention"] > 5  # many threads per histogram bin


def test_bytes_are_bound_by_the_configuration(tasks):
    f = _features(tasks["map"], "naive")
    assert math.isfinite(f["a_log_bytes"]) and f["a_log_bytes"] > 10


def test_unreadable_candidate_gets_unknown_values_not_an_exception(tasks):
    f = config_features("this is not python ((", tasks["map"], "small", facts=FACTS)
    d = f.as_dict()
    assert d["l_trace_ok"] == 0.0 and f.notes


def test_source_counts_see_warp_shuffles():
    text = 'SOURCE = r"""__global__ void k(float* x) { x[0] = __shfl_down_sync(0xffffffff, x[0], 1); }"""'
    assert source_values(text)["s_shuffles"] == 1.0


@pytest.fixture(scope="module")
def window_tasks():
    index = registry.build_index(0, families=["pooling", "stencil1d"])
    return {f: next(t for t in index if t.family == f) for f in ("pooling", "stencil1d")}


def _impl_features(task, strategy, config="large"):
    source = next(i.source for i in registry.implementations(task) if i.strategy == strategy)
    return config_features(source, Problem.of(task), config, facts=FACTS).as_dict()


def test_coarsened_pooling_reads_a_per_thread_window_not_strided_loads(window_tasks):
    f = _impl_features(window_tasks["pooling"], "coarsened")
    assert f["a_window_share"] > 0 and f["a_strided_share"] == 0 and f["a_log_sector_excess"] <= 0.5


def test_stencil_loads_through_a_macro_and_clamp_helper_are_counted(window_tasks):
    naive = _impl_features(window_tasks["stencil1d"], "naive")
    tiled = _impl_features(window_tasks["stencil1d"], "smem_tiled")
    assert naive["a_log_reuse"] > 0.5 and naive["a_log_requested_per_out"] > tiled["a_log_requested_per_out"]


def test_barriers_per_thread_are_zero_without_barriers(tasks):
    f = _features(tasks["map"], "naive")
    assert f["a_log_barriers_per_thread"] == 0 and math.isnan(f["a_log_flops_per_barrier"])


def test_a_window_counts_as_coalesced_traffic(window_tasks):
    f = _impl_features(window_tasks["pooling"], "coarsened")
    assert f["a_coalesced_share"] == 1 - f["a_uncoalesced_share"] - f["a_broadcast_share"]


def test_coarsening_pays_index_divisions_once_for_several_outputs(window_tasks):
    naive = _impl_features(window_tasks["pooling"], "naive")
    coarse = _impl_features(window_tasks["pooling"], "coarsened")
    assert naive["a_log_divisions_per_out"] > coarse["a_log_divisions_per_out"] > 0


def test_structural_feature_is_the_rewards_score_which_counts_a_window_as_coalesced(window_tasks):
    task = window_tasks["pooling"]
    source = next(i.source for i in registry.implementations(task) if i.strategy == "coarsened")
    f = config_features(source, Problem.of(task), "large", facts=FACTS)
    naive = next(i.source for i in registry.implementations(task) if i.strategy == "naive")
    g = config_features(naive, Problem.of(task), "large", facts=FACTS)
    assert f.as_dict()["a_structural"] == f.structural_score >= g.structural_score


def test_cost_model_estimates_differ_between_configurations(window_tasks):
    small = _impl_features(window_tasks["stencil1d"], "naive", "small")
    large = _impl_features(window_tasks["stencil1d"], "naive", "large")
    assert math.isfinite(small["c_log_est"]) and small["c_log_est"] != large["c_log_est"]


def test_a_tiny_problem_is_launch_bound_in_the_cost_model(window_tasks):
    f = _impl_features(window_tasks["stencil1d"], "naive", "small")
    assert f["c_log_launch"] >= max(f["c_log_dram"], f["c_log_l1"], f["c_log_compute"])


def test_runtime_divisions_count_as_compute_in_the_cost_model():
    from cudaperf.ranker.features import CostInputs, cost_values
    from cudaperf.ranker.problem import ProblemSizes

    sizes = ProblemSizes(1 << 24, 1 << 24, 4, 1)
    base = dict(launches=1, flops=1e8, footprint_bytes=2**27, requested_bytes=2**27, sector_excess=1.0,
                sm_bytes=2**27 / 132, barrier_warp_execs=0.0, tensor=False, sizes=sizes)
    plain = cost_values(CostInputs(divisions=0.0, **base))
    wrapped = cost_values(CostInputs(divisions=26.0 * (1 << 24), **base))
    assert wrapped["c_log_compute"] > plain["c_log_compute"] and wrapped["c_log_est"] > plain["c_log_est"]


def _memory_bound_inputs(**kw):
    from cudaperf.ranker.features import CostInputs
    from cudaperf.ranker.problem import ProblemSizes

    base = dict(launches=1, flops=0.0, footprint_bytes=2**27, requested_bytes=2**27, sector_excess=1.0,
                sm_bytes=2**27 / 132, divisions=0.0, barrier_warp_execs=0.0, tensor=False,
                sizes=ProblemSizes(1 << 24, 1 << 24, 4, 1))
    return CostInputs(**{**base, **kw})


def test_a_thread_with_one_small_request_in_flight_leaves_hbm_bandwidth_idle():
    from cudaperf.ranker.features import inflight_share

    assert inflight_share(_memory_bound_inputs(bytes_per_thread=4.0)) < 0.5


def test_sixteen_bytes_per_resident_thread_keep_hbm_busy():
    from cudaperf.ranker.features import inflight_share

    assert inflight_share(_memory_bound_inputs(bytes_per_thread=16.0)) == 1.0


def test_low_occupancy_lowers_the_bandwidth_share():
    from cudaperf.ranker.features import inflight_share

    full, low = (inflight_share(_memory_bound_inputs(bytes_per_thread=16.0, occupancy=o)) for o in (1, 0.25))
    assert low < full


def test_unknown_bytes_per_thread_leave_the_dram_term_at_full_bandwidth():
    from cudaperf.ranker.features import inflight_share

    assert inflight_share(_memory_bound_inputs(bytes_per_thread=None)) == 1.0


def test_few_bytes_in_flight_raise_the_estimate_of_a_memory_bound_kernel():
    from cudaperf.ranker.features import cost_values

    busy = cost_values(_memory_bound_inputs(bytes_per_thread=32.0))
    idle = cost_values(_memory_bound_inputs(bytes_per_thread=4.0))
    assert idle["c_log_est"] > busy["c_log_est"] + 0.5 and idle["c_log_dram"] == busy["c_log_dram"]


def test_global_atomics_on_few_bins_cost_more_than_a_privatised_histogram():
    from cudaperf.datasets import registry
    from cudaperf.ranker.features import FEATURE_NAMES, config_features
    from cudaperf.ranker.problem import Problem

    task = registry.build_index(0, families=["histogram"])[0]
    impls = {i.impl_id.split("/")[-1]: i.source for i in registry.implementations(task)}
    est = {name: config_features(impls[name], Problem.of(task), "large", compile=False).values[
        FEATURE_NAMES.index("c_log_atomic")] for name in ("atomic", "privatized")}
    assert est["atomic"] > est["privatized"] + 2


def test_an_atomic_made_by_one_lane_per_warp_counts_a_32nd_of_the_threads():
    from cudaperf.datasets import registry
    from cudaperf.ranker.features import atomic_updates
    from cudaperf.ranker.problem import Problem

    task = registry.build_index(0, families=["reduce_all"])[0]
    source = next(i.source for i in registry.implementations(task) if i.impl_id.endswith("/atomic"))
    from cudaperf.ranker.features import _analysis
    from cudaperf.ranker.trace import trace_solution

    problem = Problem.of(task)
    trace = trace_solution(source, problem, "large")
    report, _ = _analysis(source, trace, None, [])
    updates = atomic_updates(report, trace, problem.sizes("large"))
    threads = sum(x.blocks * x.threads_per_block for x in trace.launches if x.kernel == "reduce_atomic")
    assert updates is not None and updates.global_updates == threads / 32


def test_a_tile_whose_threads_request_one_element_keeps_less_in_flight_than_a_register_window():
    from cudaperf.ranker.features import FEATURE_NAMES, config_features
    from cudaperf.ranker.problem import Problem

    task = next(t for t in registry.build_index(0, families=["pooling"]) if t.variant["dims"] == 1)
    impls = {i.impl_id.split("/")[-1]: i.source for i in registry.implementations(task)}
    share = {name: config_features(impls[name], Problem.of(task), "large", compile=False).values[
        FEATURE_NAMES.index("c_log_inflight_share")] for name in ("smem_tiled", "coarsened")}
    assert share["smem_tiled"] < share["coarsened"] <= 0.0


@pytest.mark.parametrize(("target", "passes"), [("threadIdx.x", 4), ("0", 32), ("idx[threadIdx.x]", None)])
def test_a_warp_s_global_atomic_takes_its_sectors_passes_or_one_per_colliding_lane(target, passes):
    from cudaperf.analysis.static import analyze_cuda

    unit = analyze_cuda('extern "C" __global__ void k(const int* idx, unsigned* h) '
                        f'{{ atomicAdd(&h[{target}], 1u); }}')
    atomic = next(a for a in unit.kernels[0].accesses if a.kind == "atomic")
    assert atomic.warp_passes == passes
