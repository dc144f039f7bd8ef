"""Feedback for the next turn: what happened to an answer, said in a few lines that fit a token budget.

Covers, in order of priority (a section that does not fit the budget is shortened, then dropped, lowest
priority first): the verdict; anti-cheat verdicts stated plainly (the rule, the line, why); compiler errors
trimmed to the error lines with their source line, mapped from `kernel.cu(N)` to the line of the answer;
runtime errors cut to the candidate's own frames; which configuration failed and how (the checker's
message: count of wrong elements, the worst one, got vs expected); timings per configuration against
every baseline that ran (eager, torch.compile, serial C, the naive CUDA port); structural hints that point
at source lines (from `cudaperf.analysis`); the ranker's score when a ranker is given; the reward.

Not covered: evaluating (the evaluator), the structural analysis itself (`cudaperf.analysis`), how the
feedback enters the conversation (`context.py`). Nothing here raises on an odd record.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cudaperf.agent.extract import Extraction
from cudaperf.types import EvalResult, Flag, Outcome, RewardBreakdown, Severity

TokenCounter = Callable[[str], int]
"""Counts tokens the way the model's tokenizer does (a backend's `count_tokens`)."""

_EXPLAIN = {
    Outcome.CORRECT: "correct on every input configuration",
    Outcome.INCORRECT: "it ran, but some outputs were wrong",
    Outcome.SYNTAX_ERROR: "the module is not valid Python",
    Outcome.INVALID_SOLUTION: "the module does not define what the task asks for",
    Outcome.POLICY_VIOLATION: "rejected by the rules: it must do the work in its own kernels",
    Outcome.COMPILE_ERROR: "the CUDA source did not compile",
    Outcome.RUNTIME_ERROR: "a Python exception while building or running the model",
    Outcome.CUDA_ERROR: "a CUDA error while running a kernel (out-of-bounds access, bad launch...)",
    Outcome.OUT_OF_MEMORY: "out of memory",
    Outcome.TIMEOUT: "it ran past its deadline (an infinite loop or a deadlock?)",
    Outcome.CRASH: "the process running it crashed",
    Outcome.OUTPUT_TOO_LARGE: "the output is larger than the task allows",
    Outcome.SKIPPED: "not run here (no GPU on this machine); it was built and checked statically",
    Outcome.HARNESS_ERROR: "the judge itself failed on this answer (not your fault)",
}
_ERROR_LINE = re.compile(r"\berror\b", re.IGNORECASE)
_CUDA_LINE = re.compile(r"kernel\.cu\((\d+)\)")
_UNIT_LINE = re.compile(r"compiled at line (\d+)")
_PATH = re.compile(r"(?:/[\w.+-]+)+/([\w.+-]+)")  # long build paths shortened to the file name


def approx_tokens(text: str) -> int:
    """A tokenizer-free estimate (~4 bytes a token), used when no backend tokenizer is given."""
    return len(text.encode("utf-8")) // 4 + 1


@dataclass(frozen=True)
class FeedbackConfig:
    budget_tokens: int = 1200
    """Largest feedback message, in the model's tokens; sections are shortened or dropped to fit."""
    compiler_lines: int = 16
    """Most lines of compiler output kept (error lines with their source line and caret)."""
    traceback_lines: int = 10
    """Most lines of a runtime traceback kept (the candidate's own frames and the exception)."""
    hints: int = 6
    """Most structural hints shown."""
    show_reward: bool = True
    """State the reward of the turn (what the trainer optimises)."""


@dataclass(frozen=True)
class Feedback:
    text: str
    tokens: int
    sections: tuple[str, ...]  # sections kept, in order
    dropped: tuple[str, ...]  # sections shortened ("name~") or dropped ("name") for the budget
    instruction: str  # what to do next, one sentence


@dataclass(frozen=True)
class _Section:
    name: str
    lines: tuple[str, ...]


def render_feedback(result: EvalResult, extraction: Extraction, *, code: str | None = None,
                    hints: Sequence[str] = (), ranker_score: float | None = None,
                    reward: RewardBreakdown | None = None, baseline: str = "eager",
                    extra_configs: frozenset[str] = frozenset(),
                    config: FeedbackConfig = FeedbackConfig(),
                    count_tokens: TokenCounter = approx_tokens) -> Feedback:
    """The feedback on one answer. `result` is its evaluation (for an answer without code, the record the
    loop made for it); `hints` are structural findings ("line 14: ..."); `baseline` names the speedup
    the instruction refers to; `extra_configs` are configurations the prompt did not list (derived
    generality checks), named as such when they fail."""
    sections = [
        _verdict(result, extraction),
        _policy(result),
        _compiler(result, code, config.compiler_lines),
        _runtime(result, config.traceback_lines),
        _correctness(result, extra_configs),
        _timing(result),
        _hints(result, hints, config.hints),
        _ranker(ranker_score),
        _reward(reward) if config.show_reward else _Section("reward", ()),
    ]
    kept, dropped = _fit([s for s in sections if s.lines], config.budget_tokens, count_tokens)
    text = "\n\n".join("\n".join(s.lines) for s in kept)
    return Feedback(text, count_tokens(text), tuple(s.name for s in kept), tuple(dropped),
                    instruction(result, baseline))


def instruction(result: EvalResult, baseline: str = "eager") -> str:
    """One sentence: what the next answer should do."""
    if result.outcome is Outcome.CORRECT:
        return f"It is correct: now make it faster (the speedup over {baseline} is what counts)."
    if result.outcome is Outcome.SKIPPED:
        return "Improve it if you can."
    if result.outcome is Outcome.POLICY_VIOLATION:
        return "Rewrite it so that your own CUDA kernels do all the computation."
    return "Fix the problem above."


# -- sections --------------------------------------------------------------------------------------


def _verdict(result: EvalResult, extraction: Extraction) -> _Section:
    if result.stage == "extract":
        return _Section("verdict", ("Verdict: no code was run. " + extraction.feedback,))
    lines = [f"Verdict: {result.outcome.value.upper()} — {_EXPLAIN.get(result.outcome, '')}."]
    if extraction.feedback:
        lines.append("Note: " + extraction.feedback)
    if result.outcome in (Outcome.SYNTAX_ERROR, Outcome.INVALID_SOLUTION, Outcome.TIMEOUT, Outcome.CRASH,
                          Outcome.OUT_OF_MEMORY, Outcome.OUTPUT_TOO_LARGE, Outcome.HARNESS_ERROR) \
            and result.message:
        lines.append(_clip(result.message, 400))
    return _Section("verdict", tuple(lines))


def _policy(result: EvalResult) -> _Section:
    from cudaperf.anticheat.policy import RULES

    errors = [f for f in result.flags if f.severity is Severity.ERROR]
    if not errors:
        return _Section("policy", ())
    lines = ["Rule violations (each one alone makes the answer worthless):"]
    for f in errors[:6]:
        rule = RULES.get(f.code)
        why = f" [{f.code}: {rule.summary}]" if rule else f" [{f.code}]"
        lines.append(f"- {_where(f)}{_clip(f.message, 200)}{why}")
    return _Section("policy", tuple(lines))


def _where(flag: Flag) -> str:
    if flag.line:
        return f"line {flag.line}: "
    return f"configuration {flag.config}: " if flag.config else ""


def _compiler(result: EvalResult, code: str | None, limit: int) -> _Section:
    if result.outcome is not Outcome.COMPILE_ERROR:
        return _Section("compiler", ())
    log = (result.build.log if result.build else "") or result.logs
    lines = trim_compiler_log(log, limit)
    line_of = _cuda_line_mapper(code, result.message)
    mapped = [_CUDA_LINE.sub(lambda m: f"line {line_of(int(m.group(1)))}", ln) for ln in lines]
    head = f"Compiler errors ({_clip(result.message, 120)}):" if result.message else "Compiler errors:"
    return _Section("compiler", (head, *mapped) if mapped else (head, "(no compiler output)"))


def trim_compiler_log(log: str, limit: int = 16) -> list[str]:
    """The error lines of a compiler log, each with the source line and caret that follow it; warnings,
    notes and build-tool noise dropped; long paths cut to the file name."""
    lines = [_PATH.sub(r"\1", ln.rstrip()) for ln in log.splitlines()]
    kept: list[str] = []
    i = 0
    while i < len(lines) and len(kept) < limit:
        if _ERROR_LINE.search(lines[i]) and "warning" not in lines[i].lower():
            kept.append(lines[i].strip())
            kept.extend(_quoted_source(lines[i + 1:i + 3]))
            i += 3
            continue
        i += 1
    return kept[:limit]


def _quoted_source(lines: list[str]) -> list[str]:
    """The source line and caret under an error, re-indented together so the caret still points right."""
    quoted = []
    for line in lines:
        if not line.strip() or _ERROR_LINE.search(line) or "warning" in line.lower():
            break
        quoted.append(line)
    indent = min((len(q) - len(q.lstrip()) for q in quoted), default=0)
    return ["    " + q[indent:] for q in quoted]


def _cuda_line_mapper(code: str | None, message: str) -> Callable[[int], str]:
    """kernel.cu line -> "N of your answer" when the unit's place in the answer is known."""
    unit_map: tuple[int, ...] | None = None
    if code:
        try:
            from cudaperf.analysis.sources import solution_sources

            units = [u for u in solution_sources(code).units if u.kind == "nvrtc"]
        except Exception:  # noqa: BLE001 - a mapping is a nicety: without it the CUDA line is shown
            units = []
        m = _UNIT_LINE.search(message or "")
        chosen = [u for u in units if m and u.python_line == int(m.group(1))] or (units if len(units) == 1
                                                                                  else [])
        unit_map = chosen[0].line_map if chosen else None

    def line_of(n: int) -> str:
        if unit_map and 0 < n <= len(unit_map) and unit_map[n - 1]:
            return f"{unit_map[n - 1]} of your answer"
        return f"{n} of the CUDA source"

    return line_of


def _runtime(result: EvalResult, limit: int) -> _Section:
    if result.outcome not in (Outcome.RUNTIME_ERROR, Outcome.CUDA_ERROR):
        return _Section("runtime", ())
    first = result.message.splitlines()[0] if result.message else ""
    frames = own_frames(result.logs or result.message, limit)
    # The candidate's own text, fenced and every line clipped, under a label: it can hold lines that
    # look like the evaluator's (a verdict, a timing table, a reward), which must not read as ours.
    quoted = [_clip(x, _QUOTED_LINE_CHARS).replace(_FENCE, "'''") for x in (first, *frames) if x]
    if not quoted:
        return _Section("runtime", ())
    return _Section("runtime", (_QUOTED_LABEL, _FENCE + "text", *quoted, _FENCE))


_FENCE = "`" * 3
_QUOTED_LABEL = "Your code raised (its own text, quoted as it printed it):"
_QUOTED_LINE_CHARS = 300


def own_frames(traceback: str, limit: int = 10) -> list[str]:
    """The end of a traceback from the candidate's first frame (`<solution ...>`): harness frames cut."""
    lines = [ln.rstrip() for ln in traceback.splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if "<solution" in ln), max(0, len(lines) - limit))
    return [ln for ln in lines[start:] if set(ln.strip()) != {"^"}][-limit:]


def _correctness(result: EvalResult, extra: frozenset[str] = frozenset()) -> _Section:
    if not result.correctness:
        return _Section("correctness", ())
    wrong = [c for c in result.correctness if not c.correct]
    right = [c.config for c in result.correctness if c.correct]
    lines = [f"Correctness: {len(right)} of {len(result.correctness)} input configurations correct"
             + (f" ({', '.join(right)})." if right and wrong else ".")]
    for c in wrong:
        err = f" (max abs error {c.max_abs_error:.3g})" if c.max_abs_error is not None else ""
        what = " (an extra size checked for generality)" if c.config in extra else ""
        lines.append(f"- `{c.config}`{what} WRONG{err}: {_clip(c.message, 300)}")
    return _Section("correctness", tuple(lines))


def _timing(result: EvalResult) -> _Section:
    if not result.timings:
        return _Section("timing", ())
    lines = ["Timing (median ms; speedup = baseline time / your time, above 1 is faster):"]
    for t in result.timings:
        parts = [f"yours {t.candidate.median_ms:.4g}"]
        named = {"eager": t.eager, "torch.compile": t.compiled,
                 **{k: v for k, v in t.baselines.items() if k != "inout_restore"}}
        for name, timing in named.items():
            if timing is not None and t.candidate.median_ms > 0:
                ratio = timing.median_ms / t.candidate.median_ms
                parts.append(f"{name} {timing.median_ms:.4g} ({ratio:.2f}x)")
        lines.append(f"- `{t.config}`: " + ", ".join(parts))
    overall = ", ".join(f"{k} {v:.2f}x" for k, v in sorted(result.speedups.items()) if k != "inout_restore")
    if overall:
        lines.append(f"Overall speedup (geometric mean over configurations): {overall}.")
    if any(f.code == "anchor_copy" for f in result.flags):  # eval_modes, point 7
        lines.append("Your answer is the naive CUDA port itself (docstrings aside), so its times are the "
                     "port's: only a different kernel can be faster.")
    return _Section("timing", tuple(lines))


def _hints(result: EvalResult, hints: Sequence[str], limit: int) -> _Section:
    if not hints:
        return _Section("hints", ())
    return _Section("hints", ("Structural analysis of your kernels:", *(f"- {h}" for h in hints[:limit])))


def _ranker(score: float | None) -> _Section:
    if score is None:
        return _Section("ranker", ())
    text = (f"The performance ranker rates this kernel {score:.2f} (0 = likely slower than the reference, "
            "1 = likely faster).")
    return _Section("ranker", (text,))


def _reward(reward: RewardBreakdown | None) -> _Section:
    if reward is None:
        return _Section("reward", ())
    if not reward.details.get("applicable", 1.0):
        return _Section("reward", ("Reward: none (this answer was not run, so it could not be scored).",))
    parts = [f"{name} {value:+.3g}" for name, value in (("speed", reward.speedup_term),
             ("structure", reward.structural_term), ("ranker", reward.ranker_term)) if value]
    detail = f" ({', '.join(parts)})" if parts and reward.gate else ""
    return _Section("reward", (f"Reward: {reward.total:.3g}{detail}.",))


# -- the budget ------------------------------------------------------------------------------------


def _fit(sections: list[_Section], budget: int, count: TokenCounter) -> tuple[list[_Section], list[str]]:
    """Sections in priority order, each whole if it fits, else cut to the lines that fit, else dropped."""
    kept: list[_Section] = []
    dropped: list[str] = []
    used = 0
    for s in sections:
        cost = count("\n".join(s.lines)) + 1
        if used + cost <= budget:
            kept.append(s)
            used += cost
            continue
        cut = _shorten(s, budget - used, count)
        if cut is None:
            dropped.append(s.name)
            continue
        kept.append(cut)
        dropped.append(s.name + "~")
        used += count("\n".join(cut.lines)) + 1
    return kept, dropped


def _shorten(s: _Section, room: int, count: TokenCounter) -> _Section | None:
    """The first lines of `s` (at least its head and one more) that fit in `room` tokens, with a marker."""
    for n in range(len(s.lines) - 1, 1, -1):
        lines = (*s.lines[:n], f"... ({len(s.lines) - n} more lines)")
        if count("\n".join(lines)) + 1 <= room:
            return _Section(s.name, lines)
    return None


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split()) if "\n" not in text.strip() else text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- structural hints ------------------------------------------------------------------------------

_NO_HINTS_FOR = frozenset({Outcome.SYNTAX_ERROR, Outcome.POLICY_VIOLATION, Outcome.COMPILE_ERROR,
                           Outcome.INVALID_SOLUTION, Outcome.HARNESS_ERROR})


def structural_hints(result: EvalResult, code: str | None, arch: str = "sm_90") -> tuple[str, ...]:
    """The structural analysis' line-level findings on `code` ("line 14: store to out strided by n...");
    none for answers whose kernels never built. The compile inside is a cache hit after the evaluator's
    build, and a text seen before (K samples often repeat a kernel) is remembered, so this costs
    milliseconds: the source analysis itself, which `EvalResult` does not carry. Without the `analysis`
    extra (tree-sitter) there are no hints."""
    if not code or result.stage == "extract" or result.outcome in _NO_HINTS_FOR:
        return ()
    return _analysis_feedback(code, arch)


def _analysis_feedback(code: str, arch: str) -> tuple[str, ...]:
    report = source_analysis(code, arch)
    return tuple(report.feedback) if report is not None else ()


@functools.lru_cache(maxsize=256)
def source_analysis(code: str, arch: str = "sm_90") -> Any:
    """The static structural analysis of `code` (`cudaperf.analysis.analyze_source`, no SASS), remembered
    for the last 256 texts; None without the `analysis` extra (tree-sitter)."""
    try:
        from cudaperf.analysis import analyze_source
    except ImportError:
        return None
    return analyze_source(code, arch=arch, sass=False)
