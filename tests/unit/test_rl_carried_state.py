"""An RL checkpoint carried to another machine without its optimiser state (`train.carried_state` through
`train.rl.run_rl`): a run seeded with it continues at the carried step, on the carried adapter, with the
batches the run that never stopped took. Real tiny LoRA GRPO runs with TRL and peft on the CPU, the real
agent environment and the sandboxed CPU evaluation worker (the tiny policy writes noise: the plumbing, not
learning)."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP pool

import shutil

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

import torch
from safetensors.torch import load_file, save_file

from cudaperf.train.carried_state import OPTIMIZER_FILES, lacks_optimizer, seed_run_directory
from cudaperf.train.config import RlConfig
from cudaperf.train.monitor import read_batches, read_metrics
from cudaperf.train.rl import run_rl

ADAPTER_FILE = "adapter_model.safetensors"
MARK = 0.5


def config(out) -> RlConfig:
    return RlConfig(model="tiny", output_dir=str(out), tasks=("examples",), limit_tasks=3, trajectories=2,
                    max_turns=1, tasks_per_step=1, max_new_tokens=8, max_steps=4, save_steps=2,
                    eval_device="cpu", allow_torch_ops=True, device="cpu", learning_rate=1e-2, lora=True,
                    lora_rank=4)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cpu_evaluator):
    """The run that never stopped, and one continued from its step-2 checkpoint carried without the
    optimiser state into a fresh directory, with every adapter weight of the carried state moved by
    `MARK` (so that what the continued run trains on shows whether it loaded the carried adapter: the
    tiny policy's flat reward may leave the weights where they start)."""
    torch.set_num_threads(1)
    whole = tmp_path_factory.mktemp("whole")
    run_rl(config(whole), evaluator=cpu_evaluator)
    state = tmp_path_factory.mktemp("carried") / "state"
    shutil.copytree(whole / "checkpoint-2", state, ignore=shutil.ignore_patterns(*OPTIMIZER_FILES))
    save_file({k: v + MARK for k, v in load_file(state / ADAPTER_FILE).items()}, state / ADAPTER_FILE)
    continued = tmp_path_factory.mktemp("continued")
    seed_run_directory(state, continued)
    report = run_rl(config(continued), evaluator=cpu_evaluator)
    return whole, state, continued, report


def test_the_carried_rl_checkpoint_lacks_only_the_optimiser(runs):
    whole, state, _, _ = runs
    assert lacks_optimizer(state) and not lacks_optimizer(whole / "checkpoint-2")


def test_the_continued_rl_run_trains_from_the_carried_step_to_the_last(runs):
    _, _, continued, report = runs
    assert report.resumed_from == str(continued / "checkpoint-2") and report.steps == 4 and report.finished
    assert [r["step"] for r in read_metrics(continued, "train") if "loss" in r] == [3, 4]


def test_the_continued_rl_run_takes_the_batches_the_whole_run_took(runs):
    whole, _, continued, _ = runs
    after = {b["step"]: b["hash"] for b in read_batches(whole) if b["step"] > 2}
    assert {b["step"]: b["hash"] for b in read_batches(continued)} == after


def test_the_continued_rl_run_trains_on_the_carried_adapter(runs):
    whole, state, continued, _ = runs
    carried, trained = load_file(state / ADAPTER_FILE), load_file(continued / "checkpoint-4" / ADAPTER_FILE)
    uncarried = load_file(whole / "checkpoint-4" / ADAPTER_FILE)
    assert carried.keys() == trained.keys() == uncarried.keys()
    for k in carried:
        assert (trained[k] - carried[k]).abs().max() < (trained[k] - uncarried[k]).abs().max(), k
