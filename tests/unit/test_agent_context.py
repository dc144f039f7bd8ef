"""The conversation at each turn: reasoning dropped with a summary kept, a history window, the best kernel
always visible, the prompt length reported and kept under a limit."""

from __future__ import annotations

import pytest

from cudaperf.agent.context import ContextConfig, build_context, summarize_reasoning
from cudaperf.agent.prompting import render_task_prompt
from cudaperf.agent.trajectory import TurnRecord
from cudaperf.tasks import load_task
from cudaperf.tasks.examples import example_tasks_dir
from cudaperf.types import EvalResult, Outcome

PROMPT = render_task_prompt(load_task(example_tasks_dir() / "relu.py"))
REASONING = ("First I load four floats at a time. Then I handle the tail. Long musing about warps "
             "that should not survive into the next prompt because it is the chain of thought. " * 3)


def _turn(turn: int, outcome: Outcome = Outcome.INCORRECT, speedup: float | None = None) -> TurnRecord:
    result = EvalResult("relu", f"s{turn}", outcome, message=f"wrong at turn {turn}")
    return TurnRecord(task_id="relu", sample=0, turn=turn, prompt=(),
                      response=REASONING + f"```python\nK{turn}\n```", code=f"KERNEL_{turn} = 1\n",
                      result=result, reward=0.0, feedback=f"FEEDBACK {turn}", speedup=speedup)


def test_first_turn_is_the_system_and_task_messages():
    context = build_context(PROMPT, [])
    assert [m.content for m in context.messages] == [PROMPT.system, PROMPT.user]


def test_earlier_reasoning_is_dropped_and_a_summary_kept():
    context = build_context(PROMPT, [_turn(0)], ContextConfig(summary_chars=80))
    reply = context.messages[2].content
    assert reply.startswith("First I load four floats at a time.") and "chain of thought" not in reply
    assert "KERNEL_0 = 1" in reply and context.messages[3].content == "FEEDBACK 0"


def test_keep_reasoning_keeps_the_whole_prose():
    context = build_context(PROMPT, [_turn(0)], ContextConfig(keep_reasoning=True))
    assert "chain of thought" in context.messages[2].content


def test_turns_beyond_the_window_become_one_line_each():
    history = [_turn(i) for i in range(4)]
    context = build_context(PROMPT, history, ContextConfig(history_window=2))
    assert (context.turns_in_full, context.turns_summarised) == (2, 2)
    assert "- turn 1: INCORRECT (wrong at turn 0)" in context.messages[1].content
    assert not any("KERNEL_0" in m.content or "KERNEL_1" in m.content for m in context.messages)
    assert [m.role for m in context.messages] == ["system", "user", "assistant", "user", "assistant", "user"]


def test_best_kernel_stays_visible_after_it_leaves_the_window():
    history = [_turn(0, Outcome.CORRECT, 1.7), _turn(1), _turn(2)]
    context = build_context(PROMPT, history, ContextConfig(history_window=1))
    assert context.best_turn_shown == 0
    assert "best kernel so far (turn 1: correct, 1.70x over eager)" in context.messages[-1].content
    assert "KERNEL_0 = 1" in context.messages[-1].content


def test_best_kernel_in_the_window_is_not_repeated():
    history = [_turn(0), _turn(1, Outcome.CORRECT, 1.2)]
    context = build_context(PROMPT, history, ContextConfig(history_window=1))
    assert context.best_turn_shown is None and sum("KERNEL_1" in m.content for m in context.messages) == 1


def test_window_shrinks_until_the_prompt_fits():
    history = [_turn(i) for i in range(4)]
    full = build_context(PROMPT, history, ContextConfig(history_window=4))
    limited = build_context(PROMPT, history, ContextConfig(history_window=4,
                                                           max_prompt_tokens=full.prompt_tokens - 1))
    assert limited.fits and limited.turns_in_full < 4 and limited.prompt_tokens < full.prompt_tokens


def test_a_limit_below_the_last_turn_is_reported_unfit():
    context = build_context(PROMPT, [_turn(0), _turn(1)], ContextConfig(max_prompt_tokens=10))
    assert not context.fits and context.turns_in_full == 1


def test_prompt_length_uses_the_given_token_counter():
    context = build_context(PROMPT, [_turn(0)], count_tokens=lambda text: 1)
    assert context.prompt_tokens == len(context.messages) * 5  # 1 per message + 4 for the chat template


def test_window_below_one_is_rejected():
    with pytest.raises(ValueError, match="history_window"):
        ContextConfig(history_window=0)


def test_summary_cuts_at_a_sentence_boundary():
    assert summarize_reasoning("One. Two is longer. Three.", limit=12) == "One."
