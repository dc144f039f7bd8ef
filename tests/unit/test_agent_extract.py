"""Code extraction: every way a model formats (or mangles) its answer gets a classified outcome."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cudaperf.agent.extract import ExtractOutcome, extract_code
from cudaperf.agent.prompting import EntryKind

CODE = (
    "import torch\n\n"
    "class ModelNew(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        return x\n"
)
OTHER = CODE.replace("return x", "return x.contiguous()")


def fenced(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code}```\n"


def test_single_fenced_block_is_found():
    got = extract_code("Plan: copy.\n" + fenced(CODE) + "Done.")
    assert (got.outcome, got.code, got.feedback) == (ExtractOutcome.FOUND, CODE, "")


def test_identical_blocks_count_once():
    got = extract_code(fenced(CODE) + "Again:\n" + fenced(CODE))
    assert (got.outcome, got.code, got.blocks) == (ExtractOutcome.FOUND, CODE, 2)


def test_conflicting_blocks_are_reported_not_run():
    got = extract_code(fenced(CODE) + "Better:\n" + fenced(OTHER))
    assert got.outcome is ExtractOutcome.CONFLICTING and got.code is None and "2 different" in got.feedback


def test_conflict_policy_last_runs_the_last_block_with_a_note():
    got = extract_code(fenced(CODE) + fenced(OTHER), on_conflict="last")
    assert got.code == OTHER and "last" in got.feedback


def test_block_without_the_entry_is_ignored_beside_one_with_it():
    helper = "def helper():\n    return 1\n"
    assert extract_code(fenced(helper) + fenced(CODE)).code == CODE


def test_mislabelled_tag_still_counts():
    assert extract_code(fenced(CODE, "cpp")).code == CODE


def test_tilde_fence_is_read():
    assert extract_code(f"~~~py\n{CODE}~~~").code == CODE


def test_closing_fence_glued_to_the_last_line_is_handled():
    got = extract_code(f"```python\n{CODE.rstrip()}```")
    assert got.outcome is ExtractOutcome.FOUND and got.code.rstrip() == CODE.rstrip()


def test_unfenced_module_is_found_with_trailing_prose_trimmed():
    got = extract_code(f"Here is the code:\n{CODE}\nThis should be fast because it copies nothing.")
    assert (got.outcome, got.code, got.fenced) == (ExtractOutcome.FOUND, CODE, False)


def test_reply_cut_inside_the_code_is_truncated():
    got = extract_code(f"```python\n{CODE[:60]}", finish_reason="length")
    assert got.outcome is ExtractOutcome.TRUNCATED and got.code is None and "cut off" in got.feedback


def test_unfenced_reply_cut_off_is_truncated_not_a_parsing_prefix():
    got = extract_code(CODE + "    def extra(self", finish_reason="length")
    assert got.outcome is ExtractOutcome.TRUNCATED


def test_unclosed_block_of_a_finished_reply_is_still_run():
    got = extract_code(f"```python\n{CODE}")
    assert got.outcome is ExtractOutcome.FOUND and got.code == CODE and "not closed" in got.feedback


def test_cuda_only_block_is_no_solution_with_advice():
    got = extract_code(fenced('extern "C" __global__ void k(float* x) { x[0] = 1; }', "cuda"))
    assert got.outcome is ExtractOutcome.NO_SOLUTION and "Python string" in got.feedback


def test_prose_only_is_no_code():
    assert extract_code("I am not able to write that kernel.").outcome is ExtractOutcome.NO_CODE


def test_unfenced_code_without_the_entry_is_no_solution():
    assert extract_code("import torch\nx = 1\n").outcome is ExtractOutcome.NO_SOLUTION


def test_empty_reply_is_empty():
    assert extract_code(" \n ").outcome is ExtractOutcome.EMPTY


def test_code_inside_reasoning_is_ignored():
    reply = "<think>maybe\n" + fenced(OTHER) + "</think>\n" + fenced(CODE)
    assert extract_code(reply).code == CODE


def test_reasoning_cut_off_is_truncated():
    got = extract_code("<think>first I will consider the memory layout", finish_reason="length")
    assert got.outcome is ExtractOutcome.TRUNCATED and "reasoning" in got.feedback


def test_c_entry_function_is_found():
    code = "def saxpy(x, y, a, n):\n    pass\n"
    got = extract_code(fenced(CODE) + fenced(code), "saxpy", EntryKind.FUNCTION)
    assert got.code == code


def test_unknown_conflict_policy_is_rejected():
    try:
        extract_code(CODE, on_conflict="first")
    except ValueError as exc:
        assert "on_conflict" in str(exc)
    else:
        raise AssertionError("on_conflict='first' was accepted")


_PIECES = st.sampled_from(["```", "```python\n", "~~~", "<think>", "</think>", "class ModelNew:\n",
                           "    pass\n", "import torch\n", "def f(:\n", "\n", "x = '''",
                           "```cuda\n__global__ void k(){}\n"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=12)), max_size=12),
       st.sampled_from(["stop", "length", "error"]))
def test_any_text_gets_an_outcome_and_never_raises(parts, finish_reason):
    got = extract_code("".join(parts), finish_reason=finish_reason)
    assert isinstance(got.outcome, ExtractOutcome)
    assert (got.code is not None) == (got.outcome is ExtractOutcome.FOUND)
