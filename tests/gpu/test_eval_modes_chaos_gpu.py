"""On the GPU (marker `gpu`): an RL-mode batch that hostile kernels try to end, two workers sharing one GPU,
interleaved with honest copies of the vector_add example: a kernel writing far out of bounds, one that
traps, one that writes NaN, and three that behave through correctness and turn once they are being timed
(holding the gate exclusively): an out-of-bounds write, a kernel that never ends, and `os._exit`. The
CPU twin (tests/unit/test_eval_modes_chaos.py) has no CUDA faults; this one adds sticky CUDA errors and a
hung kernel while the gate is held exclusively.

The static source policy is off (`EvalConfig.static_policy=False`, as in the CPU twin) so that the
call-counting forward and `os._exit` reach the worker: they stand in for native code. The spinning
kernel spins in one thread of one block, so a test beside it on the same GPU keeps the other SMs.
Checked: one row per pair, each hostile kind the outcome that names it, every honest candidate correct
and timed, every row stored and read back, the gate free and no worker process left after close. Run:
    python3 -m pytest -q -s tests/gpu/test_eval_modes_chaos_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cudaperf.evaluate import EvalConfig, RlSettings, TimingConfig
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import load_task
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.types import Outcome

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))

from chaos_batch import outcomes_read_back, run_batch  # noqa: E402 - the CPU twin's helper, on the path above

pytestmark = pytest.mark.gpu

CORRECTNESS_S, TIMING_S = 20.0, 30.0
TIMED_AFTER_CALLS = 20  # one seed: correctness calls the forward 6 times (3 configurations x 2 runs); the
# timing stage at least 15 a configuration

TEMPLATE = '''
import os
import torch
from cudaperf import cuda

SRC = r"""
extern "C" __global__ void good(const float* a, const float* b, float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
extern "C" __global__ void bad(const float* a, const float* b, float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    %(bad)s
}
"""
_calls = [0]


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.good = cuda.compile(SRC, "good")
        self.bad = cuda.compile(SRC, "bad")

    def forward(self, a, b):
        out = torch.empty_like(a)
        n = a.numel()
        _calls[0] += 1
        turned = %(when)s
        if turned:
            %(python)s
        kernel = self.bad if turned else self.good
        kernel(((n + 255) // 256,), (256,), a, b, out, n)
        return out
'''

FAR = "if (i < n) out[i + (1ll << 40)] = a[i] + b[i];"
SPIN_ONE_THREAD = ("if (i == 0) { while (*(volatile const float*)a == *(volatile const float*)a) {} } "
                   "if (i < n) out[i] = a[i] + b[i];")
TIMED = f"_calls[0] > {TIMED_AFTER_CALLS}"


def _hostile(bad: str, when: str = "True", python: str = "pass") -> str:
    return TEMPLATE % {"bad": bad, "when": when, "python": python}


HOSTILE = {
    "out-of-bounds": (_hostile(FAR), {Outcome.CUDA_ERROR}),
    "trap": (_hostile("__trap();"), {Outcome.CUDA_ERROR}),
    "nan": (_hostile("if (i < n) out[i] = __int_as_float(0x7fc00000);"), {Outcome.INCORRECT}),
    "out-of-bounds-when-timed": (_hostile(FAR, TIMED), {Outcome.CUDA_ERROR}),
    "spin-when-timed": (_hostile(SPIN_ONE_THREAD, TIMED), {Outcome.TIMEOUT}),
    "exit-when-timed": (_hostile("if (i < n) out[i] = a[i] + b[i];", TIMED, "os._exit(3)"), {Outcome.CRASH}),
}
HONEST = [f"honest-{k}" for k in range(4)]
ORDER = ["honest-0", "out-of-bounds", "spin-when-timed", "honest-1", "trap", "out-of-bounds-when-timed",
         "honest-2", "nan", "exit-when-timed", "honest-3"]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chaos_gpu")
    task = load_task(example_tasks_dir() / "vector_add.py")
    honest = (example_solutions_dir("fast") / "vector_add.py").read_text()
    sources = {sid: src for sid, (src, _) in HOSTILE.items()}
    sources |= {sid: f"{honest}\n# {sid}\n" for sid in HONEST}
    pairs = [(task, solution_from_text(sources[sid], sid)) for sid in ORDER]
    config = EvalConfig(device="cuda", mode="rl", seeds=1, cache_dir=str(tmp / "cache"), static_policy=False,
                        stage_timeouts_s={"correctness": CORRECTNESS_S, "timing": TIMING_S},
                        rl=RlSettings(workers_per_gpu=2), timing=TimingConfig(budget_ms=20, warmup_ms=5))
    return run_batch(config, pairs, tmp / "results.jsonl", log_prefix="chaos-gpu")


def test_every_pair_gets_exactly_one_row(batch):
    assert sorted(r.solution_id for r in batch["rows"]) == sorted(ORDER)


@pytest.mark.parametrize("sid", sorted(HOSTILE))
def test_each_hostile_kernel_gets_the_outcome_that_names_what_it_did(batch, sid):
    row = next(r for r in batch["rows"] if r.solution_id == sid)
    assert row.outcome in HOSTILE[sid][1], (sid, row.outcome, row.message[:300])


@pytest.mark.parametrize("sid", sorted(sid for sid in HOSTILE if sid.endswith("-when-timed")))
def test_a_kernel_that_turns_once_timed_is_stopped_in_the_timing_stage(batch, sid):
    row = next(r for r in batch["rows"] if r.solution_id == sid)
    assert row.stage == "timing", (sid, row.stage, row.message[:200])


def test_every_honest_candidate_is_correct_and_timed_whatever_ran_before_it(batch):
    rows = {r.solution_id: r for r in batch["rows"]}
    for sid in HONEST:
        assert rows[sid].outcome is Outcome.CORRECT, (sid, rows[sid].outcome, rows[sid].message[:300])
        assert rows[sid].timings and rows[sid].speedups, sid


def test_every_row_is_stored_and_read_back(batch):
    assert outcomes_read_back(batch)


def test_the_gate_is_free_and_no_worker_is_left(batch):
    assert batch["held"] == (0, False, 0) and not batch["left"], (batch["held"], batch["left"])


def test_the_batch_ends_within_its_deadlines(batch):
    assert batch["wall_s"] < 2 * (CORRECTNESS_S + TIMING_S) + 240, batch["wall_s"]
