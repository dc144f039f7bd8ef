"""scripts/generation_profile.py: a step's time is the long run less the short one, per extra token."""

from __future__ import annotations

import pytest
from script_module import load_script

gp = load_script("generation_profile")


def test_prefill_cancels_out_of_the_time_a_step():
    assert gp.per_step_ms(lambda n: 2.0 + 0.01 * n, 16, 128) == pytest.approx(10.0)


def test_the_shape_model_has_smollm2_135m_parameter_count():
    model, tokenizer = gp.load_shape_model("cpu")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # SmolLM2-135M-Instruct's count
    assert max(tokenizer.get_vocab().values()) < model.config.vocab_size


def test_a_compiled_form_keeps_a_new_lengths_compile_out_of_its_step():
    compiled: set[int] = set()

    def run(n: int) -> float:  # 30 s to compile each new length, then 2 s + 10 ms a token
        extra = 0.0 if n in compiled else 30.0
        compiled.add(n)
        return extra + 2.0 + 0.01 * n

    figures = gp.compiled_form("form", run, 16, 128)
    assert figures["form_ms_per_step"] == pytest.approx(10.0)
    assert figures["form_first_call_s"] == pytest.approx(32.16)
    assert figures["form_new_length_first_call_s"] == pytest.approx(33.28)
