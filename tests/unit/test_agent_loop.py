"""The refine loop end to end: recorded replies (`replay:`) or a tiny Hugging Face model from a config,
against the real evaluator in build + static mode (device "none": CUDA answers are built by NVRTC and
checked, not run); the trajectory file, resume, the rounds' time split, and the run's figures."""

from __future__ import annotations

import json

import pytest

from cudaperf.agent.backends.base import GenerationConfig, load_backend
from cudaperf.agent.backends.replay import RecordedReply, ReplayBackend
from cudaperf.agent.evaluation import LocalEvaluator
from cudaperf.agent.loop import RefineConfig, refine
from cudaperf.agent.summary import best_per_task, turn_metrics, write_best_kernels
from cudaperf.agent.trajectory import Trajectory, TrajectoryStore, TurnRecord
from cudaperf.evaluate import EvalConfig
from cudaperf.tasks import load_task
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.types import EvalResult, Outcome

RELU = load_task(example_tasks_dir() / "relu.py")
VECTOR_ADD = load_task(example_tasks_dir() / "vector_add.py")
GOOD_RELU = (example_solutions_dir("fast") / "relu.py").read_text()
BROKEN_RELU = GOOD_RELU.replace("relu1(v.x)", "relu1(v.q)")
GOOD_ADD = (example_solutions_dir("fast") / "vector_add.py").read_text()


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    config = EvalConfig(device="none", cache_dir=str(tmp_path_factory.mktemp("cache")), build_workers=1)
    with LocalEvaluator(config) as ev:
        yield ev


def replay(*codes: str) -> ReplayBackend:
    return ReplayBackend([RecordedReply(f"Plan.\n```python\n{c}```" if c else "no code") for c in codes])


def test_k_trajectories_of_n_turns_are_run_and_every_turn_written(evaluator, tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    # round 1 asks relu s0, relu s1, vector_add s0, vector_add s1; round 2 the same order
    backend = replay(BROKEN_RELU, GOOD_RELU, GOOD_ADD, "", GOOD_RELU, GOOD_RELU, GOOD_ADD, GOOD_ADD)
    result = refine([RELU, VECTOR_ADD], backend, evaluator, RefineConfig(turns=2, samples=2), store)
    assert [(t.task_id, t.sample, len(t.turns)) for t in result.trajectories] == [
        ("relu", 0, 2), ("relu", 1, 2), ("vector_add", 0, 2), ("vector_add", 1, 2)]
    assert len(store.load()) == 8 and len(result.rounds) == 2
    outcomes = {(r.task_id, r.sample, r.turn): r.result.outcome for r in store.load()}
    assert outcomes[("relu", 0, 0)] is Outcome.COMPILE_ERROR and outcomes[("relu", 0, 1)] is Outcome.SKIPPED
    assert outcomes[("vector_add", 1, 0)] is Outcome.INVALID_SOLUTION


def test_each_turn_is_on_disk_when_it_is_reported(evaluator, tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    seen = []
    refine([RELU], replay(GOOD_RELU, ""), evaluator, RefineConfig(turns=2), store,
           on_turn=lambda record: seen.append((record.turn, len(store.load()))))
    assert seen == [(0, 1), (1, 2)]


def test_resume_continues_an_interrupted_trajectory_with_its_history(evaluator, tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    refine([RELU], replay(BROKEN_RELU, GOOD_RELU), evaluator, RefineConfig(turns=2), store)
    first_line = store.path.read_text().splitlines()[0]
    store.path.write_text(first_line + "\n")  # as if the run died during turn 2
    result = refine([RELU], replay(GOOD_RELU), evaluator, RefineConfig(turns=2), store)
    (trajectory,) = result.trajectories
    assert result.resumed_turns == 1 and [t.result.outcome for t in trajectory.turns] == [
        Outcome.COMPILE_ERROR, Outcome.SKIPPED]
    assert "relu1(v.q)" in trajectory.turns[1].prompt[2].content  # the first answer is in the history


def test_finished_trajectories_are_not_run_again(evaluator, tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    refine([RELU], replay(GOOD_RELU), evaluator, RefineConfig(turns=1), store)
    again = refine([RELU], replay(), evaluator, RefineConfig(turns=1), store)
    assert again.rounds == () and again.resumed_turns == 1 and len(store.load()) == 1


def test_no_round_starts_after_the_deadline(evaluator):
    result = refine([RELU, VECTOR_ADD], replay(GOOD_RELU, GOOD_ADD), evaluator, RefineConfig(turns=1),
                    deadline_s=0.0)
    assert (result.rounds, result.unfinished, result.trajectories) == ((), 2, ())


def test_round_time_is_split_into_prompts_generation_evaluation_and_loop(evaluator, tmp_path):
    result = refine([RELU, VECTOR_ADD], replay(GOOD_RELU, GOOD_ADD), evaluator, RefineConfig(turns=1))
    (r,) = result.rounds
    parts = r.context_s + r.generate_s + r.evaluate_s + r.loop_s
    assert r.trajectories == 2 and r.evaluate_s > 0 and parts == pytest.approx(r.wall_s, rel=0.05, abs=0.01)
    assert r.overhead_s == pytest.approx(r.wall_s - r.generate_s - r.evaluate_s)
    assert r.build_s > 0 and r.correctness_s == 0.0  # built, never run: device "none"


def test_a_backend_that_raises_fails_the_turns_not_the_run(evaluator):
    class Raising:
        name = "raising"

        def generate(self, conversations, config):
            raise ConnectionError("server gone")

        def count_tokens(self, text):
            return len(text) // 4

        def close(self):
            pass

    result = refine([RELU], Raising(), evaluator, RefineConfig(turns=1))
    (turn,) = result.trajectories[0].turns
    assert turn.result.outcome is Outcome.HARNESS_ERROR and "server gone" in turn.result.message


def test_a_backend_returning_too_few_replies_fails_the_turns_not_the_run(evaluator):
    class Short:
        name = "short"

        def generate(self, conversations, config):
            return []

        def count_tokens(self, text):
            return len(text) // 4

        def close(self):
            pass

    result = refine([RELU, VECTOR_ADD], Short(), evaluator, RefineConfig(turns=1))
    assert {t.turns[0].result.outcome for t in result.trajectories} == {Outcome.HARNESS_ERROR}


@pytest.mark.slow  # ~7 s: building the tiny model (tokenizer training, weights) dominates
def test_a_tiny_hugging_face_model_drives_the_loop(evaluator, tmp_path):
    tiny = pytest.importorskip("cudaperf.agent.backends.tiny")
    directory = tiny.build_tiny_chat_model(tmp_path / "tiny", context_tokens=8192)
    backend = load_backend(f"hf:{directory}")
    config = RefineConfig(turns=2, generation=GenerationConfig(max_new_tokens=4, seed=0))
    store = TrajectoryStore(tmp_path / "t.jsonl")
    refine([RELU], backend, evaluator, config, store)
    first, second = sorted(store.load(), key=lambda r: r.turn)
    assert (first.completion_tokens, first.finish_reason) == (4, "length")
    assert first.model == f"hf:{directory.name}" and 0 < first.prompt_tokens < second.prompt_tokens


# -- the run's figures ---------------------------------------------------------------------------------


def _turn(task: str, turn: int, outcome: Outcome, speedup: float | None = None, code: str = "x = 1\n"):
    return TurnRecord(task_id=task, sample=0, turn=turn, prompt=(), response="", code=code,
                      result=EvalResult(task, f"{task}/{turn}", outcome), reward=0.0, feedback="",
                      speedup=speedup)


def test_fast_p_per_turn_counts_each_tasks_best_kernel_so_far():
    trajectories = [
        Trajectory("a", 0, (_turn("a", 0, Outcome.INCORRECT), _turn("a", 1, Outcome.CORRECT, 1.5))),
        Trajectory("b", 0, (_turn("b", 0, Outcome.CORRECT, 0.8), _turn("b", 1, Outcome.COMPILE_ERROR))),
    ]
    first, second = turn_metrics(trajectories)
    assert (first.solved, first.fast_p["1"], first.correct_rate) == (0.5, 0.0, 0.5)
    assert (second.solved, second.fast_p["1.2"], second.fast_p["2"]) == (1.0, 0.5, 0.0)
    assert second.best_speedup == 1.5
    assert second.correct_rate == 0.5


def test_best_kernels_are_written_with_where_they_came_from(tmp_path):
    trajectories = [Trajectory("a", 0, (_turn("a", 0, Outcome.INCORRECT, code="old = 1\n"),
                                        _turn("a", 1, Outcome.CORRECT, 1.5, code="new = 1\n")))]
    (path,) = write_best_kernels(trajectories, tmp_path)
    text = path.read_text()
    assert path.name == "a.py" and text.endswith("new = 1\n") and "turn 2, correct, 1.500x" in text
    assert best_per_task(trajectories)["a"].turn == 1


def test_trajectory_file_is_readable_as_plain_json(evaluator, tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    refine([RELU], replay(GOOD_RELU), evaluator, RefineConfig(turns=1), store)
    row = json.loads(store.path.read_text())
    assert row["result"]["outcome"] == "skipped" and row["prompt"][0]["role"] == "system"
