"""A second stage of LoRA SFT continues an earlier run's adapter (`SftConfig.init_adapter`,
`train.models.start_adapter`): its weights, trained on the new run's examples, saved as one adapter over
the same base. Real tiny SFT runs with TRL and peft on the CPU (a few seconds each)."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP pool

import dataclasses

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

import torch

from cudaperf.train.config import ConfigError, SftConfig
from cudaperf.train.models import ADAPTER_DIR, TINY_DIR, load_policy, start_adapter
from cudaperf.train.sft import run_sft


def _config(out, **changes) -> SftConfig:
    values = dict(model="tiny", output_dir=str(out), kinds=("c",), limit_tasks=2, val_limit_tasks=1,
                  strategies=("naive",), max_steps=4, batch_size=2, learning_rate=5e-2, warmup_ratio=0.0,
                  save_steps=4, eval_steps=0, logging_steps=1, device="cpu", lora=True, lora_rank=4)
    return SftConfig(**{**values, **changes})


@pytest.fixture(scope="module")
def first_stage(tmp_path_factory):
    torch.set_num_threads(1)
    config = _config(tmp_path_factory.mktemp("stage1"))
    report = run_sft(config)
    return config, os.path.join(report.final_dir, ADAPTER_DIR)


def _second(first_stage, out, **changes) -> SftConfig:
    config, adapter = first_stage
    base = os.path.join(config.output_dir, TINY_DIR)  # the first stage's base model, so the adapter fits
    return _config(out, model=base, max_steps=1, **{"init_adapter": adapter, **changes})


def _lora_weights(model) -> dict[str, torch.Tensor]:
    return {k.replace(".default", ""): v.detach().clone() for k, v in model.state_dict().items()
            if "lora_" in k}


def test_the_starting_adapter_holds_the_earlier_runs_weights_and_trains(first_stage, tmp_path):
    from safetensors.torch import load_file

    config = _second(first_stage, tmp_path)
    model, _ = load_policy(config)
    started = start_adapter(model, config, config.init_adapter)
    saved = load_file(os.path.join(config.init_adapter, "adapter_model.safetensors"))
    loaded = _lora_weights(started)
    assert saved and {k.removeprefix("base_model.model.") for k in saved} <= {
        k.removeprefix("base_model.model.") for k in loaded}
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
    assert all(p.requires_grad for n, p in started.named_parameters() if "lora_" in n)


def test_a_second_stage_starts_where_the_first_ended(first_stage, tmp_path):
    """Its first loss on the first stage's (memorised) examples is below a new adapter's on the same."""
    second = run_sft(_second(first_stage, tmp_path / "second"))
    fresh = run_sft(dataclasses.replace(_second(first_stage, tmp_path / "fresh"), init_adapter=""))
    assert second.finished and fresh.finished
    assert second.train_loss < fresh.train_loss
    assert os.path.isfile(os.path.join(second.final_dir, ADAPTER_DIR, "adapter_config.json"))


def test_an_adapter_of_another_rank_is_refused(first_stage, tmp_path):
    config = _second(first_stage, tmp_path, lora_rank=8)
    model, _ = load_policy(config)
    with pytest.raises(ConfigError, match="lora_rank"):
        start_adapter(model, config, config.init_adapter)


def test_a_folder_without_an_adapter_is_refused(first_stage, tmp_path):
    config = _second(first_stage, tmp_path)
    model, _ = load_policy(config)
    with pytest.raises(ConfigError, match="adapter_config.json"):
        start_adapter(model, config, str(tmp_path))


def test_a_starting_adapter_without_lora_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="lora=True"):
        SftConfig(model="tiny", output_dir=str(tmp_path), init_adapter=str(tmp_path))
