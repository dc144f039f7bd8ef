"""The structural score: range, monotonicity in each feature, neutral missing features, launch evidence and
time weighting, and kernel-name matching between analysis and profiler."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudaperf.reward import (
    StructuralWeights,
    kernel_structural_score,
    structural_score,
)
from cudaperf.types import CoalescingClass, KernelFeatures, MemoryAccess, Occupancy, ResourceUsage

W = StructuralWeights()

_global_access = st.builds(
    MemoryAccess, line=st.integers(1, 99), text=st.just("x"), space=st.just("global"),
    kind=st.sampled_from(["load", "store", "atomic"]),
    coalescing=st.one_of(st.none(), st.sampled_from(list(CoalescingClass))),
    stride_elements=st.one_of(st.none(), st.integers(-64, 64)), vector_width=st.sampled_from([1, 2, 4]))
_shared_access = st.builds(
    MemoryAccess, line=st.integers(1, 99), text=st.just("s"), space=st.just("shared"), kind=st.just("load"),
    bank_conflict_degree=st.one_of(st.none(), st.integers(1, 32)))
_occupancy = st.one_of(st.none(), st.builds(Occupancy, arch=st.just("sm_90"), block_size=st.just(256),
                                            active_blocks_per_sm=st.just(1), occupancy=st.floats(0, 1)))
_resources = st.one_of(st.none(), st.builds(
    ResourceUsage, kernel=st.just("k"), arch=st.just("sm_90"), registers=st.integers(1, 255),
    stack_frame_bytes=st.integers(0, 4096), spill_store_bytes=st.integers(0, 4096),
    spill_load_bytes=st.integers(0, 4096)))
_sass = st.dictionaries(st.sampled_from(["ldg128", "hmma", "ldl", "bar"]), st.integers(0, 8), max_size=4)
_kernels = st.builds(
    KernelFeatures, kernel=st.just("k"), resources=_resources, occupancy=_occupancy,
    accesses=st.lists(st.one_of(_global_access, _shared_access), max_size=8).map(tuple),
    barriers=st.integers(0, 4), divergent_barriers=st.lists(st.integers(1, 99), max_size=2).map(tuple),
    redundant_barriers=st.lists(st.integers(1, 99), max_size=2).map(tuple), sass=_sass,
    roofline_regime=st.sampled_from([None, "memory", "compute"]),
    dynamic=st.dictionaries(st.just("roofline_fraction"), st.floats(0, 1), max_size=1))


def score(f: KernelFeatures) -> float:
    return kernel_structural_score(f, W)[0]


@settings(max_examples=200, deadline=None)
@given(_kernels)
def test_score_lies_in_unit_interval(f):
    assert 0.0 <= score(f) <= 1.0


@settings(max_examples=200, deadline=None)
@given(f=_kernels, data=st.data())
def test_more_coalesced_accesses_never_lower_the_score(f, data):
    upgrade = data.draw(st.lists(st.booleans(), min_size=len(f.accesses), max_size=len(f.accesses)))
    accesses = tuple(dataclasses.replace(a, coalescing=CoalescingClass.COALESCED)
                     if up and a.space == "global" else a
                     for a, up in zip(f.accesses, upgrade, strict=True))
    assert score(dataclasses.replace(f, accesses=accesses)) >= score(f) - 1e-12


@settings(max_examples=200, deadline=None)
@given(f=_kernels, extra=st.floats(0, 1))
def test_higher_occupancy_never_lowers_the_score(f, extra):
    if f.occupancy is None:
        return
    higher = dataclasses.replace(f.occupancy, occupancy=min(1.0, f.occupancy.occupancy + extra))
    assert score(dataclasses.replace(f, occupancy=higher)) >= score(f) - 1e-12


@settings(max_examples=200, deadline=None)
@given(f=_kernels, extra=st.integers(0, 31))
def test_worse_bank_conflicts_never_raise_the_score(f, extra):
    worse = tuple(dataclasses.replace(a, bank_conflict_degree=min(32, a.bank_conflict_degree + extra))
                  if a.bank_conflict_degree is not None else a for a in f.accesses)
    assert score(dataclasses.replace(f, accesses=worse)) <= score(f) + 1e-12


@settings(max_examples=200, deadline=None)
@given(f=_kernels, extra=st.integers(0, 10_000))
def test_more_spills_never_raise_the_score(f, extra):
    if f.resources is None:
        return
    r = dataclasses.replace(f.resources, spill_store_bytes=f.resources.spill_store_bytes + extra)
    assert score(dataclasses.replace(f, resources=r)) <= score(f) + 1e-12


@settings(max_examples=200, deadline=None)
@given(f=_kernels)
def test_vectorising_accesses_never_lowers_the_score(f):
    vectorised = tuple(dataclasses.replace(a, vector_width=4) if a.space == "global" else a
                       for a in f.accesses)
    assert score(dataclasses.replace(f, accesses=vectorised)) >= score(f) - 1e-12


@settings(max_examples=200, deadline=None)
@given(f=_kernels)
def test_a_divergent_barrier_never_raises_the_score(f):
    assert score(dataclasses.replace(f, divergent_barriers=(*f.divergent_barriers, 7))) <= score(f) + 1e-12


def test_divergent_barrier_is_a_hard_penalty():
    f = KernelFeatures("k", accesses=(MemoryAccess(1, "a[i]", "global", "load", CoalescingClass.COALESCED),),
                       divergent_barriers=(12,))
    value, parts = kernel_structural_score(f, W)
    assert value == 0.0 and parts["divergent_barriers"] == 1.0


def test_missing_features_are_neutral_and_listed():
    value, parts = kernel_structural_score(KernelFeatures("k"), W)
    assert value == pytest.approx(W.neutral)
    assert {"missing.coalescing", "missing.occupancy", "missing.spills", "missing.vectorization",
            "missing.intensity", "missing.tensor_cores"} <= set(parts)


def test_unknown_access_class_is_neutral():
    unknown = KernelFeatures("k", accesses=(MemoryAccess(1, "a[idx[i]]", "global", "load",
                                                         CoalescingClass.UNKNOWN),))
    assert kernel_structural_score(unknown, W)[1]["coalescing"] == pytest.approx(W.neutral)


def test_stride_c_counts_one_over_c():
    strided = KernelFeatures("k", accesses=(MemoryAccess(1, "a[4*i]", "global", "load",
                                                         CoalescingClass.STRIDED, 4),))
    assert kernel_structural_score(strided, W)[1]["coalescing"] == pytest.approx(0.25)


def test_occupancy_saturates_at_half():
    def occ(o: float) -> float:
        f = KernelFeatures("k", occupancy=Occupancy("sm_90", 256, 1, o))
        return kernel_structural_score(f, W)[1]["occupancy"]
    assert occ(0.5) == occ(1.0) == 1.0 and occ(0.25) == pytest.approx(0.5)


def test_tensor_cores_do_not_apply_to_memory_bound_kernels():
    plain = KernelFeatures("k", roofline_regime="memory", sass={"ldg128": 2})
    assert "tensor_cores" not in kernel_structural_score(plain, W)[1]


def test_compute_bound_kernel_without_tensor_cores_scores_lower():
    without = KernelFeatures("k", roofline_regime="compute", sass={"ffma": 100})
    with_tc = KernelFeatures("k", roofline_regime="compute", sass={"ffma": 100, "hmma": 8})
    assert score(with_tc) > score(without)


def test_local_memory_caps_the_spill_component():
    local = KernelFeatures("k", resources=ResourceUsage("k", "sm_90", 32, stack_frame_bytes=64))
    assert kernel_structural_score(local, W)[1]["spills"] == pytest.approx(W.local_memory_factor)


def test_zero_weight_components_do_not_matter():
    only_coalescing = StructuralWeights(**{n: 0.0 for n in ("occupancy", "bank_conflicts", "synchronization",
                                                            "spills", "vectorization", "intensity",
                                                            "tensor_cores")})
    f = KernelFeatures("k", accesses=(MemoryAccess(1, "a[i]", "global", "load", CoalescingClass.COALESCED),))
    assert kernel_structural_score(f, only_coalescing)[0] == 1.0


def test_weights_may_be_a_mapping():
    f = KernelFeatures("k", accesses=(MemoryAccess(1, "a[i]", "global", "load", CoalescingClass.COALESCED),))
    assert (structural_score([f], {"coalescing": 1.0})[0]
            == structural_score([f], StructuralWeights(coalescing=1.0))[0])


def test_negative_weight_rejected():
    with pytest.raises(ValueError, match="coalescing"):
        StructuralWeights(coalescing=-1.0)


# ------------------------------------------------------------------------------------------------
# Several kernels, launch evidence


def coalesced(name: str) -> KernelFeatures:
    return KernelFeatures(name, occupancy=Occupancy("sm_90", 256, 8, 1.0),
                          accesses=(MemoryAccess(1, "a[i]", "global", "load", CoalescingClass.COALESCED, 1,
                                                 None, 4),))


def uncoalesced(name: str) -> KernelFeatures:
    return KernelFeatures(name, occupancy=Occupancy("sm_90", 256, 8, 1.0),
                          accesses=(MemoryAccess(1, "a[i*n]", "global", "load",
                                                 CoalescingClass.UNCOALESCED),))


def test_no_kernels_score_zero():
    assert structural_score([])[0] == 0.0


def test_kernel_absent_from_profiler_table_scores_zero():
    value, parts = structural_score([coalesced("pretty")], kernel_time_ms={"other_kernel": 3.0})
    assert value == 0.0 and parts["never_launched"] == 1.0


def test_zero_launches_in_dynamic_features_scores_zero():
    f = dataclasses.replace(coalesced("pretty"), dynamic={"launches": 0.0})
    assert structural_score([f])[0] == 0.0


def test_kernels_weighted_by_gpu_time():
    times = {"fast_part": 1.0, "slow_part": 3.0}
    mixed = structural_score([coalesced("fast_part"), uncoalesced("slow_part")], kernel_time_ms=times)[0]
    a = kernel_structural_score(coalesced("x"), W)[0]
    b = kernel_structural_score(uncoalesced("x"), W)[0]
    assert mixed == pytest.approx((1.0 * a + 3.0 * b) / 4.0)


def test_well_shaped_copies_of_the_launched_kernel_name_do_not_raise_the_score():
    times = {"relu_k": 0.05}  # the profiler's time is per name: which copy ran is not known
    honest = structural_score([uncoalesced("relu_k")], kernel_time_ms=times)[0]
    padded = structural_score([uncoalesced("relu_k")] + [coalesced("relu_k")] * 8, kernel_time_ms=times)[0]
    assert padded == honest


def test_copies_of_a_name_count_as_one_without_times():
    honest = structural_score([uncoalesced("relu_k"), coalesced("other")])[0]
    padded = structural_score([uncoalesced("relu_k"), coalesced("other")] + [coalesced("relu_k")] * 8)[0]
    assert padded == honest


def test_kernels_averaged_uniformly_without_times():
    mixed = structural_score([coalesced("a"), uncoalesced("b")])[0]
    expected = (kernel_structural_score(coalesced("a"), W)[0]
                + kernel_structural_score(uncoalesced("b"), W)[0]) / 2
    assert mixed == pytest.approx(expected)


def test_require_launch_evidence_zeroes_unknown_kernels():
    assert structural_score([coalesced("k")], require_launch_evidence=True)[0] == 0.0
    assert structural_score([coalesced("k")], require_launch_evidence=False)[0] > 0.0


# ------------------------------------------------------------------------------------------------
# Bad input (issue #3 item 8): records decoded from partial or malformed JSON never make the reward raise

_junk = st.one_of(st.none(), st.integers(-5, 5), st.floats(allow_nan=True, allow_infinity=True),
                  st.text(max_size=3))
_access_dicts = st.fixed_dictionaries(
    {"line": st.integers(1, 9), "text": st.just("x"), "space": st.sampled_from(["global", "shared", "?"]),
     "kind": st.just("load")},
    optional={"vector_width": _junk, "bank_conflict_degree": _junk, "stride_elements": _junk,
              "coalescing": st.sampled_from([c.value for c in CoalescingClass])})
_feature_dicts = st.fixed_dictionaries({"kernel": st.text(max_size=12)}, optional={
    "barriers": _junk, "vectorized_accesses": _junk, "sass": st.one_of(st.none(), st.dictionaries(
        st.sampled_from(["hmma", "ldl", "ldg128"]), _junk, max_size=3)),
    "dynamic": st.one_of(st.none(), st.dictionaries(
        st.sampled_from(["gpu_time_ms", "launches", "roofline_fraction"]), _junk, max_size=3)),
    "accesses": st.lists(_access_dicts, max_size=3),
    "roofline_regime": st.sampled_from([None, "memory", "compute", "?"]),
    "resources": st.one_of(st.none(), st.fixed_dictionaries({"kernel": st.just("k"), "arch": st.just("sm_90"),
                                                             "registers": _junk}, optional={
        "spill_store_bytes": _junk, "spill_load_bytes": _junk, "stack_frame_bytes": _junk})),
    "occupancy": st.one_of(st.none(), st.fixed_dictionaries({"arch": st.just("sm_90"), "block_size": _junk,
                                                             "active_blocks_per_sm": _junk,
                                                             "occupancy": _junk})),
})


@settings(max_examples=200, deadline=None)
@given(st.lists(_feature_dicts, max_size=3),
       st.one_of(st.none(), st.dictionaries(st.text(max_size=8), _junk, max_size=3)))
def test_reward_never_raises_on_malformed_feature_records(dicts, times):
    from cudaperf.reward import compute_reward
    from cudaperf.types import EvalResult, Outcome, from_dict

    features = [from_dict(KernelFeatures, d) for d in dicts]
    b = compute_reward(EvalResult("t", "s", Outcome.CORRECT, speedup_vs_eager=2.0), features,
                       kernel_time_ms=times)
    assert 0.0 <= b.details.get("structural_score", 0.0) <= 1.0


def test_a_per_thread_window_scores_as_coalesced_not_as_its_stride():
    def kernel(window: int) -> KernelFeatures:
        access = MemoryAccess(line=3, text="x[t * 4 + k]", space="global", kind="load",
                              coalescing=CoalescingClass.STRIDED, stride_elements=4, window=window)
        return KernelFeatures(kernel="k", accesses=(access,))

    coalesced = KernelFeatures(kernel="k", accesses=(MemoryAccess(
        line=3, text="x[t]", space="global", kind="load", coalescing=CoalescingClass.COALESCED),))
    assert score(kernel(4)) == score(coalesced) > score(kernel(1))
