"""Trajectory records and their JSONL file: round trip, crash tolerance, grouping, best turn, returns."""

from __future__ import annotations

import json

import pytest

from cudaperf.agent.backends.base import ChatMessage
from cudaperf.agent.trajectory import (
    Trajectory,
    TrajectoryStore,
    TurnRecord,
    best_turn,
    group,
    headline_speedup,
)
from cudaperf.types import BuildResult, EvalResult, Outcome, SolutionFormat


def _record(turn: int, sample: int = 0, outcome: Outcome = Outcome.INCORRECT, speedup: float | None = None,
            reward: float = 0.0, built: bool = False) -> TurnRecord:
    build = BuildResult(ok=True, outcome=Outcome.CORRECT, format=SolutionFormat.FAST) if built else None
    return TurnRecord(task_id="t", sample=sample, turn=turn, prompt=(ChatMessage("user", "go"),),
                      response=f"reply {turn}", code=f"code {turn}",
                      result=EvalResult("t", f"s{turn}", outcome, build=build), reward=reward,
                      feedback=f"fb {turn}", speedup=speedup)


def test_records_round_trip_through_the_file(tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    records = [_record(0), _record(1, outcome=Outcome.CORRECT, speedup=1.5, reward=1.4)]
    for r in records:
        store.append(r)
    assert store.load() == records


def test_lines_carry_the_keys_readers_rely_on(tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    store.append(_record(0))
    line = json.loads(store.path.read_text())
    keys = {"task_id", "sample", "turn", "prompt", "response", "code", "result", "reward", "feedback"}
    assert keys <= set(line)


def test_torn_last_line_is_skipped_and_the_next_append_starts_a_fresh_line(tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    store.append(_record(0))
    with open(store.path, "a") as f:
        f.write('{"task_id": "t", "sam')
    assert len(store.load()) == 1
    store.append(_record(1))
    assert [r.turn for r in store.load()] == [0, 1]


def test_a_rewritten_turn_wins(tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    store.append(_record(0, reward=0.0))
    store.append(_record(0, reward=2.0))
    assert [r.reward for r in store.load()] == [2.0]


def test_grouping_stops_at_a_missing_turn():
    (trajectory,) = group([_record(0), _record(2), _record(1), _record(4)])
    assert [r.turn for r in trajectory.turns] == [0, 1, 2]


def test_grouping_separates_samples():
    assert [(t.sample, len(t.turns)) for t in group([_record(0, 1), _record(0, 0), _record(1, 0)])] == [
        (0, 2), (1, 1)]


def test_returns_follow_kevins_discounted_sum():
    trajectory = Trajectory("t", 0, (_record(0, reward=1.0), _record(1, reward=0.0), _record(2, reward=2.0)))
    assert trajectory.returns(0.4) == pytest.approx([1.0 + 0.4 * 0.0 + 0.16 * 2.0, 0.8, 2.0])


def test_best_turn_prefers_correct_then_speedup_then_earlier():
    turns = [_record(0), _record(1, outcome=Outcome.CORRECT, speedup=1.2),
             _record(2, outcome=Outcome.CORRECT, speedup=1.5),
             _record(3, outcome=Outcome.CORRECT, speedup=1.5)]
    assert best_turn(turns).turn == 2


def test_best_turn_prefers_a_built_answer_among_failures():
    turns = [_record(0, outcome=Outcome.COMPILE_ERROR), _record(1, outcome=Outcome.SKIPPED, built=True)]
    assert best_turn(turns).turn == 1


def test_headline_speedup_is_none_for_wrong_results():
    wrong = EvalResult("t", "s", Outcome.INCORRECT, speedup_vs_eager=3.0)
    right = EvalResult("t", "s", Outcome.CORRECT, speedups={"naive_cuda": 2.0})
    assert (headline_speedup(wrong, "eager"), headline_speedup(right, "naive_cuda")) == (None, 2.0)
