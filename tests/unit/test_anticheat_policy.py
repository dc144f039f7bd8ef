"""The anti-cheat Policy record and its rule registry."""

from __future__ import annotations

import json
import re

import pytest

from cudaperf.anticheat.policy import RULES, TORCH_OP_RULES, Policy, has_violation, make_flag
from cudaperf.types import Severity, from_dict, to_dict


def test_policy_round_trips_through_json():
    policy = Policy(min_coverage=0.3, disabled_rules=("torch_operator",), allow_streams=True)
    assert from_dict(Policy, json.loads(json.dumps(to_dict(policy)))) == policy


def test_default_policy_is_strict():
    policy = Policy()
    assert not policy.allow_torch_ops and policy.min_coverage == 0.5
    assert all(policy.active(code) for code in RULES)


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_min_coverage_out_of_range_is_rejected(value):
    with pytest.raises(ValueError, match="min_coverage"):
        Policy(min_coverage=value)


def test_unknown_disabled_rule_is_rejected_with_the_valid_codes():
    with pytest.raises(ValueError, match="valid codes"):
        Policy(disabled_rules=("no_such_rule",))


def test_allow_torch_ops_switches_off_exactly_the_torch_rules():
    policy = Policy(allow_torch_ops=True)
    assert {code for code in RULES if not policy.active(code)} == set(TORCH_OP_RULES)


@pytest.mark.parametrize("field, codes", [("allow_streams", {"stream_created", "stream_changed"}),
                                          ("allow_cuda_graphs", {"cuda_graph"}),
                                          ("allow_vendor_libraries", {"cuda_library_call"}),
                                          ("allow_reduced_precision", {"precision_downcast",
                                                                       "reduced_precision_cuda"})])
def test_each_permission_switches_off_its_rules(field, codes):
    policy = Policy(**{field: True})
    assert {code for code in RULES if not policy.active(code)} == codes


def test_rule_codes_are_stable_snake_case_with_a_summary():
    for code, rule in RULES.items():
        assert rule.code == code and re.fullmatch(r"[a-z][a-z0-9_]*", code) and rule.summary


def test_torch_op_rules_are_registered():
    assert TORCH_OP_RULES <= set(RULES)


def test_make_flag_uses_the_rule_severity():
    assert make_flag("forward_state", "x").severity is Severity.WARNING
    assert make_flag("torch_compute_op", "x", line=3).severity is Severity.ERROR


def test_every_rule_has_a_rationale_comment():
    import inspect

    from cudaperf.anticheat import policy

    lines = inspect.getsource(policy).splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith('Rule("'):
            assert lines[i - 1].strip().startswith("#"), line


def test_a_result_has_a_violation_when_any_flag_is_one():
    info = make_flag("precision_downcast", "a warning")
    hack = make_flag("forbidden_import", "imports the dataset")
    assert has_violation([info, hack]) and not has_violation([info]) and not has_violation([])
