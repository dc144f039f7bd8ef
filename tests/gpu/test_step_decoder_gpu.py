"""The rollouts' decoding loop with its step captured as a CUDA graph (`agent.backends.step_decoder`,
`RlConfig.generation_cache='graph'`) on a GPU (marker `gpu`): the captured step replays what the eager
loop computes, and in float32 the loop decodes `generate`'s own greedy tokens. Its speed is measured by
`scripts/decoding_conditions_gpu.py` (form `graph`), not here.

Run: `python3 -m pytest -q -s tests/gpu/test_step_decoder_gpu.py`.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from cudaperf.agent.backends.decoding_attention import attention_kernels
from cudaperf.agent.backends.step_decoder import Sampling, decode
from cudaperf.train.rollout import ModelGenerator

pytestmark = [pytest.mark.gpu]

NEW_TOKENS = 48


@pytest.fixture(scope="module")
def lm():
    """A small random Llama on the GPU, weights scaled up so that its greedy tokens vary, and the tiny
    ChatML tokenizer (built here: nothing carried)."""
    from cudaperf.agent.backends.tiny import tiny_chat_model

    torch.manual_seed(0)
    model, tokenizer = tiny_chat_model(hidden_size=64)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8)
    return model.to("cuda").eval(), tokenizer


def batch(tokenizer):
    texts = ["__global__ void k(float* x) { x[0] = 1; } and more", "int main() { return 0; }", "x"]
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    width, pad = max(map(len, prompts)), tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device="cuda")
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device="cuda")
    return prompts, ids, mask


def test_the_captured_step_replays_the_eager_loop(lm, capsys):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    sampling = Sampling(0.0, pad_id=tokenizer.pad_token_id)
    with attention_kernels("no_cudnn", "cuda"):
        graph, graph_lp = decode(model, ids, mask, NEW_TOKENS, sampling, graph=True)
        eager, eager_lp = decode(model, ids, mask, NEW_TOKENS, sampling, graph=False)
    assert "could not be captured" not in capsys.readouterr().out  # the graph did replay
    assert len(set(eager[0].tolist())) > 3
    assert torch.equal(graph, eager) and torch.allclose(graph_lp, eager_lp, atol=1e-4)


def test_in_bfloat16_the_capture_starts_as_the_eager_loop(lm, capsys):
    """bfloat16 rounding may part the two after some steps (a library may pick other kernels inside a
    capture); their first tokens agree. With the rollouts' attention kernels (no cuDNN)."""
    model, tokenizer = lm
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    _, ids, mask = batch(tokenizer)
    sampling = Sampling(0.0, pad_id=tokenizer.pad_token_id)
    with attention_kernels("no_cudnn", "cuda"):
        graph, graph_lp = decode(bf16, ids, mask, NEW_TOKENS, sampling, graph=True)
        eager, _ = decode(bf16, ids, mask, NEW_TOKENS, sampling, graph=False)
    assert "could not be captured" not in capsys.readouterr().out
    assert torch.equal(graph[:, :8], eager[:, :8]) and bool(torch.isfinite(graph_lp).all())


def test_in_float32_the_loop_decodes_generates_greedy_tokens(lm):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    expected = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW_TOKENS,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=None)[:, ids.shape[1]:]
    tokens, _ = decode(model, ids, mask, NEW_TOKENS, Sampling(0.0, pad_id=tokenizer.pad_token_id))
    assert torch.equal(tokens, expected)


@pytest.mark.parametrize("weights", ["bfloat16", "autocast"])
def test_the_rollouts_generator_samples_in_the_graph_form(lm, weights, capsys):
    model, tokenizer = lm
    prompts, _, _ = batch(tokenizer)
    replies = ModelGenerator(model, tokenizer, 0.7, 0.95, cache="graph", weights=weights).generate(prompts,
                                                                                                  NEW_TOKENS)
    assert "could not be captured" not in capsys.readouterr().out
    assert len(replies) == 3 and all(0 < len(r.ids) == len(r.logprobs) for r in replies)
    assert all(lp <= 0 for r in replies for lp in r.logprobs)


def test_the_local_backend_generates_in_the_graph_form(lm, capsys):
    from cudaperf.agent.backends.base import ChatMessage, GenerationConfig
    from cudaperf.agent.backends.hf_local import HFLocalBackend

    model, tokenizer = lm
    backend = HFLocalBackend(copy.deepcopy(model).to(torch.bfloat16), tokenizer, "hf:tiny", cache="graph")
    replies = backend.generate([[ChatMessage("user", "Write a CUDA kernel.")]] * 3,
                               GenerationConfig(max_new_tokens=NEW_TOKENS, temperature=0.7, seed=0))
    assert all(r.error is None and 0 < r.completion_tokens <= NEW_TOKENS for r in replies)
    assert "could not be captured" not in capsys.readouterr().out


def test_a_row_handed_over_while_the_graph_replays_is_the_row_it_returns(lm, capsys):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    with attention_kernels("no_cudnn", "cuda"):
        free, _ = decode(model, ids, mask, NEW_TOKENS, Sampling(0.0, pad_id=tokenizer.pad_token_id))
        eos = int(free[0, 3])  # row 0's fourth token ends it
        handed = {}
        sampling = Sampling(0.0, eos_ids=(eos,), pad_id=tokenizer.pad_token_id)
        tokens, _ = decode(model, ids, mask, NEW_TOKENS, sampling, graph=True,
                           on_finished=lambda rows, t, lp: handed.update(zip(rows, t)))
    assert "could not be captured" not in capsys.readouterr().out
    assert 0 in handed and handed[0].device.type == "cpu"
    for row, early in handed.items():
        assert torch.equal(early, tokens[row, :early.shape[0]].cpu())
