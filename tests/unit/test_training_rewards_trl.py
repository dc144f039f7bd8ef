"""`TRLReward` inside a real `trl.GRPOTrainer`: accepted by its reward_funcs check, named in its logs, fed
results from a dataset column, one training step on a tiny random model. Skipped where trl is not installed
(CI does not install the `[train]` extra); ~5 s, mostly importing transformers."""

from __future__ import annotations

import json
import math

import pytest

from cudaperf.train.reward_functions import TRLReward
from cudaperf.types import EvalResult, Outcome, to_dict

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

pytestmark = pytest.mark.slow

VOCAB_TEXT = "write a cuda kernel __global__ void add ( float * a ) { }"


def tiny_model_and_tokenizer():
    """A word-level tokenizer trained on one line and a 1-layer Llama with random weights (no download)."""
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.train_from_iterator([VOCAB_TEXT], tokenizers.trainers.WordLevelTrainer(
        special_tokens=["<unk>", "<pad>", "<eos>"]))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                                     pad_token="<pad>", eos_token="<eos>")
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    return transformers.LlamaForCausalLM(config), tokenizer


def test_grpo_trainer_accepts_and_calls_trl_reward(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    good = EvalResult("t0", "s", Outcome.CORRECT, speedup_vs_eager=2.0, speedup_vs_compile=2.0)
    bad = EvalResult("t1", "s", Outcome.INCORRECT)
    dataset = datasets.Dataset.from_dict({"prompt": ["write a cuda kernel", "write a kernel"],
                                          "eval_result": [json.dumps(to_dict(good)),
                                                          json.dumps(to_dict(bad))]})
    args = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=4, max_steps=1, report_to="none", use_cpu=True,
                          logging_steps=1, save_strategy="no", disable_tqdm=True)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[TRLReward("cudaperf")], args=args,
                              train_dataset=dataset, processing_class=tokenizer)
    assert trainer.reward_func_names == ["cudaperf_cudaperf"]
    trainer.train()
    logs = trainer.state.log_history[0]
    # two prompts × two generations: the correct 2× result scores 1 + ln 2, the incorrect one 0
    assert logs["rewards/cudaperf_cudaperf/mean"] == pytest.approx((1.0 + math.log(2.0)) / 2, rel=1e-5)
    assert logs["cudaperf_cudaperf/correct"] == pytest.approx(0.5)
