"""A tiny random chat model built in seconds: for tests, smoke runs and machines without any model.

Covers: a byte-level BPE tokenizer trained with `tokenizers` on the package's own example kernels and
tasks (so CUDA text tokenizes sensibly), ChatML special tokens and chat template (the same format as
SmolLM2), and a randomly initialised `LlamaForCausalLM` of ~0.1 M parameters, in memory
(`tiny_chat_model`) or saved as a normal model directory that `hf_local` (or `transformers serve`) loads.

Not covered: anything a trained model does. Its replies are random tokens; it exercises the plumbing
(templates, padding, batching, stop strings, servers), never the quality of a backend.
"""

from __future__ import annotations

from pathlib import Path

from cudaperf.agent.backends.base import BackendSpecError

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2, as in SmolLM2
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _corpus() -> list[str]:
    examples = Path(__file__).resolve().parents[2] / "examples"
    files = sorted(p for p in examples.rglob("*") if p.suffix in (".cu", ".py"))
    return [p.read_text(errors="replace") for p in files] or ["__global__ void k(float* x) { x[0] = 1; }"]


def train_tokenizer(vocab_size: int = 512):
    """A ChatML `PreTrainedTokenizerFast` with a byte-level BPE trained on the example kernels (< 1 s)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|im_start|>",
                                        eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def build_tiny_chat_model(directory: Path, seed: int = 0, hidden_size: int = 32, layers: int = 2,
                          context_tokens: int = 512) -> Path:
    """Write a tiny random Llama chat model (config, weights, tokenizer) into `directory`; return it."""
    model, tokenizer = tiny_chat_model(seed, hidden_size, layers, context_tokens)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def tiny_chat_model(seed: int = 0, hidden_size: int = 32, layers: int = 2, context_tokens: int = 512):
    """A tiny random float32 Llama chat model on the CPU and its ChatML tokenizer (trained here)."""
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as exc:
        raise BackendSpecError("transformers is not installed: pip install 'cudaperf[agent]'") from exc
    tokenizer = train_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=context_tokens, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
