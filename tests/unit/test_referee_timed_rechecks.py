"""The timing stage's later re-checks are judged by the referee under the task's own tolerance: a later
output of the candidate on an input set that is bit for bit its first one there passes in the worker (the
referee judged that first one), and one that differs at all is kept (at most `outputs.KEPT_RECHECKS` per
set) and shipped after the configuration's bench like the first (`outputs.TimedOutputs`, `TimedKey.recheck`),
judged against the referee's own reference (`timed_output_mismatch` when wrong). Through a real sandboxed
worker and referee (CPU mode) on the small PyTorch task of test_session.py; the pieces without a process."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cudaperf.execute import WorkerPool

sys.path.insert(0, str(Path(__file__).parent))
from test_referee import LIMITS, TIMEOUTS, _codes, _job  # the same task, job and limits
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
NOISY = CORRECT.replace("return torch.relu(self.linear(x)) * 2 + z", """out = torch.relu(self.linear(x)) * 2 + z
        bound = 1e-4 * out.square().mean().sqrt() + 1e-4 * out.abs()
        return out + 0.1 * bound * (2 * torch.rand_like(out) - 1)""")


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(None, dataclasses.replace(LIMITS, output_region_bytes=1 << 20), timeouts=TIMEOUTS) as p:
        p.warm_up()
        yield p


def _handler(name: str, solution: str) -> dict:
    return _job(solution, handler=f"{HANDLERS}:{name}", referee=True)


def test_a_later_output_beyond_the_tolerance_but_near_the_first_is_caught_by_the_referee(pool):
    reply = pool.run(_job(DRIFTING))
    assert all(c["correct"] for c in reply.payload["correctness"]), (reply.message, reply.logs[-2000:])
    flags = [f for f in reply.payload["flags"] if f["code"] == "timed_output_mismatch"]
    assert any("the referee judged" in f["message"] and f["severity"] == "error" for f in flags), \
        reply.payload["flags"]
