"""A LoRA SFT run's adapter, kept beside its merged model, merged again into the same base elsewhere gives the
same model (`train.models.save_model`, `merge_adapter`): what lets a trained SFT model leave a machine as
megabytes and come back in a later lease. A real tiny SFT run with TRL and peft on the CPU (a few seconds).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP pool

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

import torch

from cudaperf.train.config import SftConfig
from cudaperf.train.models import ADAPTER_DIR, TINY_DIR, merge_adapter
from cudaperf.train.sft import run_sft


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sft-lora")
    config = SftConfig(model="tiny", output_dir=str(out), kinds=("c",), limit_tasks=2, val_limit_tasks=1,
                       strategies=("naive",), max_steps=2, batch_size=2, learning_rate=5e-2,
                       warmup_ratio=0.0, save_steps=2, eval_steps=2, logging_steps=1, device="cpu",
                       lora=True, lora_rank=4)
    torch.set_num_threads(1)
    return config, run_sft(config)


def _weights(directory) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).state_dict()


def test_a_lora_run_keeps_its_adapter_beside_the_merged_model(lora_run):
    _, report = lora_run
    assert report.finished
    adapter = os.path.join(report.final_dir, ADAPTER_DIR)
    assert os.path.isfile(os.path.join(adapter, "adapter_config.json"))
    assert os.path.isfile(os.path.join(report.final_dir, "config.json"))


def test_the_adapter_merged_into_its_base_again_is_the_same_model(lora_run, tmp_path):
    config, report = lora_run
    base = os.path.join(config.output_dir, TINY_DIR)
    merge_adapter(base, os.path.join(report.final_dir, ADAPTER_DIR), tmp_path / "merged")
    final, merged, untouched = _weights(report.final_dir), _weights(tmp_path / "merged"), _weights(base)
    assert final.keys() == merged.keys()
    assert all(torch.equal(final[k], merged[k]) for k in final)  # both merged on the CPU
    assert any(not torch.equal(final[k], untouched[k]) for k in final)  # the adapter changed something
    assert (tmp_path / "merged" / ADAPTER_DIR / "adapter_config.json").is_file()
    assert not (tmp_path / "merged.tmp").exists()


def test_a_folder_without_an_adapter_is_refused(lora_run, tmp_path):
    config, _ = lora_run
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        merge_adapter(os.path.join(config.output_dir, TINY_DIR), tmp_path, tmp_path / "merged")


def test_a_lora_checkpoint_is_promoted_by_merging_it_into_the_base(lora_run, tmp_path):
    """A stage stopped by its budget (`train_h200.py --final-on-limit`) leaves its last checkpoint as final/:
    a LoRA run's checkpoint holds the adapter alone, so it is merged into the stage's starting model."""
    import shutil

    from script_module import load_script

    config, _ = lora_run
    run = tmp_path / "sft"
    shutil.copytree(config.output_dir, run, ignore=shutil.ignore_patterns("final"))
    train_h200 = load_script("train_h200")
    assert not train_h200._promote(run, 2, None)  # no base: an adapter cannot be promoted alone
    assert train_h200._promote(run, 2, None, lambda: run / TINY_DIR)
    assert (run / "final" / "config.json").is_file()
    assert (run / "final" / "stopped_early.json").is_file()
    assert (run / "final" / ADAPTER_DIR / "adapter_config.json").is_file()



def test_a_promoted_final_is_promoted_again_once_a_later_checkpoint_exists(lora_run, tmp_path):
    """A stage resumed in a later call and killed there has a newer checkpoint than the final/ an earlier
    call promoted: `--promote-only` promotes it (`_final_is_current`), a final of the last one stays."""
    import shutil

    from script_module import load_script

    config, _ = lora_run
    run = tmp_path / "sft"
    shutil.copytree(config.output_dir, run, ignore=shutil.ignore_patterns("final"))
    train_h200 = load_script("train_h200")
    assert not train_h200._final_is_current(run)  # none yet
    assert train_h200._promote(run, 2, None, lambda: run / TINY_DIR)
    assert train_h200._final_is_current(run)
    shutil.copytree(run / "checkpoint-2", run / "checkpoint-3")  # a later call's checkpoint
    assert not train_h200._final_is_current(run)
