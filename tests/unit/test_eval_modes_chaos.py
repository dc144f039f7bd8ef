"""An RL-mode batch that hostile and broken candidates try to end, on real CPU-mode workers (sandboxed
processes, referees, the build pool, the GPU gate), two workers sharing the batch: candidates that kill
their worker (exit, a segfault), close its channel, spin until the deadline, do either only once they are
being timed (holding the gate exclusively), fork, or return NaN, interleaved with honest ones.

The static source policy is off here (`EvalConfig.static_policy=False`), so that code the source scan refuses
(`os._exit`, `os.fork`, `faulthandler._sigsegv`) reaches the worker: it stands in for native code, which the
scan cannot see. What is checked: every pair gets exactly one row, each hostile kind the outcome that names
it, every honest candidate after them correct and timed, every row storable and read back, the gate free and
no worker process left once the evaluator closes, and the batch within its deadlines; with the default
schedule, and (marked slow) with jobs leaving the gate after the referee's verdict, as the worker's result
comes in (`RlSettings.release_at_result`), and with each batch thread bound to a worker taking its last
task's candidates first (`RlSettings.task_affinity`)."""

from __future__ import annotations

import textwrap

import pytest
from chaos_batch import outcomes_read_back, run_batch
from relu2_task import RIGHT, relu2_source

from cudaperf.anticheat.policy import Policy
from cudaperf.evaluate import EvalConfig, RlSettings, TimingConfig
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import task_from_source
from cudaperf.types import Outcome

TASK = relu2_source("a test of hostile candidates in the RL mode")
CORRECTNESS_S, TIMING_S = 5.0, 8.0  # the RL mode's stage deadlines here; an honest job takes well under 1 s
TIMED_AFTER_CALLS = 20  # correctness calls the candidate 12 times (2 configurations x 3 seeds x 2 runs);
# the timing stage at least 30 (2 configurations x 15: one call and three estimate rounds, a warm-up round,
# ten timed rounds at the least)


def _hostile(body: str, *, when_timed: bool = False) -> str:
    """A right candidate whose forward first runs `body` (always, or only past the correctness calls)."""
    counted = f"        _calls[0] += 1\n        if _calls[0] > {TIMED_AFTER_CALLS}:\n"
    guard = counted if when_timed else "        if True:\n"
    return textwrap.dedent("""
        import os
        import torch
        import torch.nn as nn

        _calls = [0]

        class ModelNew(nn.Module):
            def forward(self, x, z):
        """) + guard + textwrap.indent(textwrap.dedent(body).strip(), " " * 12) + \
        "\n        return torch.relu(x) * 2 + z\n"


HOSTILE = {
    "exit": (_hostile("os._exit(3)"), {Outcome.CRASH}),
    "segfault": (_hostile("import faulthandler\nfaulthandler._sigsegv()"), {Outcome.CRASH}),
    "channel-closed": (_hostile("os.closerange(3, 4096)"), {Outcome.CRASH, Outcome.HARNESS_ERROR}),
    "spin": (_hostile("while True:\n    pass"), {Outcome.TIMEOUT}),
    "spin-when-timed": (_hostile("while True:\n    pass", when_timed=True), {Outcome.TIMEOUT}),
    "exit-when-timed": (_hostile("os._exit(3)", when_timed=True), {Outcome.CRASH}),
    "fork": (_hostile("os.fork()"), {Outcome.RUNTIME_ERROR, Outcome.POLICY_VIOLATION}),
    "nan": (RIGHT.format(k="nan").replace("* 2 + z", "* float('nan') + z"), {Outcome.INCORRECT}),
}
HONEST = [f"right-{k}" for k in range(4)]
ORDER = ["right-0", "exit", "spin", "right-1", "segfault", "spin-when-timed", "right-2", "fork", "nan",
         "exit-when-timed", "channel-closed", "right-3"]


SCHEDULES = {"defaults": {}, "gate-left-at-result": {"release_at_result": True},
             "task-affinity": {"task_affinity": True}}
# The opt-in schedules (off by default) run with `-m slow`: about 30 s each on the 2-core machine.
OPT_IN = [pytest.param(name, marks=pytest.mark.slow) for name in SCHEDULES if name != "defaults"]


@pytest.fixture(scope="module", params=["defaults", *OPT_IN])
def batch(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chaos")
    config = EvalConfig(device="cpu", mode="rl", cache_dir=str(tmp / "cache"), analyze=False, build_workers=1,
                        static_policy=False, policy=Policy(allow_torch_ops=True),
                        rl=RlSettings(cpu_workers=2, live_anchor=False, **SCHEDULES[request.param],
                                      stage_timeouts_s={"correctness": CORRECTNESS_S, "timing": TIMING_S}),
                        timing=TimingConfig(baselines=("eager",), budget_ms=5.0, warmup_ms=1.0))
    task = task_from_source(TASK, "relu2")
    sources = {sid: src for sid, (src, _) in HOSTILE.items()} | {sid: RIGHT.format(k=sid) for sid in HONEST}
    pairs = [(task, solution_from_text(sources[sid], sid)) for sid in ORDER]
    return run_batch(config, pairs, tmp / "results.jsonl")


def test_every_pair_gets_exactly_one_row(batch):
    assert sorted(r.solution_id for r in batch["rows"]) == sorted(ORDER)


@pytest.mark.parametrize("sid", sorted(HOSTILE))
def test_each_hostile_candidate_gets_the_outcome_that_names_what_it_did(batch, sid):
    row = next(r for r in batch["rows"] if r.solution_id == sid)
    assert row.outcome in HOSTILE[sid][1], (sid, row.outcome, row.message[:300])


@pytest.mark.parametrize("sid", sorted(sid for sid in HOSTILE if sid.endswith("-when-timed")))
def test_a_candidate_that_turns_once_timed_is_stopped_in_the_timing_stage(batch, sid):
    row = next(r for r in batch["rows"] if r.solution_id == sid)
    assert row.stage == "timing", (sid, row.stage, row.message[:200])


def test_every_honest_candidate_is_correct_and_timed_whatever_ran_before_it(batch):
    rows = {r.solution_id: r for r in batch["rows"]}
    for sid in HONEST:
        assert rows[sid].outcome is Outcome.CORRECT, (sid, rows[sid].outcome, rows[sid].message[:300])
        assert rows[sid].timings and rows[sid].speedups, sid


def test_every_row_is_stored_and_read_back(batch):
    assert outcomes_read_back(batch)


def test_the_gate_is_free_once_the_batch_is_done(batch):
    assert batch["held"] == (0, False, 0)


def test_no_worker_process_outlives_the_evaluator(batch):
    assert not batch["left"], batch["left"]


def test_the_batch_ends_within_its_deadlines(batch):
    # two spinning candidates hold a worker each for their stage's deadline; everything else is seconds
    assert batch["wall_s"] < 4 * (CORRECTNESS_S + TIMING_S) + 60, batch["wall_s"]
