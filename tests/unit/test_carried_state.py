"""An SFT checkpoint carried to another machine without its optimiser state (`train.carried_state`): a run
seeded with it continues the same data order and learning-rate schedule as the run that never stopped; a
run directory with its own checkpoint, or a state without its configuration, is refused. Real tiny LoRA SFT
runs with TRL and peft on the CPU (seconds)."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP pool

import shutil

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

import torch

from cudaperf.train.carried_state import OPTIMIZER_FILES, lacks_optimizer, seed_run_directory
from cudaperf.train.config import CONFIG_FILE, ConfigError, SftConfig
from cudaperf.train.monitor import read_batches, read_metrics
from cudaperf.train.sft import run_sft


def config(out) -> SftConfig:
    return SftConfig(model="tiny", output_dir=str(out), kinds=("c",), limit_tasks=3, val_limit_tasks=1,
                     strategies=("naive",), max_steps=8, batch_size=1, learning_rate=1e-2,
                     warmup_ratio=0.0, save_steps=4, eval_steps=0, logging_steps=1, device="cpu",
                     lora=True, lora_rank=4)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The run that never stopped, and one continued from its step-4 checkpoint carried without the
    optimiser state into a fresh directory."""
    torch.set_num_threads(1)
    whole = tmp_path_factory.mktemp("whole")
    run_sft(config(whole))
    state = tmp_path_factory.mktemp("carried") / "state"
    shutil.copytree(whole / "checkpoint-4", state, ignore=shutil.ignore_patterns(*OPTIMIZER_FILES))
    continued = tmp_path_factory.mktemp("continued")
    seed_run_directory(state, continued)
    report = run_sft(config(continued))
    return whole, state, continued, report


def rates(run_dir) -> dict[int, float]:
    return {r["step"]: r["learning_rate"] for r in read_metrics(run_dir)
            if r["kind"] == "train" and "learning_rate" in r}


def test_a_stripped_checkpoint_is_told_from_a_whole_one(runs):
    whole, state, _, _ = runs
    assert lacks_optimizer(state) and not lacks_optimizer(whole / "checkpoint-4")


def test_the_continued_run_starts_at_the_carried_step_and_ends_at_the_last(runs):
    _, _, continued, report = runs
    assert report.resumed_from == str(continued / "checkpoint-4") and report.steps == 8


def test_the_continued_run_takes_the_batches_the_whole_run_took(runs):
    whole, _, continued, _ = runs
    assert [b["hash"] for b in read_batches(continued)] == [b["hash"] for b in read_batches(whole)[4:]]


def test_the_continued_run_keeps_the_learning_rate_schedule(runs):
    whole, _, continued, _ = runs
    assert rates(continued) == {step: rate for step, rate in rates(whole).items() if step > 4}


def test_a_run_directory_with_its_own_checkpoint_is_not_seeded(runs):
    whole, state, _, _ = runs
    with pytest.raises(ConfigError, match="continues from its own"):
        seed_run_directory(state, whole)


def test_a_state_without_its_configuration_is_refused(runs, tmp_path):
    _, state, _, _ = runs
    shutil.copytree(state, tmp_path / "state")
    (tmp_path / "state" / CONFIG_FILE).unlink()
    with pytest.raises(ConfigError, match="configuration must travel"):
        seed_run_directory(tmp_path / "state", tmp_path / "run")
