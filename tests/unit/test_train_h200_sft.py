"""The SFT stage of `scripts/train_h200.py` across calls: a run stopped early by its limit is final unless
`--sft-continue` says to train on from its checkpoint, and a refused examples file (`--sft-examples` built
for other options or another tokenizer) costs the call the examples' build, not its training."""

from __future__ import annotations

import json

import pytest
from script_module import load_script

from cudaperf.train.config import ConfigError, SftConfig
from cudaperf.train.sft_examples_file import ExamplesMismatch


@pytest.fixture
def train_h200():
    return load_script("train_h200")


def stopped_early(work):
    final = work / "sft" / "final"
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    (final / "stopped_early.json").write_text(json.dumps({"checkpoint": "checkpoint-178", "steps": 178}))
    return final


def args_for(train_h200, work, *more):
    return train_h200.parse_args(["--work", str(work), "--model", "tiny", *more])


def test_a_run_stopped_early_is_final_without_sft_continue(train_h200, tmp_path, monkeypatch):
    final = stopped_early(tmp_path)
    monkeypatch.setattr(train_h200, "_run_sft_with_examples", lambda c: pytest.fail("trained again"))
    result = train_h200._sft(args_for(train_h200, tmp_path), 5.0)
    assert result["note"] == "already trained (stopped early)" and final.is_dir()


def test_sft_continue_trains_a_run_stopped_early_on(train_h200, tmp_path, monkeypatch):
    final = stopped_early(tmp_path)
    seen = []

    def trained(config):
        seen.append(final.exists())
        raise RuntimeError("stop here")

    monkeypatch.setattr(train_h200, "_run_sft_with_examples", trained)
    with pytest.raises(RuntimeError, match="stop here"):
        train_h200._sft(args_for(train_h200, tmp_path, "--sft-continue"), 5.0)
    assert seen == [False]  # the promoted copy is gone before the run resumes from its checkpoint


def test_a_finished_run_is_not_trained_again_by_sft_continue(train_h200, tmp_path, monkeypatch):
    final = stopped_early(tmp_path)
    (final / "stopped_early.json").unlink()
    monkeypatch.setattr(train_h200, "_run_sft_with_examples", lambda c: pytest.fail("trained again"))
    assert train_h200._sft(args_for(train_h200, tmp_path, "--sft-continue"), 5.0)["finished"]


def test_a_refused_examples_file_is_replaced_by_building_them(train_h200, tmp_path, monkeypatch):
    import cudaperf.train.sft as sft

    files = []

    def run_sft(config):
        files.append(config.examples_file)
        if config.examples_file:
            raise ExamplesMismatch(f"examples_file={config.examples_file}: built for other data")
        return "report"

    monkeypatch.setattr(sft, "run_sft", run_sft)
    config = SftConfig(model="tiny", output_dir=str(tmp_path), examples_file="x.json.gz")
    assert train_h200._run_sft_with_examples(config) == "report"
    assert files == ["x.json.gz", ""]


def test_other_configuration_errors_are_not_swallowed(train_h200, tmp_path, monkeypatch):
    import cudaperf.train.sft as sft

    def run_sft(config):
        raise ConfigError("batch_size and grad_accum must be >= 1")

    monkeypatch.setattr(sft, "run_sft", run_sft)
    with pytest.raises(ConfigError, match="batch_size"):
        train_h200._run_sft_with_examples(SftConfig(model="tiny", output_dir=str(tmp_path),
                                                    examples_file="x.json.gz"))


def test_the_refinement_order_and_the_starting_adapter_reach_sfts_configuration(train_h200, tmp_path):
    args = args_for(train_h200, tmp_path, "--sft-lora-rank", "4", "--sft-refine-per-task", "1",
                    "--sft-refine-from", "naive", "grid_stride", "--sft-refine-min-speedup", "1.1",
                    "--sft-init-adapter", str(tmp_path / "a"))
    config = train_h200._sft_config(args, 0.0)
    assert config.refine_from == ("naive", "grid_stride")
    assert config.refine_min_speedup == 1.1
    assert config.init_adapter == str(tmp_path / "a")


def test_without_them_sft_starts_a_new_adapter_with_the_slowest_first(train_h200, tmp_path):
    config = train_h200._sft_config(args_for(train_h200, tmp_path, "--sft-lora-rank", "4"), 0.0)
    assert (config.refine_from, config.refine_min_speedup, config.init_adapter) == ((), 1.2, "")
