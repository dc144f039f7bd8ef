"""Finding the solution module in a model's reply, however it is formatted.

Covers: fenced blocks (``` or ~~~, any language tag, a closing fence glued to the last code line),
several blocks (identical copies count once; a block that does not define the required name is ignored),
replies without fences (the span from the first import to the last line that still parses), reasoning
in `<think>...</think>` (never searched for code), and cut-off replies. Every reply gets an
`ExtractOutcome` and, when it is not a clean find, a sentence of feedback for the model; nothing here
raises on any input.

Not covered: whether the code is valid or allowed (the evaluator's static checks and build say that),
and choosing between a reply's conflicting blocks on merit (by default a conflict is reported back to the
model; `on_conflict="last"` takes the last block instead).
"""

from __future__ import annotations

import ast
import enum
import re
from dataclasses import dataclass

from cudaperf.agent.prompting import EntryKind

PYTHON_TAGS = frozenset({"", "python", "py", "python3", "ipython", "pycon"})
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n`]*$")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_CODE_START = re.compile(r"^(import |from \w|class \w|def \w|@\w|[A-Za-z_]\w* *=)")
_UNCLOSED = "Your code block was not closed with ```."
_MAX_TRIMS = 60  # trailing prose lines tried off an unfenced reply before giving up


class ExtractOutcome(str, enum.Enum):
    """What extraction found, most useful first."""

    FOUND = "found"  # one solution module (maybe with a note, e.g. a missing closing fence)
    EMPTY = "empty"  # an empty reply (or the backend failed)
    NO_CODE = "no_code"  # prose only
    NO_SOLUTION = "no_solution"  # code, but nothing defines the required class or function
    CONFLICTING = "conflicting"  # several different blocks define it
    TRUNCATED = "truncated"  # the reply was cut off before the code (or the reasoning) ended
    WRONG_FORMAT = "wrong_format"  # a module in the other solution format than the one asked for


@dataclass(frozen=True)
class Extraction:
    outcome: ExtractOutcome
    code: str | None  # the module to evaluate; None unless FOUND
    feedback: str = ""  # for the model: why nothing was evaluated, or a note on what was picked
    blocks: int = 0  # fenced blocks in the reply (reasoning excluded)
    fenced: bool = True  # False when the code was found without fences

    @property
    def ok(self) -> bool:
        return self.code is not None


@dataclass(frozen=True)
class _Block:
    tag: str
    body: str
    closed: bool
    line: int  # 1-based line of the opening fence in the searched text


def extract_code(reply: str, entry: str = "ModelNew", entry_kind: EntryKind = EntryKind.CLASS, *,
                 finish_reason: str = "stop", on_conflict: str = "reject") -> Extraction:
    """The solution module in `reply`; `entry` is the class (PyTorch tasks) or function (C tasks) it must
    define. `finish_reason` is the backend's ("length" means the reply was cut off)."""
    if on_conflict not in ("reject", "last"):
        raise ValueError(f"on_conflict={on_conflict!r}: use 'reject' or 'last'")
    if not reply or not reply.strip():
        return Extraction(ExtractOutcome.EMPTY, None, "Your reply was empty.")
    text, cut_thinking = _without_reasoning(reply)
    if cut_thinking and finish_reason == "length":
        return Extraction(ExtractOutcome.TRUNCATED, None, "Your reply was cut off while you were still "
                          "reasoning, before any code: reason more briefly and give the code sooner.")
    blocks = _fenced_blocks(text)
    defines = _definition(entry, entry_kind)
    if blocks:
        return _from_blocks(blocks, defines, _what(entry, entry_kind), finish_reason, on_conflict)
    return _unfenced(text, defines, _what(entry, entry_kind), finish_reason)


def _what(entry: str, kind: EntryKind) -> str:
    return f"`class {entry}`" if kind is EntryKind.CLASS else f"`def {entry}(...)`"


def _definition(entry: str, kind: EntryKind) -> re.Pattern[str]:
    word = "class" if kind is EntryKind.CLASS else "def"
    return re.compile(rf"^[ \t]*{word}[ \t]+{re.escape(entry)}\b", re.MULTILINE)


def _without_reasoning(reply: str) -> tuple[str, bool]:
    """The reply without closed `<think>` sections; True when an unclosed one runs to the end."""
    text = _THINK.sub("", reply)
    opened = text.lower().rfind("<think>")
    if opened >= 0:
        return text[:opened], True
    return text, False


def _fenced_blocks(text: str) -> list[_Block]:
    """Every fenced block, in order; a block still open at the end of the text is `closed=False`."""
    blocks: list[_Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, tag, start = m.group(1), m.group(2).lower(), i
        body, closed, i = [], False, i + 1
        while i < len(lines):
            stripped = lines[i].strip()
            if set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                closed = True
                break
            if stripped.endswith(fence) and not stripped.startswith(fence):  # "    return out```"
                body.append(lines[i].rstrip()[: -len(fence)])
                closed = True
                break
            body.append(lines[i])
            i += 1
        blocks.append(_Block(tag, "\n".join(body).strip("\n") + "\n", closed, start + 1))
        i += 1
    return blocks


def _from_blocks(blocks: list[_Block], defines: re.Pattern[str], what: str, finish_reason: str,
                 on_conflict: str) -> Extraction:
    n = len(blocks)
    solutions = [b for b in blocks if b.tag in PYTHON_TAGS and defines.search(b.body)]
    solutions = solutions or [b for b in blocks if defines.search(b.body)]  # a mislabelled tag
    if not solutions:
        return Extraction(ExtractOutcome.NO_SOLUTION, None, _no_solution_text(blocks, what), n)
    complete = [b for b in solutions if b.closed]
    if not complete:  # cut off by the length limit, or the model forgot the closing fence
        if finish_reason == "length":
            return _truncated(what, n)
        return Extraction(ExtractOutcome.FOUND, solutions[-1].body, _UNCLOSED, n)
    distinct = list(dict.fromkeys(b.body.strip() for b in complete))
    if len(distinct) > 1 and on_conflict == "reject":
        where = ", ".join(str(b.line) for b in complete)
        return Extraction(ExtractOutcome.CONFLICTING, None,
                          f"Your reply has {len(distinct)} different code blocks that define {what} (at "
                          f"lines {where} of the reply), so none was run: give exactly one complete module.",
                          n)
    note = f"Only the last of your {len(distinct)} versions was run." if len(distinct) > 1 else ""
    return Extraction(ExtractOutcome.FOUND, complete[-1].body, note, n)


def _no_solution_text(blocks: list[_Block], what: str) -> str:
    cuda_only = any("__global__" in b.body for b in blocks)
    text = f"None of your code blocks defines {what}, so nothing was run."
    if cuda_only:
        text += (" Put the CUDA source in a Python string inside the one Python module that defines it, "
                 "not in a separate block.")
    return text


def _truncated(what: str, blocks: int, fenced: bool = True) -> Extraction:
    return Extraction(ExtractOutcome.TRUNCATED, None,
                      f"Your reply was cut off before the code defining {what} was complete: write a shorter "
                      "answer (less explanation, more compact code).", blocks, fenced)


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: null bytes
        return False
    return True


def _unfenced(text: str, defines: re.Pattern[str], what: str, finish_reason: str) -> Extraction:
    """A reply without fences: the code from its first line of code to the last line that keeps it
    parsing (trailing prose trimmed)."""
    found = defines.search(text)
    if found is None:
        looks_like_code = "__global__" in text or re.search(r"^(import|from) \w", text, re.MULTILINE)
        if looks_like_code:
            return Extraction(ExtractOutcome.NO_SOLUTION, None, f"Your reply has code but nothing defines "
                              f"{what}, so nothing was run.", 0, False)
        return Extraction(ExtractOutcome.NO_CODE, None, f"Your reply has no code: answer with one "
                          f"```python block that defines {what}.", 0, False)
    lines = text.split("\n")
    def_line = text.count("\n", 0, found.start())
    start = next((i for i in range(def_line + 1) if _CODE_START.match(lines[i])), def_line)
    # A reply cut off by the length limit may still parse once its tail is trimmed, but then it is the
    # front of an unfinished module: only the whole span counts.
    lowest = len(lines) - 1 if finish_reason == "length" else max(def_line, len(lines) - _MAX_TRIMS)
    for end in range(len(lines), lowest, -1):
        code = "\n".join(lines[start:end]).strip("\n") + "\n"
        if _parses(code):
            return Extraction(ExtractOutcome.FOUND, code, "Put your code in a ```python block next time.",
                              0, False)
    if finish_reason == "length":
        return _truncated(what, 0, fenced=False)
    code = "\n".join(lines[start:]).strip("\n") + "\n"  # the evaluator reports the syntax error and its line
    return Extraction(ExtractOutcome.FOUND, code, "Put your code in a ```python block next time.", 0, False)
