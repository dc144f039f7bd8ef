"""The rollouts' decoding loop over a static cache (`agent.backends.step_decoder`, `RlConfig.generation_cache=
'graph'`), checked on the CPU against `transformers`' own `generate` with a small random Llama whose
weights are scaled up so that its greedy tokens vary. The CUDA graph's capture and replay run on the GPU
(`tests/gpu/test_step_decoder_gpu.py`)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from cudaperf.agent.backends.step_decoder import Sampling, _nucleus, decode
from cudaperf.train.rollout import ModelGenerator

NEW_TOKENS = 20


@pytest.fixture(scope="module")
def lm():
    from cudaperf.agent.backends.tiny import tiny_chat_model

    torch.manual_seed(0)
    model, tokenizer = tiny_chat_model(hidden_size=64)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8)  # sharper logits: the greedy tokens of a barely trained model would all be one
    return model.eval(), tokenizer


def batch(tokenizer):
    """Three prompts of different lengths (one of a single token), left-padded."""
    texts = ["__global__ void k(float* x) { x[0] = 1; } and more", "int main() { return 0; }", "x"]
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    width, pad = max(map(len, prompts)), tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return prompts, ids, mask


def reference(model, tokenizer, ids, mask, eos=None):
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW_TOKENS,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=eos, output_logits=True,
                         return_dict_in_generate=True)
    return out.sequences[:, ids.shape[1]:], out.logits


def test_greedy_tokens_are_generates_with_left_padding(lm):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    expected, _ = reference(model, tokenizer, ids, mask)
    tokens, _ = decode(model, ids, mask, NEW_TOKENS, Sampling(0.0, pad_id=tokenizer.pad_token_id))
    assert len(set(expected[0].tolist())) > 3  # the check means something: the tokens vary
    assert torch.equal(tokens, expected)


def test_each_tokens_log_probability_is_generates(lm):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    expected, logits = reference(model, tokenizer, ids, mask)
    _, logprobs = decode(model, ids, mask, NEW_TOKENS, Sampling(0.0, pad_id=tokenizer.pad_token_id))
    wanted = torch.stack([torch.log_softmax(s.float(), -1).gather(1, expected[:, i:i + 1]).squeeze(1)
                          for i, s in enumerate(logits)], 1)
    assert torch.allclose(logprobs, wanted, atol=1e-4)


def test_a_row_that_ends_gets_pad_tokens_after_its_end_as_in_generate(lm):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    free, _ = reference(model, tokenizer, ids, mask)
    eos = int(free[0, 3])  # row 0's fourth token ends it
    expected, _ = reference(model, tokenizer, ids, mask, eos=eos)
    sampling = Sampling(0.0, eos_ids=(eos,), pad_id=tokenizer.pad_token_id)
    tokens, _ = decode(model, ids, mask, NEW_TOKENS, sampling)
    assert torch.equal(tokens, expected[:, :tokens.shape[1]])
    assert (tokens[0, 4:] == tokenizer.pad_token_id).all()


def test_min_new_tokens_holds_the_end_back(lm):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    free, _ = reference(model, tokenizer, ids, mask)
    eos = int(free[0, 0])
    tokens, _ = decode(model, ids, mask, 6, Sampling(0.0, eos_ids=(eos,), pad_id=tokenizer.pad_token_id,
                                                       min_new_tokens=6))
    assert not (tokens == eos).any()


def test_a_tiny_nucleus_samples_the_greedy_tokens(lm):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    greedy, _ = decode(model, ids, mask, NEW_TOKENS, Sampling(0.0, pad_id=tokenizer.pad_token_id))
    sampled, _ = decode(model, ids, mask, NEW_TOKENS, Sampling(1.0, top_p=1e-6,
                                                               pad_id=tokenizer.pad_token_id))
    assert torch.equal(sampled, greedy)


def test_the_nucleus_is_the_smallest_set_reaching_top_p():
    probs = torch.tensor([[0.1, 0.5, 0.3, 0.1]])
    assert (_nucleus(probs, 0.7) > 0).tolist() == [[False, True, True, False]]
    assert (_nucleus(probs, 0.5) > 0).tolist() == [[False, True, False, False]]
    assert torch.equal(_nucleus(probs, 0.7)[0, 1:3], probs[0, 1:3])  # kept mass is not renormalised here
    assert _nucleus(probs, 1.0) is probs


def test_the_rollouts_generator_decodes_the_same_replies_in_the_graph_form(lm):
    model, tokenizer = lm
    prompts, _, _ = batch(tokenizer)
    plain = ModelGenerator(model, tokenizer, 0.0, 1.0).generate(prompts, NEW_TOKENS)
    graph = ModelGenerator(model, tokenizer, 0.0, 1.0, cache="graph").generate(prompts, NEW_TOKENS)
    assert [g.ids for g in graph] == [p.ids for p in plain]
    assert all(max(abs(a - b) for a, b in zip(g.logprobs, p.logprobs, strict=True)) < 1e-4
               for g, p in zip(graph, plain, strict=True))


def test_the_graph_form_carries_the_decoding_probe(lm, tmp_path):
    model, tokenizer = lm
    prompts, _, _ = batch(tokenizer)
    path = tmp_path / "probe.txt"
    ModelGenerator(model, tokenizer, 1.0, 1.0, cache="graph", probe_to=str(path)).generate(prompts, 40)
    text = path.read_text()
    assert "rows: 3;" in text and "new tokens: 40" in text and "profiled steps: 8" in text


def test_an_unknown_form_is_refused(lm):
    model, tokenizer = lm
    with pytest.raises(ValueError, match="use one of"):
        ModelGenerator(model, tokenizer, 1.0, 1.0, cache="paged")


def test_the_rl_config_takes_the_graph_form():
    from cudaperf.train.config import RlConfig

    assert RlConfig(generation_cache="graph", generation_weights="bfloat16").generation_cache == "graph"


def test_a_step_that_cannot_be_captured_decodes_eagerly(lm, monkeypatch, capsys):
    import contextlib

    from cudaperf.agent.backends.step_decoder import _prefill, _State, _Step

    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)

    @contextlib.contextmanager
    def refused(graph):
        raise RuntimeError("operation not permitted when stream is capturing")
        yield

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(torch.cuda, "graph", refused)
    state = _State.start(model, ids, mask, ids.shape[1] + 4)
    with torch.no_grad():
        _prefill(model, ids, state, ids.shape[1], ids.shape[1] + 4)
        step = _Step(model, state)
        first, second = step.run(graph=True), step.run(graph=True)  # eager warm-up, then a refused capture
    assert "stream is capturing" in step.failed and "decoding eagerly" in capsys.readouterr().out
    assert first.shape == second.shape == (3, model.config.vocab_size)


def test_the_local_backend_gives_the_same_greedy_replies_in_the_graph_form(lm):
    from cudaperf.agent.backends.base import ChatMessage, GenerationConfig
    from cudaperf.agent.backends.hf_local import HFLocalBackend

    model, tokenizer = lm
    conversations = [[ChatMessage("user", "Write a CUDA kernel.")], [ChatMessage("user", "Add two arrays")]]
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, temperature=0.0, seed=0)
    plain = HFLocalBackend(model, tokenizer, "hf:tiny").generate(conversations, config)
    graph = HFLocalBackend(model, tokenizer, "hf:tiny", cache="graph").generate(conversations, config)
    assert [g.text for g in graph] == [p.text for p in plain]
    assert [g.completion_tokens for g in graph] == [p.completion_tokens for p in plain]


def test_the_prefill_computes_the_last_positions_logits_only(lm):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    widths = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: widths.append(out.shape[1]))
    try:
        decode(model, ids, mask, 4, Sampling(0.0, pad_id=tokenizer.pad_token_id))
    finally:
        hook.remove()
    assert widths == [1, 1, 1, 1]  # the prefill's (a width of ids.shape[1] would be rows x width x vocab)


def test_the_folded_attention_is_the_sdpa_attention_of_one_query_token():
    from types import SimpleNamespace

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from cudaperf.agent.backends.step_decoder import _folded_sdpa

    torch.manual_seed(0)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True, training=False)
    query, key, value = torch.randn(2, 9, 1, 8), torch.randn(2, 3, 10, 8), torch.randn(2, 3, 10, 8)
    mask = torch.rand(2, 1, 1, 10) > 0.3
    mask[:, :, :, 0] = True
    folded, _ = _folded_sdpa(module, query, key, value, mask, scaling=0.5)
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.5)
    assert folded.shape == expected.shape == (2, 1, 9, 8)
    assert torch.allclose(folded, expected, atol=1e-6)


def test_the_folded_attention_takes_an_additive_mask_as_sdpa_does():
    from types import SimpleNamespace

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from cudaperf.agent.backends.step_decoder import _folded_sdpa

    torch.manual_seed(1)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True, training=False)
    query, key, value = torch.randn(2, 9, 1, 8), torch.randn(2, 3, 10, 8), torch.randn(2, 3, 10, 8)
    mask = torch.where(torch.rand(2, 1, 1, 10) > 0.3, 0.0, float("-inf"))
    mask[:, :, :, 0] = 0.0
    folded, _ = _folded_sdpa(module, query, key, value, mask)
    expected, _ = sdpa_attention_forward(module, query, key, value, mask)
    assert torch.allclose(folded, expected, atol=1e-6)


def test_decoding_leaves_the_models_attention_as_it_found_it(lm):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    decode(model, ids, mask, 2, Sampling(0.0, pad_id=tokenizer.pad_token_id))
    assert model.config._attn_implementation == "sdpa"


def test_every_decoding_step_takes_the_folded_path(lm, monkeypatch):
    from cudaperf.agent.backends import step_decoder

    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    seen = []
    original = step_decoder._folded_sdpa

    def spy(module, query, key, value, attention_mask, **kwargs):
        seen.append((query.shape[2], tuple(attention_mask.shape)))
        return original(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setattr(step_decoder, "_folded_sdpa", spy)
    decode(model, ids, mask, 3, Sampling(0.0, pad_id=tokenizer.pad_token_id))
    layers, width = model.config.num_hidden_layers, ids.shape[1]
    assert [q for q, _ in seen] == [width] * layers + [1] * 2 * layers  # prefill, then two decoding steps
    assert all(shape[2] == 1 for q, shape in seen if q == 1)  # one query row: the fold applies


def test_a_row_that_ends_is_handed_over_at_the_next_check_while_others_decode(lm):
    model, tokenizer = lm
    _, ids, mask = batch(tokenizer)
    free, _ = reference(model, tokenizer, ids, mask)
    eos = int(free[0, 3])  # row 0's fourth token ends it
    handed = []
    sampling = Sampling(0.0, eos_ids=(eos,), pad_id=tokenizer.pad_token_id)
    tokens, _ = decode(model, ids, mask, NEW_TOKENS, sampling, check_every=8,
                       on_finished=lambda rows, t, lp: handed.append((rows, t.shape)))
    if (tokens[1:] == eos).any():
        pytest.skip("another row ended too: the check needs one row that ends alone")
    assert handed == [([0], torch.Size([1, 8]))]


def test_the_rollouts_generator_hands_each_reply_once_as_it_returns_it(lm):
    model, tokenizer = lm
    prompts, _, _ = batch(tokenizer)
    handed = {}

    def on_reply(i, reply):
        assert i not in handed
        handed[i] = reply

    generator = ModelGenerator(model, tokenizer, 0.0, 1.0, cache="graph")
    replies = generator.generate(prompts, NEW_TOKENS, on_reply)
    assert [handed[i] for i in range(len(prompts))] == replies


def test_a_reply_handed_before_its_batch_ends_is_the_reply_generate_gives(lm):
    import copy

    model, tokenizer = lm
    prompts, ids, mask = batch(tokenizer)
    free, _ = reference(model, tokenizer, ids, mask)
    ending = copy.deepcopy(tokenizer)
    ending.eos_token = ending.convert_ids_to_tokens(int(free[0, 3]))  # the first prompt's reply ends early
    order = []
    graph = ModelGenerator(model, ending, 0.0, 1.0, cache="graph").generate(
        prompts, NEW_TOKENS, lambda i, reply: order.append(i))
    plain = ModelGenerator(model, ending, 0.0, 1.0).generate(prompts, NEW_TOKENS)
    assert graph[0].ended and not graph[1].ended
    assert order[0] == 0 and [g.ids for g in graph] == [p.ids for p in plain]
