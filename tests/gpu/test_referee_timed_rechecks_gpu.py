"""On the GPU (marker `gpu`): the refereed worker's later timing re-checks, judged by the referee under the
task's own tolerance (`outputs.TimedOutputs`, `TimedKey.recheck`), with both baselines (eager and
torch.compile) timed beside the candidate, on a small configuration and a 2 MiB one. The GPU twin of
tests/unit/test_referee_timed_rechecks.py: a candidate within the bound on its first re-checked output per
set and beyond it on later ones (yet within the bound of that first one) is caught; a deterministic one
(cuBLAS, one stream) ships nothing beyond its first output per set; one with noise of a tenth of the bound
on every call passes, at most `KEPT_RECHECKS` later outputs per set shipped. Run:
    python3 -m pytest -q -s tests/gpu/test_referee_timed_rechecks_gpu.py
It prints `[timed-rechecks] <candidate>: shipped first N, later M (max per set K); flags {...}` per
candidate (expect: drifting with timed_output_mismatch from the referee naming a "re-checked call";
correct with later 0; noisy with later >= 1, max per set <= 2, no timed_output_mismatch) and the
referee's time on timed outputs (`referee_ms` timed, timed_compare_ms).
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy
from cudaperf.execute import Limits, StageTimeouts, WorkerPool
from cudaperf.execute.outputs import KEPT_RECHECKS
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import task_from_source
from cudaperf.types import Solution, SolutionFormat

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
sys.path.insert(0, str(Path(__file__).parent))
from test_referee_timed_rechecks import NOISY, SHIFTED  # noqa: E402
from test_referee_timing_answers_gpu import TASK  # noqa: E402  (its two configurations)
from test_session import CORRECT  # noqa: E402

HANDLERS = str(Path(__file__).parents[1] / "unit" / "timed_recheck_handlers.py")
TIMEOUTS = StageTimeouts(default_s=300.0, start_s=180.0)
# 0.6x the bound on the first re-check per set, 1.5x after (0.9x apart): margins for a candidate whose
# matmul may round differently from the referee's by a few ulps.
DRIFTING = SHIFTED.replace("FIRST", "0.6").replace("LATER", "1.5")


@pytest.fixture(scope="module")
def pool():
    with WorkerPool([0], Limits(), timeouts=TIMEOUTS) as p:
        p.warm_up()
        yield p


def _run(pool, name: str, source: str):
    job = EvalJob(task=task_from_source(TASK, "relu_linear_rechecks_gpu"), solution=Solution(
                  name, source, SolutionFormat.PYTORCH), device="cuda:0", seeds=(1, 2),
                  policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=20.0, warmup_ms=5.0, baselines=("eager", "compile")))
    reply = pool.run({**job_message(job, secrets.token_hex(16)),
                      "handler": f"{HANDLERS}:record_timed_keys", "referee": True})
    keys = [(c, s, r) for c, s, _, r in reply.payload.get("timed_keys", [])]
    later = [k for k in keys if k[2] > 0]
    per_set = max((sum(k[:2] == key[:2] for k in later) for key in later), default=0)
    flags = {f["code"]: f["message"][:300] for f in reply.payload.get("flags", [])
             if f["code"] not in ("derived_config_dropped",)}
    spent = json.loads(reply.payload.get("environment", {}).get("referee_ms", "{}"))
    print(f"\n[timed-rechecks] {name}: shipped first {len(keys) - len(later)}, later {len(later)} (max per "
          f"set {per_set}); flags {flags}; referee timed {spent.get('timed')} ms, timed_compare_ms "
          f"{spent.get('timed_compare_ms')}")
    return reply, later, per_set


def test_a_drifting_candidate_is_caught_at_a_later_re_check_on_the_gpu(pool):
    reply, _, _ = _run(pool, "drifting", DRIFTING)
    assert all(c["correct"] for c in reply.payload["correctness"]), (reply.message, reply.logs[-2000:])
    flags = [f for f in reply.payload["flags"] if f["code"] == "timed_output_mismatch"]
    # caught where it drifted: by the referee at a later re-check, and (the first output on an unseen set
    # comes late in the run, drifted) by the worker's own comparison or the referee on that set
    assert flags and any("referee judged" in f["message"] for f in flags), reply.payload["flags"]
    assert all(f["severity"] == "error" for f in flags), flags


def test_a_deterministic_candidate_ships_no_later_output_on_the_gpu(pool):
    reply, later, _ = _run(pool, "correct", CORRECT)
    assert reply.outcome is None and len(reply.payload["timings"]) == 2, (reply.message, reply.logs[-2000:])
    assert later == [] and not {f["code"] for f in reply.payload["flags"]} & {
        "timed_output_mismatch", "verdict_mismatch", "timed_recheck_partial"}, reply.payload["flags"]


def test_a_noisy_honest_candidate_passes_with_its_later_outputs_judged_on_the_gpu(pool):
    reply, later, per_set = _run(pool, "noisy", NOISY)
    assert reply.outcome is None and len(reply.payload["timings"]) == 2, (reply.message, reply.logs[-2000:])
    assert not {f["code"] for f in reply.payload["flags"]} & {"timed_output_mismatch", "verdict_mismatch"}
    assert later and per_set <= KEPT_RECHECKS, later


def test_the_re_checks_own_device_memory_stays_within_one_comparison_chunk():
    """`TimedOutputs.check` on a 1 GiB CUDA output: the bit-for-bit test of an identical later output, and
    a differing one replacing the kept copy under a budget of one output, each allocate at most about one
    comparison chunk beyond what is held (the memory plan counts `COMPARE_BYTES`; an output-sized mask or
    two kept copies at once would be 1 GiB more). Prints both peaks."""
    import random

    from cudaperf.correctness import COMPARE_CHUNK_BYTES, compare
    from cudaperf.execute.outputs import TimedOutputs

    class AlwaysDrawn(random.Random):
        def randrange(self, *args, **kwargs) -> int:
            return 0

    device = torch.device("cuda", 0)
    n = (1 << 30) // 4
    timed = TimedOutputs(compare, budget_bytes=4 * n, rng=AlwaysDrawn())
    first = torch.ones(n, device=device)
    timed.check("candidate", 0, first)

    def peak_beyond(out) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        held = torch.cuda.memory_allocated(device)
        timed.check("candidate", 0, out)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated(device) - held

    identical = peak_beyond(first.clone())
    timed.check("candidate", 0, first + 1e-7)  # kept
    replacing = peak_beyond(first + 1e-6)  # farther, drawn too: replaces the kept copy
    print(f"\n[timed-rechecks] 1 GiB output: bit-for-bit check {identical >> 20} MiB, a replacing copy "
          f"{replacing >> 20} MiB beyond what was held")
    assert len(timed.to_ship()) == 2 and timed.kept_bytes == 4 * n
    assert identical <= COMPARE_CHUNK_BYTES + (16 << 20)
    assert replacing <= 2 * COMPARE_CHUNK_BYTES
