"""RL continued across leases (`scripts/train_h200.py --rl-lora-rank`, `--rl-from-adapter`): the RL steps
behind an adapter add up over every lease (`rl_lineage.json` beside it), for a finished run and for a
checkpoint promoted after a kill; the model a continued run's checkpoints merge into is its start. Files
only (the training itself: the model day's CPU smoke, `SMOKE=1`)."""

from __future__ import annotations

import argparse
import json

from script_module import load_script

train_h200 = load_script("train_h200")


def adapter_dir(path, lineage=None):
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")
    if lineage is not None:
        (path / train_h200.LINEAGE).write_text(json.dumps({"steps_total": lineage}))
    return path


def args(tmp_path, carried=None):
    return argparse.Namespace(work=tmp_path / "work", rl_from_adapter=carried, seed=1)


def test_a_finished_runs_steps_add_to_the_carried_adapters(tmp_path):
    carried = adapter_dir(tmp_path / "carried", lineage=3)
    final = tmp_path / "final"
    adapter_dir(final / "adapter")
    train_h200._write_lineage(args(tmp_path, carried), final, 2)
    lineage = json.loads((final / "adapter" / train_h200.LINEAGE).read_text())
    assert lineage == {"steps_before": 3, "steps": 2, "steps_total": 5, "seed": 1}


def test_a_promoted_checkpoint_counts_its_own_steps(tmp_path):
    final = tmp_path / "final"
    adapter_dir(final / "adapter")
    (final / "stopped_early.json").write_text(json.dumps({"checkpoint": "checkpoint-4", "steps": 4}))
    train_h200._write_lineage(args(tmp_path), final, None)
    assert json.loads((final / "adapter" / train_h200.LINEAGE).read_text())["steps_total"] == 4


def test_a_full_weights_run_gets_no_lineage(tmp_path):
    final = tmp_path / "final"
    final.mkdir()
    train_h200._write_lineage(args(tmp_path), final, 2)
    assert not (final / "adapter").exists()


def test_a_continued_runs_checkpoints_merge_into_its_start(tmp_path):
    a = args(tmp_path)
    assert train_h200._rl_base(a) == a.work / "sft" / "final"
    (a.work / "rl_start").mkdir(parents=True)
    (a.work / "rl_start" / "config.json").write_text("{}")
    assert train_h200._rl_base(a) == a.work / "rl_start"
