"""scripts/ranker_model_pairs.py: which model-written answers count, and which pairs they form (its pure
functions; the ranker's own verdicts are tested in test_ranker_model.py)."""

from __future__ import annotations

import json

from script_module import load_script

mp = load_script("ranker_model_pairs")
MISMATCH = "verdict_mismatch: the worker reports timings of 'small', a configuration the job does not time"


def _row(code: str, ms: float, outcome: str = "correct", message: str = "", correct: bool = True,
         task: str = "t1") -> dict:
    return {"task_id": task, "code": code, "result": {
        "outcome": outcome, "message": message,
        "correctness": [{"config": "large", "correct": correct}],
        "timings": [{"config": "large", "candidate": {"median_ms": ms}}]}}


def test_a_correct_timed_answer_counts():
    assert mp.usable(_row("a", 1.0), include_flagged=False)


def test_an_answer_failing_a_correctness_check_never_counts():
    assert not mp.usable(_row("a", 1.0, outcome="incorrect", correct=False), include_flagged=True)


def test_a_timing_mismatch_counts_only_when_asked():
    row = _row("a", 1.0, outcome="policy_violation", message=MISMATCH)
    assert not mp.usable(row, include_flagged=False) and mp.usable(row, include_flagged=True)


def test_another_policy_violation_never_counts():
    row = _row("a", 1.0, outcome="policy_violation", message=MISMATCH + "; line 3: `+` applied to a tensor")
    assert not mp.usable(row, include_flagged=True)


def test_the_same_text_twice_is_one_kernel_at_its_median(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (_row("a", 1.0), _row("a", 3.0), _row("a", 2.0))))
    (kernel,), = (k.values() for k in mp.medians([path], False).values())
    assert kernel == ("a", 2.0)


def test_pairs_below_the_noise_floor_are_left_out():
    timed = {("t1", "large"): {"x": ("fast", 1.0), "y": ("close", 1.04), "z": ("slow", 2.0)}}
    assert [(f, s) for _, _, f, s, _ in mp.pairs(timed, 1.05)] == [("fast", "slow"), ("close", "slow")]
