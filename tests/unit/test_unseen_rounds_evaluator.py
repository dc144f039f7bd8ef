"""Outputs kept by input contents, through the real CPU evaluator (sandboxed worker, referee, both modes):
the unseen rounds time such a candidate from the rounds where it must compute (`timing`, hack 15)."""

from __future__ import annotations

import pytest

from cudaperf.anticheat.policy import Policy
from cudaperf.eval_modes import RlSettings
from cudaperf.evaluate import EvalConfig, Evaluator
from cudaperf.jobs import TimingConfig
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import task_from_source
from cudaperf.timing import UNSEEN_SLOWDOWN_LIMIT

TASK = '''
import torch
from torch import nn

CUDAPERF_TASK = {"family": "matmul", "description": "C = A @ B, float32."}


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


def get_input_configs():
    return [{"name": "square", "M": 384, "K": 384, "N": 384}]


def get_inputs(M=64, K=64, N=64):
    return [torch.randn(M, K) * K ** -0.25, torch.randn(K, N) * K ** -0.25]


def get_init_inputs():
    return []
'''

MEMO = '''
import torch
import torch.nn as nn

_kept = []


class ModelNew(nn.Module):
    def forward(self, A, B):
        a, b = A.reshape(-1)[::61].clone(), B.reshape(-1)[::61].clone()
        for ka, kb, out in _kept:
            if torch.equal(ka, a) and torch.equal(kb, b):
                return out.clone()
        out = torch.matmul(A, B)
        _kept.append((a, b, out.clone()))
        return out
'''

HONEST = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)
"""


def _evaluate(mode: str, tmp_path) -> list:
    config = EvalConfig(device="cpu", mode=mode, cache_dir=str(tmp_path), build_workers=1, seeds=1,
                        policy=Policy(allow_torch_ops=True), rl=RlSettings(cpu_workers=1),
                        timing=TimingConfig(budget_ms=20, warmup_ms=5, baselines=("eager",)))
    task = task_from_source(TASK, "matmul_cpu")
    # the first, honest, candidate carries the RL mode's baselines; the memo is then timed anchored
    pairs = [(task, solution_from_text(text, name)) for name, text in (("honest", HONEST), ("memo", MEMO))]
    with Evaluator(config) as evaluator:
        return list(evaluator.evaluate_many(pairs))


@pytest.mark.parametrize("mode", ["default", "rl"])
def test_a_content_memo_is_timed_where_it_computes(mode, tmp_path):
    honest, memo = _evaluate(mode, tmp_path)
    assert memo.outcome.value == "correct", memo.message
    assert "unseen_inputs_slower" in {f.code for f in memo.flags}
    assert all(t.unseen_slowdown > UNSEEN_SLOWDOWN_LIMIT for t in memo.timings)
    assert memo.timings[0].candidate.n_samples < memo.timings[0].rounds  # from the unseen rounds alone
    assert honest.outcome.value == "correct", honest.message


# The memo above, replacing `torch.randn` once timing has begun so that every set drawn after it is zeros: the
# unseen sets would then all be one content, kept after the first (drawn with the patch in place, they were
# zeros against expected outputs of the real sets: caught, but as wrong outputs). Its 10th call is the fourth
# or so of timing: the checks before timing call it 6 times on any machine, whereas the timing calls depend on
# the machine's speed (at its 30th call it patched nothing on a slower machine).
PATCHING_MEMO = MEMO.replace("_kept = []", "_kept = []\n_calls = []").replace(
    "    def forward(self, A, B):\n", """    def forward(self, A, B):
        _calls.append(1)
        if len(_calls) == 10:
            setattr(torch, "randn", lambda *shape, **kw: torch.zeros(*shape, **kw))
""", 1)


def test_unseen_sets_are_drawn_with_the_trusted_functions_put_back(tmp_path):
    config = EvalConfig(device="cpu", cache_dir=str(tmp_path), build_workers=1, seeds=1, static_policy=False,
                        policy=Policy(allow_torch_ops=True),
                        timing=TimingConfig(budget_ms=20, warmup_ms=5, baselines=("eager",)))
    with Evaluator(config) as evaluator:
        result = evaluator.evaluate(task_from_source(TASK, "matmul_cpu"),
                                    solution_from_text(PATCHING_MEMO, "patching_memo"))
    codes = {f.code for f in result.flags}
    assert {"monkey_patch", "unseen_inputs_slower"} <= codes, (result.outcome, result.message, codes)
