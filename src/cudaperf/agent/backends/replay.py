"""`replay:<file.jsonl>`: a backend that returns recorded replies in order.

Each line of the file is one JSON object holding the reply as `text` (a trajectory record's `response`
key is read too, so a recorded run can be re-scored with a new evaluator). Optional keys
`prompt_tokens`, `completion_tokens` and `finish_reason` are passed through when present.

Covers: replies handed out one per conversation, in file order, across calls and threads. Once the file
is used up every further conversation gets an error `Generation` ("replay exhausted"), not an exception.

Not covered: matching replies to prompts (order is the only key), applying `GenerationConfig` (the
recorded text is returned as it was recorded: no stop strings, no length limit), real token counts
(`count_tokens` is a tokenizer-free estimate unless the record carries counts).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cudaperf.agent.backends._common import failed, rough_token_count
from cudaperf.agent.backends.base import BackendSpecError, ChatMessage, Generation, GenerationConfig


@dataclass(frozen=True)
class RecordedReply:
    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str = "stop"


def read_replies(path: Path) -> list[RecordedReply]:
    """The replies of a replay file; raises `BackendSpecError` naming the bad line."""
    replies = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            replies.append(_reply(json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise BackendSpecError(f"{path}:{number}: not a replay record ({exc})") from exc
    return replies


def _reply(record: object) -> RecordedReply:
    if not isinstance(record, dict):
        raise TypeError("a line must be a JSON object")
    text = record.get("text", record.get("response"))
    if not isinstance(text, str):
        raise TypeError("no string 'text' (or 'response') key")
    return RecordedReply(
        text=text,
        prompt_tokens=record.get("prompt_tokens"),
        completion_tokens=record.get("completion_tokens"),
        finish_reason=record.get("finish_reason") or "stop",
    )


class ReplayBackend:
    """Hands out `replies` one per conversation, in order; thread-safe."""

    def __init__(self, replies: Sequence[RecordedReply], name: str = "replay") -> None:
        self.name = name
        self._replies = list(replies)
        self._next = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        return len(self._replies) - self._next

    def generate(
        self, conversations: Sequence[Sequence[ChatMessage]], config: GenerationConfig
    ) -> list[Generation]:
        return [self._one(conversation) for conversation in conversations]

    def _one(self, conversation: Sequence[ChatMessage]) -> Generation:
        start = time.perf_counter()
        prompt_tokens = sum(rough_token_count(m.content) for m in conversation)
        with self._lock:
            index = self._next
            self._next += index < len(self._replies)
        if index >= len(self._replies):
            return failed(f"replay exhausted after {len(self._replies)} replies", 0.0, prompt_tokens)
        reply = self._replies[index]
        return Generation(
            text=reply.text,
            prompt_tokens=reply.prompt_tokens if reply.prompt_tokens is not None else prompt_tokens,
            completion_tokens=(
                reply.completion_tokens
                if reply.completion_tokens is not None
                else rough_token_count(reply.text)
            ),
            finish_reason=reply.finish_reason,
            duration_s=time.perf_counter() - start,
        )

    def count_tokens(self, text: str) -> int:
        return rough_token_count(text)

    def close(self) -> None:
        pass


def from_spec(rest: str, **options) -> ReplayBackend:
    """`replay:<file.jsonl>`; raises `BackendSpecError` for a missing or malformed file."""
    if options:
        raise BackendSpecError(f"the replay backend takes no options (got {sorted(options)})")
    if not rest:
        raise BackendSpecError("the replay backend needs a file: 'replay:<file.jsonl>'")
    path = Path(rest).expanduser()
    if not path.is_file():
        raise BackendSpecError(f"replay file {path} does not exist")
    return ReplayBackend(read_replies(path), name=f"replay:{path}")
