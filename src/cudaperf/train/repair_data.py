"""Repair examples for SFT: a second turn that fixes a failed first answer, as the agent renders it, built
from the dataset's verified implementations.

An example is a trajectory's conversation at its second turn (the task prompt, a broken copy of a verified
implementation as the first reply, the feedback the environment renders for it) followed by the intact
implementation as the answer. The conversation is made by the real environment (`agent.environment.
RefineEnv`: reset, prepare, observe), and the broken reply is judged by the real evaluator without a GPU
(`Evaluator` with `device='none'`: the static verdict and the NVRTC build run, correctness and timing do
not), so the feedback is the one a rollout gets for that failure. A fault that does not fail as intended
(the build still succeeds, say) gives no example.

Why: in session 33's comparison (H100, dev/LOG.md) 35 of 48 first replies of the SFT model failed and its
second replies fixed none of them: 21 of 48 carried no solution at all. SFT had shown the model first turns
only (and, with `refine_per_task`, second turns after correct answers), never a failure and its fix.

The faults (`FAULTS`), each a failure the evaluator named in the replies of sessions 32 and 33:
- 'truncated': the reply cut half way between the entry point's definition and its end, as by the token
  limit (extraction: truncated);
- 'no_entry': the entry point renamed where it is defined (extraction: no_solution);
- 'syntax': the colon dropped from the entry point's definition (static verdict: syntax_error);
- 'forbidden_import': `import os` added (static verdict: policy_violation, forbidden_import);
- 'compile': a semicolon dropped from the first kernel's body (NVRTC: compile_error).
A task's faults follow a rotation that starts at a hash of its id (reproducible, spread over the kinds).

Covers: making the broken replies (`break_reply`), the second-turn conversation, the examples' tokens
(prompt masked out of the loss, as `sft_data.build_examples`). Not covered: failures that need a GPU to show
(wrong results, crashes, timeouts), turns after the second.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cudaperf.agent.backends.base import Generation
from cudaperf.agent.environment import EnvConfig, RefineEnv
from cudaperf.agent.prompting import EntryKind, render_task_prompt
from cudaperf.agent.taskset import task_from_generated
from cudaperf.datasets.records import GeneratedTask, Implementation
from cudaperf.train.config import SftConfig
from cudaperf.train.models import answer_ids, prompt_ids, token_counter
from cudaperf.train.sft_data import MeasuredImpl, SftExample, answer_text, masked_example, task_impls
from cudaperf.types import EvalResult, Outcome

# config.REPAIR_FAULT_KINDS of them
FAULTS = ("truncated", "no_entry", "syntax", "forbidden_import", "compile")
# What each fault must produce for its example to be kept: the extraction's outcome for a reply the
# evaluator never sees, else the evaluator's.
EXPECTED = {"truncated": "truncated", "no_entry": "no_solution", "syntax": Outcome.SYNTAX_ERROR.value,
            "forbidden_import": Outcome.POLICY_VIOLATION.value, "compile": Outcome.COMPILE_ERROR.value}


@dataclass(frozen=True)
class BrokenReply:
    """A first reply with one fault in it."""

    fault: str
    text: str  # the reply as the model would have written it
    finish_reason: str  # 'length' for a reply cut by the token limit, else 'stop'


def faults_of(task_id: str, per_task: int) -> tuple[str, ...]:
    """The `per_task` faults (at most one of each kind) a task's examples carry."""
    start = zlib.crc32(task_id.encode())
    return tuple(FAULTS[(start + k) % len(FAULTS)] for k in range(min(per_task, len(FAULTS))))


def break_reply(source: str, fault: str, entry: str, entry_kind: EntryKind) -> BrokenReply | None:
    """`source`'s reply with `fault` in it, or None where the fault has no place in this source."""
    if fault == "truncated":  # cut after the entry point's definition, half way to the end
        text = answer_text(source)
        found = re.search(_definition(entry, entry_kind), text, flags=re.M)
        return None if found is None else BrokenReply(
            fault, text[:found.end() + (len(text) - found.end()) // 2], "length")
    broken = {"no_entry": _rename_entry, "syntax": _drop_entry_colon, "forbidden_import": _add_import,
              "compile": _drop_kernel_semicolon}[fault](source, entry, entry_kind)
    return None if broken is None or broken == source else BrokenReply(fault, answer_text(broken), "stop")


def _definition(entry: str, entry_kind: EntryKind) -> str:
    """A pattern of the line that defines the entry point (one line: `class X(...):` or `def x(...):`)."""
    keyword = "class" if entry_kind is EntryKind.CLASS else "def"
    return rf"^({keyword} {re.escape(entry)})(\b[^\n]*):[ \t]*$"


def _rename_entry(source: str, entry: str, entry_kind: EntryKind) -> str | None:
    new, n = re.subn(_definition(entry, entry_kind), r"\1_impl\2:", source, count=1, flags=re.M)
    return new if n else None


def _drop_entry_colon(source: str, entry: str, entry_kind: EntryKind) -> str | None:
    new, n = re.subn(_definition(entry, entry_kind), r"\1\2", source, count=1, flags=re.M)
    return new if n else None


def _add_import(source: str, entry: str, entry_kind: EntryKind) -> str | None:
    new, n = re.subn(r"^(import |from )", r"import os\n\1", source, count=1, flags=re.M)
    return new if n else None


def _drop_kernel_semicolon(source: str, entry: str, entry_kind: EntryKind) -> str | None:
    kernel = source.find("__global__")
    semicolon = source.find(";\n", source.find("{", kernel)) if kernel >= 0 else -1
    return source[:semicolon] + source[semicolon + 1:] if semicolon > 0 else None


def repair_turn_messages(task: GeneratedTask, reply: BrokenReply, evaluator: Any,
                         count_tokens: Any = None) -> list[dict[str, str]] | None:
    """The conversation the environment gives the model at turn 2 after `reply`, judged by `evaluator`
    (an `Evaluator` without a GPU); None when the reply did not fail as its fault intends."""
    env = RefineEnv(EnvConfig(max_turns=2), count_tokens=count_tokens)
    env.reset(task_from_generated(task))
    pending = env.prepare(Generation(reply.text, 0, 0, reply.finish_reason, 0.0))
    result: EvalResult | None = None
    if pending.solution is not None:
        result = evaluator.evaluate(env.task, pending.solution)
    observed = pending.extraction.outcome.value if result is None else result.outcome.value
    if observed != EXPECTED[reply.fault]:
        return None
    env.observe(pending, result)
    return env.prompt_messages()


def build_repair_examples(tasks: Iterable[GeneratedTask], tokenizer: Any, config: SftConfig,
                          verified: dict[str, MeasuredImpl] | None,
                          evaluator: Any = None) -> tuple[list[SftExample], Counter]:
    """Every repair example of `tasks` (`config.repair_per_task` a task at most, each on one of the
    implementations SFT trains on, in turn) within `config.max_length` (longer ones are dropped, never
    cut), and a count of what happened to each fault ('<fault>' kept, '<fault>:too_long', '<fault>:no_place',
    '<fault>:did_not_fail'). `evaluator`: an open `Evaluator`; default, one without a GPU, opened here."""
    if evaluator is None:
        from cudaperf.evaluate import EvalConfig, Evaluator

        with Evaluator(EvalConfig(device="none", analyze=False)) as own:
            return build_repair_examples(tasks, tokenizer, config, verified, own)
    examples: list[SftExample] = []
    counts: Counter = Counter()
    count = token_counter(tokenizer)
    for task in tasks:
        impls = task_impls(task, config, verified)
        if not impls:
            continue
        entry = render_task_prompt(task_from_generated(task))  # the name the faults break, once a task
        for k, fault in enumerate(faults_of(task.task_id, config.repair_per_task)):
            impl = impls[k % len(impls)]
            reply = break_reply(impl.source, fault, entry.entry, entry.entry_kind)
            example = _example(task, impl, reply, tokenizer, config, evaluator, count)
            counts[fault if isinstance(example, SftExample) else f"{fault}:{example}"] += 1
            if isinstance(example, SftExample):
                examples.append(example)
    return examples, counts


def _example(task: GeneratedTask, impl: Implementation, reply: BrokenReply | None, tokenizer: Any,
             config: SftConfig, evaluator: Any, count: Any) -> SftExample | str:
    """The example of `impl` broken into `reply`, or why there is none."""
    if reply is None:
        return "no_place"
    messages = repair_turn_messages(task, reply, evaluator, count)
    if messages is None:
        return "did_not_fail"
    ids = prompt_ids(tokenizer, messages)
    answer = answer_ids(tokenizer, answer_text(impl.source))
    if len(ids) + len(answer) > config.max_length:
        return "too_long"
    return masked_example(f"{impl.impl_id}~{reply.fault}", task, ids, answer)


__all__ = ["EXPECTED", "FAULTS", "BrokenReply", "break_reply", "build_repair_examples", "faults_of",
           "repair_turn_messages"]
