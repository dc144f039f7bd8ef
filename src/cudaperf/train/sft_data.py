"""Supervised examples from the task dataset: the agent's first prompt of a task -> one of its verified
implementations, as token ids with the prompt masked out of the loss.

Covers: choosing tasks by the dataset's family split (train families for training, held-out validation
families for the eval loss; `cudaperf.datasets.splits`), every implementation of a chosen task (both task
kinds), optionally only those a GPU measurement found correct on every configuration with their current
source (`measurements`) and of those each task's fastest by measured time (`fastest_per_task`), the
prompt exactly as the agent renders it (`agent.prompting.render_task_prompt`, chat template with the
generation prompt), the answer in the form the agent's extractor accepts (one
```python block; `answer_text`), and the token-length distribution (`LengthStats`). Examples longer than
`max_length` are dropped and counted, never truncated.

Not covered: the trainer (`sft.py`), the implementations themselves (`cudaperf.datasets.generate`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaperf.agent.taskset import task_from_generated
from cudaperf.datasets import registry, splits
from cudaperf.datasets.records import GeneratedTask, Implementation
from cudaperf.train.config import SftConfig
from cudaperf.train.heldout import heldout_ids
from cudaperf.train.models import answer_ids, prompt_ids

IGNORE = -100  # the label the loss skips (prompt tokens)


@dataclass(frozen=True)
class SftExample:
    """One training example: ids and labels (-100 on the prompt), and where it came from."""

    example_id: str  # "<impl_id>"
    task_id: str
    family: str
    kind: str
    input_ids: tuple[int, ...]
    labels: tuple[int, ...]
    prompt_tokens: int
    answer_tokens: int


@dataclass(frozen=True)
class LengthStats:
    """Token lengths of prompt + answer over the examples (before the max_length filter)."""

    count: int
    mean: float
    p50: int
    p90: int
    p99: int
    max: int
    dropped: int  # longer than max_length
    answer_p50: int
    answer_p99: int

    def line(self) -> str:
        return (f"{self.count} examples: tokens mean {self.mean:.0f}, p50 {self.p50}, p90 {self.p90}, "
                f"p99 {self.p99}, max {self.max}; answers p50 {self.answer_p50}, p99 {self.answer_p99}; "
                f"{self.dropped} dropped over max_length")


def answer_text(source: str) -> str:
    """The reply SFT teaches: the solution module in one fenced python block (what `extract_code` finds)."""
    return f"```python\n{source.strip()}\n```"


def split_tasks(config: SftConfig) -> dict[str, list[GeneratedTask]]:
    """'train' and 'val' tasks of the index under the family split, filtered and limited as configured;
    the held-out tasks of the train families (`heldout.py`) are never among them."""
    from cudaperf.agent.taskset import select

    index = registry.build_index(config.dataset_seed)
    assigned = splits.split_tasks(index, config.dataset_seed)
    held = heldout_ids(index, assigned, config.holdout_fraction, config.dataset_seed)
    out: dict[str, list[GeneratedTask]] = {}
    for name, limit in (("train", config.limit_tasks), ("val", config.val_limit_tasks)):
        chosen = [g for g in index if assigned[g.task_id] == name and g.task_id not in held]
        out[name] = select(chosen, kinds=config.kinds, families=config.families, limit=limit)
    return out


@dataclass(frozen=True)
class MeasuredImpl:
    """An implementation a GPU measurement found correct on every configuration it measured."""

    source_hash: str  # the source it was measured with
    geomean_ms: float | None  # geometric mean of its median times over those configurations


def measured_rows(directory: str) -> dict[str, dict[str, dict[str, Any]]]:
    """impl_id -> configuration -> its measurement row (the last row per implementation and configuration
    counts)."""
    from cudaperf.datasets.jsonl import read_records

    records, _ = read_records([Path(directory)], "measurements")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in records:
        if r.get("record") == "row":
            out.setdefault(r["impl_id"], {})[r["config"]] = r
    return out


def verified_impls(directory: str) -> dict[str, MeasuredImpl]:
    """impl_id -> how it measured, for the implementations correct on every configuration with one source
    (the last row per implementation and configuration counts)."""
    return verified_from_rows(measured_rows(directory))


def verified_from_rows(rows: dict[str, dict[str, dict[str, Any]]]) -> dict[str, MeasuredImpl]:
    """`verified_impls` of rows already read (`measured_rows`)."""
    out = {}
    for impl_id, by_config in rows.items():
        found = list(by_config.values())
        hashes = {row.get("source_hash") for row in found}
        if all(row.get("status") == "ok" for row in found) and len(hashes) == 1 and None not in hashes:
            out[impl_id] = MeasuredImpl(hashes.pop(), _geomean([row.get("median_ms") for row in found]))
    return out


def _geomean(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def task_impls(task: GeneratedTask, config: SftConfig,
               verified: dict[str, MeasuredImpl] | None) -> list[Implementation]:
    """The task's implementations the configuration trains on: of its strategies, verified by the
    measurements when given, and the `fastest_per_task` of them by measured time when set."""
    impls = registry.implementations(task)
    if config.strategies:
        impls = [i for i in impls if i.strategy in config.strategies]
    if verified is None:
        return impls
    impls = verified_of(impls, verified)
    if config.fastest_per_task:
        impls = fastest_first(impls, verified)[:config.fastest_per_task]
    return impls


def verified_of(impls: Sequence[Implementation], verified: dict[str, MeasuredImpl]) -> list[Implementation]:
    """Those of `impls` the measurements verified with their current source."""
    from cudaperf.datasets.measure.results import impl_hash

    return [i for i in impls
            if i.impl_id in verified and verified[i.impl_id].source_hash == impl_hash(i.source)]


def fastest_first(impls: Sequence[Implementation], verified: dict[str, MeasuredImpl]) -> list[Implementation]:
    """Those of verified `impls` with a measured time, fastest first (ties in their given order)."""
    timed = [i for i in impls if verified[i.impl_id].geomean_ms is not None]
    return sorted(timed, key=lambda i: verified[i.impl_id].geomean_ms)


def task_messages(task: GeneratedTask, fmt: str = "fast") -> list[dict[str, str]]:
    """The agent's first prompt for a dataset task, as chat messages."""
    from cudaperf.agent.prompting import render_task_prompt

    prompt = render_task_prompt(task_from_generated(task), fmt)
    return [{"role": m.role, "content": m.content} for m in prompt.messages()]


def build_examples(tasks: Iterable[GeneratedTask], tokenizer: Any, config: SftConfig,
                   verified: dict[str, MeasuredImpl] | None = None) -> tuple[list[SftExample], LengthStats]:
    """Every (task prompt, implementation) example of `tasks` within `max_length`, and the lengths of all."""
    examples: list[SftExample] = []
    lengths: list[int] = []
    answers: list[int] = []
    for task in tasks:
        impls = task_impls(task, config, verified)
        if not impls:
            continue
        prompt = prompt_ids(tokenizer, task_messages(task, config.format))
        for impl in impls:
            answer = answer_ids(tokenizer, answer_text(impl.source))
            lengths.append(len(prompt) + len(answer))
            answers.append(len(answer))
            if len(prompt) + len(answer) > config.max_length:
                continue
            examples.append(masked_example(impl.impl_id, task, prompt, answer))
    return examples, length_stats(lengths, answers, config.max_length)


def masked_example(example_id: str, task: GeneratedTask, prompt: list[int], answer: list[int]) -> SftExample:
    """The example of `prompt` then `answer` token ids, the prompt masked out of the loss."""
    return SftExample(example_id, task.task_id, task.family, task.kind.value, tuple(prompt + answer),
                      tuple([IGNORE] * len(prompt) + answer), len(prompt), len(answer))


def _quantile(values: Sequence[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] if q > 0 else ordered[0]


def length_stats(lengths: Sequence[int], answers: Sequence[int], max_length: int) -> LengthStats:
    n = len(lengths)
    return LengthStats(n, sum(lengths) / n if n else 0.0, _quantile(lengths, 0.5), _quantile(lengths, 0.9),
                       _quantile(lengths, 0.99), max(lengths, default=0),
                       sum(1 for x in lengths if x > max_length), _quantile(answers, 0.5),
                       _quantile(answers, 0.99))


def as_dataset(examples: Sequence[SftExample]) -> Any:
    """A `datasets.Dataset` with input_ids and labels (what SFTTrainer takes as already tokenised)."""
    from datasets import Dataset

    return Dataset.from_dict({"input_ids": [list(e.input_ids) for e in examples],
                              "labels": [list(e.labels) for e in examples]})


__all__ = ["IGNORE", "LengthStats", "MeasuredImpl", "SftExample", "answer_text", "as_dataset",
           "build_examples", "length_stats", "masked_example", "split_tasks", "task_messages",
           "verified_impls"]
