"""A refereed PyTorch worker holds no right answer on a timing input set while the candidate's code runs in
the timing stage: the eager baseline (the reference model) runs interleaved with the candidate in the same
process, but its outputs are overwritten after each call and never kept (`TorchSession.baselines`,
`outputs.TimedOutputs`). Through a real sandboxed worker and referee (CPU mode) on the small PyTorch task
of test_session.py, with a probe standing in for the candidate's native code (tests/unit/
timing_probe_handlers.py): at each of the candidate's calls in the timing stage it computes the right
answer on the call's inputs and looks for it among live tensors and in freed memory.

What the CPU test can show: live tensors (every one the garbage collector tracks) and freed chunks the C
library hands back for an allocation of the output's size, through torch (aligned) and through `malloc`
itself (its per-thread cache, most recently freed first, so an output freed just before the candidate's
call is the first one found): for a model whose answer is also one of its temporaries, the baselines'
memory mechanism (`execute.baseline_memory`: glibc's perturbation and the cache's drain) is what keeps
them clean. What it cannot: the CUDA caching allocator's blocks and stream ordering; tests/gpu/
test_referee_timing_answers_gpu.py checks those (live CUDA tensors, a raw read of every inactive block, the
compile baseline, the private pool)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import task_from_source
from cudaperf.types import Solution, SolutionFormat

sys.path.insert(0, str(Path(__file__).parent))
from test_referee import _codes, _job  # the same task, job and limits
from test_session import CORRECT, TASK

PROBES = str(Path(__file__).with_name("timing_probe_handlers.py"))

# Correct within the tolerance, never bit-equal to the reference where relu is positive (a relative 2^-20
# off), nor is any of its temporaries: its own outputs, kept or freed, are never mistaken for the
# reference's (it ends with the same `+ z` as the reference, on another product).
NEAR = CORRECT.replace("return torch.relu(self.linear(x)) * 2 + z",
                       "return torch.relu(self.linear(x)) * (2 + 2 ** -19) + z")


@pytest.fixture(scope="module")
def pool(refereed_pool):
    return refereed_pool


@pytest.fixture(scope="module")
def probed(pool):
    return pool.run(_job(NEAR, handler=f"{PROBES}:probe_right_answers", referee=True))


def test_the_probed_candidate_is_timed_and_its_re_checked_outputs_pass(probed):
    assert probed.outcome is None, (probed.message, probed.logs[-2000:])
    assert all(c["correct"] for c in probed.payload["correctness"]) and len(probed.payload["timings"]) == 2
    assert not _codes(probed) & {"timed_output_mismatch", "baseline_output_mismatch", "verdict_mismatch"}
    assert probed.payload["probe"]["calls"] > 10


def test_no_live_tensor_holds_the_right_answer_while_the_candidate_runs(probed):
    assert probed.payload["probe"]["live"] == 0, probed.payload["probe"]


def test_no_freed_block_of_the_output_s_size_holds_the_right_answer_while_the_candidate_runs(probed):
    assert probed.payload["probe"]["freed"] == 0, probed.payload["probe"]


def test_every_baseline_output_is_overwritten_when_disposed(probed):
    probe = probed.payload["probe"]
    assert probe["disposed"] > 10 and probe["left_readable"] == 0, probe


# The same model, its answer copied once more at the end: the copy is the output (overwritten after each
# call), the value it was copied from one of the forward's temporaries (freed during the call).
COPIED_LAST = TASK.replace("return torch.relu(self.linear(x)) * 2 + z",
                           "return (torch.relu(self.linear(x)) * 2 + z).clone()")


def test_no_freed_temporary_of_a_baseline_holds_the_right_answer(pool):
    job = EvalJob(task=task_from_source(COPIED_LAST, "relu_linear_copied"), solution=Solution(
                  "near", NEAR, SolutionFormat.PYTORCH), device="cpu", seeds=(1, 2),
                  policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager",)))
    reply = pool.run({**job_message(job, "00ff00ff"), "handler": f"{PROBES}:probe_right_answers",
                      "referee": True})
    assert reply.outcome is None and reply.payload["probe"]["calls"] > 10, (reply.message, reply.logs[-2000:])
    assert reply.payload["probe"]["freed"] == 0, reply.payload["probe"]


# A reference whose output aliases its input and a tensor its module keeps as a plain attribute: neither
# is a secret, and overwriting them would change the next call's input and the model itself.
ALIASING_TASK = '''
import torch
import torch.nn as nn

CUDAPERF_TASK = {"no_derived_configs": "a unit test of the timing stage's disposal"}

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.table = torch.randn(n)  # a plain attribute: neither a parameter nor a buffer

    def forward(self, x):
        return x.view(-1), self.table

def get_input_configs():
    return [{"name": "small", "n": 16}]

def get_inputs(n=16):
    return [torch.randn(8, n)]

def get_init_inputs(n=16):
    return [n]
'''
ALIASING_CANDIDATE = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.table = torch.randn(n)

    def forward(self, x):
        return x.reshape(-1).clone(), self.table.clone()
'''


def test_a_baseline_output_that_aliases_an_input_or_the_model_is_left_intact(pool):
    job = EvalJob(task=task_from_source(ALIASING_TASK, "aliasing"), solution=Solution(
                  "copy", ALIASING_CANDIDATE, SolutionFormat.PYTORCH), device="cpu", seeds=(1, 2),
                  policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager",)))
    reply = pool.run({**job_message(job, "00ff00ff"), "referee": True})
    assert reply.outcome is None and len(reply.payload["timings"]) == 1, (reply.message, reply.logs[-2000:])
    assert all(c["correct"] for c in reply.payload["correctness"]), reply.payload["correctness"]
    assert not _codes(reply) & {"timed_output_mismatch", "baseline_output_mismatch", "verdict_mismatch"}


# The same, the model's table kept in a list (a plain attribute holding tensors in a container): still
# the model's, left intact.
LISTED_TASK = ALIASING_TASK.replace("self.table = torch.randn(n)  #", "self.tables = [torch.randn(n)]  #")
LISTED_TASK = LISTED_TASK.replace("return x.view(-1), self.table", "return x.view(-1), self.tables[0]")


def test_a_baseline_output_that_is_a_tensor_the_model_keeps_in_a_list_is_left_intact(pool):
    job = EvalJob(task=task_from_source(LISTED_TASK, "aliasing_listed"), solution=Solution(
                  "copy", ALIASING_CANDIDATE.replace("self.table = torch.randn(n)",
                                                     "self.table = [torch.randn(n)][0]"),
                  SolutionFormat.PYTORCH), device="cpu", seeds=(1, 2), policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=0.5, warmup_ms=0.1, baselines=("eager",)))
    reply = pool.run({**job_message(job, "00ff00ff"), "referee": True})
    assert reply.outcome is None and len(reply.payload["timings"]) == 1, (reply.message, reply.logs[-2000:])
    assert all(c["correct"] for c in reply.payload["correctness"]), reply.payload["correctness"]
    assert not _codes(reply) & {"timed_output_mismatch", "baseline_output_mismatch", "verdict_mismatch"}
