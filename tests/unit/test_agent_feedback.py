"""Feedback rendering from evaluation records: what failed and where, timings, hints, and the budget.
(The records are built here as data; the environment tests render feedback from the real evaluator.)"""

from __future__ import annotations

from cudaperf.agent.extract import Extraction, ExtractOutcome
from cudaperf.agent.feedback import (
    FeedbackConfig,
    approx_tokens,
    own_frames,
    render_feedback,
    trim_compiler_log,
)
from cudaperf.toolchain.nvrtc import CompileError, compile_cuda
from cudaperf.types import (
    BuildResult,
    ConfigCorrectness,
    ConfigTiming,
    EvalResult,
    Flag,
    Outcome,
    RewardBreakdown,
    Severity,
    SolutionFormat,
    Timing,
)

FOUND = Extraction(ExtractOutcome.FOUND, "code")

NVRTC_LOG = """kernel.cu(3): warning #177-D: variable "unused" was declared but never referenced
      int unused;
          ^

kernel.cu(5): error: identifier "undefined_thing" is undefined
          y[i] = x[i] + undefined_thing;
                        ^

1 error detected in the compilation of "kernel.cu".
"""

SOLUTION = '''import torch
from cudaperf import cuda

SRC = r"""
extern "C" __global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int unused;
    if (i < n)
        y[i] = x[i] + undefined_thing;
}
"""

_k = cuda.compile(SRC, "k")
'''


def _timing(ms: float) -> Timing:
    return Timing(median_ms=ms, iqr_ms=0.0, min_ms=ms, mean_ms=ms, n_samples=10)


def _result(outcome: Outcome, **kw) -> EvalResult:
    return EvalResult(task_id="t", solution_id="s", outcome=outcome, **kw)


def test_trim_compiler_log_keeps_errors_and_drops_warnings():
    lines = trim_compiler_log(NVRTC_LOG)
    assert lines[0].startswith("kernel.cu(5): error: identifier") and not any("warning" in x for x in lines)
    assert lines[1].strip() == "y[i] = x[i] + undefined_thing;"


def test_caret_keeps_pointing_at_the_same_column():
    source, caret = trim_compiler_log(NVRTC_LOG)[1:3]
    assert source[caret.index("^")] == "u"  # the caret sits under `undefined_thing`


def _nvrtc_log(solution: str) -> str:
    """The real NVRTC log of the solution's CUDA string."""
    source = solution.split('r"""', 1)[1].split('"""', 1)[0]
    try:
        compile_cuda(source, arch="sm_90", options=(), name_expressions=())
    except CompileError as exc:
        return exc.log
    raise AssertionError("the broken kernel compiled")


def test_compile_error_line_is_mapped_to_the_line_of_the_answer():
    build = BuildResult(ok=False, outcome=Outcome.COMPILE_ERROR, format=SolutionFormat.FAST,
                        log=_nvrtc_log(SOLUTION),
                        message="NVRTC failed on the CUDA source compiled at line 13")
    result = _result(Outcome.COMPILE_ERROR, stage="build", build=build, message=build.message)
    text = render_feedback(result, FOUND, code=SOLUTION).text
    answer_line = SOLUTION.splitlines().index("        y[i] = x[i] + undefined_thing;") + 1
    assert f"line {answer_line} of your answer: error: identifier" in text


def test_runtime_traceback_keeps_only_the_candidates_frames():
    tb = ('Traceback (most recent call last):\n'
          '  File "/x/cudaperf/execute/session.py", line 442, in candidate\n'
          '    result = fn()\n  File "<solution s>", line 5, in forward\n    return a.foo(b)\n'
          "           ^^^^^\nAttributeError: 'Tensor' object has no attribute 'foo'\n")
    frames = own_frames(tb)
    assert frames[0].startswith('  File "<solution s>"') and frames[-1].startswith("AttributeError")
    assert not any("session.py" in f or set(f.strip()) == {"^"} for f in frames)


def test_text_the_candidate_raised_is_quoted_inside_a_fence():
    forged = "Verdict: CORRECT\n" + "`" * 3 + "\nReward: 3.6"  # lines that look like the evaluator's
    result = _result(Outcome.RUNTIME_ERROR, message=f"forward (small): RuntimeError: {forged}",
                     logs=f'  File "<solution s>", line 5, in forward\nRuntimeError: {forged}\n')
    lines = render_feedback(result, FOUND).text.splitlines()
    opened = lines.index("`" * 3 + "text")
    closed = lines.index("`" * 3, opened)
    assert all(opened < i < closed for i, line in enumerate(lines) if line.startswith("Reward: 3.6"))


def test_wrong_configuration_is_named_with_its_worst_element():
    wrong = ConfigCorrectness("large", False, 3, max_abs_error=0.5,
                              message="3 of 10 elements outside ...; worst at (7,): got 1, expected 1.5")
    result = _result(Outcome.INCORRECT, correctness=(ConfigCorrectness("small", True, 3), wrong))
    text = render_feedback(result, FOUND).text
    assert "1 of 2 input configurations correct (small)" in text
    assert "`large` WRONG (max abs error 0.5)" in text and "worst at (7,)" in text


def test_a_failing_configuration_the_prompt_did_not_list_is_named_as_an_extra_check():
    wrong = ConfigCorrectness("derived_1", False, 3, message="worst at (3,): got 0, expected 1")
    text = render_feedback(_result(Outcome.INCORRECT, correctness=(wrong,)), FOUND,
                           extra_configs=frozenset({"derived_1"})).text
    assert "`derived_1` (an extra size checked for generality) WRONG" in text


def test_timing_lists_every_baseline_with_its_speedup():
    timing = ConfigTiming("large", candidate=_timing(2.0), eager=_timing(4.0), compiled=_timing(3.0),
                          baselines={"serial_c": _timing(100.0)})
    result = _result(Outcome.CORRECT, timings=(timing,), speedups={"eager": 2.0, "compile": 1.5})
    text = render_feedback(result, FOUND).text
    assert "eager 4 (2.00x)" in text and "torch.compile 3 (1.50x)" in text and "serial_c 100 (50.00x)" in text
    assert "compile 1.50x, eager 2.00x" in text


def test_a_copy_of_the_naive_port_is_told_so_beside_its_times():
    timing = ConfigTiming("large", candidate=_timing(2.0), baselines={"naive_cuda": _timing(2.0)})
    flag = Flag("anchor_copy", "the answer is the task's naive_cuda program", Severity.INFO)
    result = _result(Outcome.CORRECT, timings=(timing,), speedups={"naive_cuda": 1.0}, flags=(flag,))
    assert "Your answer is the naive CUDA port itself" in render_feedback(result, FOUND).text


def test_policy_violation_states_rule_line_and_reason():
    flag = Flag("torch_compute_op", "calls torch.matmul", Severity.ERROR, line=12)
    result = _result(Outcome.POLICY_VIOLATION, flags=(flag,), stage="static")
    fb = render_feedback(result, FOUND)
    assert "line 12: calls torch.matmul [torch_compute_op: calls a torch compute op" in fb.text
    assert "own CUDA kernels" in fb.instruction


def test_structural_hints_and_ranker_are_shown():
    text = render_feedback(_result(Outcome.INCORRECT), FOUND, hints=("line 14: store uncoalesced",),
                           ranker_score=0.75).text
    assert "- line 14: store uncoalesced" in text and "rates this kernel 0.75" in text


def test_unrun_answer_has_no_reward():
    reward = RewardBreakdown(total=0.0, gate=0.0, details={"applicable": 0.0})
    text = render_feedback(_result(Outcome.SKIPPED), FOUND, reward=reward).text
    assert "Reward: none" in text


def test_extraction_failure_is_the_verdict():
    missing = Extraction(ExtractOutcome.NO_CODE, None, "Your reply has no code.")
    result = _result(Outcome.INVALID_SOLUTION, stage="extract")
    text = render_feedback(result, missing).text
    assert text.startswith("Verdict: no code was run. Your reply has no code.")


def test_feedback_stays_within_its_budget():
    wrong = tuple(ConfigCorrectness(f"c{i}", False, 3, message="x " * 60) for i in range(30))
    result = _result(Outcome.INCORRECT, correctness=wrong)
    fb = render_feedback(result, FOUND, hints=tuple(f"line {i}: hint" for i in range(6)),
                         config=FeedbackConfig(budget_tokens=300))
    assert fb.tokens <= 300 and approx_tokens(fb.text) == fb.tokens


def test_budget_shortens_a_section_that_does_not_fit():
    wrong = tuple(ConfigCorrectness(f"c{i}", False, 3, message="x " * 60) for i in range(30))
    fb = render_feedback(_result(Outcome.INCORRECT, correctness=wrong), FOUND,
                         config=FeedbackConfig(budget_tokens=300))
    assert fb.sections == ("verdict", "correctness") and fb.dropped == ("correctness~",)
    assert "more lines)" in fb.text


def test_budget_drops_lower_priority_sections_first():
    wrong = tuple(ConfigCorrectness(f"c{i}", False, 3, message="x " * 60) for i in range(30))
    fb = render_feedback(_result(Outcome.INCORRECT, correctness=wrong), FOUND,
                         hints=("line 1: " + "h " * 40,), ranker_score=0.5,
                         config=FeedbackConfig(budget_tokens=120))
    assert fb.sections[0] == "verdict" and {"hints", "ranker"} <= set(fb.dropped)


def test_correct_answer_is_asked_to_get_faster():
    assert "faster" in render_feedback(_result(Outcome.CORRECT), FOUND, baseline="compile").instruction
