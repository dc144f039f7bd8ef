"""Refinement examples for SFT (`train.refine_data`): the pairs chosen from a task's measured
implementations, the measured result that stands in for an evaluation, and the second-turn conversation
made by the real environment. The task and its implementations are the real dataset's (a C task: its
baselines are the naive CUDA port and the serial C); the measurement rows are `dataset measure`'s format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudaperf.datasets import registry
from cudaperf.datasets.measure.results import impl_hash
from cudaperf.train.config import ConfigError, SftConfig
from cudaperf.train.refine_data import (
    build_refine_examples,
    measured_result,
    refine_pairs,
    second_turn_messages,
)
from cudaperf.train.sft_data import IGNORE, answer_text, measured_rows, verified_from_rows
from cudaperf.types import Outcome

CONFIGS = (("small", 1.0), ("large", 4.0))
MEASUREMENTS = Path(__file__).resolve().parents[2] / "benchmarks" / "dataset_measure"  # the dataset's own


@pytest.fixture(scope="module")
def task():
    return next(g for g in registry.build_index(0)
                if g.family == "gemv" and len(registry.implementations(g)) >= 3)


def rows_of(impl, ms: float) -> dict[str, dict]:
    """Measurement rows of `impl`, correct on both configurations, `ms` on the small one."""
    return {config: {"record": "row", "impl_id": impl.impl_id, "config": config, "status": "ok",
                     "median_ms": ms * scale, "iqr_ms": 0.01, "min_ms": ms * scale, "mean_ms": ms * scale,
                     "n_samples": 100, "naive_ms": 2.0 * scale, "serial_c_ms": 50.0 * scale,
                     "eager_ms": None, "compile_ms": None, "source_hash": impl_hash(impl.source)}
            for config, scale in CONFIGS}


def refining(per_task: int, max_length: int) -> SftConfig:
    """An SFT configuration with `per_task` refinement examples a task (min speedup 1.2, the default)."""
    return SftConfig(model="tiny", measurements=str(MEASUREMENTS), refine_per_task=per_task,
                     max_length=max_length)


@pytest.fixture(scope="module")
def measured(task):
    """The task's implementations timed 4, 1, 3, 2... ms (the second is the fastest)."""
    impls = registry.implementations(task)
    times = [4.0, 1.0, 3.0, 2.0, 5.0, 6.0, 7.0, 8.0][:len(impls)]
    rows = {impl.impl_id: rows_of(impl, t) for impl, t in zip(impls, times, strict=False)}
    return impls, rows, verified_from_rows(rows)


def test_the_answer_is_the_fastest_after_the_slowest_first(task, measured):
    impls, _, verified = measured
    pairs = refine_pairs(task, verified, per_task=2, min_speedup=1.2)
    slowest_first = sorted((i for i in impls if i is not impls[1]),
                           key=lambda i: -verified[i.impl_id].geomean_ms)
    assert [p.first.impl_id for p in pairs] == [i.impl_id for i in slowest_first[:2]]
    assert {p.answer.impl_id for p in pairs} == {impls[1].impl_id}


def test_first_replies_of_the_named_strategies_come_first(task, measured):
    impls, _, verified = measured  # naive 4 ms, grid_stride 1 (the fastest), coarsened 3, warp_shuffle 2
    pairs = refine_pairs(task, verified, per_task=1, min_speedup=1.2, first_from=("naive",))
    assert [p.first.strategy for p in pairs] == ["naive"]


def test_the_named_strategies_keep_their_order_and_the_rest_follow_slowest_first(task, measured):
    impls, _, verified = measured
    pairs = refine_pairs(task, verified, per_task=3, min_speedup=1.2, first_from=("warp_shuffle", "naive"))
    assert [p.first.strategy for p in pairs] == ["warp_shuffle", "naive", "coarsened"]


def test_a_named_strategy_not_slow_enough_is_not_a_first_reply(task, measured):
    impls, _, verified = measured
    pairs = refine_pairs(task, verified, per_task=1, min_speedup=2.5, first_from=("warp_shuffle",))
    assert [p.first.strategy for p in pairs] == ["naive"]  # warp_shuffle is 2.0x the fastest: the slowest


def test_a_first_reply_not_slow_enough_makes_no_pair(task, measured):
    impls, _, verified = measured
    pairs = refine_pairs(task, verified, per_task=len(impls), min_speedup=2.5)
    assert all(p.speedup >= 2.5 for p in pairs)
    assert impls[3].impl_id not in {p.first.impl_id for p in pairs}  # 2 ms: 2.0x the fastest


def test_an_implementation_measured_with_another_source_makes_no_pair(task, measured):
    impls, rows, _ = measured
    changed = {k: {c: dict(r, source_hash="0123456789ab") for c, r in v.items()} for k, v in rows.items()}
    assert refine_pairs(task, verified_from_rows(changed), per_task=2, min_speedup=1.2) == []


def test_the_measured_result_is_correct_with_every_baseline_and_its_speedups(measured):
    impls, rows, _ = measured
    result = measured_result("t", "t/s0/t0", rows[impls[0].impl_id])
    assert result.outcome is Outcome.CORRECT and [t.config for t in result.timings] == ["large", "small"]
    small = result.timings[1]
    assert small.candidate.median_ms == 4.0 and set(small.baselines) == {"naive_cuda", "serial_c"}
    assert result.speedups == pytest.approx({"naive_cuda": 0.5, "serial_c": 12.5})
    assert result.speedup_vs_eager is None  # a C task: no eager baseline was measured


def test_the_second_turn_is_the_environments_conversation_after_the_first_reply(task, measured):
    impls, rows, verified = measured
    pair = refine_pairs(task, verified, per_task=1, min_speedup=1.2)[0]
    messages = second_turn_messages(task, pair, rows[pair.first.impl_id])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert pair.first.source.strip() in messages[2]["content"]
    feedback = messages[3]["content"]
    assert "Verdict: CORRECT" in feedback and "now make it faster" in feedback
    assert f"yours {rows[pair.first.impl_id]['small']['median_ms']:.4g}" in feedback


def test_an_example_learns_the_faster_answer_only(task, measured):
    from cudaperf.agent.backends.tiny import tiny_chat_model

    impls, rows, verified = measured
    _, tokenizer = tiny_chat_model(hidden_size=64)
    (example,), _ = build_refine_examples([task], tokenizer, refining(1, 1 << 16), verified, rows)
    answer = tokenizer(answer_text(impls[1].source), add_special_tokens=False)["input_ids"]
    learned = [t for t in example.labels if t != IGNORE]
    assert learned == answer + [tokenizer.eos_token_id]
    assert example.labels[:example.prompt_tokens] == (IGNORE,) * example.prompt_tokens


def test_an_example_over_max_length_is_dropped_and_counted(task, measured):
    from cudaperf.agent.backends.tiny import tiny_chat_model

    _, rows, verified = measured
    _, tokenizer = tiny_chat_model(hidden_size=64)
    examples, lengths = build_refine_examples([task], tokenizer, refining(2, 256), verified, rows)
    assert examples == [] and len(lengths) == 2


def test_rows_are_read_back_by_implementation_and_configuration(measured, tmp_path):
    impls, rows, _ = measured
    with open(tmp_path / "measurements-test.jsonl", "w") as f:
        for by_config in rows.values():
            for row in by_config.values():
                f.write(json.dumps(row) + "\n")
    assert measured_rows(str(tmp_path)) == rows


def test_refinement_without_measurements_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="refine_per_task"):
        SftConfig(model="tiny", output_dir=str(tmp_path), refine_per_task=1)


def test_an_order_of_first_replies_without_refinement_examples_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="refine_from"):
        SftConfig(model="tiny", output_dir=str(tmp_path), refine_from=("naive",))


def test_a_minimum_speedup_under_one_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="refine_min_speedup"):
        SftConfig(model="tiny", output_dir=str(tmp_path), refine_min_speedup=0.9)


def test_the_sft_run_trains_on_the_refinement_examples_beside_the_first_turns(tmp_path):
    from cudaperf.agent.backends.tiny import tiny_chat_model
    from cudaperf.train.sft import _examples

    _, tokenizer = tiny_chat_model(hidden_size=64)
    config = SftConfig(model="tiny", output_dir=str(tmp_path), limit_tasks=4, val_limit_tasks=1,
                       families=("gemv", "conv2d"), kinds=("c",), measurements=str(MEASUREMENTS),
                       refine_per_task=1, max_length=1 << 16)
    train, _, _, _ = _examples(config, tokenizer)
    refine = [e for e in train if "->" in e.example_id]
    assert refine and len({e.task_id for e in refine}) == len(refine)  # one a task
    assert len(train) > len(refine)  # the first turns are still there


def test_the_dry_run_counts_the_refinement_examples(tmp_path, capsys):
    from cudaperf.cli import main

    code = main(["train", "sft", "--dry-run", "--model", "tiny", "--output-dir", str(tmp_path),
                 "--limit-tasks", "2", "--val-limit-tasks", "1", "--kinds", "c", "--families", "gemv",
                 "--measurements", str(MEASUREMENTS), "--refine-per-task", "1", "--max-length", "65536"])
    out = capsys.readouterr().out
    assert code == 0 and "train: 2 tasks" in out and "refinement examples: 2 of 2 within" in out
