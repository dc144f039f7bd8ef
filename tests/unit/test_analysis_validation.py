"""The labelled validation suite: the static analysis gives every kernel its expected verdicts.

Each case compiles with NVRTC (registers -> occupancy, stack frame -> local memory); SASS is skipped
to keep the suite fast. The same verdicts are compared with Nsight Compute on the H200 by
scripts/validate_static_vs_ncu.py.
"""

from __future__ import annotations

import pytest

from cudaperf.analysis import analyze_source
from cudaperf.analysis.validation import FEATURES, all_cases, evaluate_spec, verdicts

CASES = all_cases()


def test_suite_has_at_least_thirty_runnable_kernels():
    assert sum(c.run for c in CASES) >= 30


def test_every_feature_has_both_verdicts_somewhere():
    for feature in ("divergent_barrier", "redundant_barrier", "atomics", "vectorized", "local_memory"):
        assert {c.expected[feature] for c in CASES} == {True, False}, feature
    assert {c.expected["occupancy"] for c in CASES} == {"high", "low"}
    assert {c.expected["regime"] for c in CASES} == {"memory", "compute"}
    assert ({"broadcast", "coalesced", "strided", "uncoalesced", "unknown"}
            <= {c.expected["load"] for c in CASES})


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_static_verdicts_match_labels(case):
    report = analyze_source(case.source, kind="cuda", launch=case.launch, sizes=case.sizes, sass=False)
    assert len(report.kernels) == 1, report.diagnostics
    got = verdicts(report.kernels[0], report.details[0])
    expected = {k: case.expected[k] for k in FEATURES}
    assert got == expected


def test_argument_specs_are_arithmetic_over_sizes():
    assert evaluate_spec("n // 4 + 1", {"n": 8}) == 3
    with pytest.raises(TypeError):
        evaluate_spec("__import__('os')", {})
