"""Small helpers every backend shares: stop-string truncation, error records, a rough token count.

Not covered: anything that needs a tokenizer or a model (those live in the backend modules).
"""

from __future__ import annotations

import re

from cudaperf.agent.backends.base import Generation

ERROR_TEXT_CHARS = 2000  # errors are kept short: they go into JSONL trajectories and logs


def cut_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """`text` up to (not including) the earliest stop string, and whether one was found."""
    ends = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(ends)], True) if ends else (text, False)


def failed(error: str, duration_s: float, prompt_tokens: int = 0) -> Generation:
    """The record of a generation that did not happen (or did not finish)."""
    return Generation(
        text="",
        prompt_tokens=prompt_tokens,
        completion_tokens=0,
        finish_reason="error",
        duration_s=duration_s,
        error=error[:ERROR_TEXT_CHARS],
    )


_WORDS = re.compile(r"\w+|[^\w\s]")


def rough_token_count(text: str) -> int:
    """Words and punctuation marks: a tokenizer-free estimate, used only where no tokenizer exists."""
    return len(_WORDS.findall(text))
