"""fast_p, outcome counts, histogram bins, best-per-task choice and rendering, on hand-made results."""

from __future__ import annotations

import itertools
import math

import pytest

from cudaperf.report import (
    HISTOGRAM_EDGES,
    best_per_task,
    candidate_ms,
    fast_p,
    outcome_counts,
    render,
    rich_renderables,
    speedup_histogram,
)
from cudaperf.types import ConfigTiming, EvalResult, Flag, Outcome, Severity, Timing


def _r(task="t", sol="s", outcome=Outcome.CORRECT, eager=None, compile_=None, **kw) -> EvalResult:
    return EvalResult(task_id=task, solution_id=sol, outcome=outcome, speedup_vs_eager=eager,
                      speedup_vs_compile=compile_, **kw)


# Five results: 3 correct (speedups vs eager 0.5, 1.1, 3.0), 1 incorrect, 1 compile error.
RESULTS = [
    _r("a", eager=0.5, compile_=0.4),
    _r("b", eager=1.1, compile_=0.9),
    _r("c", eager=3.0, compile_=1.6),
    _r("d", outcome=Outcome.INCORRECT, eager=5.0),  # fast but wrong: never counts
    _r("e", outcome=Outcome.COMPILE_ERROR),
]


@pytest.mark.parametrize("p, expected", [(0, 3 / 5), (1, 2 / 5), (1.2, 1 / 5), (1.5, 1 / 5), (2, 1 / 5),
                                         (3.0, 0.0)])
def test_fast_p_vs_eager_is_share_of_all_results(p, expected):
    assert fast_p(RESULTS, p, "eager") == pytest.approx(expected)


@pytest.mark.parametrize("p, expected", [(0, 3 / 5), (1, 1 / 5), (1.5, 1 / 5), (2, 0.0)])
def test_fast_p_vs_compile_uses_the_compile_speedup(p, expected):
    assert fast_p(RESULTS, p, "compile") == pytest.approx(expected)


def test_fast_p_is_strictly_greater_than_p():
    assert fast_p([_r(eager=1.0)], 1.0) == 0.0


def test_correct_untimed_result_counts_for_fast_0_only():
    results = [_r(eager=None)]
    assert (fast_p(results, 0), fast_p(results, 1)) == (1.0, 0.0)


def test_fast_p_of_no_results_is_none():
    assert fast_p([], 1.0) is None


def test_fast_p_rejects_an_unknown_baseline():
    with pytest.raises(ValueError, match="baseline"):
        fast_p(RESULTS, 1.0, "cublas")


def test_outcome_counts_follow_enum_order_and_skip_zeros():
    assert list(outcome_counts(RESULTS).items()) == [(Outcome.CORRECT, 3), (Outcome.INCORRECT, 1),
                                                     (Outcome.COMPILE_ERROR, 1)]


def test_histogram_edges_are_log_spaced_around_one():
    ratios = [b / a for a, b in itertools.pairwise(HISTOGRAM_EDGES)]
    assert all(r == pytest.approx(math.sqrt(2)) for r in ratios) and 1.0 in HISTOGRAM_EDGES


def test_histogram_counts_only_correct_timed_results():
    assert sum(b.count for b in speedup_histogram(RESULTS)) == 3


def test_histogram_puts_a_speedup_in_the_bin_that_contains_it():
    bins = speedup_histogram([_r(eager=1.1)])
    hit = next(b for b in bins if b.count)
    assert (hit.lo, hit.hi) == (1.0, pytest.approx(math.sqrt(2)))


def test_histogram_bin_edges_are_inclusive_below():
    hit = next(b for b in speedup_histogram([_r(eager=1.0)]) if b.count)
    assert hit.lo == 1.0


def test_histogram_has_open_ended_outer_bins():
    bins = speedup_histogram([_r(eager=0.01), _r(eager=100.0)])
    assert (bins[0].lo, bins[0].count, bins[-1].hi, bins[-1].count) == (0.0, 1, math.inf, 1)


def test_best_per_task_prefers_correct_then_fastest():
    results = [_r("t", "slow", eager=1.2), _r("t", "wrong", Outcome.INCORRECT, eager=9.0),
               _r("t", "fast", eager=2.0), _r("t", "broken", Outcome.COMPILE_ERROR)]
    assert [r.solution_id for r in best_per_task(results)] == ["fast"]


def test_best_per_task_prefers_a_run_over_a_build_failure():
    results = [_r("t", "broken", Outcome.COMPILE_ERROR), _r("t", "wrong", Outcome.INCORRECT)]
    assert best_per_task(results)[0].solution_id == "wrong"


def _timing(ms: float) -> Timing:
    return Timing(median_ms=ms, iqr_ms=0.0, min_ms=ms, mean_ms=ms, n_samples=10)


def test_candidate_ms_is_the_geometric_mean_over_configs():
    r = _r(timings=(ConfigTiming("a", _timing(1.0)), ConfigTiming("b", _timing(4.0))))
    assert candidate_ms(r) == pytest.approx(2.0)


def test_render_names_every_task_and_the_fast_p_rows():
    text = render(RESULTS + [_r("a", "other", flags=(Flag("low_coverage", "m", Severity.WARNING),))])
    assert all(t in text for t in "abcde") and "fast_1.2" in text and "| a |" in text


def test_render_shows_flag_codes_of_the_best_solution():
    text = render([_r("z", eager=2.0, flags=(Flag("impossible_speed", "m", Severity.ERROR),))])
    assert "impossible_speed" in text


def test_render_of_no_results_says_so():
    assert "No results" in render([])


def test_rich_renderables_print_without_error():
    from rich.console import Console

    console = Console(record=True, width=120)
    for renderable in rich_renderables(RESULTS):
        console.print(renderable)
    assert "fast_p" in console.export_text()
