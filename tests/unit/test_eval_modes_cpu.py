"""The RL mode end to end on real CPU-mode workers (sandboxed processes, referees, the build pool): the same
verdicts as the default mode on one batch of right, wrong, failing and rejected candidates, baselines
timed by one carrier and cached for the rest. Pure-PyTorch candidates (torch ops allowed), as CPU mode
runs; the GPU twin is tests/gpu/test_eval_modes_gpu.py. The live anchor is off here: eager is the only
baseline a CPU run can afford, and with it live nothing would be cached (the unit tests cover that). Four
right candidates of one task on two workers with the baselines' plan made at each go-ahead
(`RlSettings.plan_at_go_ahead`): one carrier, no deadlock."""

from __future__ import annotations

import threading

import pytest
from relu2_task import RIGHT, relu2_source

from cudaperf.anticheat.policy import Policy
from cudaperf.evaluate import EvalConfig, Evaluator, RlSettings, TimingConfig
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import task_from_source
from cudaperf.types import Outcome

TASK = relu2_source("a test of the evaluation modes")
CANDIDATES = {
    "right-0": RIGHT.format(k=0), "right-1": RIGHT.format(k=1), "right-2": RIGHT.format(k=2),
    "wrong": RIGHT.format(k=0).replace("* 2", "* 2.01"),
    "raises": RIGHT.format(k=0).replace("return", "raise RuntimeError('no')\n        return"),
    "syntax": RIGHT.format(k=0).replace("def forward", "def forward("),
}


def _results(mode: str, tmp_path, candidates: dict = CANDIDATES, at_go_ahead: bool = False) -> dict:
    rl = RlSettings(cpu_workers=2, live_anchor=False, plan_at_go_ahead=at_go_ahead)
    config = EvalConfig(device="cpu", mode=mode, cache_dir=str(tmp_path), analyze=False, build_workers=1,
                        policy=Policy(allow_torch_ops=True), rl=rl,
                        timing=TimingConfig(baselines=("eager",), budget_ms=5.0, warmup_ms=1.0))
    task = task_from_source(TASK, "relu2")
    pairs = [(task, solution_from_text(src, sid)) for sid, src in candidates.items()]
    with Evaluator(config) as ev:
        results = {r.solution_id: r for r in ev.evaluate_many(pairs)}
        return {"results": results, "report": ev.mode_report}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    return {mode: _results(mode, tmp_path_factory.mktemp(mode)) for mode in ("default", "rl")}


def test_both_modes_reach_the_same_verdicts(both):
    verdicts = {m: {k: r.outcome for k, r in run["results"].items()} for m, run in both.items()}
    assert verdicts["rl"] == verdicts["default"]
    assert verdicts["rl"]["right-0"] is Outcome.CORRECT and verdicts["rl"]["wrong"] is Outcome.INCORRECT


def test_one_carrier_times_the_baselines_and_the_other_correct_candidates_reuse_them(both):
    rl = both["rl"]
    sources = sorted(r.environment.get("baselines", "")[:6] for k, r in rl["results"].items()
                     if k.startswith("right"))
    assert sources == ["cached", "cached", "timed "] and rl["report"]["carriers"] == 1


def test_candidates_timed_alone_still_get_a_speedup_against_the_cached_baseline(both):
    rl = both["rl"]["results"]
    assert all(rl[k].speedup_vs_eager is not None and len(rl[k].timings) == 2 for k in CANDIDATES
               if k.startswith("right"))


def test_only_correct_candidates_reach_the_timed_pass(both):
    report = both["rl"]["report"]
    assert (report["checked"], report["timed"]) == (5, 3)  # the syntax error never reaches a worker


def test_planned_at_the_go_ahead_two_workers_finish_four_right_candidates_of_one_task(tmp_path):
    run: dict = {}
    right = {f"right-{k}": RIGHT.format(k=k) for k in range(4)}
    thread = threading.Thread(target=lambda: run.update(_results("rl", tmp_path, right, True)), daemon=True)
    thread.start()
    thread.join(240)
    assert not thread.is_alive(), "the batch did not finish in 240 s"
    results = run["results"].values()
    assert [r.outcome for r in results] == [Outcome.CORRECT] * 4 and run["report"]["carriers"] == 1
    assert sorted(r.environment["baselines"][:6] for r in results) == ["cached"] * 3 + ["timed "]
