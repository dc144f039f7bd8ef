"""The timing stage's later re-checks are judged by the referee under the task's own tolerance: a later
output of the candidate on an input set that is bit for bit its first one there passes in the worker (the
referee judged that first one), and one that differs at all is kept (at most `outputs.KEPT_RECHECKS` per
set) and shipped after the configuration's bench like the first (`outputs.TimedOutputs`, `TimedKey.recheck`),
judged against the referee's own reference (`timed_output_mismatch` when wrong). Through a real sandboxed
worker and referee (CPU mode) on the small PyTorch task of test_session.py; the pieces without a process."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cudaperf.correctness import compare
from cudaperf.execute.outputs import KEPT_RECHECKS, TimedOutputs
from cudaperf.jobs import TimingConfig

sys.path.insert(0, str(Path(__file__).parent))
from test_referee import _codes, _job  # the same task, job and limits
from test_session import CORRECT

HANDLERS = str(Path(__file__).with_name("timed_recheck_handlers.py"))
TOLERATED = {"timed_output_mismatch", "verdict_mismatch"}

# How a candidate tells a re-checked call (`timing._Run.checked_round`: set i's tensors hold another set's
# contents) from a plain one: the first contents it saw at an input's address are that set's own (the
# first calls are plain ones), so other contents there mean a re-check. It returns the answer plus
# `factor` times the task's bound (atol x rms + rtol x |answer|, fp32: 1e-4 each), where `factor` is
# FIRST on the first re-checked call with some contents and LATER on every later one.
SHIFTED = CORRECT.replace("self.linear = nn.Linear(n, n)", """self.linear = nn.Linear(n, n)
        self.native = {}  # input address -> the contents first seen there (a plain call's)
        self.rechecked = set()  # contents already returned once in a re-checked call""").replace(
    "return torch.relu(self.linear(x)) * 2 + z", """out = torch.relu(self.linear(x)) * 2 + z
        seen = float(x[0, 0])
        if self.native.setdefault(x.data_ptr(), seen) == seen:
            return out
        factor = FIRST if seen not in self.rechecked else LATER
        self.rechecked.add(seen)
        return out + factor * (1e-4 * out.square().mean().sqrt() + 1e-4 * out.abs())""")

# Within the bound on its first re-checked output on each set (0.9x: the referee passes it), beyond it on
# every later one (1.8x), yet within the bound of that first output (0.9x apart): what a compare with the
# candidate's own first output lets through.
DRIFTING = SHIFTED.replace("FIRST", "0.9").replace("LATER", "1.8")

# Honest and nondeterministic: every call adds noise of at most a tenth of the bound (atomics' order).
NOISY = CORRECT.replace("return torch.relu(self.linear(x)) * 2 + z", """\
out = torch.relu(self.linear(x)) * 2 + z
        bound = 1e-4 * out.square().mean().sqrt() + 1e-4 * out.abs()
        return out + 0.1 * bound * (2 * torch.rand_like(out) - 1)""")


@pytest.fixture(scope="module")
def pool(refereed_pool):
    return refereed_pool


def _handler(name: str, solution: str) -> dict:
    return _job(solution, handler=f"{HANDLERS}:{name}", referee=True)


def test_a_later_output_beyond_the_tolerance_but_near_the_first_is_caught_by_the_referee(pool):
    reply = pool.run(_job(DRIFTING))
    assert all(c["correct"] for c in reply.payload["correctness"]), (reply.message, reply.logs[-2000:])
    flags = [f for f in reply.payload["flags"] if f["code"] == "timed_output_mismatch"]
    assert any("the referee judged" in f["message"] and f["severity"] == "error" for f in flags), \
        reply.payload["flags"]
    # a later one, not the first (the worker's own comparison may flag one too: its first output on a set
    # can come from a silent re-check of a plain round, which this candidate answers exactly)
    refereed = [f for f in flags if "the referee judged" in f["message"]]
    assert all("re-checked call" in f["message"] for f in refereed), flags


def _keys(reply) -> list[tuple[str, int, int]]:
    return [(config, input_set, recheck) for config, input_set, _, recheck in reply.payload["timed_keys"]]


def test_a_deterministic_candidate_ships_only_its_first_output_per_input_set(pool):
    reply = pool.run(_handler("record_timed_keys", CORRECT))
    assert reply.outcome is None and len(reply.payload["timings"]) == 2, (reply.message, reply.logs[-2000:])
    keys = _keys(reply)
    configs = {t["config"] for t in reply.payload["timings"]}
    sets = 3 + TimingConfig().unseen_sets  # the rotated sets, then the unseen ones (one round each)
    assert sorted(keys) == sorted((c, s, 0) for c in configs for s in range(sets)), keys
    assert not _codes(reply) & (TOLERATED | {"timed_recheck_partial"}), reply.payload["flags"]


def test_an_honest_candidate_whose_later_outputs_differ_within_the_tolerance_passes(pool):
    reply = pool.run(_handler("record_timed_keys", NOISY))
    assert reply.outcome is None and len(reply.payload["timings"]) == 2, (reply.message, reply.logs[-2000:])
    assert not _codes(reply) & TOLERATED, reply.payload["flags"]
    later = [key for key in _keys(reply) if key[2] > 0]
    per_set = {key[:2]: sum(k[:2] == key[:2] for k in later) for key in later}
    assert later and max(per_set.values()) <= KEPT_RECHECKS, _keys(reply)


def test_later_outputs_sent_by_the_rules_are_accepted(pool):
    reply = pool.run(_handler("later_outputs_within_the_cap", CORRECT))
    assert reply.outcome is None and not _codes(reply) & TOLERATED, reply.payload["flags"]


@pytest.mark.parametrize("handler", ["later_outputs_over_the_cap", "a_later_output_twice",
                                     "a_later_output_before_the_first", "a_negative_recheck",
                                     "a_later_output_of_a_baseline"])
def test_a_timed_announcement_against_the_rules_is_a_verdict_mismatch(pool, handler):
    reply = pool.run(_handler(handler, CORRECT))
    mismatches = [f["message"] for f in reply.payload["flags"] if f["code"] == "verdict_mismatch"]
    assert any("announcements were not what its own code sends" in m for m in mismatches), mismatches
    assert reply.worker_replaced


# -- the pieces ---------------------------------------------------------------------------------------


def _timed(**options) -> TimedOutputs:
    return TimedOutputs(lambda out, want: compare(out, want), **options)


def test_a_later_output_bit_for_bit_the_first_is_neither_compared_nor_kept():
    timed = _timed()
    timed.check("candidate", 0, torch.ones(3))
    assert timed.check("candidate", 0, torch.ones(3))
    assert sorted(timed.to_ship()) == [("candidate", 0, 0)] and timed.unjudged() == (0, 0)


def test_a_later_output_that_differs_only_in_its_bits_is_kept_for_the_referee():
    timed = _timed()
    timed.check("candidate", 0, torch.zeros(3))
    assert timed.check("candidate", 0, -torch.zeros(3))  # equal as numbers, not as bytes
    assert sorted(timed.to_ship()) == [("candidate", 0, 0), ("candidate", 0, 1)]


def test_the_farthest_later_output_from_the_first_is_always_kept():
    for seed in range(20):
        timed = _timed(rng=random.Random(seed))
        timed.check("candidate", 0, torch.ones(64))
        for recheck, error in enumerate([1e-6, 1e-5, 3e-5, 1e-6, 2e-6, 1e-6], start=1):
            timed.check("candidate", 0, torch.ones(64) + error)
        kept = {recheck for _, _, recheck in timed.to_ship()} - {0}
        assert 3 in kept and len(kept) <= KEPT_RECHECKS and timed.unjudged() == (6 - len(kept), 6)


def test_every_differing_later_output_can_be_the_one_drawn_at_random():
    drawn = set()
    for seed in range(60):
        timed = _timed(rng=random.Random(seed))
        timed.check("candidate", 0, torch.ones(8))
        for recheck in range(1, 6):
            timed.check("candidate", 0, torch.ones(8) + (1e-5 if recheck == 1 else 1e-7 * recheck))
        drawn |= {recheck for _, _, recheck in timed.to_ship()} - {0, 1}
    assert drawn == {2, 3, 4, 5}


def test_later_outputs_over_the_byte_budget_are_not_kept_and_counted_as_unjudged():
    timed = _timed(budget_bytes=0)
    timed.check("candidate", 0, torch.ones(8))
    assert timed.check("candidate", 0, torch.ones(8) + 1e-6)
    assert sorted(timed.to_ship()) == [("candidate", 0, 0)] and timed.unjudged() == (1, 1)


def test_a_later_output_beyond_the_tolerance_of_the_first_still_fails_here():
    timed = _timed()
    timed.check("candidate", 0, torch.ones(8))
    assert not timed.check("candidate", 0, torch.ones(8) * 2)


class _AlwaysDrawn(random.Random):
    def randrange(self, *args, **kwargs) -> int:
        return 0  # every differing output wins the random slot


def test_a_kept_copy_is_released_before_the_copy_that_replaces_it_is_made():
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    # a budget of one output: the copy replacing the kept one fits only if the old one is gone first
    timed = _timed(budget_bytes=8 * 4, rng=_AlwaysDrawn())
    timed.check("candidate", 0, torch.ones(8))
    timed.check("candidate", 0, torch.ones(8) + 1e-6)
    old = weakref.ref(timed.later[0].farthest.value)
    alive_at_copy = []

    class Copies(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.clone.default:
                alive_at_copy.append(old() is not None)
            return func(*args, **(kwargs or {}))

    with Copies():
        timed.check("candidate", 0, torch.ones(8) + 1e-5)
    assert timed.to_ship()[("candidate", 0, 2)] is not None and timed.kept_bytes == 8 * 4
    assert alive_at_copy == [False]
