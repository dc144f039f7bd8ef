"""The conversation a model sees at each turn, kept short the way Kevin keeps it (arXiv 2507.11948).

Layout of the prompt for turn t:
  system  · the judge and the answer form
  user    · the task; then one line per turn older than the window ("turn 2: COMPILE_ERROR ...")
  then, for each of the last `history_window` turns:
  assistant · a short summary of that reply's reasoning (the chain of thought itself is dropped) and its code
  user      · the feedback on it; the last one also shows the best kernel so far when that kernel is no
              longer in view, so the best kernel is always visible.
The prompt length (tokens, counted with the backend's tokenizer when given) is reported with every context;
with `max_prompt_tokens` the window shrinks (never below the last turn) until the prompt fits.

Not covered: rendering the task (`prompting.py`) or the feedback (`feedback.py`); summarising with a model
(the summary is the reply's first sentences outside code; `summarize` can be any callable instead).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cudaperf.agent.backends.base import ChatMessage
from cudaperf.agent.feedback import TokenCounter, approx_tokens
from cudaperf.agent.prompting import TaskPrompt
from cudaperf.agent.trajectory import TurnRecord, best_turn

_MESSAGE_OVERHEAD_TOKENS = 4  # role markers a chat template adds around each message
_FENCED = re.compile(r"(```|~~~).*?(\1|\Z)", re.DOTALL)
_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL | re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class ContextConfig:
    history_window: int = 2
    """Earlier turns shown in full (summary + code + feedback); older ones get one line each. At least 1:
    the last turn's feedback is what the next answer responds to."""
    keep_reasoning: bool = False
    """Keep the full text of earlier replies outside their code (False: Kevin's choice, a short summary)."""
    summary_chars: int = 300
    """Length of the reasoning summary kept from each earlier reply."""
    show_best: bool = True
    """Show the best kernel so far when it has left the window."""
    max_prompt_tokens: int | None = None
    """Shrink the window until the prompt fits (None: no limit). The task and the last turn always stay."""

    def __post_init__(self) -> None:
        if self.history_window < 1:
            raise ValueError(f"ContextConfig.history_window={self.history_window}: at least 1 (the last turn "
                             "carries the feedback the next answer needs)")


@dataclass(frozen=True)
class Context:
    messages: tuple[ChatMessage, ...]
    prompt_tokens: int  # counted with the given counter, plus a few tokens per message for the template
    turns_in_full: int
    turns_summarised: int
    best_turn_shown: int | None  # the turn whose kernel was added as "best so far", if any
    fits: bool = True  # False when even the smallest window exceeds max_prompt_tokens


def build_context(prompt: TaskPrompt, history: Sequence[TurnRecord], config: ContextConfig = ContextConfig(),
                  count_tokens: TokenCounter = approx_tokens,
                  summarize: Callable[[str], str] | None = None) -> Context:
    """The messages for the next turn after `history` (earlier turns of this trajectory, in order)."""
    summarize = summarize or (lambda reply: summarize_reasoning(reply, config.summary_chars,
                                                                config.keep_reasoning))
    window = min(config.history_window, len(history)) if history else 0
    while True:
        context = _assemble(prompt, history, window, config, count_tokens, summarize)
        fits = config.max_prompt_tokens is None or context.prompt_tokens <= config.max_prompt_tokens
        if fits or window <= 1:
            return context if fits else _unfit(context)
        window -= 1


def _unfit(context: Context) -> Context:
    return Context(context.messages, context.prompt_tokens, context.turns_in_full, context.turns_summarised,
                   context.best_turn_shown, fits=False)


def _assemble(prompt: TaskPrompt, history: Sequence[TurnRecord], window: int, config: ContextConfig,
              count_tokens: TokenCounter, summarize: Callable[[str], str]) -> Context:
    older, shown = list(history[: len(history) - window]), list(history[len(history) - window:])
    first = prompt.user
    if older:
        first += "\n\n# Your earlier turns (summarised)\n" + "\n".join(_one_line(t) for t in older)
    messages = [ChatMessage("system", prompt.system), ChatMessage("user", first)]
    for t in shown:
        messages.append(ChatMessage("assistant", _assistant_view(t, summarize)))
        messages.append(ChatMessage("user", t.feedback))
    best = best_turn(history)
    best_shown = None
    if config.show_best and best is not None and best.correct and best.code and best not in shown:
        messages[-1] = ChatMessage("user", messages[-1].content.rstrip() + "\n\n" + _best_view(best))
        best_shown = best.turn
    tokens = sum(count_tokens(m.content) + _MESSAGE_OVERHEAD_TOKENS for m in messages)
    return Context(tuple(messages), tokens, len(shown), len(older), best_shown)


def _one_line(t: TurnRecord) -> str:
    verdict = t.result.outcome.value.upper()
    if t.speedup is not None:
        verdict += f", {t.speedup:.2f}x over {t.baseline}"
    why = " ".join(t.result.message.split())[:120] if not t.correct else ""
    return f"- turn {t.turn + 1}: {verdict}" + (f" ({why})" if why else "")


def _assistant_view(t: TurnRecord, summarize: Callable[[str], str]) -> str:
    summary = summarize(t.response)
    if t.code is None:  # nothing was extracted: show what was said, briefly
        return summary or "(no answer)"
    head = f"{summary}\n\n" if summary else ""
    return f"{head}```python\n{t.code.rstrip()}\n```"


def _best_view(t: TurnRecord) -> str:
    return (f"For reference, your best kernel so far (turn {t.turn + 1}: correct, "
            + (f"{t.speedup:.2f}x over {t.baseline}" if t.speedup is not None else "not timed")
            + f"):\n```python\n{(t.code or '').rstrip()}\n```")


def summarize_reasoning(reply: str, limit: int = 300, keep_all: bool = False) -> str:
    """The reply's prose (code blocks and <think> sections removed), cut to its first sentences within
    `limit` characters; with `keep_all`, all of the prose."""
    prose = _FENCED.sub(" ", _THINK.sub(" ", reply))
    prose = " ".join(prose.split())
    if keep_all or len(prose) <= limit:
        return prose
    kept = ""
    for sentence in _SENTENCE_END.split(prose):
        if len(kept) + len(sentence) + 1 > limit:
            break
        kept = f"{kept} {sentence}".strip()
    return kept or prose[: limit - 3] + "..."
