"""`cudaperf eval`'s printed result (rich renderables; no evaluation runs here)."""

from __future__ import annotations

from rich.console import Console

from cudaperf.commands.eval_cmd import result_renderables
from cudaperf.types import ConfigCorrectness, ConfigTiming, EvalResult, Outcome, Timing


def _timing(ms: float) -> Timing:
    return Timing(median_ms=ms, iqr_ms=0.0, min_ms=ms, mean_ms=ms, n_samples=10)


def _printed(overhead_ms: float | None, lead_us: float = 0.0) -> str:
    result = EvalResult(task_id="t", solution_id="s", outcome=Outcome.CORRECT,
                        correctness=(ConfigCorrectness(config="large", correct=True, seeds=3),),
                        timings=(ConfigTiming(config="large", candidate=_timing(0.047), eager=_timing(0.050),
                                              overhead_ms=overhead_ms, lead_us=lead_us),))
    console = Console(width=200, record=True)
    for item in result_renderables(result):
        console.print(item)
    return console.export_text()


def test_the_timer_overhead_is_shown_beside_the_times():
    text = _printed(0.0141)
    assert "timer ms" in text and "0.0141" in text and "not subtracted" in text


def test_without_a_measured_overhead_there_is_no_footnote():
    assert "not subtracted" not in _printed(None)


def test_the_lead_before_each_call_is_named():
    assert "200 µs lead" in _printed(0.0141, lead_us=200.0)
