"""Repair examples for SFT (`train.repair_data`): each fault breaks a real dataset implementation the way
it intends, the real environment renders the second turn with the real evaluator's verdict (no GPU: the
static verdict and the NVRTC build), and the example teaches the intact implementation after it."""

from __future__ import annotations

import pytest

from cudaperf.agent.prompting import EntryKind, render_task_prompt
from cudaperf.agent.taskset import task_from_generated
from cudaperf.datasets import registry
from cudaperf.evaluate import EvalConfig, Evaluator
from cudaperf.train.config import REPAIR_FAULT_KINDS, ConfigError, SftConfig
from cudaperf.train.repair_data import (
    FAULTS,
    break_reply,
    build_repair_examples,
    faults_of,
    repair_turn_messages,
)
from cudaperf.train.sft_data import IGNORE, answer_text

# What the feedback of each fault says (the environment's own wording of the verdict).
SAYS = {"truncated": "cut off", "no_entry": "None of your code blocks defines", "syntax": "SYNTAX_ERROR",
        "forbidden_import": "import of `os` is not allowed", "compile": "COMPILE_ERROR"}


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvalConfig(device="none", analyze=False)) as ev:
        yield ev


@pytest.fixture(scope="module", params=["pytorch", "c"])
def task(request):
    """A real dataset task of each kind with generated implementations."""
    return next(g for g in registry.build_index(0)
                if g.kind.value == request.param and registry.implementations(g))


@pytest.fixture(scope="module")
def tokenizer():
    from cudaperf.agent.backends.tiny import tiny_chat_model

    return tiny_chat_model(hidden_size=64)[1]


def entry_of(task):
    prompt = render_task_prompt(task_from_generated(task))
    return prompt.entry, prompt.entry_kind


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_fails_as_intended_and_the_feedback_says_so(task, fault, evaluator):
    impl = registry.implementations(task)[0]
    reply = break_reply(impl.source, fault, *entry_of(task))
    messages = repair_turn_messages(task, reply, evaluator)
    assert messages is not None and messages[-1]["role"] == "user"
    assert SAYS[fault] in messages[-1]["content"]


def test_an_intact_reply_gives_no_example(task, evaluator):
    """The check is real: a 'compile' fault that compiles (here: no fault at all) is dropped."""
    from cudaperf.train.repair_data import BrokenReply

    intact = BrokenReply("compile", answer_text(registry.implementations(task)[0].source), "stop")
    assert repair_turn_messages(task, intact, evaluator) is None


def test_a_fault_without_a_place_in_the_source_gives_no_reply():
    source = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
    assert break_reply(source, "compile", "ModelNew", EntryKind.CLASS) is None


def test_a_tasks_faults_are_reproducible_and_of_distinct_kinds():
    assert faults_of("pt_x_1", 3) == faults_of("pt_x_1", 3)
    assert len(set(faults_of("pt_x_1", REPAIR_FAULT_KINDS))) == len(FAULTS) == REPAIR_FAULT_KINDS
    assert len({faults_of(f"t{i}", 1) for i in range(40)}) == len(FAULTS)  # the first kind is spread


def test_the_example_answers_the_intact_implementation_with_the_prompt_masked(task, tokenizer, evaluator):
    config = SftConfig(model="tiny", repair_per_task=2, max_length=1 << 16)
    examples, counts = build_repair_examples([task], tokenizer, config, None, evaluator)
    assert len(examples) == 2 and sum(counts.values()) == 2
    impls = {i.impl_id: i for i in registry.implementations(task)}
    for e in examples:
        impl = impls[e.example_id.split("~")[0]]
        answer = tokenizer(answer_text(impl.source), add_special_tokens=False)["input_ids"]
        assert list(e.input_ids[e.prompt_tokens:e.prompt_tokens + len(answer)]) == answer
        assert set(e.labels[:e.prompt_tokens]) == {IGNORE} and e.labels[e.prompt_tokens:] == e.input_ids[
            e.prompt_tokens:]


def test_examples_longer_than_max_length_are_counted_not_kept(task, tokenizer, evaluator):
    config = SftConfig(model="tiny", repair_per_task=1, max_length=256)
    examples, counts = build_repair_examples([task], tokenizer, config, None, evaluator)
    assert not examples and sum(v for k, v in counts.items() if k.endswith(":too_long")) == 1


@pytest.mark.parametrize("per_task", [-1, REPAIR_FAULT_KINDS + 1])
def test_a_repair_count_out_of_range_is_refused(per_task, tmp_path):
    with pytest.raises(ConfigError, match="repair_per_task"):
        SftConfig(model="tiny", output_dir=str(tmp_path), repair_per_task=per_task)


def test_the_dry_run_counts_the_repair_examples(tmp_path, capsys):
    from cudaperf.cli import main

    code = main(["train", "sft", "--dry-run", "--model", "tiny", "--output-dir", str(tmp_path),
                 "--limit-tasks", "2", "--val-limit-tasks", "1", "--kinds", "c", "--families", "gemv",
                 "--repair-per-task", "2", "--max-length", "65536"])
    out = capsys.readouterr().out
    assert code == 0 and "repair examples: 4 (" in out and "train: 4 second-turn examples kept" in out
