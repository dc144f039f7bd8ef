"""A batch whose pairs arrive over time (`Evaluator.evaluate_many` reading an iterable that waits between
pairs, as the RL rollout hands answers while the policy still generates): a result comes out before the
next pair arrives, every pair gets its row, and an iterable that fails has its error raised after the
pairs it gave. Without a worker (`device="none"`)."""

from __future__ import annotations

import queue
import threading

import pytest

from cudaperf.evaluate import EvalConfig, Evaluator
from cudaperf.solutions import solution_from_text
from tests.unit.test_evaluate_batch import BATCH, CHEATING, FAST_SRC, _task


@pytest.fixture
def evaluator(tmp_path):
    with Evaluator(EvalConfig(device="none", cache_dir=str(tmp_path), build_workers=1, analyze=False)) as ev:
        yield ev


def _arriving(feed: queue.Queue):
    """The pairs put into `feed`, until None."""
    while (pair := feed.get(timeout=30)) is not None:
        yield pair


def test_a_result_comes_out_before_the_next_pair_arrives(evaluator):
    feed: queue.Queue = queue.Queue()
    feed.put((_task(), solution_from_text(CHEATING, "first")))
    results = evaluator.evaluate_many(_arriving(feed))
    first = next(results)  # the iterable has not ended: the first pair's row is out regardless
    feed.put((_task(), solution_from_text(FAST_SRC, "second")))
    feed.put(None)
    assert first.solution_id == "first" and [r.solution_id for r in results] == ["second"]


def test_every_arriving_pair_gets_its_row(evaluator):
    feed: queue.Queue = queue.Queue()

    def hand_over() -> None:
        for sid, src in BATCH:
            feed.put((_task(), solution_from_text(src, sid)))
        feed.put(None)

    threading.Thread(target=hand_over).start()
    got = sorted(r.solution_id for r in evaluator.evaluate_many(_arriving(feed)))
    assert got == sorted(s for s, _ in BATCH)


def test_an_iterable_that_fails_has_its_error_raised_after_the_pairs_it_gave(evaluator):
    def failing():
        yield _task(), solution_from_text(CHEATING, "given")
        raise RuntimeError("the answers stopped")

    seen = []
    with pytest.raises(RuntimeError, match="the answers stopped"):
        for result in evaluator.evaluate_many(failing()):
            seen.append(result.solution_id)
    assert seen == ["given"]


def test_a_consumer_that_leaves_early_lets_the_batch_threads_end(evaluator):
    feed: queue.Queue = queue.Queue()
    feed.put((_task(), solution_from_text(CHEATING, "only")))
    before = threading.active_count()
    results = evaluator.evaluate_many(_arriving(feed))
    next(results)
    results.close()  # the iterable never ends; the drain threads must not wait on it
    feed.put(None)  # lets the feeding thread end too
    for _ in range(100):
        if threading.active_count() <= before:
            break
        threading.Event().wait(0.05)
    assert threading.active_count() <= before
