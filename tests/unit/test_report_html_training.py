"""Training curves in the HTML page (`cudaperf report --html RUN_DIR`): the numbers drawn are the run's
metrics.jsonl as `cudaperf.train`'s own writer writes it, and the page renders in Debian's headless
Chromium without script errors.

To refresh the committed screenshot:
`REPORT_HTML_SAVE_DIR=benchmarks/results/2026-12-04-s14/report-html-training python3 -m pytest -q
tests/unit/test_report_html_training.py -k chromium -p no:cacheprovider`.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import pytest
from test_report_html import _chromium, _parse, _run_chromium, png_size_and_distinct_bytes

from cudaperf.report_html import (
    ROLLOUT_KEYS,
    flag_kinds,
    optimizer_seconds,
    read_inputs,
    read_training_run,
    render_html,
    write_html,
)
from cudaperf.train.monitor import MetricsWriter

STEPS = 8


def rollout(step: int) -> dict:
    """Numbers shaped like `train.rollout.rollout_stats` of one step: learning slowly, some flags."""
    flags = {"hack_torch_compute_op": 2 if step % 2 else 0, "hack_timing_tamper": 1 if step == 5 else 0}
    return {"trajectories": 8.0, "turns": 16.0, "samples": 16.0, "score_mean": 0.05 * step,
            "sample_reward_mean": 0.07 * step, "gate_mean": 0.04 * step, "speedup_term_mean": 0.01 * step,
            "structural_term_mean": 0.005 * step, "ranker_term_mean": 0.0, "correct_rate": 0.04 * step,
            "first_turn_correct_rate": 0.03 * step, "best_of_turns_correct_rate": 0.06 * step,
            "speedup_geomean": 0.8 + 0.05 * step, "hack_rate": sum(flags.values()) / 16.0,
            "not_applicable_rate": 0.0, "no_code_rate": 0.5 - 0.04 * step, "truncated_rate": 0.1,
            "prompt_tokens_per_turn": 1900.0 + 10 * step, "completion_tokens_per_turn": 700.0 - 20 * step,
            "generate_s": 30.0 + step, "evaluate_s": 8.0, "rollout_s": 40.0 + step, "turns_per_min": 24.0,
            **{k: float(v) for k, v in flags.items() if v},
            "hack_kinds": sorted(k[5:] for k, v in flags.items() if v)}


def write_run(directory: Path) -> Path:
    """A run directory as `cudaperf train rl` leaves it, step 3 written twice (a resumed run)."""
    writer = MetricsWriter(directory, tensorboard=False)
    for step in range(1, STEPS + 1):
        writer.write("rollout", step, rollout(step))
        writer.write("train", step, {"loss": 0.5 / step, "step_s": 50.0 + step, "learning_rate": 2e-6})
        if step == 3:
            writer.write("rollout", 3, {**rollout(3), "score_mean": 0.99})  # the resumed run's step 3
    writer.close()
    return directory


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return write_run(tmp_path / "rl")


def _dots(page: str, series: str) -> dict[str, float]:
    return {a["data-x"]: float(a["data-value"]) for tag, a in _parse(page).tags
            if tag == "circle" and a.get("data-series") == series}


def test_rollout_keys_drawn_are_keys_the_trainer_writes():
    from cudaperf.train.rollout import SAMPLE_COLUMNS, RolloutBatch, rollout_stats

    empty = RolloutBatch([], [], [], [], {k: [] for k in SAMPLE_COLUMNS}, [], {"total": 1.0})
    assert set(ROLLOUT_KEYS) <= set(rollout_stats(empty).values)


def test_each_step_is_drawn_with_its_metric(run_dir):
    page = render_html(read_inputs([run_dir]))
    best = _dots(page, "best of turns")
    assert list(best) == [str(s) for s in range(1, STEPS + 1)]
    assert best["4"] == pytest.approx(0.24)
    assert _dots(page, "reply")["2"] == pytest.approx(660.0)


def test_a_rewritten_step_of_a_resumed_run_wins(run_dir):
    run, bad = read_training_run(run_dir)
    assert not bad and run.of_kind("rollout")[3]["score_mean"] == 0.99
    assert _dots(render_html(read_inputs([run_dir])), "turn score")["3"] == pytest.approx(0.99)


def test_every_flagged_kind_is_named_with_its_total(run_dir):
    run, _ = read_training_run(run_dir)
    assert flag_kinds(run.of_kind("rollout")) == {"torch_compute_op": 8, "timing_tamper": 1}
    page = render_html(read_inputs([run_dir]))
    assert "torch_compute_op" in page and "timing_tamper" in page
    assert _dots(page, "timing_tamper")["5"] == pytest.approx(1 / 16)


def test_optimiser_time_is_the_step_less_its_rollout(run_dir):
    run, _ = read_training_run(run_dir)
    assert optimizer_seconds(run.of_kind("rollout"), run.of_kind("train")) == pytest.approx([10.0] * STEPS)


def test_sft_run_draws_its_losses(tmp_path):
    writer = MetricsWriter(tmp_path / "sft", tensorboard=False)
    writer.write("data", 0, {"train_examples": 10})
    for step in (10, 20, 30):
        writer.write("train", step, {"loss": 3.0 / step * 10, "step_s": 0.2})
    writer.write("train", 30, {"eval_loss": 1.5})
    writer.close()
    page = render_html(read_inputs([tmp_path / "sft" / "metrics.jsonl"]))
    assert _dots(page, "loss") == {"10": 3.0, "20": 1.5, "30": 1.0}
    assert _dots(page, "eval_loss") == {"30": 1.5}


def test_command_draws_a_run_directory_with_html(run_dir, tmp_path, capsys):
    from cudaperf.commands import report_cmd

    parser = argparse.ArgumentParser()
    report_cmd.add_arguments(parser)
    out = tmp_path / "page.html"
    assert report_cmd.run(parser.parse_args([str(run_dir), "--html", str(out)])) == 0
    assert "1 training runs" in capsys.readouterr().out and 'data-run="rl"' in out.read_text()


def test_long_runs_keep_the_axis_legible(tmp_path):
    writer = MetricsWriter(tmp_path / "long", tensorboard=False)
    for step in range(1, 101):
        writer.write("rollout", step, rollout(step % 8))
    writer.close()
    page = render_html(read_inputs([tmp_path / "long"]))
    chart = page.split('aria-label="correct rate per step"')[1].split("</svg>")[0]
    labels = [t for t in _parse(chart).text if t.strip().isdigit()]
    assert len(_dots(chart, "all turns")) == 100 and len(labels) <= 14


@pytest.mark.skipif(_chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_training_page_renders_in_headless_chromium_without_script_errors(run_dir, tmp_path):
    out = write_html(tmp_path / "training.html", read_inputs([run_dir]), title="cudaperf training run")
    url = out.resolve().as_uri()
    dom = _run_chromium(_chromium(), tmp_path / "profile-dom", "--dump-dom", url)
    shot = tmp_path / "training.png"
    _run_chromium(_chromium(), tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1400,1500",
                  "--hide-scrollbars", url)
    root = next(a for tag, a in _parse(dom.stdout).tags if tag == "html")
    save = os.environ.get("REPORT_HTML_SAVE_DIR")
    if save:
        Path(save).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(save) / "training.html")
        shutil.copy(shot, Path(save) / "training.png")
    assert (root.get("data-report-ready"), root.get("data-js-error"), root.get("data-training-runs")) == (
        "1", None, "1")
    assert "Uncaught" not in dom.stderr
    width, height, distinct = png_size_and_distinct_bytes(shot)
    assert (width, height, distinct > 40) == (1400, 1500, True)


def test_a_batch_serving_two_optimiser_steps_counts_both_in_its_optimiser_time():
    rollouts = {1: {"rollout_s": 40.0}, 3: {"rollout_s": 30.0}}
    train = {1: {"step_s": 50.0}, 2: {"step_s": 2.0}, 3: {"step_s": 35.0}, 4: {"step_s": 1.5}}
    assert optimizer_seconds(rollouts, train) == pytest.approx([12.0, 6.5])


def test_a_copied_rl_metrics_file_is_a_training_run(run_dir, tmp_path):
    copied = tmp_path / "rl_metrics.jsonl"
    shutil.copy(run_dir / "metrics.jsonl", copied)
    inputs = read_inputs([copied])
    assert not inputs.bad_lines and [len(r.of_kind("rollout")) for r in inputs.training] == [STEPS]


def test_a_folder_holding_one_copied_metrics_file_is_read(run_dir, tmp_path):
    folder = tmp_path / "train"
    folder.mkdir()
    shutil.copy(run_dir / "metrics.jsonl", folder / "rl_metrics.jsonl")
    inputs = read_inputs([folder])
    assert [(r.name, len(r.of_kind("rollout"))) for r in inputs.training] == [("train", STEPS)]


def test_a_folder_without_metrics_is_named_unreadable_and_not_drawn(tmp_path):
    inputs = read_inputs([tmp_path])
    assert inputs.training == () and inputs.bad_lines == (f"{tmp_path.name}: no metrics.jsonl",)


def test_a_step_without_a_correct_turn_has_no_speedup_and_draws_none(run_dir, tmp_path):
    from cudaperf.train.rollout import SAMPLE_COLUMNS, RolloutBatch, rollout_stats

    empty = RolloutBatch([], [], [], [], {k: [] for k in SAMPLE_COLUMNS}, [], {"total": 1.0})
    assert rollout_stats(empty).values["speedup_geomean"] is None
    writer = MetricsWriter(tmp_path / "run", tensorboard=False)
    writer.write("rollout", 1, {**rollout(1), "speedup_geomean": None})
    writer.write("rollout", 2, rollout(2))
    writer.close()
    assert set(_dots(render_html(read_inputs([tmp_path / "run"])), "speedup")) == {"2"}


def test_a_run_whose_rollouts_serve_two_steps_says_both_counts(tmp_path):
    writer = MetricsWriter(tmp_path / "run", tensorboard=False)
    for step in (1, 2, 3, 4):
        if step % 2:
            writer.write("rollout", step, rollout(step))
        writer.write("train", step, {"loss": 0.1, "step_s": 2.0})
    writer.close()
    assert "(4 optimiser steps, 2 rollouts)" in render_html(read_inputs([tmp_path / "run"]))


def test_a_zero_speedup_logged_for_a_step_without_a_correct_turn_is_read_as_none(tmp_path):
    writer = MetricsWriter(tmp_path / "run", tensorboard=False)
    writer.write("rollout", 1, {**rollout(1), "correct_rate": 0.0, "speedup_geomean": 0.0})
    writer.close()
    run, _ = read_training_run(tmp_path / "run")
    assert run.of_kind("rollout")[1]["speedup_geomean"] is None


def test_a_run_with_no_step_yet_is_drawn_with_a_note(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("")
    inputs = read_inputs([tmp_path / "run"])
    assert [r.name for r in inputs.training] == ["run"] and not inputs.bad_lines
    assert "No step was logged yet." in render_html(inputs)
