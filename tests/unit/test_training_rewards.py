"""The TRL and verl reward adapters, without trl or verl: the call contracts, reading results from columns,
pickling, the evaluate_fn hook, and that importing the adapters pulls in no framework."""

from __future__ import annotations

import inspect
import json
import math
import pickle
import subprocess
import sys
import types

import numpy as np
import pytest

from cudaperf.reward import compute_reward, get_preset
from cudaperf.train.reward_functions import VERL_KEYS, Evaluation, TRLReward, completion_text, compute_score
from cudaperf.types import CoalescingClass, EvalResult, KernelFeatures, MemoryAccess, Outcome, to_dict


def result(outcome: Outcome = Outcome.CORRECT, eager: float | None = 2.0,
           compiled: float | None = 2.0) -> EvalResult:
    return EvalResult(task_id="t", solution_id="s", outcome=outcome, speedup_vs_eager=eager,
                      speedup_vs_compile=compiled)


KERNEL = KernelFeatures("k", accesses=(MemoryAccess(1, "a[i]", "global", "load", CoalescingClass.COALESCED),))


def fake_evaluate(texts: list[str], rows: list[dict]) -> list:
    """A stand-in evaluator: correct and 2× faster when the text mentions __global__, else incorrect."""
    return [Evaluation(result()) if "__global__" in t else result(Outcome.INCORRECT) for t in texts]


# ------------------------------------------------------------------------------------------------
# TRL


def test_trl_reward_reads_dicts_records_and_json():
    reward = TRLReward("cudaperf")
    columns = [to_dict(result()), result(), json.dumps(to_dict(result()))]
    out = reward(prompts=["p"] * 3, completions=["c"] * 3, eval_result=columns)
    assert out == pytest.approx([1.0 + math.log(2.0)] * 3)


def test_trl_reward_matches_compute_reward():
    r = result(eager=3.0, compiled=1.7)
    out = TRLReward("kevin")(prompts=["p"], completions=["c"], eval_result=[to_dict(r)])
    assert out == [compute_reward(r, config=get_preset("kevin")).total]


def test_trl_reward_none_where_no_result():
    out = TRLReward()(prompts=["p", "p"], completions=["a", "b"], eval_result=[None, to_dict(result())])
    assert out[0] is None and out[1] is not None


def test_trl_reward_none_without_result_column():
    assert TRLReward()(prompts=["p"], completions=["a"]) == [None]


def test_trl_reward_malformed_record_is_none():
    out = TRLReward()(prompts=["p"] * 2, completions=["a"] * 2,
                      eval_result=[{"outcome": "nope"}, "{not json"])
    assert out == [None, None]


def test_trl_reward_harness_error_is_none_by_default():
    r = to_dict(result(Outcome.HARNESS_ERROR))
    assert TRLReward()(prompts=["p"], completions=["a"], eval_result=[r]) == [None]
    assert TRLReward(none_when_not_applicable=False)(prompts=["p"], completions=["a"],
                                                     eval_result=[r]) == [0.0]


def test_trl_reward_uses_feature_and_ranker_columns():
    base = TRLReward()(prompts=["p"], completions=["a"], eval_result=[to_dict(result())])[0]
    out = TRLReward()(prompts=["p"], completions=["a"], eval_result=[to_dict(result())],
                      kernel_features=[[to_dict(KERNEL)]], ranker_score=[1.0])[0]
    assert out > base


def test_trl_reward_custom_result_key():
    out = TRLReward("kevin", result_key="res")(prompts=["p"], completions=["a"], res=[to_dict(result())])
    assert out == pytest.approx([2.3])


def test_trl_reward_ignores_trainer_runtime_kwargs():
    out = TRLReward()(prompts=["p"], completions=["a"], eval_result=[to_dict(result())],
                      completion_ids=[[1, 2]], trainer_state=object(), log_extra=lambda *a: None,
                      environments=None)
    assert out[0] is not None


def test_trl_reward_has_a_name_for_trl_logs():
    assert TRLReward("cuda-agent").__name__ == "cudaperf_cuda_agent"
    assert TRLReward("kevin", name="speed").__name__ == "speed"


def test_trl_reward_round_trips_through_pickle():
    reward = TRLReward("cuda-agent", evaluate_fn=fake_evaluate)
    clone = pickle.loads(pickle.dumps(reward))
    kwargs = {"prompts": ["p", "p"], "completions": ["x", "__global__ correct"],
              "eval_result": [to_dict(result()), None]}
    assert clone(**kwargs) == reward(**kwargs) and clone.__name__ == reward.__name__


def test_evaluate_fn_called_only_for_missing_results():
    seen: list[tuple[list[str], list[dict]]] = []

    def spy(texts, rows):
        seen.append((texts, rows))
        return fake_evaluate(texts, rows)

    out = TRLReward("kevin", evaluate_fn=spy)(
        prompts=["p0", "p1"], completions=["a", [{"role": "assistant", "content": "__global__ correct"}]],
        eval_result=[to_dict(result()), None], task_id=["t0", "t1"], trainer_state=object())
    assert len(seen) == 1
    texts, rows = seen[0]
    assert texts == ["__global__ correct"]
    assert rows == [{"eval_result": None, "task_id": "t1", "prompt": "p1"}]
    assert out == pytest.approx([2.3, 2.3])


def test_evaluate_fn_by_dotted_path(monkeypatch):
    module = types.ModuleType("my_evaluator")
    module.evaluate = fake_evaluate
    monkeypatch.setitem(sys.modules, "my_evaluator", module)
    out = TRLReward("kevin", evaluate_fn="my_evaluator:evaluate")(
        prompts=["p"], completions=["plain text"])
    assert out == [0.0]


def test_short_evaluate_fn_answer_leaves_rest_none():
    out = TRLReward(evaluate_fn=lambda texts, rows: [])(prompts=["p"], completions=["a"])
    assert out == [None]


def test_log_metric_gets_batch_means():
    logged: dict[str, float] = {}
    TRLReward("kevin")(prompts=["p"] * 2, completions=["a"] * 2,
                       eval_result=[to_dict(result()), to_dict(result(Outcome.INCORRECT))],
                       log_metric=lambda name, value: logged.__setitem__(name, value))
    assert logged["cudaperf_kevin/correct"] == 0.5
    assert logged["cudaperf_kevin/speedup_term"] == pytest.approx(1.0)


@pytest.mark.parametrize(("completion", "text"), [
    ("plain", "plain"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"},
      {"role": "assistant", "content": "a2"}], "a2"),
    ([{"role": "assistant", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}],
     "xy"),
    (None, ""),
])
def test_completion_text_handles_plain_and_conversational(completion, text):
    assert completion_text(completion) == text


# ------------------------------------------------------------------------------------------------
# verl


def test_verl_signature_matches_custom_reward_contract():
    params = inspect.signature(compute_score).parameters
    assert list(params)[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    assert params["extra_info"].default is None
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def test_verl_score_equals_compute_reward_total():
    r = result(eager=4.0, compiled=3.0)
    out = compute_score("kernelbench", "src", "t", {"eval_result": to_dict(r)})
    assert out["score"] == pytest.approx(compute_reward(r).total)
    assert out["correct"] == 1.0 and out["applicable"] == 1.0


@pytest.mark.parametrize("extra_info", [
    {"eval_result": to_dict(result())},
    {"eval_result": to_dict(result(Outcome.COMPILE_ERROR))},
    {"eval_result": to_dict(result(Outcome.SKIPPED))},
    {},
    None,
])
def test_verl_dict_always_has_the_same_keys(extra_info):
    out = compute_score("ds", "src", None, extra_info)
    assert tuple(out) == VERL_KEYS and all(isinstance(v, float) for v in out.values())


def test_verl_missing_result_is_not_applicable_wrong_value():
    out = compute_score("ds", "src", None, {}, preset="cuda-agent")
    assert out["applicable"] == 0.0 and out["score"] == -1.0


def test_verl_preset_and_unknown_kwargs():
    out = compute_score("ds", "src", None, {"eval_result": json.dumps(to_dict(result()))},
                        preset="cuda-agent", reward_router_address=None, some_future_kwarg=1)
    assert out["score"] == 3.0


def test_verl_reads_numpy_arrays_from_parquet_rows():
    extra = {"eval_result": to_dict(result()), "kernel_features": np.array([to_dict(KERNEL)], dtype=object),
             "ranker_score": np.float32(1.0)}
    out = compute_score("ds", "src", None, extra)
    assert out["structural_term"] > 0 and out["ranker_term"] == pytest.approx(0.1)


def test_verl_evaluate_fn_gets_solution_and_ground_truth():
    seen = []

    def spy(texts, rows):
        seen.append((texts, rows))
        return [to_dict(result())]

    out = compute_score("ds", "__global__ void k(){}", "task-7", {"task_id": "task-7"}, evaluate_fn=spy)
    assert seen == [(["__global__ void k(){}"],
                     [{"task_id": "task-7", "data_source": "ds", "ground_truth": "task-7"}])]
    assert out["applicable"] == 1.0


# ------------------------------------------------------------------------------------------------
# Import weight


def test_importing_adapters_pulls_in_no_framework():
    code = ("import sys, cudaperf.train.reward_functions, cudaperf.reward; "
            "print(sorted(m for m in ('trl', 'verl', 'torch', 'transformers', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
