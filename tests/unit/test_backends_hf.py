"""The local transformers backend on a tiny random Llama chat model with a locally trained BPE tokenizer."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from cudaperf.agent.backends.base import BackendSpecError, ChatMessage, GenerationConfig, load_backend
from cudaperf.agent.backends.hf_local import HFLocalBackend
from cudaperf.agent.backends.tiny import build_tiny_chat_model

GREEDY = GenerationConfig(max_new_tokens=12, temperature=0.0)
SAMPLED = GenerationConfig(max_new_tokens=24, temperature=1.0, top_p=1.0, seed=7)


def _user(text: str) -> list[ChatMessage]:
    return [ChatMessage("system", "You write CUDA."), ChatMessage("user", text)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_chat_model(tmp_path_factory.mktemp("tiny") / "tiny-chat", context_tokens=256)


@pytest.fixture(scope="module")
def backend(model_dir):
    return load_backend(f"hf:{model_dir}", batch_size=2)


def test_hf_spec_names_the_model_directory(backend, model_dir):
    assert backend.name == f"hf:{model_dir.name}"


def test_batched_replies_come_back_in_input_order_equal_to_single_ones(backend):
    prompts = [_user("add " * n) for n in (9, 1, 5)]  # lengths out of order: the backend sorts them
    together = backend.generate(prompts, GREEDY)
    alone = [backend.generate([p], GREEDY)[0] for p in prompts]
    assert [(g.text, g.prompt_tokens) for g in together] == [(g.text, g.prompt_tokens) for g in alone]


def test_prompt_tokens_count_the_chat_template(backend):
    (g,) = backend.generate([_user("relu")], GREEDY)
    template = backend.tokenizer.apply_chat_template(
        [{"role": "system", "content": "You write CUDA."}, {"role": "user", "content": "relu"}],
        tokenize=False, add_generation_prompt=True)
    assert g.prompt_tokens == backend.count_tokens(template)


def test_reply_at_the_token_limit_reports_length(backend):
    (g,) = backend.generate([_user("relu")], GREEDY)
    assert (g.finish_reason, g.completion_tokens, g.error) == ("length", 12, None)


def test_same_seed_samples_the_same_reply(backend):
    first = backend.generate([_user("matmul")], SAMPLED)[0].text
    assert backend.generate([_user("matmul")], SAMPLED)[0].text == first


def test_stop_string_ends_the_reply_before_it(backend):
    (free,) = backend.generate([_user("matmul")], SAMPLED)
    stop = free.text[len(free.text) // 2:][:2]  # a piece of the middle of the unconstrained reply
    cut = free.text[: free.text.find(stop)]
    config = GenerationConfig(max_new_tokens=24, temperature=1.0, top_p=1.0, seed=7, stop=(stop,))
    (g,) = backend.generate([_user("matmul")], config)
    assert (g.text, g.finish_reason) == (cut, "stop")


def test_end_of_turn_token_stops_the_reply_and_is_not_in_the_text(model_dir):
    probe = load_backend(f"hf:{model_dir}")
    first = probe.tokenizer(probe.generate([_user("relu")], GREEDY)[0].text[:1])["input_ids"][0]
    probe.model.generation_config.eos_token_id = first  # the token it says first now ends its turn
    backend = HFLocalBackend(probe.model, probe.tokenizer, "hf:tiny-eos")
    (g,) = backend.generate([_user("relu")], GREEDY)
    assert (g.text, g.finish_reason, g.completion_tokens) == ("", "stop", 1)


def test_prompt_longer_than_the_context_is_an_error_value(backend):
    (g,) = backend.generate([_user("add " * 400)], GREEDY)
    assert (g.text, g.finish_reason, "context" in (g.error or "")) == ("", "error", True)


def test_missing_model_directory_is_a_spec_error(tmp_path):
    with pytest.raises(BackendSpecError, match="cannot load"):
        load_backend(f"hf:{tmp_path / 'none'}")


def test_unknown_option_is_a_spec_error(model_dir):
    with pytest.raises(BackendSpecError, match="options"):
        load_backend(f"hf:{model_dir}", beam_width=4)


def test_a_static_cache_gives_the_greedy_replies_of_the_dynamic_one(backend, model_dir):
    static = load_backend(f"hf:{model_dir}", batch_size=2, cache="static")
    prompts = [_user("add " * n) for n in (9, 1, 5)]
    expected = [g.text for g in backend.generate(prompts, GREEDY)]
    assert [g.text for g in static.generate(prompts, GREEDY)] == expected


def test_an_unknown_cache_is_refused_with_the_choices(model_dir):
    with pytest.raises(BackendSpecError, match=r"one of \('dynamic', 'static', 'graph'\)"):
        load_backend(f"hf:{model_dir}", cache="paged")
