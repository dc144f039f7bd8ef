"""Where an RL run's time went (`cudaperf.train.run_summary`, `cudaperf report RUN_DIR`): the split of
generation, evaluation and the optimiser over rollout batches that serve two optimiser steps each, as
the trainer's own writers write the records (`MetricsWriter`, `record_evaluations`), and the evaluations'
stage times over all answers and over the correct ones."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from cudaperf.cli import main
from cudaperf.report_html import read_training_run
from cudaperf.train.monitor import EVALUATIONS_FILE, MetricsWriter, record_evaluations
from cudaperf.train.run_summary import (
    evaluations_file,
    read_evaluations,
    summarise_evaluations,
    time_split,
)
from cudaperf.types import EvalResult, Outcome

# rollout step -> (generation s, evaluation s, turns); each batch serves optimiser steps s and s + 1
BATCHES = {1: (20.0, 40.0, 32), 3: (10.0, 30.0, 32)}
STEP_S = {1: 62.0, 2: 3.0, 3: 44.0, 4: 2.0}  # the trainer's step times (a batch's rollout inside the first)


def write_run(directory: Path, drop_step_s: int | None = None) -> Path:
    writer = MetricsWriter(directory, tensorboard=False)
    for step in sorted(STEP_S):
        if step in BATCHES:
            gen, ev, turns = BATCHES[step]
            writer.write("rollout", step, {"generate_s": gen, "evaluate_s": ev, "rollout_s": gen + ev,
                                           "turns": float(turns), "hack_syntax_error": 2.0})
        times = {} if step == drop_step_s else {"step_s": STEP_S[step]}
        writer.write("train", step, {"loss": 0.1, **times})
    writer.close()
    return directory


def _result(outcome: Outcome, stages: dict[str, float]) -> SimpleNamespace:
    r = EvalResult("t", "s", outcome, stage_durations_s=stages)
    return SimpleNamespace(result=r, solution=SimpleNamespace(source="code"))


def write_evaluations(directory: Path) -> None:
    record = record_evaluations(0.0, directory)
    record(_result(Outcome.CORRECT, {"gate_wait": 2.0, "timing": 1.0, "total": 9.0}))
    record(_result(Outcome.CORRECT, {"gate_wait": 4.0, "timing": 3.0, "gate_held": 3.5, "total": 9.0}))
    record(_result(Outcome.COMPILE_ERROR, {"build": 0.5, "gate_wait": 1.0, "total": 1.0}))


def _summary(directory: Path):
    return summarise_evaluations(read_evaluations(directory / EVALUATIONS_FILE)[0])


def test_the_split_takes_each_batch_optimiser_steps_less_its_rollout(tmp_path):
    split = time_split(read_training_run(write_run(tmp_path))[0])
    assert split.seconds() == {"generation": 30.0, "evaluation": 70.0, "optimiser": 11.0}


def test_the_shares_add_up_to_one(tmp_path):
    split = time_split(read_training_run(write_run(tmp_path))[0])
    assert sum(split.shares().values()) == pytest.approx(1.0)


def test_turns_per_minute_count_the_whole_step_time(tmp_path):
    split = time_split(read_training_run(write_run(tmp_path))[0])
    assert split.turns_per_min() == pytest.approx(64 * 60 / 111.0)


def test_a_batch_missing_a_step_time_is_left_out_of_the_totals(tmp_path):
    split = time_split(read_training_run(write_run(tmp_path, drop_step_s=4))[0])
    assert (split.batches[1].optimiser_s, split.seconds()["evaluation"]) == (None, 40.0)


def test_correct_answers_stage_sums_leave_the_others_out(tmp_path):
    write_evaluations(tmp_path)
    stages = {t.stage: t for t in _summary(tmp_path).stages}
    assert (stages["gate_wait"].sum_s, stages["gate_wait"].correct_sum_s) == (7.0, 6.0)


def test_the_correct_median_and_the_largest_of_all(tmp_path):
    write_evaluations(tmp_path)
    stages = {t.stage: t for t in _summary(tmp_path).stages}
    assert (stages["timing"].correct_median_s, stages["build"].correct_median_s, stages["build"].max_s) == \
        (2.0, None, 0.5)


def test_the_total_is_not_a_stage(tmp_path):
    write_evaluations(tmp_path)
    summary = _summary(tmp_path)
    assert "total" not in {t.stage for t in summary.stages}


def test_a_shared_repeat_counts_as_an_answer_without_evaluator_time(tmp_path):
    from cudaperf.agent.shared_answers import SHARED_DURATIONS

    write_evaluations(tmp_path)
    record_evaluations(0.0, tmp_path)(_result(Outcome.CORRECT, dict(SHARED_DURATIONS)))
    summary = _summary(tmp_path)
    stages = {t.stage: t for t in summary.stages}
    assert summary.answers == 4 and (stages["shared"].answers, stages["shared"].sum_s) == (1, 0.0)
    assert stages["timing"].sum_s == 4.0  # the evaluated answers' time, counted once


def test_outcomes_are_counted_most_first(tmp_path):
    write_evaluations(tmp_path)
    summary = _summary(tmp_path)
    assert list(summary.outcomes.items()) == [("correct", 2), ("compile_error", 1)]


def test_a_torn_last_line_is_counted_not_read(tmp_path):
    write_evaluations(tmp_path)
    with open(tmp_path / EVALUATIONS_FILE, "a", encoding="utf-8") as f:
        f.write('{"outcome": "corr')
    records, bad = read_evaluations(tmp_path / EVALUATIONS_FILE)
    assert (len(records), bad) == (3, 1)


def test_a_kept_runs_gzipped_evaluations_are_found_beside_its_metrics(tmp_path):
    write_run(tmp_path / "run")
    write_evaluations(tmp_path / "run")
    kept = tmp_path / "kept"
    kept.mkdir()
    shutil.copy(tmp_path / "run" / "metrics.jsonl", kept / "rl_metrics.jsonl")
    with gzip.open(kept / "rl_evaluations.jsonl.gz", "wb") as kept_file:
        kept_file.write((tmp_path / "run" / EVALUATIONS_FILE).read_bytes())
    assert evaluations_file(kept / "rl_metrics.jsonl") == kept / "rl_evaluations.jsonl.gz"


def test_report_prints_a_runs_summary(tmp_path, capsys):
    write_run(tmp_path)
    write_evaluations(tmp_path)
    assert main(["report", "--markdown", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "evaluation 70.0 s (63%)" in out and "| gate_wait (waiting) | 3 | 7.0 | 6.0 | 3.00 | 4.0 |" in out
    assert "| gate_held (GPU alone) | 1 | 3.5 | 3.5 | 3.50 | 3.5 |" in out


def test_report_names_the_steps_the_gradient_guard_skipped(tmp_path, capsys):
    write_run(tmp_path)
    writer = MetricsWriter(tmp_path, tensorboard=False)
    writer.write("guard", 3, {"nonfinite_gradient_skipped": 1, "nonfinite_gradient_skips": 1})
    writer.close()
    assert main(["report", "--markdown", str(tmp_path)]) == 0
    assert "skipped for a non-finite gradient (weights kept): 3." in capsys.readouterr().out


def test_report_shows_what_the_gpu_gate_did_during_the_evaluations(tmp_path, capsys):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    for step, free_s in ((1, 2.0), (3, 4.0)):
        writer.write("rollout", step, {"generate_s": 1.0, "evaluate_s": 9.0, "turns": 4.0,
                                       "gate_free_s": free_s, "gate_shared_s": 1.0, "gate_draining_s": 0.0,
                                       "gate_exclusive_s": 3.0})
    writer.close()
    assert main(["report", "--markdown", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "the GPU gate was free 6.0 s (43%: no job on the GPU: builds, host work)" in out
    assert "exclusive 6.0 s (43%: a timed pass alone)" in out


def test_a_run_evaluated_without_a_gate_has_no_gate_line(tmp_path, capsys):
    write_run(tmp_path)
    assert main(["report", "--markdown", str(tmp_path)]) == 0
    assert "GPU gate was" not in capsys.readouterr().out


def test_a_run_without_rollouts_says_so(tmp_path, capsys):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    writer.write("train", 1, {"loss": 1.0})  # an SFT run's records
    writer.close()
    assert main(["report", "--markdown", str(tmp_path)]) == 0
    assert "No rollout batches" in capsys.readouterr().out


def test_a_folder_of_two_runs_is_refused_with_the_fix(tmp_path, capsys):
    write_run(tmp_path / "rl")
    kept = tmp_path / "kept"
    kept.mkdir()
    for name in ("sft_metrics.jsonl", "rl_metrics.jsonl"):
        shutil.copy(tmp_path / "rl" / "metrics.jsonl", kept / name)
    assert main(["report", str(kept)]) == 2
    assert "DIR/rl_metrics.jsonl" in capsys.readouterr().err
