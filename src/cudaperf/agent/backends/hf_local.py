"""`hf:<path or id>`: local generation with Hugging Face `transformers`, batched.

Covers: chat prompts built with the tokenizer's own chat template; conversations sorted by prompt length
and generated in batches of `batch_size` with left padding (so every row's new tokens start at the same
column); greedy decoding at temperature 0, sampling otherwise; stop strings (generation stops at them and
the reply is cut before them); the context length respected (a prompt that leaves no room is an error
`Generation`, a long one gets fewer new tokens); a seed per call; with `probe_to` set, the next call's
decoding steps timed and a few profiled (`decoding_probe.py`); the attention kernels `generate` may use
(`decoding_attention.py`: no cuDNN attention by default). Any exception inside `generate`
(out of memory, a broken template) becomes error `Generation`s for the batch it hit.

Not covered: continuous batching, paged attention or speculative decoding (use a vLLM or SGLang server
through `openai_compat` for those), multi-GPU sharding, downloading: `hf:<id>` works only where the hub
is reachable or the model is already in the local Hugging Face cache.

Caveats worth knowing: with a seed, sampled replies are reproducible only for the same batch
composition (a row's random draws depend on its batch mates); `duration_s` of each reply is the wall time
of the batch it was generated in; `completion_tokens` counts the end-of-turn token when one was produced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaperf.agent.backends._common import cut_at_stop, failed
from cudaperf.agent.backends.base import (
    GENERATION_CACHES,
    BackendSpecError,
    ChatMessage,
    Generation,
    GenerationConfig,
)
from cudaperf.agent.backends.decoding_attention import attention_kernels, check_attention
from cudaperf.agent.backends.decoding_probe import probing

MISSING_EXTRA = "transformers is not installed: pip install 'cudaperf[agent]'"


@dataclass(frozen=True)
class HFLocalOptions:
    """How a local model is loaded and batched."""

    device: str = "auto"
    """"auto" = "cuda" when torch sees a GPU, else "cpu"; or any torch device string."""
    dtype: str = "auto"
    """torch dtype name; "auto" = bfloat16 on a GPU, float32 on the CPU (bf16 matmuls are slow on most
    CPUs)."""
    batch_size: int = 16
    """Conversations generated together; larger is faster per token until memory runs out."""
    cache: str = "dynamic"
    """How it decodes: `generate` with the "dynamic" or the "static" KV cache (preallocated; on a GPU
    `transformers` compiles the decoding step once per batch shape, which cuts a step's per-launch host
    overhead), or "graph" (`step_decoder.py`: a static cache and the decoding step one captured CUDA
    graph; calls with stop strings use `generate`)."""
    attention: str = "no_cudnn"
    """The attention kernels `generate` may use: "no_cudnn" (on a GPU, not cuDNN's, which builds a plan
    for every new key length, so for every decoding step) or "any" (`decoding_attention.py`)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise BackendSpecError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.cache not in GENERATION_CACHES:
            raise BackendSpecError(f"cache must be one of {GENERATION_CACHES}, got {self.cache!r}")
        if why := check_attention(self.attention):
            raise BackendSpecError(why)


def resolve_device_dtype(options: HFLocalOptions) -> tuple[str, Any]:
    import torch

    device = options.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    name = options.dtype
    if name == "auto":
        name = "bfloat16" if device.startswith("cuda") else "float32"
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise BackendSpecError(f"dtype {options.dtype!r} is not a torch dtype (try bfloat16 or float32)")
    return device, dtype


class HFLocalBackend:
    """A `ModelBackend` over an already loaded causal LM and its tokenizer (one `generate` at a time)."""

    def __init__(self, model, tokenizer, name: str, batch_size: int = 16, cache: str = "dynamic",
                 attention: str = "no_cudnn") -> None:
        if why := check_attention(attention):
            raise BackendSpecError(why)
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.cache = cache
        self.attention = attention  # `HFLocalOptions.attention`
        # Left padding: new tokens of every row then start at the same column of the output.
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self._eos_ids = _eos_ids(model, tokenizer)
        self._context_tokens = _context_tokens(model)
        self._lock = threading.Lock()  # generate mutates the model's caches: one call at a time
        self.probe_to: str | None = None  # set: the next `generate` call's decoding probe goes here, once

    @classmethod
    def from_pretrained(cls, path: str, options: HFLocalOptions = HFLocalOptions(),
                        name: str | None = None) -> HFLocalBackend:
        """Load a model directory (or hub id) with `AutoModelForCausalLM` and `AutoTokenizer`."""
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise BackendSpecError(MISSING_EXTRA) from exc
        device, dtype = resolve_device_dtype(options)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
        except (OSError, ValueError) as exc:
            raise BackendSpecError(f"cannot load a model from {path!r}: {exc}") from exc
        return cls(model, tokenizer, name or f"hf:{Path(path).name or path}", options.batch_size,
                   options.cache, options.attention)

    def generate(
        self, conversations: Sequence[Sequence[ChatMessage]], config: GenerationConfig
    ) -> list[Generation]:
        prompts = [self._prompt_ids(c) for c in conversations]
        # Similar lengths together: less padding, so less wasted compute per batch.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[Generation | None] = [None] * len(prompts)
        with self._lock:
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                for i, g in zip(rows, self._batch([prompts[i] for i in rows], config), strict=True):
                    out[i] = g
        return [g for g in out if g is not None]

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def close(self) -> None:
        self.model = None
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass

    # -- one batch -----------------------------------------------------------------------------------

    def _prompt_ids(self, conversation: Sequence[ChatMessage]) -> list[int]:
        messages = [{"role": m.role, "content": m.content} for m in conversation]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        # The template already holds any special tokens the model expects (BOS, role markers).
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _batch(self, prompts: list[list[int]], config: GenerationConfig) -> list[Generation]:
        start = time.perf_counter()
        room = self._context_tokens - max(len(p) for p in prompts)
        if room <= 0:
            return [_too_long(len(p), self._context_tokens) for p in prompts]
        limit = min(config.max_new_tokens, room)
        try:
            new_tokens = self._run_generate(prompts, config, limit)
        except Exception as exc:  # noqa: BLE001 - any failure of one batch is that batch's value
            return [failed(f"{type(exc).__name__}: {exc}", time.perf_counter() - start, len(p))
                    for p in prompts]
        duration_s = time.perf_counter() - start
        return [self._reply(len(p), row, config, limit, duration_s) for p, row in zip(prompts, new_tokens)]

    def _run_generate(self, prompts: list[list[int]], config: GenerationConfig,
                      limit: int) -> list[list[int]]:
        import torch

        batch = self.tokenizer.pad({"input_ids": prompts}, return_tensors="pt").to(self.model.device)
        sample = config.temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": limit, "do_sample": sample, "pad_token_id": self.tokenizer.pad_token_id,
            "eos_token_id": sorted(self._eos_ids),
        }
        if sample:
            kwargs.update(temperature=config.temperature, top_p=config.top_p)
        else:  # greedy: unset the model's sampling defaults so transformers does not warn about them
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if config.stop:
            kwargs.update(stop_strings=list(config.stop), tokenizer=self.tokenizer)
        if self.cache == "static":
            kwargs["cache_implementation"] = "static"
        if config.seed is not None:
            torch.manual_seed(config.seed)
        device = self.model.device
        with torch.inference_mode(), attention_kernels(self.attention, device.type), \
                probing(self.probe_to, str(device), [len(p) for p in prompts], kwargs):
            if self.cache == "graph" and not config.stop:
                new = self._decode(batch, config, limit, kwargs)
            else:
                new = self.model.generate(**batch, **kwargs)[:, batch["input_ids"].shape[1]:]
        self.probe_to = None  # the next call only
        return new.tolist()

    def _decode(self, batch: Any, config: GenerationConfig, limit: int, kwargs: dict[str, Any]) -> Any:
        """`generate`'s work by `step_decoder.decode` (cache="graph"), the decoding probe among `kwargs`'
        processors when `probing` put one there."""
        from cudaperf.agent.backends.step_decoder import Sampling, calling, decode

        sampling = Sampling(config.temperature, config.top_p, tuple(sorted(self._eos_ids)),
                            self.tokenizer.pad_token_id)
        new, _ = decode(self.model, batch["input_ids"], batch["attention_mask"], limit, sampling,
                        on_step=calling(list(kwargs.get("logits_processor") or ())))
        return new

    def _reply(self, prompt_tokens: int, row: list[int], config: GenerationConfig, limit: int,
               duration_s: float) -> Generation:
        ended = next((k for k, t in enumerate(row) if t in self._eos_ids), None)
        if ended is None:
            # Finished rows (a stop string) are filled with pad tokens up to the batch's longest row.
            while row and row[-1] == self.tokenizer.pad_token_id:
                row = row[:-1]
        kept = row if ended is None else row[:ended]
        text, stopped = cut_at_stop(self.tokenizer.decode(kept, skip_special_tokens=True), config.stop)
        count = len(row) if ended is None else ended + 1
        finish = "stop" if ended is not None or stopped or count < limit else "length"
        return Generation(text, prompt_tokens, count, finish, duration_s)


def _eos_ids(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id
    found = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        found.add(tokenizer.eos_token_id)
    return found


def _context_tokens(model) -> int:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(getattr(config, "max_position_embeddings", 0) or 1 << 30)


def _too_long(prompt_tokens: int, context_tokens: int) -> Generation:
    return failed(f"prompt of {prompt_tokens} tokens leaves no room in the {context_tokens}-token context",
                  0.0, prompt_tokens)


def from_spec(rest: str, **options) -> HFLocalBackend:
    """`hf:<path or id>` with `HFLocalOptions` fields (device, dtype, batch_size, cache, attention) as
    options."""
    if not rest:
        raise BackendSpecError("the hf backend needs a model: 'hf:<path or id>'")
    try:
        parsed = HFLocalOptions(**options)
    except TypeError as exc:
        raise BackendSpecError(f"hf backend options: {exc}") from exc
    return HFLocalBackend.from_pretrained(rest, parsed)
