"""The self-check table names a failure the task itself causes (scripts/kernelbench_self_check.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from cudaperf.types import ConfigCorrectness, EvalResult, Flag, Outcome, Severity

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kernelbench_self_check.py"


def _script():
    spec = importlib.util.spec_from_file_location("kernelbench_self_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _failed(flag_config: str) -> EvalResult:
    return EvalResult(task_id="66_Matmul_Dropout_Softmax", solution_id="self-check",
                      outcome=Outcome.INCORRECT,
                      correctness=(ConfigCorrectness(config="default", correct=False, seeds=1),),
                      flags=(Flag("task_nondeterministic", "the reference gives different outputs",
                                  Severity.WARNING, flag_config),))


def test_a_failure_on_a_configuration_whose_reference_disagrees_with_itself_is_a_task_property():
    assert _script().task_property(_failed("default")) == "reference nondeterministic"


def test_a_nondeterministic_flag_on_another_configuration_explains_nothing():
    assert _script().task_property(_failed("derived_1")) == ""
