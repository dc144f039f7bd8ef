"""Records of a refinement: one `TurnRecord` per turn (prompt, reply, extracted code, `EvalResult`, reward,
feedback, timings), trajectories made of them, and their JSONL file.

Covers: the records and their JSON form (`to_dict` / `from_dict` of `cudaperf.types`, one line per turn;
the keys `task_id`, `sample`, `turn`, `prompt`, `response`, `code`, `result`, `reward`, `feedback` are what
readers such as the HTML report rely on, and a `response` key lets the `replay:` backend re-play a file),
appending (each line flushed to the OS at once, so a killed process loses at most the line being written;
fsync per line, or per batch with `sync()` when a machine crash may cost the last batch), reading back
with a torn last line skipped and a re-written turn winning, grouping into trajectories, the best turn and
Kevin-style discounted returns per turn.

Not covered: running turns (`environment.py`, `loop.py`), rendering (`cudaperf.report`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cudaperf.agent.backends.base import ChatMessage
from cudaperf.reward import turn_returns
from cudaperf.types import EvalResult, RewardBreakdown, Task, TaskKind, from_dict, to_dict

FORMAT_VERSION = 1


@dataclass(frozen=True)
class TurnRecord:
    """One turn of one trajectory: what the model saw, what it said, what the judge made of it."""

    task_id: str
    sample: int  # which of the K trajectories of this task
    turn: int  # 0-based
    prompt: tuple[ChatMessage, ...]  # the conversation the model answered
    response: str  # the model's reply as generated
    code: str | None  # the module extracted from it (None: nothing was evaluated)
    result: EvalResult  # the evaluation (stage "extract" when nothing could be evaluated)
    reward: float  # the turn's own score (`cudaperf.reward.compute_reward(...).total`)
    feedback: str  # the user message that carries this turn's feedback into the next turn
    extraction: str = "found"  # `ExtractOutcome` value
    finish_reason: str = "stop"  # the backend's: "stop" | "length" | "error"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    baseline: str = "eager"  # the baseline `speedup` is measured against
    speedup: float | None = None  # correct answers only: speedup over `baseline` (geometric mean)
    reward_breakdown: RewardBreakdown | None = None
    ranker_score: float | None = None
    done: bool = False  # the trajectory ended with this turn (last turn, or target speedup reached)
    durations_s: dict[str, float] = field(default_factory=dict)  # generate, extract, evaluate, feedback...
    model: str = ""
    created_at: str = ""
    version: int = FORMAT_VERSION

    @property
    def correct(self) -> bool:
        return self.result.correct


@dataclass(frozen=True)
class Trajectory:
    """The turns of one (task, sample), in turn order."""

    task_id: str
    sample: int
    turns: tuple[TurnRecord, ...]

    @property
    def done(self) -> bool:
        return bool(self.turns) and self.turns[-1].done

    def best(self) -> TurnRecord | None:
        return best_turn(self.turns)

    def returns(self, gamma: float = 0.4) -> list[float]:
        """Per-turn returns Σ_{k≥t} γ^{k−t}·s_k (Kevin, arXiv 2507.11948; γ = 0.4 was best there)."""
        return turn_returns([t.reward for t in self.turns], gamma)


def default_baseline(task: Task) -> str:
    """The speedup a task is judged by: PyTorch eager for PyTorch tasks; for C tasks the naive CUDA port
    (a GPU baseline: against the serial C program every GPU kernel looks fast)."""
    return "naive_cuda" if task.kind is TaskKind.C else "eager"


def headline_speedup(result: EvalResult, baseline: str) -> float | None:
    """The speedup over `baseline` of a correct result (None when wrong or not timed)."""
    if not result.correct:
        return None
    if baseline == "eager" and result.speedup_vs_eager is not None:
        return result.speedup_vs_eager
    if baseline == "compile" and result.speedup_vs_compile is not None:
        return result.speedup_vs_compile
    return result.speedups.get(baseline)


def rank_key(turn: TurnRecord) -> tuple:
    """Correct beats wrong, ran beats built beats not built; then the larger speedup, the larger reward,
    the earlier turn."""
    result = turn.result
    progress = 2 if result.outcome.ran else int(result.build is not None and result.build.ok)
    return (turn.correct, progress, turn.speedup is not None, turn.speedup or 0.0, turn.reward, -turn.turn)


def best_turn(turns: Iterable[TurnRecord]) -> TurnRecord | None:
    turns = list(turns)
    return max(turns, key=rank_key) if turns else None


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class TrajectoryStore:
    """Append-only JSONL of `TurnRecord`s, keyed by (task_id, sample, turn). One writer per file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record: TurnRecord, sync: bool = True) -> None:
        """Write one record as one line and flush it; `sync` also fsyncs it (~1-15 ms on shared disks,
        which is why the loop syncs once per round instead)."""
        line = json.dumps(to_dict(record), separators=(",", ":"), allow_nan=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as f:
            end = f.seek(0, os.SEEK_END)
            if end:
                f.seek(end - 1)
                if f.read(1) != b"\n":  # a torn line from a crash: start a fresh one
                    line = "\n" + line
            f.write(line.encode("utf-8"))
            f.flush()
            if sync:
                os.fsync(f.fileno())

    def sync(self) -> None:
        """fsync the file: every appended line is then on disk, not only handed to the OS."""
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def load(self) -> list[TurnRecord]:
        """Every record, the last line of each (task, sample, turn) winning; bad or torn lines skipped."""
        if not self.path.exists():
            return []
        by_key: dict[tuple[str, int, int], TurnRecord] = {}
        for raw in self.path.read_bytes().split(b"\n"):
            record = _parse(raw) if raw.strip() else None
            if record is not None:
                by_key[(record.task_id, record.sample, record.turn)] = record
        return list(by_key.values())

    def trajectories(self) -> list[Trajectory]:
        return group(self.load())


def group(records: Iterable[TurnRecord]) -> list[Trajectory]:
    """Records grouped by (task, sample), turns sorted; a trajectory keeps only its turns 0..k without a
    gap (a later turn after a missing one cannot be trusted to have seen the right history)."""
    by_key: dict[tuple[str, int], dict[int, TurnRecord]] = {}
    for r in records:
        by_key.setdefault((r.task_id, r.sample), {})[r.turn] = r
    out = []
    for (task_id, sample), turns in sorted(by_key.items()):
        run: list[TurnRecord] = []
        while len(run) in turns:
            run.append(turns[len(run)])
        out.append(Trajectory(task_id, sample, tuple(run)))
    return out


def _parse(raw: bytes) -> TurnRecord | None:
    try:
        record = from_dict(TurnRecord, json.loads(raw))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    ok = isinstance(record.task_id, str) and isinstance(record.turn, int) and isinstance(record.result,
                                                                                          EvalResult)
    return record if ok else None


def messages_as_dicts(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """Chat messages in the plain `{"role", "content"}` form tokenizers' chat templates and RL frameworks
    take."""
    return [{"role": m.role, "content": m.content} for m in messages]
