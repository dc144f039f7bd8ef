"""The policy a training run starts from, and the one tokenisation of chat turns that SFT, the rollouts and
the agent share.

Covers: resolving `model` ('tiny', 'smollm2' or a directory) to a plain, trainable causal LM and its
tokenizer (SmolLM2 through the agent's offline GGUF conversion; the tiny model built once per run under
`<output_dir>/tiny-init`), the tokenizer fixes training needs (a pad token, `<|im_end|>` as end of turn),
optional LoRA (peft; a LoRA run's adapter kept beside its merged model, and merged again into its base
elsewhere: `merge_adapter`; or continued by a later run: `start_adapter`), and token ids of a prompt
(`prompt_ids`: the chat template with the generation prompt, exactly as `agent.backends.hf_local` renders
it) and of an answer (`answer_ids`: the text and the end-of-turn token the model must learn to emit).

Not covered: downloading (no hub here), quantised training, models without a chat template.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudaperf.train.config import CommonConfig, ConfigError

TINY_DIR = "tiny-init"


def model_directory(config: CommonConfig) -> Path:
    """The directory `config.model` names, building or converting it first when needed."""
    if config.model == "tiny":
        from cudaperf.agent.backends.tiny import build_tiny_chat_model

        directory = Path(config.output_dir) / TINY_DIR
        if not (directory / "config.json").is_file():
            build_tiny_chat_model(directory, seed=config.seed, hidden_size=64, layers=2,
                                  context_tokens=config.tiny_context_tokens)
        return directory
    if config.model == "smollm2":
        from cudaperf.agent.backends.smollm2 import SmolLM2Options, convert, converted_dir, find_gguf

        options = SmolLM2Options()
        gguf = find_gguf(options.gguf)
        directory = converted_dir(gguf, options)
        if not (directory / "config.json").is_file():
            convert(gguf, directory, options.cache_dtype)
        return directory
    directory = Path(config.model).expanduser()
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"model={config.model!r}: not 'tiny', 'smollm2' or a model directory "
                                "with a config.json")
    return directory


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def load_policy(config: CommonConfig) -> tuple[Any, Any]:
    """(model, tokenizer): float32 weights (on a GPU the trainers compute in bfloat16 autocast, and the
    optimiser keeps float32 updates); the tokenizer padded with `<|endoftext|>` and ending turns with
    `<|im_end|>` when the vocabulary has them."""
    model, tokenizer = _load(model_directory(config))
    return model.to(resolve_device(config.device)), tokenizer


def _load(directory: Path) -> tuple[Any, Any]:
    """(float32 model on the CPU, tokenizer) of a model directory, with the training fixes."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    fix_special_tokens(model, tokenizer)
    return model, tokenizer


def fix_special_tokens(model: Any, tokenizer: Any) -> None:
    vocab = tokenizer.get_vocab()
    if "<|im_end|>" in vocab:
        tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None or tokenizer.pad_token == tokenizer.eos_token:
        tokenizer.pad_token = "<|endoftext|>" if "<|endoftext|>" in vocab else tokenizer.eos_token
    for cfg in (model.config, model.generation_config):
        cfg.eos_token_id = tokenizer.eos_token_id
        cfg.pad_token_id = tokenizer.pad_token_id


def lora_config(config: CommonConfig) -> Any:
    """The peft `LoraConfig` of the run, or None without `lora`."""
    if not config.lora:
        return None
    from peft import LoraConfig

    return LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=list(config.lora_targets), task_type="CAUSAL_LM")


def start_adapter(model: Any, config: CommonConfig, directory: str) -> Any:
    """`model` with the LoRA adapter of `directory` loaded for training (its weights; the run's own
    optimiser); refused unless its rank, alpha and targets are those of the run's `lora_config`."""
    from peft import PeftModel

    path = Path(directory) / "adapter_config.json"
    if not path.is_file():
        raise ConfigError(f"init_adapter={directory!r}: no adapter_config.json there (not a LoRA adapter)")
    saved, wanted = json.loads(path.read_text()), lora_config(config)
    mine = {"r": wanted.r, "lora_alpha": wanted.lora_alpha, "target_modules": sorted(wanted.target_modules)}
    theirs = {"r": saved.get("r"), "lora_alpha": saved.get("lora_alpha"),
              "target_modules": sorted(saved.get("target_modules") or ())}
    if mine != theirs:
        raise ConfigError(f"init_adapter={directory!r} has {theirs}; the run's LoRA settings are {mine}: "
                          "set lora_rank, lora_alpha and lora_targets to the adapter's")
    return PeftModel.from_pretrained(model, str(directory), is_trainable=True)


ADAPTER_DIR = "adapter"  # a LoRA run's adapter, kept beside the merged model it made


def save_model(trainer: Any, tokenizer: Any, directory: Path) -> None:
    """The trained model as a plain model directory (called once training has ended); a LoRA run's adapter
    is kept on its own under `directory/ADAPTER_DIR` (megabytes where the model is hundreds: what can leave a
    machine) and merged into its base weights on the CPU, the merge `merge_adapter` does elsewhere, so the
    two give the same model (a GPU's matrix products may round otherwise)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    if hasattr(model, "merge_and_unload"):
        model.save_pretrained(directory / ADAPTER_DIR)
        model = model.to("cpu").merge_and_unload()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def merge_adapter(base: Path, adapter: Path, directory: Path) -> None:
    """A plain model directory made of the model directory `base` and the LoRA adapter directory `adapter`
    (peft's files, as `save_model` or a checkpoint of a LoRA run keeps them), merged in float32 on the CPU
    as `save_model` merges; the tokenizer is `base`'s with the training fixes (`load_policy`), and the
    adapter is kept under `directory/ADAPTER_DIR`. Written to a scratch folder first, so `directory` is either
    whole or absent."""
    import shutil

    from peft import PeftModel

    if not (Path(adapter) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter}: no adapter_config.json (not a LoRA adapter directory)")
    model, tokenizer = _load(Path(base))
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    scratch = Path(f"{directory}.tmp")
    shutil.rmtree(scratch, ignore_errors=True)
    merged.save_pretrained(scratch)
    tokenizer.save_pretrained(scratch)
    shutil.copytree(adapter, scratch / ADAPTER_DIR,
                    ignore=lambda _d, names: [n for n in names if not n.startswith(("adapter_", "README"))])
    shutil.rmtree(directory, ignore_errors=True)
    scratch.rename(directory)


def prompt_ids(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """Token ids of a conversation with the assistant's turn opened (what the model continues)."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def token_counter(tokenizer: Any) -> Any:
    """Counts tokens as the rollouts' environment does with the same tokenizer (the feedback's budget)."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def answer_ids(tokenizer: Any, answer: str) -> list[int]:
    """Token ids of an assistant reply followed by the end-of-turn token."""
    return tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def between_turns_ids(tokenizer: Any, user_message: str, reply_ended: bool) -> list[int]:
    """Token ids the chat template puts between the end of an assistant reply and the next reply: the
    close of the assistant turn (the end-of-turn token itself only when the reply did not emit it), the
    user message, and the opening of the next assistant turn. Found by rendering a conversation around a
    marker, so it follows any template."""
    marker = "\u2063cudaperf-reply\u2063"
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": marker},
                {"role": "user", "content": user_message}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    tail = text.split(marker, 1)[1]
    if reply_ended and tail.startswith(tokenizer.eos_token):
        tail = tail[len(tokenizer.eos_token):]
    return tokenizer(tail, add_special_tokens=False)["input_ids"]


__all__ = ["answer_ids", "between_turns_ids", "fix_special_tokens", "load_policy", "lora_config",
           "model_directory", "prompt_ids", "resolve_device", "save_model", "start_adapter", "token_counter"]
