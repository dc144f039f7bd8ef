"""The attention kernels a local model's `generate` may use (`agent.backends.decoding_attention`) and the
settings that choose them (`RlConfig`, `CompareConfig`, `HFLocalOptions`, `ModelGenerator`). The CUDA
context's effect on a step's time is measured on the GPU (`scripts/decoding_conditions_gpu.py`)."""

from __future__ import annotations

import pytest

from cudaperf.agent.backends.base import BackendSpecError
from cudaperf.agent.backends.decoding_attention import attention_kernels, check_attention
from cudaperf.agent.backends.hf_local import HFLocalOptions
from cudaperf.train.compare import CompareConfig
from cudaperf.train.config import ConfigError, RlConfig


def test_both_choices_are_accepted():
    assert check_attention("no_cudnn") is None and check_attention("any") is None


def test_an_unknown_choice_says_which_are_known():
    assert check_attention("flash") == "attention='flash': use one of ('no_cudnn', 'any')"


def test_the_rl_config_refuses_an_unknown_choice():
    with pytest.raises(ConfigError, match="generation_attention='cudnn'"):
        RlConfig(generation_attention="cudnn")


def test_the_compare_config_refuses_an_unknown_choice():
    with pytest.raises(ConfigError, match="generation_attention='cudnn'"):
        CompareConfig(models=("smollm2",), generation_attention="cudnn")


def test_the_local_backend_options_refuse_an_unknown_choice():
    with pytest.raises(BackendSpecError, match="attention='cudnn'"):
        HFLocalOptions(attention="cudnn")


def test_every_generator_leaves_cudnn_out_by_default():
    assert RlConfig().generation_attention == "no_cudnn"
    assert CompareConfig(models=("smollm2",)).generation_attention == "no_cudnn"
    assert HFLocalOptions().attention == "no_cudnn"


def test_the_choice_may_change_when_a_run_resumes():
    from cudaperf.train.config import RESUMABLE

    assert "generation_attention" in RESUMABLE


def test_the_context_refuses_an_unknown_choice():
    with pytest.raises(ValueError, match="use one of"):
        with attention_kernels("cudnn", "cuda"):
            pass


def test_on_the_cpu_the_context_leaves_attention_as_it_is():
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 2, 3, 8)
    plain = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    with attention_kernels("no_cudnn", "cpu"):
        inside = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert torch.equal(plain, inside)


def test_without_cudnn_the_allowed_kernels_leave_cudnn_out(monkeypatch):
    pytest.importorskip("torch")
    import torch.nn.attention as attention

    seen = []
    monkeypatch.setattr(attention, "sdpa_kernel", lambda backends: seen.append(backends) or _Nothing())
    with attention_kernels("no_cudnn", "cuda"):
        pass
    (backends,) = seen
    assert attention.SDPBackend.CUDNN_ATTENTION not in backends
    assert attention.SDPBackend.EFFICIENT_ATTENTION in backends


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
