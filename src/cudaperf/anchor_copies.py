"""Answers that are their task's anchor program, and the anchor's live timings they take instead of a timed
pass of their own (the RL evaluation mode, `eval_modes`, point 7).

A C task's anchor is its naive CUDA port (`eval_modes.ANCHORS`), a program the evaluator holds as text
(`tasks.ctask.baseline_source`). An answer whose module is that program, docstrings aside, runs the port's
code, so timing it beside the port measures the port against itself: a speedup of 1.0 up to timing noise,
which a reward then ranks by that noise. In session 44's RL run 67 of 115 correct answers were such copies
(their module docstring named another task), and their timed passes took most of the exclusive GPU time.

Covers:
- `same_program(a, b)`: two solution modules are one program when their syntax trees are equal once the
  docstrings are set aside (comments and layout never reach the tree), and the anchor's code reads none of
  its own text (docstrings, source, line numbers: `READS_OWN_TEXT`), so the docstrings cannot steer it;
- `copies_anchor(task, solution)`: a fast-format answer to a C task that is its naive port's program;
- `AnchorTimings`: per task, the anchor's last live timings in one evaluator run (from any timed pass of
  the task that timed the anchor on every configuration), and the one timed pass of a copy in flight,
  which later copies of the task wait for rather than time the same program again.

Not covered: programs alike in behaviour but not in syntax (a renamed variable, a reordered statement, a
comment inside the CUDA source string): they are timed as any answer. PyTorch tasks: their anchor, eager,
is the task's own model, not a solution module.
"""

from __future__ import annotations

import ast
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cudaperf.tasks.ctask import NAIVE_CUDA, baseline_source
from cudaperf.types import EvalResult, Solution, SolutionFormat, Task, TaskKind, Timing

# Names through which a module could read its own text or where it stands in it; an anchor using any of
# them is never matched (its docstrings, or the line numbers they shift, could change what it does).
READS_OWN_TEXT = frozenset({"__doc__", "__file__", "__loader__", "__spec__", "getsource", "getsourcelines",
                            "_getframe", "currentframe", "f_lineno", "co_firstlineno", "linecache",
                            "inspect", "traceback"})
WAIT_S = 900.0  # the longest a copy waits for the timed pass of another copy (a bound against a bug only)


def same_program(source: str, anchor: str) -> bool:
    """Whether `source` is `anchor`'s program: equal syntax trees without docstrings (module docstring)."""
    theirs = _anchor_program(anchor)
    return theirs is not None and _program(source) == theirs


@functools.lru_cache(maxsize=1024)
def _anchor_program(anchor: str) -> str | None:
    """`_program` of an anchor, kept: each task's port is compared with every answer to it."""
    return _program(anchor)


def _program(source: str) -> str | None:
    """The module's syntax tree without its docstrings, as text; None when it does not parse or reads its
    own text."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in READS_OWN_TEXT:
            return None
        if isinstance(node, ast.Attribute) and node.attr in READS_OWN_TEXT:
            return None
        if isinstance(node, ast.alias) and node.name.split(".")[0] in READS_OWN_TEXT:
            return None
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = _without_docstring(node.body)
    return ast.dump(tree)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return body[1:] or [ast.Pass()]
    return body


def copies_anchor(task: Task, solution: Solution) -> bool:
    """A fast-format answer to a C task whose module is the task's naive CUDA port's program."""
    if task.kind is not TaskKind.C or solution.format is not SolutionFormat.FAST:
        return False
    port = baseline_source(task, NAIVE_CUDA)
    return bool(port) and same_program(solution.source, port)


@dataclass(frozen=True)
class LiveAnchor:
    """The anchor's timings per configuration from one timed pass of a task."""

    timings: dict[str, Timing]
    solution_id: str  # the answer whose timed pass timed them
    at_s: float  # when they were recorded (the clock of `AnchorTimings`)


def anchor_timings(result: EvalResult, anchor: str) -> dict[str, Timing] | None:
    """`anchor`'s timing on each configuration of a correct, timed result; None unless every configuration
    has one."""
    if not result.correct or not result.timings:
        return None
    found = {t.config: t.baseline_timing(anchor) for t in result.timings}
    return found if all(found.values()) else None


class AnchorTimings:
    """The anchor's last live timings per task key for one evaluator run, and which keys a copy's timed
    pass is producing. Thread-safe. `begin(key)` claims the production when nothing fresh is known and
    nobody produces (True: time this copy, then `release(key)`); `wait(key)` returns the fresh timings once
    no pass of the key is in flight (None: none was left); `record(key, timings, solution_id)` keeps a
    timed pass's. Timings older than `max_age_s` are not used."""

    def __init__(self, max_age_s: float, clock: Callable[[], float] = time.monotonic):
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Condition()
        self._known: dict[tuple[str, str], LiveAnchor] = {}
        self._producing: set[tuple[str, str]] = set()

    def begin(self, key: tuple[str, str]) -> bool:
        with self._lock:
            if self._fresh(key) is not None or key in self._producing:
                return False
            self._producing.add(key)
            return True

    def wait(self, key: tuple[str, str], timeout_s: float = WAIT_S) -> LiveAnchor | None:
        with self._lock:
            self._lock.wait_for(lambda: key not in self._producing, timeout_s)
            return self._fresh(key)

    def record(self, key: tuple[str, str], timings: dict[str, Timing], solution_id: str) -> None:
        with self._lock:
            self._known[key] = LiveAnchor(dict(timings), solution_id, self._clock())

    def release(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._producing.discard(key)
            self._lock.notify_all()

    def _fresh(self, key: tuple[str, str]) -> LiveAnchor | None:
        live = self._known.get(key)
        return live if live is not None and self._clock() - live.at_s <= self.max_age_s else None
