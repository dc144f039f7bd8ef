"""A round's replies kept until its turns are on disk (`agent.pending_replies`), alone and through the
refine loop: a run stopped during a round's evaluation resumes the round with the replies it generated,
against the real evaluator in build + static mode (device "none")."""

from __future__ import annotations

import pytest

from cudaperf.agent.backends.base import Generation
from cudaperf.agent.backends.replay import RecordedReply, ReplayBackend
from cudaperf.agent.evaluation import LocalEvaluator
from cudaperf.agent.loop import RefineConfig, refine
from cudaperf.agent.pending_replies import PendingReplies
from cudaperf.agent.trajectory import TrajectoryStore
from cudaperf.evaluate import EvalConfig
from cudaperf.tasks import load_task
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.types import Outcome

RELU = load_task(example_tasks_dir() / "relu.py")
GOOD_RELU = (example_solutions_dir("fast") / "relu.py").read_text()
REPLY = Generation("text", 10, 3, "stop", 1.5)
KEY = ("relu", 0, 1)


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    config = EvalConfig(device="none", cache_dir=str(tmp_path_factory.mktemp("cache")), build_workers=1)
    with LocalEvaluator(config) as ev:
        yield ev


class Killed(BaseException):
    """Stands for the process being killed while the evaluator works."""


class DyingEvaluator:
    """The real evaluator's face, killed as soon as a batch is sent to it."""

    def __init__(self, real):
        self.real = real

    def arch(self):
        return self.real.arch()

    def evaluate_stream(self, pairs):
        raise Killed
        yield  # a generator, as the real one

    def close(self):
        pass


def replay(*codes: str) -> ReplayBackend:
    return ReplayBackend([RecordedReply(f"Plan.\n```python\n{c}```") for c in codes])


def test_a_saved_reply_is_taken_back_for_its_model_and_key(tmp_path):
    pending = PendingReplies(tmp_path / "p.json")
    pending.save("hf:m", [KEY], [REPLY])
    assert pending.take("hf:m", [KEY, ("relu", 1, 1)]) == {KEY: REPLY}


def test_another_models_replies_are_not_taken(tmp_path):
    pending = PendingReplies(tmp_path / "p.json")
    pending.save("hf:m", [KEY], [REPLY])
    assert pending.take("hf:other", [KEY]) == {}


def test_a_failed_reply_is_not_kept(tmp_path):
    pending = PendingReplies(tmp_path / "p.json")
    pending.save("hf:m", [KEY], [Generation("", 10, 0, "error", 0.1, error="out of memory")])
    assert pending.take("hf:m", [KEY]) == {}


def test_a_torn_file_keeps_nothing(tmp_path):
    (tmp_path / "p.json").write_text('{"model": "hf:m", "replies": [{"key": ["relu", 0')
    assert PendingReplies(tmp_path / "p.json").take("hf:m", [KEY]) == {}


def test_a_round_stopped_in_its_evaluation_resumes_with_the_replies_it_generated(evaluator, tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    with pytest.raises(Killed):
        refine([RELU], replay(GOOD_RELU), DyingEvaluator(evaluator), RefineConfig(turns=1), store)
    result = refine([RELU], replay(), evaluator, RefineConfig(turns=1), store)  # nothing left to say
    (turn,) = result.trajectories[0].turns
    assert result.rounds[0].reused_replies == 1 and GOOD_RELU in turn.response
    assert turn.result.outcome is Outcome.SKIPPED  # built and checked; device "none" runs nothing


def test_the_kept_replies_are_removed_once_the_round_is_on_disk(evaluator, tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    refine([RELU], replay(GOOD_RELU), evaluator, RefineConfig(turns=1), store)
    assert not PendingReplies.beside(store.path).path.exists()
