"""Thin adapters from cudaperf's pure reward to the reward-function contracts of TRL and verl.

Covers:
- `TRLReward`: a picklable callable for `trl.GRPOTrainer(reward_funcs=...)`. TRL calls a reward function
  with `prompts`, `completions` and every dataset column (plus keys a `rollout_func` returns) as keyword
  arguments, one list entry per completion, and expects one float per completion, None where the function
  does not apply. `TRLReward` reads each completion's `EvalResult` (a record, its `to_dict` dict or that
  dict as JSON) from the column `result_key`, and optionally its kernels' features, ranker score and
  per-kernel GPU times from further columns, then returns `compute_reward(...).total`.
- `compute_score`: verl's custom reward function, `(data_source, solution_str, ground_truth, extra_info,
  **kwargs) -> dict`, reading the same inputs from `extra_info`; the dict holds "score" and a fixed set of
  breakdown keys (verl collects every key of every sample into equal-length columns, so the keys never vary).
- `EvaluateFn`: the hook through which later work plugs the evaluator in when no result was passed.

Not covered: running the evaluator (no `evaluate_fn` is supplied here), rollouts and multi-turn credit
(`cudaperf.reward.turn_returns` computes returns; the rollout side applies them), importing trl or verl
(neither is needed to build or call these adapters, so they are tested without them).
"""

from __future__ import annotations

import functools
import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from cudaperf.reward import (
    RewardConfig,
    compute_reward,
    get_preset,
    import_object,
    resolve_config,
)
from cudaperf.types import EvalResult, KernelFeatures, RewardBreakdown, from_dict


@dataclass(frozen=True)
class Evaluation:
    """Everything the reward reads about one completion (what an `EvaluateFn` may return)."""

    result: EvalResult
    features: tuple[KernelFeatures, ...] = ()
    ranker_score: float | None = None
    kernel_time_ms: dict[str, float] = field(default_factory=dict)  # per-kernel GPU time (profiler)


EvaluateFn: TypeAlias = Callable[[list[str], list[dict[str, Any]]], Sequence[Any]]
"""Evaluates completions that arrived without a result: called once per batch with the completion texts
and, for each, its row (the dataset columns / rollout keys for that completion, plus "prompt" for TRL or
"data_source" and "ground_truth" for verl). Returns one item per completion: an `Evaluation`, an
`EvalResult` (or its dict / JSON), or None when it cannot evaluate that completion. Must be picklable
(a module-level function or a callable object) for TRL's and verl's worker processes."""

# Keyword arguments TRL adds next to the dataset columns; never part of a sample's row.
_TRL_RUNTIME_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "environments",
                                 "completion_ids"})

# The keys of `compute_score`'s dict, always all present.
VERL_KEYS: tuple[str, ...] = ("score", "applicable", "gate", "correct", "speedup_term", "structural_term",
                              "ranker_term", "structural_score", "coverage_factor")


@dataclass(frozen=True)
class InputKeys:
    """Where each input of the reward lives among the columns / `extra_info` keys of a sample."""

    result: str = "eval_result"
    features: str = "kernel_features"
    ranker_score: str = "ranker_score"
    kernel_time_ms: str = "kernel_time_ms"


class TRLReward:
    """A TRL reward function over cudaperf evaluation results (see the module docstring for the contract).

    `TRLReward("cudaperf")`, `TRLReward("kevin", result_key="result")`, `TRLReward(RewardConfig(...))`.
    Returns None for a completion without a usable result (and no `evaluate_fn`), and — with
    `none_when_not_applicable` — for SKIPPED / HARNESS_ERROR outcomes, which are not the policy's fault.
    When TRL passes `log_metric`, the batch means of the reward's parts are logged under `<__name__>/...`.
    """

    def __init__(
        self,
        config_or_preset: RewardConfig | str = "cudaperf",
        result_key: str = "eval_result",
        *,
        features_key: str = "kernel_features",
        ranker_key: str = "ranker_score",
        kernel_time_key: str = "kernel_time_ms",
        evaluate_fn: EvaluateFn | str | None = None,
        none_when_not_applicable: bool = True,
        name: str | None = None,
    ) -> None:
        self.config = resolve_config(config_or_preset)
        self.keys = InputKeys(result_key, features_key, ranker_key, kernel_time_key)
        self.evaluate_fn = evaluate_fn
        self.none_when_not_applicable = none_when_not_applicable
        label = config_or_preset if isinstance(config_or_preset, str) else "custom"
        # TRL names the reward's log columns after `__name__` (a callable instance has none by default).
        self.__name__ = name or f"cudaperf_{label.replace('-', '_').replace(':', '_').replace('.', '_')}"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 **kwargs: Any) -> list[float | None]:
        n = len(completions)
        evaluations = [_evaluation_from(_row(kwargs, i, n), self.keys) for i in range(n)]
        missing = [i for i, e in enumerate(evaluations) if e is None]
        if missing and self.evaluate_fn is not None:
            rows = [{**_row(kwargs, i, n), "prompt": prompts[i] if i < len(prompts) else None}
                    for i in missing]
            texts = [completion_text(completions[i]) for i in missing]
            for i, item in zip(missing, _run_evaluate_fn(self.evaluate_fn, texts, rows), strict=False):
                evaluations[i] = _as_evaluation(item)
        breakdowns = [self._score(e) for e in evaluations]
        _log_means(kwargs.get("log_metric"), self.__name__, breakdowns)
        return [self._total(b) for b in breakdowns]

    def _score(self, evaluation: Evaluation | None) -> RewardBreakdown | None:
        if evaluation is None:
            return None
        return _breakdown(evaluation, self.config)

    def _total(self, breakdown: RewardBreakdown | None) -> float | None:
        if breakdown is None:
            return None
        if self.none_when_not_applicable and breakdown.details.get("applicable") == 0.0:
            return None
        return breakdown.total

    def __repr__(self) -> str:
        return f"TRLReward(name={self.__name__!r}, keys={self.keys})"


def compute_score(
    data_source: str | None,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    *,
    preset: str = "cudaperf",
    result_key: str = "eval_result",
    features_key: str = "kernel_features",
    ranker_key: str = "ranker_score",
    kernel_time_key: str = "kernel_time_ms",
    evaluate_fn: EvaluateFn | str | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """verl's custom reward function: point `reward.custom_reward_function.path` at this module and
    `name` at `compute_score`; `reward_kwargs` may set `preset` (a name or "package.module:function"),
    the keys, and `evaluate_fn` (a dotted path). Reads the inputs from `extra_info`; "applicable" is 0 when
    there is no usable result or the outcome is not the candidate's fault, and "score" is then the preset's
    `wrong_reward` (verl needs a number)."""
    config = _cached_preset(preset)
    keys = InputKeys(result_key, features_key, ranker_key, kernel_time_key)
    row = dict(extra_info or {})
    evaluation = _evaluation_from(row, keys)
    if evaluation is None and evaluate_fn is not None:
        row.update(data_source=data_source, ground_truth=ground_truth)
        items = _run_evaluate_fn(evaluate_fn, [solution_str], [row])
        evaluation = _as_evaluation(items[0]) if items else None
    if evaluation is None:
        return {**dict.fromkeys(VERL_KEYS, 0.0), "score": config.wrong_reward}
    return _verl_dict(_breakdown(evaluation, config))


@functools.lru_cache(maxsize=32)
def _cached_preset(preset: str) -> RewardConfig:
    return get_preset(preset)


def _verl_dict(b: RewardBreakdown) -> dict[str, float]:
    d = b.details
    return {
        "score": b.total, "applicable": d.get("applicable", 1.0), "gate": b.gate,
        "correct": d.get("correct", 0.0), "speedup_term": b.speedup_term,
        "structural_term": b.structural_term, "ranker_term": b.ranker_term,
        "structural_score": d.get("structural_score", 0.0), "coverage_factor": d.get("coverage_factor", 0.0),
    }


def _breakdown(evaluation: Evaluation, config: RewardConfig) -> RewardBreakdown:
    return compute_reward(evaluation.result, evaluation.features, evaluation.ranker_score, config,
                          kernel_time_ms=evaluation.kernel_time_ms or None)


# --------------------------------------------------------------------------------------------------
# Reading columns


def _row(kwargs: Mapping[str, Any], i: int, n: int) -> dict[str, Any]:
    """Sample i's values of the per-completion columns (lists of length n) among TRL's kwargs."""
    return {k: v[i] for k, v in kwargs.items()
            if k not in _TRL_RUNTIME_KWARGS and isinstance(v, (list, tuple)) and len(v) == n}


def _evaluation_from(row: Mapping[str, Any], keys: InputKeys) -> Evaluation | None:
    result = _as_result(row.get(keys.result))
    if result is None:
        return None
    return Evaluation(result=result, features=_as_features(row.get(keys.features)),
                      ranker_score=_as_float(row.get(keys.ranker_score)),
                      kernel_time_ms=_as_times(row.get(keys.kernel_time_ms)))


def _as_evaluation(item: Any) -> Evaluation | None:
    if isinstance(item, Evaluation):
        return item
    result = _as_result(item)
    return Evaluation(result=result) if result is not None else None


def _decode(value: Any) -> Any:
    """JSON text becomes its value (columns of nested records are often stored as strings); numpy arrays
    (verl reads parquet through pandas, so list columns arrive as arrays) become lists."""
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    if hasattr(value, "tolist") and not isinstance(value, Mapping):
        return value.tolist()
    return value


def _as_result(value: Any) -> EvalResult | None:
    value = _decode(value)
    if isinstance(value, EvalResult):
        return value
    if not isinstance(value, Mapping):
        return None
    try:
        result = from_dict(EvalResult, dict(value))
    except (TypeError, ValueError, KeyError, AttributeError):  # a malformed record: not applicable
        return None
    return result


def _as_features(value: Any) -> tuple[KernelFeatures, ...]:
    value = _decode(value)
    if not isinstance(value, (list, tuple)):
        return ()
    out: list[KernelFeatures] = []
    for item in value:
        if isinstance(item, KernelFeatures):
            out.append(item)
        elif isinstance(item, Mapping):
            try:
                out.append(from_dict(KernelFeatures, dict(item)))
            except (TypeError, ValueError, KeyError, AttributeError):
                continue  # an unreadable kernel record is left out (structure is then credited less)
    return tuple(out)


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # Real: numpy scalars too
        return None
    return float(value) if math.isfinite(value) else None


def _as_times(value: Any) -> dict[str, float]:
    value = _decode(value)
    if not isinstance(value, Mapping):
        return {}
    return {str(k): float(v) for k, v in value.items() if _as_float(v) is not None}


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or (conversational) the last assistant message's content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, Mapping)]
        assistant = [m for m in messages if m.get("role") == "assistant"] or messages
        return _content_text(assistant[-1].get("content")) if assistant else ""
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):  # multimodal parts: [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return ""


def _run_evaluate_fn(evaluate_fn: EvaluateFn | str, texts: list[str],
                     rows: list[dict[str, Any]]) -> list[Any]:
    fn = import_object(evaluate_fn) if isinstance(evaluate_fn, str) else evaluate_fn
    items = list(fn(texts, rows))  # type: ignore[operator]
    return items + [None] * (len(texts) - len(items))  # a short answer leaves the rest unevaluated


def _log_means(log_metric: Any, prefix: str, breakdowns: Sequence[RewardBreakdown | None]) -> None:
    if not callable(log_metric):
        return
    scored = [b for b in breakdowns if b is not None and b.details.get("applicable") != 0.0]
    if not scored:
        return
    parts = {"correct": [b.details.get("correct", 0.0) for b in scored],
             "speedup_term": [b.speedup_term for b in scored],
             "structural_term": [b.structural_term for b in scored],
             "ranker_term": [b.ranker_term for b in scored]}
    for name, values in parts.items():
        log_metric(f"{prefix}/{name}", sum(values) / len(values))
    log_metric(f"{prefix}/scored_fraction", len(scored) / len(breakdowns))


__all__ = ["VERL_KEYS", "EvaluateFn", "Evaluation", "InputKeys", "TRLReward", "completion_text",
           "compute_score"]
