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
