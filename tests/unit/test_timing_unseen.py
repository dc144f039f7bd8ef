"""Unseen rounds in `cudaperf.timing` (CPU fallback): outputs kept by input contents are timed honestly."""

from __future__ import annotations

import time

import pytest
import torch

from cudaperf.timing import UNSEEN_MIN_ROUNDS, UNSEEN_SLOWDOWN_LIMIT, bench_interleaved_report

WORK_S = 0.002  # what "computing" costs the functions below


def _sets(n: int, seed: int) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(64, generator=g)] for _ in range(n)]


def _computing(inputs):
    time.sleep(WORK_S)
    return inputs[0] * 2


def _memo(read_whole: bool = True):
    """Right every time: keeps each output with (a sample of) its inputs' contents, computes on a miss."""
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []

    def key(x):
        return x.clone() if read_whole else x[::7].clone()

    def fn(inputs):
        k = key(inputs[0])
        for seen, out in kept:
            if torch.equal(seen, k):
                return out.clone()
        out = _computing(inputs)
        kept.append((k, out))
        return out
    return fn


def _bench(fns, *, rounds=20, unseen=5, anchor="anchor", check=True):
    rotated, fresh = _sets(3, 0), _sets(unseen, 1)
    expected = [s[0] * 2 for s in rotated + fresh]
    return bench_interleaved_report(
        fns, rotated, budget_ms=0, warmup_ms=0, min_reps=rounds, max_reps=rounds, measure_overhead=False,
        check=(lambda name, i, out: torch.equal(out, expected[i])) if check else None,
        silent_checks=frozenset({"candidate"}), unseen_sets=fresh, anchor=anchor)


@pytest.mark.parametrize("read_whole", [True, False])
def test_a_memo_is_timed_from_its_unseen_rounds(read_whole):
    report = _bench({"candidate": _memo(read_whole), "anchor": _computing})
    assert report.unseen_slowdown["candidate"] > UNSEEN_SLOWDOWN_LIMIT
    assert report.timings["candidate"].median_ms >= WORK_S * 1e3
    assert report.all_rounds_median_ms["candidate"] < WORK_S * 1e3


def test_a_memo_is_flagged_as_a_warning():
    report = _bench({"candidate": _memo(), "anchor": _computing})
    flags = {f.code: f.severity.value for f in report.flags_for("candidate")}
    assert flags == {"unseen_inputs_slower": "warning"}


def test_an_honest_function_keeps_every_round():
    report = _bench({"candidate": _computing, "anchor": _computing})
    assert report.unseen_slowdown["candidate"] < UNSEEN_SLOWDOWN_LIMIT
    assert report.timings["candidate"].n_samples == 20 and not report.all_rounds_median_ms


def test_slower_in_all_unseen_rounds_but_one_short_of_the_strong_bar_keeps_every_round():
    slow_on = [t[0] for t in _sets(5, 1)][:4]  # all but one, 1.8x: past the limit, short of the strong bar

    def sometimes_slow(inputs):
        if any(torch.equal(inputs[0], t) for t in slow_on):
            time.sleep(0.8 * WORK_S)
        return _computing(inputs)

    report = _bench({"candidate": sometimes_slow, "anchor": _computing})
    assert report.unseen_slowdown["candidate"] > UNSEEN_SLOWDOWN_LIMIT  # a majority: the median is past it
    assert not report.all_rounds_median_ms and not report.flags_for("candidate")


@pytest.mark.parametrize(("ratios", "judged"), [
    ([1.3] * 5, True),  # every round past the limit
    ([5.0, 5.0, 5.0, 5.0, 0.9], True),  # all but one, median past the strong bar: one anchor sample disturbed
    ([1.8, 1.8, 1.8, 1.8, 0.9], False),  # all but one, median short of the strong bar
    ([5.0, 5.0, 5.0, 0.9, 0.9], False),  # two rounds under the limit
])
def test_the_unseen_rounds_rule(ratios, judged):
    from cudaperf.timing import _unseen_slower

    assert _unseen_slower(ratios) is judged


def test_each_unseen_set_gets_one_round_after_the_rotated_sets_first_ones():
    report = _bench({"candidate": _computing, "anchor": _computing})
    assert len(report.unseen_rounds) == 5 and len(set(report.unseen_rounds)) == 5
    assert min(report.unseen_rounds) >= 3


def test_unseen_outputs_are_rechecked_against_their_own_sets():
    def wrong_when_new(inputs):  # right on the rotated sets only
        out = inputs[0] * 2
        return out if any(torch.equal(inputs[0], s[0]) for s in _sets(3, 0)) else out + 1

    report = _bench({"candidate": wrong_when_new, "anchor": _computing})
    assert report.check_failures["candidate"] == 5 and report.check_failures["anchor"] == 0


def test_the_rotated_and_unseen_sets_keep_their_contents():
    rotated, fresh = _sets(3, 0), _sets(5, 1)
    before = [t[0].clone() for t in rotated + fresh]
    bench_interleaved_report({"candidate": _computing}, rotated, budget_ms=0, warmup_ms=0, min_reps=20,
                             max_reps=20, check=lambda *a: True, unseen_sets=fresh)
    assert all(torch.equal(s[0], b) for s, b in zip(rotated + fresh, before, strict=True))


def test_mutating_unseen_inputs_is_counted():
    def mutating_when_new(inputs):
        if not any(torch.equal(inputs[0], s[0]) for s in _sets(3, 0)):
            inputs[0].add_(1)
        return inputs[0] * 2

    report = _bench({"candidate": mutating_when_new, "anchor": _computing}, check=True)
    assert report.input_mutations["candidate"] == 5 and report.input_mutations["anchor"] == 0


def test_too_few_rounds_judge_no_slowdown():
    report = _bench({"candidate": _memo(), "anchor": _computing}, rounds=3 + UNSEEN_MIN_ROUNDS - 1)
    assert len(report.unseen_rounds) == UNSEEN_MIN_ROUNDS - 1 and not report.unseen_slowdown


def test_without_an_anchor_the_raw_samples_are_compared():
    report = _bench({"candidate": _memo()}, anchor=None)
    assert report.unseen_slowdown["candidate"] > UNSEEN_SLOWDOWN_LIMIT


def test_unseen_sets_of_another_layout_are_refused():
    with pytest.raises(ValueError, match="layout"):
        bench_interleaved_report({"a": _computing}, _sets(3, 0), unseen_sets=[[torch.zeros(3)]])


def test_unseen_rounds_take_no_re_check_from_the_rotated_sets():
    import random

    from cudaperf.timing import _check_rounds

    taken = {3, 4, 5, 6, 7}  # a short run of 12 rounds, 5 of them unseen
    chosen = _check_rounds(12, 3, 0.1, random.Random(0), taken)
    assert not chosen & taken and len(chosen - {0, 1, 2}) == 3


def test_an_unseen_set_given_as_a_function_is_drawn_once_and_re_checked():
    rotated, fresh, drawn = _sets(3, 0), _sets(5, 1), []
    expected = [s[0] * 2 for s in rotated + fresh]

    def drawing(j):
        return lambda: drawn.append(j) or [fresh[j][0].clone()]

    report = bench_interleaved_report(
        {"candidate": _memo(), "anchor": _computing}, rotated, budget_ms=0, warmup_ms=0, min_reps=20,
        max_reps=20, measure_overhead=False, check=lambda name, i, out: torch.equal(out, expected[i]),
        silent_checks=frozenset({"candidate"}), unseen_sets=[drawing(j) for j in range(5)], anchor="anchor")
    assert sorted(drawn) == list(range(5)) and report.check_failures["candidate"] == 0
    assert report.unseen_slowdown["candidate"] > UNSEEN_SLOWDOWN_LIMIT


def test_a_drawn_unseen_set_of_another_layout_is_refused_at_its_round():
    with pytest.raises(ValueError, match="layout"):
        bench_interleaved_report({"a": _computing}, _sets(3, 0), budget_ms=0, warmup_ms=0, min_reps=20,
                                 max_reps=20, unseen_sets=[lambda: [torch.zeros(3)]] * 3)
