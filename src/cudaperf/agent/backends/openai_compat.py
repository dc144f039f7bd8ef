"""`openai:<base_url>[:<model>]`: any OpenAI-compatible chat endpoint through the `openai` client.

Works with vLLM, SGLang, `transformers serve` and hosted APIs. Covers:
- streaming (default): replies arrive as deltas, passed to an optional `on_text(index, delta)` callback
  (progress display), and a reply cut mid-stream is retried from the start;
- retries with exponential backoff and jitter: the client's own for requests that fail before a response
  starts (connection refused or dropped, 408/409/429/5xx, honouring `Retry-After`), ours for streams that
  break after they started (the client cannot retry those; a retried stream restarts the reply);
- timeouts: `timeout_s` for connecting and between two chunks, `deadline_s` for a whole reply;
- a concurrency limit: at most `concurrency` requests in flight per backend, across all callers and
  threads (one shared thread pool), so a server is never flooded by K parallel trajectories;
- failures as values: anything that still fails is an error `Generation` (text "").

Not covered: tool calls, logprobs, the legacy completions endpoint, asyncio (callers use threads).
Token counts come from the server's `usage` when it sends one; `count_tokens` uses a local tokenizer when
`tokenizer` names one, else a tokenizer-free estimate (hosted APIs expose no tokenizer endpoint).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cudaperf.agent.backends._common import cut_at_stop, failed, rough_token_count
from cudaperf.agent.backends.base import BackendSpecError, ChatMessage, Generation, GenerationConfig

MISSING_EXTRA = "the openai client is not installed: pip install 'cudaperf[agent]'"
MAX_SERVER_STOPS = 4  # the OpenAI API takes at most 4 stop strings; the rest are applied locally


@dataclass(frozen=True)
class OpenAIOptions:
    """How to reach and pace an OpenAI-compatible server."""

    model: str | None = None
    """Model name sent with each request; None = the first model the server lists at /v1/models."""
    api_key: str | None = None
    """None = $OPENAI_API_KEY if set, else a placeholder (local servers ignore the key)."""
    timeout_s: float = 60.0
    """Longest wait to connect, or between two chunks of a reply, before the attempt fails."""
    deadline_s: float = 1800.0
    """Longest time one reply may take in all (a stream that keeps trickling is cut here)."""
    retries: int = 3
    """Extra attempts after a failed one (both for failed requests and for broken streams)."""
    backoff_s: float = 0.5
    """Wait before the first re-issued broken stream; doubles each time, with up to 25% jitter."""
    concurrency: int = 8
    """Requests in flight at once, across every caller of this backend."""
    stream: bool = True
    """Stream replies (progress, and a stall is seen after `timeout_s` rather than at the end)."""
    tokenizer: str | None = None
    """A Hugging Face tokenizer (path or id) for `count_tokens`; None = a tokenizer-free estimate."""
    on_text: Callable[[int, str], None] | None = None
    """Called with (conversation index in the call, text delta) as a streamed reply arrives."""

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.retries < 0 or self.timeout_s <= 0 or self.deadline_s <= 0:
            raise BackendSpecError("openai backend: concurrency >= 1, retries >= 0 and positive timeouts, "
                                   f"got {self}")


def parse_target(rest: str) -> tuple[str, str | None]:
    """(base_url, model) from "<base_url>[:<model>]"; the model is what follows the first ':' after the
    URL's host and port, so model names with '/' (org/name) work: http://h:8000/v1:org/model."""
    parts = urlsplit(rest)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BackendSpecError(f"openai backend: {rest!r} is not 'http(s)://host[:port]/path[:model]'")
    host, _, after_host = rest.partition("://")[2].partition("/")
    if host.count(":") > 1:  # "host:port:model" without a path
        host, _, model = host.rpartition(":")
        return f"{parts.scheme}://{host}", model or None
    path, sep, model = after_host.partition(":")
    return f"{parts.scheme}://{host}/{path}".rstrip("/"), (model or None) if sep else None


class _StreamBroken(Exception):
    """A streamed reply that stopped before its end (dropped connection, stall, bad chunk)."""


class OpenAICompatBackend:
    """A `ModelBackend` over an OpenAI-compatible `/v1/chat/completions` endpoint."""

    def __init__(self, base_url: str, options: OpenAIOptions = OpenAIOptions()) -> None:
        try:
            import openai
        except ImportError as exc:
            raise BackendSpecError(MISSING_EXTRA) from exc
        import os

        self.options = options
        self.base_url = base_url
        self._client = openai.OpenAI(
            base_url=base_url, api_key=options.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=options.timeout_s, max_retries=options.retries,
        )
        self._pool = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="openai-backend")
        self._model = options.model
        self._model_lock = threading.Lock()
        self._tokenizer: Any = None
        self.name = f"openai:{base_url}:{options.model or '?'}"

    def generate(
        self, conversations: Sequence[Sequence[ChatMessage]], config: GenerationConfig
    ) -> list[Generation]:
        futures = [self._pool.submit(self._one, i, c, config) for i, c in enumerate(conversations)]
        return [f.result() for f in futures]

    def count_tokens(self, text: str) -> int:
        if self.options.tokenizer is None:
            return rough_token_count(text)
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.options.tokenizer)
        return len(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    # -- one conversation ----------------------------------------------------------------------------

    def _one(self, index: int, conversation: Sequence[ChatMessage], config: GenerationConfig) -> Generation:
        start = time.perf_counter()
        try:
            request = self._request(conversation, config)
        except Exception as exc:  # noqa: BLE001 - the model list could not be read: a value, not a raise
            return failed(f"{type(exc).__name__}: {exc}", time.perf_counter() - start)
        for attempt in range(self.options.retries + 1):
            try:
                text, finish, usage = self._attempt(index, request, start)
                return self._generation(conversation, config, text, finish, usage, start)
            except _StreamBroken as exc:
                if attempt == self.options.retries:
                    return failed(f"stream broken after {attempt + 1} attempts: {exc}",
                                  time.perf_counter() - start)
                wait_s = self.options.backoff_s * 2 ** attempt
                time.sleep(wait_s * (1 + 0.25 * random.random()))  # jitter: retries do not move in step
            except Exception as exc:  # noqa: BLE001 - the client gave up after its own retries
                return failed(f"{type(exc).__name__}: {exc}", time.perf_counter() - start)
        raise AssertionError("unreachable")

    def _request(self, conversation: Sequence[ChatMessage], config: GenerationConfig) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self._model_name(),
            "messages": [{"role": m.role, "content": m.content} for m in conversation],
            "max_tokens": config.max_new_tokens, "temperature": config.temperature, "top_p": config.top_p,
        }
        if config.seed is not None:
            request["seed"] = config.seed
        if config.stop:
            request["stop"] = list(config.stop[:MAX_SERVER_STOPS])
        if self.options.stream:
            request.update(stream=True, stream_options={"include_usage": True})
        return request

    def _model_name(self) -> str:
        with self._model_lock:
            if self._model is None:
                listed = self._client.models.list().data
                if not listed:
                    raise BackendSpecError(f"{self.base_url} lists no models: name one in the spec")
                self._model = listed[0].id
                self.name = f"openai:{self.base_url}:{self._model}"
            return self._model

    def _attempt(self, index: int, request: dict[str, Any], start: float) -> tuple[str, str | None, Any]:
        if not self.options.stream:
            reply = self._client.chat.completions.create(**request)
            choice = reply.choices[0]
            return choice.message.content or "", choice.finish_reason, reply.usage
        stream = self._client.chat.completions.create(**request)  # the client retries this call
        pieces: list[str] = []
        finish, usage = None, None
        try:
            for chunk in stream:
                if time.perf_counter() - start > self.options.deadline_s:
                    raise _StreamBroken(f"deadline of {self.options.deadline_s:g} s passed")
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    delta = choice.delta.content or ""
                    if delta:
                        pieces.append(delta)
                        if self.options.on_text is not None:
                            self.options.on_text(index, delta)
                    finish = choice.finish_reason or finish
        except _StreamBroken:
            raise
        except Exception as exc:
            raise _StreamBroken(f"{type(exc).__name__}: {exc}") from exc
        finally:
            stream.close()
        if finish is None:
            raise _StreamBroken("the stream ended without a finish reason")
        return "".join(pieces), finish, usage

    def _generation(self, conversation: Sequence[ChatMessage], config: GenerationConfig, text: str,
                    finish: str | None, usage: Any, start: float) -> Generation:
        text, stopped = cut_at_stop(text, config.stop)
        prompt_tokens = getattr(usage, "prompt_tokens", None)
        if prompt_tokens is None:
            prompt_tokens = sum(self.count_tokens(m.content) for m in conversation)
        completion_tokens = getattr(usage, "completion_tokens", None)
        if completion_tokens is None:
            completion_tokens = self.count_tokens(text)
        reason = "length" if finish == "length" and not stopped else "stop"
        return Generation(text, prompt_tokens, completion_tokens, reason, time.perf_counter() - start)


def from_spec(rest: str, **options) -> OpenAICompatBackend:
    """`openai:<base_url>[:<model>]` with `OpenAIOptions` fields as options (a `model` option wins)."""
    base_url, model = parse_target(rest)
    try:
        parsed = OpenAIOptions(**{"model": model, **options})
    except TypeError as exc:
        raise BackendSpecError(f"openai backend options: {exc}") from exc
    return OpenAICompatBackend(base_url, parsed)
