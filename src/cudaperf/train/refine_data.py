"""Refinement examples for SFT: a second turn that improves on a correct first answer, as the agent renders
it, built from the dataset's measured implementations.

An example is a trajectory's conversation at its second turn (the task prompt, a slower verified
implementation as the first reply, the feedback the environment renders for it) followed by a faster
verified implementation of the same task as the answer. The conversation is made by the real environment
(`agent.environment.RefineEnv`: reset, prepare, observe), so it is the prompt the RL rollouts and the
comparison give the model at turn 2 (credit 'turn': the conversation rendered again each turn); only the
evaluation is replaced, by the dataset's GPU measurement of the first reply (`measured_result`): verdict
correct, its median time on every measured configuration against every baseline measured beside it,
the speedups, and the static structural features the evaluator would attach (when the `analysis` extra is
installed; without it, none, as the evaluator's own result would have none).

Why: SFT on first turns alone left the model without the second turn: in session 32's GRPO step 10 of 16
second replies carried no solution (dev/LOG.md), so best-of-turns could not rise above first-turn.

Covers: choosing the pairs (`refine_pairs`: each task's fastest verified implementation as the answer,
after each of up to `per_task` others at least `min_speedup` times slower: those of the strategies named
in `first_from` first, in that order, then the rest slowest first), the measured result, the example's
tokens (prompt masked out of the loss, as `sft_data.build_examples`).
Not covered: refinement from wrong answers (the dataset holds verified implementations only), turns after
the second, the GPU measurement itself (`cudaperf dataset measure`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cudaperf.agent.environment import EnvConfig, RefineEnv
from cudaperf.agent.feedback import source_analysis
from cudaperf.agent.taskset import task_from_generated
from cudaperf.datasets import registry
from cudaperf.datasets.records import GeneratedTask, Implementation
from cudaperf.train.config import SftConfig
from cudaperf.train.models import answer_ids, prompt_ids, token_counter
from cudaperf.train.sft_data import (
    MeasuredImpl,
    SftExample,
    answer_text,
    fastest_first,
    masked_example,
    verified_of,
)
from cudaperf.types import ConfigTiming, EvalResult, Outcome, Timing

ARCH = "sm_90"  # the structural features' target (H100 and H200, the machines the dataset was measured on)
# A measurement row's baseline columns -> the name the evaluator gives that baseline (`ConfigTiming`).
BASELINE_COLUMNS = {"naive_ms": "naive_cuda", "serial_c_ms": "serial_c"}


@dataclass(frozen=True)
class RefinePair:
    """A first answer and the faster one that follows it, of one task."""

    task_id: str
    first: Implementation
    answer: Implementation
    speedup: float  # first's measured time / answer's (geometric means over the configurations)


def refine_pairs(task: GeneratedTask, verified: dict[str, MeasuredImpl], per_task: int,
                 min_speedup: float, first_from: Sequence[str] = ()) -> list[RefinePair]:
    """Up to `per_task` pairs of `task`: its fastest verified, timed implementation as the answer after
    each other one at least `min_speedup` times slower; first replies of the strategies in `first_from`
    come first (in its order), then the others, the slowest first."""
    order = fastest_first(verified_of(registry.implementations(task), verified), verified)
    if len(order) < 2 or per_task < 1:
        return []
    ms = {i.impl_id: float(verified[i.impl_id].geomean_ms) for i in order}  # type: ignore[arg-type]
    fastest = order[0]
    slower = [i for i in reversed(order[1:]) if ms[i.impl_id] >= min_speedup * ms[fastest.impl_id]]
    rank = {strategy: n for n, strategy in enumerate(first_from)}
    slower.sort(key=lambda i: rank.get(i.strategy, len(rank)))  # stable: the rest stay slowest first
    return [RefinePair(task.task_id, i, fastest, ms[i.impl_id] / ms[fastest.impl_id])
            for i in slower[:per_task]]


def measured_result(task_id: str, solution_id: str, rows: dict[str, dict[str, Any]],
                    features: tuple = ()) -> EvalResult:
    """The evaluator's result for an implementation that measured correct: `rows` are its measurement
    rows by configuration (`sft_data.measured_rows`)."""
    from cudaperf.evaluate import speedups_by_baseline

    timings = tuple(_config_timing(config, row) for config, row in sorted(rows.items()))
    speedups = speedups_by_baseline(timings)
    return EvalResult(task_id=task_id, solution_id=solution_id, outcome=Outcome.CORRECT, stage="timing",
                      timings=timings, speedup_vs_eager=speedups.get("eager"),
                      speedup_vs_compile=speedups.get("compile"), speedups=speedups, features=features)


def _config_timing(config: str, row: dict[str, Any]) -> ConfigTiming:
    median = row["median_ms"]
    candidate = Timing(median_ms=median, iqr_ms=row.get("iqr_ms") or 0.0, min_ms=row.get("min_ms") or median,
                       mean_ms=row.get("mean_ms") or median, n_samples=int(row.get("n_samples") or 0))
    baselines = {name: _median_only(row.get(column), row.get(column.replace("_ms", "_iqr_ms")))
                 for column, name in BASELINE_COLUMNS.items() if row.get(column)}
    return ConfigTiming(config, candidate, eager=_median_only(row.get("eager_ms"), row.get("eager_iqr_ms")),
                        compiled=_median_only(row.get("compile_ms"), row.get("compile_iqr_ms")),
                        baselines={k: v for k, v in baselines.items() if v is not None})


def _median_only(median_ms: float | None, iqr_ms: float | None) -> Timing | None:
    """A baseline the measurement kept as a median (and spread) only: its samples are not in the row."""
    if not median_ms:
        return None
    return Timing(median_ms=median_ms, iqr_ms=iqr_ms or 0.0, min_ms=median_ms, mean_ms=median_ms, n_samples=0)


def static_features(source: str) -> tuple:
    """The structural features the evaluator attaches to a built candidate (`evaluate._with_features`,
    static), or none without the `analysis` extra. The analysis is the one the feedback's hints read
    (`feedback.source_analysis`, remembered per text), so an example analyses its first reply once."""
    report = source_analysis(source, ARCH)
    return tuple(report.kernels) if report is not None else ()


def second_turn_messages(task: GeneratedTask, pair: RefinePair, rows: dict[str, dict[str, Any]],
                         count_tokens: Any = None) -> list[dict[str, str]]:
    """The conversation the environment gives the model at turn 2 after `pair.first` as the first reply,
    evaluated as measured."""
    env = RefineEnv(EnvConfig(max_turns=2), count_tokens=count_tokens)
    env.reset(task_from_generated(task))
    pending = env.prepare(answer_text(pair.first.source))
    if pending.solution is None:  # the dataset's own module did not extract: a bug in the dataset
        raise ValueError(f"{pair.first.impl_id}: {pending.extraction.feedback}")
    result = measured_result(task.task_id, pending.solution.solution_id, rows,
                             static_features(pending.extraction.code or pending.solution.source))
    env.observe(pending, result)
    return env.prompt_messages()


def build_refine_examples(tasks: Iterable[GeneratedTask], tokenizer: Any, config: SftConfig,
                          verified: dict[str, MeasuredImpl],
                          rows: dict[str, dict[str, dict[str, Any]]]) -> tuple[list[SftExample], list[int]]:
    """Every refinement example of `tasks` (`config.refine_per_task` a task at most, answers at least
    `config.refine_min_speedup` times faster) within `config.max_length` (longer ones are dropped, never
    cut), and the lengths of all (prompt + answer tokens); as `sft_data.build_examples` for first turns."""
    examples: list[SftExample] = []
    lengths: list[int] = []
    max_length = config.max_length
    count = token_counter(tokenizer)
    for task in tasks:
        for pair in refine_pairs(task, verified, config.refine_per_task, config.refine_min_speedup,
                                 config.refine_from):
            prompt = prompt_ids(tokenizer, second_turn_messages(task, pair, rows[pair.first.impl_id], count))
            answer = answer_ids(tokenizer, answer_text(pair.answer.source))
            lengths.append(len(prompt) + len(answer))
            if len(prompt) + len(answer) > max_length:
                continue
            examples.append(masked_example(f"{pair.first.impl_id}->{pair.answer.strategy}", task, prompt,
                                           answer))
    return examples, lengths


__all__ = ["RefinePair", "build_refine_examples", "measured_result", "refine_pairs", "second_turn_messages",
           "static_features"]
