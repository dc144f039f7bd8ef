"""RL continued across leases from its own carried checkpoint (`scripts/train_h200.py --rl-from-state`): the
checkpoint is placed in rl/ only when it was trained on the SFT model RL starts from now and is below
--rl-steps, and rl/ notes its base for the next lease. Files only (the continued training itself:
`test_rl_carried_state.py`)."""

from __future__ import annotations

import argparse
import json

import pytest
from script_module import load_script

from cudaperf.train.config import RlConfig, load_config, save_config

train_h200 = load_script("train_h200")


def start_model(path, sha):
    path.mkdir(parents=True)
    if sha is not None:
        (path / "from_adapter.json").write_text(json.dumps({"adapter": "a", "sha256": sha}))
    return path


def carried_state(path, step=2, sha="abc"):
    path.mkdir(parents=True)
    save_config(RlConfig(model="/elsewhere/sft/final", output_dir="/elsewhere/rl"), path)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if sha is not False:
        (path / train_h200.RL_BASE).write_text(json.dumps({"sft_adapter_sha256": sha}))
    return path


def args(tmp_path, state=None, steps=16):
    return argparse.Namespace(work=tmp_path / "work", rl_from_state=state, rl_steps=steps)


def test_a_state_from_the_same_sft_model_is_placed_as_rls_checkpoint(tmp_path):
    state = carried_state(tmp_path / "state", step=4)
    train_h200._seed_rl_state(args(tmp_path, state), start_model(tmp_path / "sft", "abc"))
    assert (tmp_path / "work" / "rl" / "checkpoint-4" / "trainer_state.json").is_file()


def test_the_placed_configuration_names_the_model_where_it_lies_here(tmp_path):
    state = carried_state(tmp_path / "state", step=4)
    train_h200._seed_rl_state(args(tmp_path, state), start_model(tmp_path / "sft", "abc"))
    rl = tmp_path / "work" / "rl"
    assert load_config(rl).model == load_config(rl / "checkpoint-4").model == str(tmp_path / "sft")


def test_a_state_from_another_sft_model_is_refused(tmp_path):
    state = carried_state(tmp_path / "state", sha="abc")
    with pytest.raises(SystemExit, match="carry the SFT adapter"):
        train_h200._seed_rl_state(args(tmp_path, state), start_model(tmp_path / "sft", "def"))


def test_a_state_trained_on_an_sft_model_without_an_adapter_is_refused(tmp_path):
    state = carried_state(tmp_path / "state", sha=None)
    with pytest.raises(SystemExit, match="no other machine can match"):
        train_h200._seed_rl_state(args(tmp_path, state), start_model(tmp_path / "sft", None))


def test_a_state_without_its_base_is_refused(tmp_path):
    state = carried_state(tmp_path / "state", sha=False)
    with pytest.raises(SystemExit, match="no rl_base.json"):
        train_h200._seed_rl_state(args(tmp_path, state), start_model(tmp_path / "sft", "abc"))


def test_a_state_at_or_past_the_last_step_is_refused(tmp_path):
    state = carried_state(tmp_path / "state", step=16)
    with pytest.raises(SystemExit, match="--rl-steps above it"):
        train_h200._seed_rl_state(args(tmp_path, state, steps=16), start_model(tmp_path / "sft", "abc"))


def test_rl_with_its_own_checkpoint_continues_from_it_not_the_carried_one(tmp_path):
    (tmp_path / "work" / "rl" / "checkpoint-6").mkdir(parents=True)
    state = carried_state(tmp_path / "state", sha="other")
    train_h200._seed_rl_state(args(tmp_path, state), start_model(tmp_path / "sft", "abc"))
    assert not (tmp_path / "work" / "rl" / "checkpoint-2").exists()


def test_every_rl_run_notes_the_sft_model_it_trains_on(tmp_path):
    train_h200._seed_rl_state(args(tmp_path), start_model(tmp_path / "sft", None))
    noted = json.loads((tmp_path / "work" / "rl" / train_h200.RL_BASE).read_text())
    assert noted == {"sft_adapter_sha256": None}


def test_continuing_one_rl_run_and_starting_another_are_refused_together(tmp_path, capsys):
    argv = ["--work", str(tmp_path), "--rl-from-state", str(tmp_path / "s"), "--rl-from-adapter",
            str(tmp_path / "a")]
    assert train_h200.main(argv) == 2 and "pass one of them" in capsys.readouterr().err


def lora_model_trained_here(path):
    model = start_model(path, None)
    (model / "adapter").mkdir()
    (model / "adapter" / "adapter_model.safetensors").write_bytes(b"weights")
    return model


def test_a_lora_sft_model_trained_here_is_known_by_its_own_adapter(tmp_path):
    model = lora_model_trained_here(tmp_path / "sft")
    train_h200._seed_rl_state(args(tmp_path), model)
    noted = json.loads((tmp_path / "work" / "rl" / train_h200.RL_BASE).read_text())
    assert noted == {"sft_adapter_sha256": train_h200._adapter_sha(model / "adapter")}


def test_its_state_continues_where_that_adapter_is_carried_and_merged(tmp_path):
    sha = train_h200._adapter_sha(lora_model_trained_here(tmp_path / "lease1") / "adapter")
    state = carried_state(tmp_path / "state", step=4, sha=sha)
    train_h200._seed_rl_state(args(tmp_path, state), start_model(tmp_path / "lease2", sha))
    assert (tmp_path / "work" / "rl" / "checkpoint-4" / "trainer_state.json").is_file()
