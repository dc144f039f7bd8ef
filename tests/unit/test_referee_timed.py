"""The refereed worker computes no reference output: it plans its memory from the sizes the referee reports,
its payload carries no correctness of its own, and the outputs its timing stage re-checks are judged by the
referee (`outputs.TimedOutputs`, `referee.RefereeJob.timed_outputs`), whose time per part of its work comes
back in every result (`environment["referee_ms"]`). Through a real sandboxed worker and referee (CPU mode)
on the small PyTorch task of test_session.py; the pieces without a process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cudaperf.execute.outputs import TimedKey, TimedOutputs, snapshot

sys.path.insert(0, str(Path(__file__).parent))
from test_referee import _codes, _job  # the same task, job and limits
from test_session import CORRECT

HANDLERS = str(Path(__file__).with_name("referee_handlers.py"))

# Returns the output it computed for the same input tensors (by pointer): correct in the correctness stage
# (each seed has a model of its own, each call fresh inputs of that seed); during timing, a round whose
# tensors hold another set's contents gets a stale answer (hack #3's pointer cache).
STALE = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)
        self.cache = {}

    def forward(self, x, z):
        key = (x.data_ptr(), z.data_ptr())
        if key in self.cache:
            return self.cache[key]
        out = torch.relu(self.linear(x)) * 2 + z
        self.cache[key] = out
        return out
'''


@pytest.fixture(scope="module")
def pool(refereed_pool):
    return refereed_pool


def _handler(name: str, solution: str) -> dict:
    return _job(solution, handler=f"{HANDLERS}:{name}", referee=True)


def test_the_refereed_worker_computes_no_reference_output(pool):
    reply = pool.run(_handler("count_reference_outputs", CORRECT))
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    assert reply.payload["reference_outputs"] == 0
    assert all(c["correct"] for c in reply.payload["correctness"]) and len(reply.payload["timings"]) == 2


def test_the_referee_gives_the_speed_of_light_figures(pool):
    reply = pool.run(_job(CORRECT))
    assert all(t["bytes_moved"] for t in reply.payload["timings"]), reply.payload["timings"]


def test_a_stale_output_during_timing_is_caught_by_the_referee(pool):
    reply = pool.run(_job(STALE))
    assert all(c["correct"] for c in reply.payload["correctness"]), reply.payload["correctness"]
    flags = [f for f in reply.payload["flags"] if f["code"] == "timed_output_mismatch"]
    assert any("the referee judged" in f["message"] and f["severity"] == "error" for f in flags), flags


def test_an_honest_candidate_s_timed_outputs_pass_the_referee(pool):
    reply = pool.run(_job(CORRECT))
    assert not _codes(reply) & {"timed_output_mismatch", "baseline_output_mismatch", "verdict_mismatch"}
    assert json.loads(reply.payload["environment"]["referee_ms"]).get("timed", 0) > 0


def test_timings_reported_without_their_re_checked_outputs_are_a_verdict_mismatch(pool):
    reply = pool.run(_handler("skip_timed_outputs", CORRECT))
    mismatches = [f["message"] for f in reply.payload["flags"] if f["code"] == "verdict_mismatch"]
    assert any("never shipped the outputs its timing stage re-checked" in m for m in mismatches), mismatches


def test_every_result_carries_the_referee_s_time_per_message_kind(pool):
    reply = pool.run(_job(CORRECT))
    spent = json.loads(reply.payload["environment"]["referee_ms"])
    assert {"job", "sync", "output", "done", "finish", "compare", "wait_output", "wait_finish"} <= set(spent)


# -- the pieces ---------------------------------------------------------------------------------------


def test_the_candidate_s_first_output_on_each_input_set_goes_to_the_referee():
    timed = TimedOutputs(lambda out, want: torch.equal(out, want))
    assert timed.check("candidate", 0, torch.ones(3)) and timed.check("eager", 0, torch.ones(3))
    assert timed.check("candidate", 1, torch.ones(3))
    assert sorted(timed.first) == [("candidate", 0), ("candidate", 1)]


def test_no_baseline_output_is_kept():
    timed = TimedOutputs(lambda out, want: torch.equal(out, want))
    assert timed.check("compile", 0, torch.zeros(3))  # before the candidate's first: not compared
    timed.check("eager", 0, torch.ones(3))
    timed.check("candidate", 1, torch.ones(3))
    timed.check("eager", 1, torch.ones(3))
    kept = [t for value in timed.first.values() for t in ([value] if torch.is_tensor(value) else value)]
    assert sorted(timed.first) == [("candidate", 1)] and len(kept) == 1


def test_a_baseline_is_compared_with_the_candidate_s_first_output_on_its_set():
    timed = TimedOutputs(lambda out, want: torch.equal(out, want))
    timed.check("candidate", 0, torch.ones(3))
    assert timed.check("eager", 0, torch.ones(3)) and not timed.check("compile", 0, torch.zeros(3))


def test_later_timed_outputs_are_compared_with_the_candidate_s_own_first():
    timed = TimedOutputs(lambda out, want: torch.equal(out, want))
    timed.check("candidate", 0, torch.zeros(3))  # wrong, but the first: the referee's to judge
    timed.check("eager", 0, torch.ones(3))
    assert timed.check("candidate", 0, torch.zeros(3)) and not timed.check("candidate", 0, torch.ones(3))


def test_a_snapshot_is_a_copy_the_candidate_cannot_change_later():
    out = torch.ones(4)
    kept = snapshot(out)
    out.zero_()
    assert torch.equal(kept, torch.ones(4))


def test_a_timed_key_of_the_wrong_kinds_is_malformed():
    from cudaperf.execute.outputs import Malformed

    assert TimedKey.parse(["a", 1, "candidate", 2]) == TimedKey("a", 1, "candidate", 2)
    for wrong in (["a", "1", "candidate", 0], ["a", 1, "candidate"], ["a", 1, "candidate", True]):
        with pytest.raises(Malformed):
            TimedKey.parse(wrong)
