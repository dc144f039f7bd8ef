"""RL continued across leases (`scripts/train_h200.py --rl-lora-rank`, `--rl-from-adapter`,
`--rl-final-from-adapter`): the RL steps behind an adapter add up over every lease (`rl_lineage.json`
beside it), for a finished run and for a checkpoint promoted after a kill; the model a continued run's
checkpoints merge into is its start; a carried adapter made the final RL model keeps its lineage. Files
only (the merge and the training: the model day's CPU smoke, `SMOKE=1`)."""

from __future__ import annotations

import argparse
import json

import pytest
from script_module import load_script

train_h200 = load_script("train_h200")


def adapter_dir(path, lineage=None):
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")
    if lineage is not None:
        (path / train_h200.LINEAGE).write_text(json.dumps({"steps_total": lineage}))
    return path


def args(tmp_path, carried=None, final_from=None, final_name="rl"):
    return argparse.Namespace(work=tmp_path / "work", rl_from_adapter=carried, seed=1,
                              rl_final_from_adapter=final_from, rl_final_name=final_name)


def fake_merge(merges):
    def merge(base, adapter, out):
        merges.append((base, adapter))
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        digest = train_h200._adapter_sha(adapter)
        (out / "from_adapter.json").write_text(json.dumps({"adapter": str(adapter), "sha256": digest}))
        return digest
    return merge


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


def test_a_carried_adapter_made_final_keeps_its_lineage(tmp_path, monkeypatch):
    monkeypatch.setattr(train_h200, "_merged_from_adapter", fake_merge([]))
    carried = adapter_dir(tmp_path / "carried", lineage=8)
    result = train_h200._rl_final_from_adapter(args(tmp_path, final_from=carried), tmp_path / "sft")
    final = tmp_path / "work" / "rl" / "final"
    assert result["steps_total"] == 8 and json.loads((final / train_h200.LINEAGE).read_text()) == \
        {"steps_total": 8}


def test_a_final_made_from_an_adapter_is_not_merged_again(tmp_path, monkeypatch):
    merges = []
    monkeypatch.setattr(train_h200, "_merged_from_adapter", fake_merge(merges))
    carried = adapter_dir(tmp_path / "carried", lineage=8)
    for _ in range(2):
        train_h200._rl_final_from_adapter(args(tmp_path, final_from=carried), tmp_path / "sft")
    assert merges == [(tmp_path / "sft", carried)]


def test_a_final_made_from_another_adapter_is_merged_again(tmp_path, monkeypatch):
    merges = []
    monkeypatch.setattr(train_h200, "_merged_from_adapter", fake_merge(merges))
    first, second = (adapter_dir(tmp_path / name, lineage=8) for name in ("first", "second"))
    (second / "adapter_model.safetensors").write_bytes(b"other weights")
    for carried in (first, second):
        train_h200._rl_final_from_adapter(args(tmp_path, final_from=carried), tmp_path / "sft")
    assert merges == [(tmp_path / "sft", first), (tmp_path / "sft", second)]


def test_a_carried_adapter_can_be_made_a_named_training_seed(tmp_path, monkeypatch):
    monkeypatch.setattr(train_h200, "_merged_from_adapter", fake_merge([]))
    carried = adapter_dir(tmp_path / "carried", lineage=8)
    named = args(tmp_path, final_from=carried, final_name="rl@seed1")
    train_h200._rl_final_from_adapter(named, tmp_path / "sft")
    assert (tmp_path / "work" / "rl@seed1" / "final" / "config.json").is_file()


@pytest.mark.parametrize("name", ["sft", "a/b", "..", ""])
def test_a_final_name_that_is_not_a_folder_of_its_own_is_refused(tmp_path, name):
    carried = adapter_dir(tmp_path / "carried", lineage=8)
    with pytest.raises(SystemExit, match="--rl-final-name"):
        train_h200._rl_final_from_adapter(args(tmp_path, final_from=carried, final_name=name),
                                          tmp_path / "sft")


def test_a_folder_without_an_adapter_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no adapter_config.json"):
        train_h200._rl_final_from_adapter(args(tmp_path, final_from=tmp_path / "empty"), tmp_path / "sft")


def test_the_runs_table_prints_a_final_made_from_an_adapter(capsys):
    train_h200._print_table({"sft": {"finished": True}, "rl": {"finished": True, "steps_total": 8}})
    assert '"steps_total": 8' in capsys.readouterr().out
