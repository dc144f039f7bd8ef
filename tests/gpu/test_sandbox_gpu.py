"""The sandbox on a real GPU: CUDA faults are classified, the faulty worker is replaced and the GPU serves
the next job; guards and the FAST path work together; start time and per-job overhead are printed
(run with `-s` to see them). Handlers: tests/unit/sandbox_handlers.py (GPU section)."""

from __future__ import annotations

import secrets
import sys
import time
from pathlib import Path

import pytest

from cudaperf.execute import Limits, StageTimeouts, WorkerPool
from cudaperf.types import Outcome

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
import sandbox_handlers  # the workers load it by path; the parent needs helper_source

pytestmark = pytest.mark.gpu

HANDLERS = str(Path(__file__).parents[1] / "unit" / "sandbox_handlers.py")
TIMEOUTS = StageTimeouts(default_s=120.0, stages={"hang": 5.0, "cleanup": 10.0}, start_s=180.0)


def job(name: str, **fields) -> dict:
    return {"handler": f"{HANDLERS}:{name}", **fields}


@pytest.fixture(scope="module")
def pool():
    start = time.monotonic()
    with WorkerPool([0], Limits(), timeouts=TIMEOUTS) as p:
        (ready_s,) = p.warm_up()
        print(f"\n[sandbox-gpu] worker start (torch + CUDA Python + context): {ready_s:.2f} s "
              f"(pool {time.monotonic() - start:.2f} s), info={p.workers[0].info}")  # fmt: skip
        yield p


def assert_gpu_serves_next_job(pool: WorkerPool, previous_pid: int | None) -> None:
    after = pool.run(job("gpu_ok"))
    assert after.outcome is None and after.payload["sum"] == 1023 * 1024 / 2, after
    assert after.sandbox["pid"] != previous_pid


def test_gpu_worker_sees_only_its_gpu_as_cuda0(pool):
    reply = pool.run(job("gpu_ok"))
    assert reply.outcome is None, reply
    assert reply.payload["visible"] == "0" and reply.payload["count"] == 1
    assert reply.flags == (), reply.flags  # CUDA work does not trip the integrity check


def test_illegal_address_in_scope_is_a_cuda_error_and_the_gpu_recovers(pool):
    reply = pool.run(job("gpu_illegal_address"))
    assert reply.outcome is Outcome.CUDA_ERROR, (reply.message, reply.logs[-2000:])
    assert "ILLEGAL_ADDRESS" in reply.message or "illegal memory access" in reply.message
    assert reply.worker_replaced
    assert_gpu_serves_next_job(pool, reply.sandbox["pid"])


def test_device_side_assert_in_torch_is_a_cuda_error_and_the_gpu_recovers(pool):
    reply = pool.run(job("gpu_device_assert"))
    assert reply.outcome is Outcome.CUDA_ERROR, (reply.message, reply.logs[-2000:])
    assert reply.worker_replaced
    assert_gpu_serves_next_job(pool, reply.sandbox["pid"])


def test_spinning_kernel_times_out_and_the_gpu_recovers(pool):
    start = time.monotonic()
    reply = pool.run(job("gpu_spin", stage="hang"))
    took = time.monotonic() - start
    assert reply.outcome is Outcome.TIMEOUT and reply.stage == "hang", reply
    print(f"\n[sandbox-gpu] spinning kernel: TIMEOUT after {took:.2f} s (deadline 5 s, kill + reap included)")
    start = time.monotonic()
    assert_gpu_serves_next_job(pool, reply.sandbox["pid"])
    print(
        f"[sandbox-gpu] next job after the kill (new worker start included): {time.monotonic() - start:.2f} s"
    )


def test_kernel_left_spinning_after_the_job_times_out_in_cleanup(pool):
    reply = pool.run(job("gpu_spin", stage="correctness", sync=False))
    assert reply.outcome is Outcome.TIMEOUT and reply.stage == "cleanup", reply
    assert_gpu_serves_next_job(pool, reply.sandbox["pid"])


def test_kernel_compiled_and_launched_inside_the_scope_is_correct(pool):
    reply = pool.run(job("gpu_scale_in_scope"))
    assert reply.outcome is None and reply.payload["correct"] is True, (reply, reply.logs[-2000:])


def test_fast_helper_launches_inside_the_scope_from_the_prebuilt_cache(pool, tmp_path, monkeypatch):
    from cudaperf import cuda

    salt = secrets.token_hex(4)
    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path))
    cuda.compile(sandbox_handlers.helper_source(salt), "scale", arch="sm_90")  # the build pool's part
    reply = pool.run(job("helper_in_scope", cache_dir=str(tmp_path), salt=salt, arch="sm_90", launch=True))
    assert reply.payload.get("error") is None and reply.payload["correct"] is True, (
        reply,
        reply.logs[-2000:],
    )


def test_per_job_overhead_with_a_warm_gpu_worker(pool):
    pool.run(job("gpu_ok"))
    n = 20
    start = time.monotonic()
    replies = [pool.run(job("ok")) for _ in range(n)]
    per_job_s = (time.monotonic() - start) / n
    print(f"\n[sandbox-gpu] per-job overhead (no-op handler, torch + CUDA loaded): {per_job_s * 1e3:.1f} ms")
    assert all(r.outcome is None for r in replies)
    assert per_job_s < 0.5


def test_cuda_initialises_under_rlimit_data():
    """Whether RLIMIT_DATA (unlike RLIMIT_AS) is compatible with CUDA: informs Limits.data_bytes."""
    with WorkerPool([0], Limits(data_bytes=32 << 30), timeouts=TIMEOUTS) as p:
        reply = p.run(job("gpu_ok"))
    assert reply.outcome is None and reply.payload["sum"] == 1023 * 1024 / 2, (reply, reply.logs[-2000:])


def test_gpu_worker_under_its_own_uid_runs_cuda(tmp_path):
    """Limits.run_as_uid on the GPU machine: CUDA must work as an unprivileged uid (world-accessible
    /dev/nvidia*), and the worker must lose root's powers. Skipped where Python or the checkout is not
    readable by other uids."""
    from test_sandbox_guards import skip_unless_run_as_uid_possible

    skip_unless_run_as_uid_possible()
    secret = tmp_path / "secret.txt"
    secret.write_text("root only")
    secret.chmod(0o600)
    with WorkerPool([0], Limits(run_as_uid=61000), timeouts=TIMEOUTS) as p:
        ok = p.run(job("gpu_ok"))
        powers = p.run(job("privileges", root_only_file=str(secret)))
    assert ok.outcome is None and ok.payload["sum"] == 1023 * 1024 / 2, (ok, ok.logs[-2000:])
    assert powers.payload["uid"] == 61000 and powers.payload["signal_parent"] == "PermissionError"


def test_cpu_mode_pool_on_a_gpu_machine_hides_the_gpu():
    with WorkerPool(None, Limits(), timeouts=TIMEOUTS) as p:
        reply = p.run(job("cuda_available"))
    assert reply.outcome is None and reply.payload["available"] is False, reply


# -- the operating-system boundary (issue 24) --------------------------------------------------------

HELD = ("mount_ns", "pid_ns", "net_ns", "ipc_ns", "no_new_privs", "seccomp")


def test_gpu_worker_runs_cuda_inside_the_boundary(pool):
    from cudaperf.execute import boundary

    reply = pool.run(job("gpu_ok"))
    state = reply.sandbox["boundary"]
    print(f"\n[sandbox-gpu] boundary: {boundary.state_text(state)}")
    assert reply.outcome is None and reply.payload["sum"] == 1023 * 1024 / 2, (reply, reply.logs[-2000:])
    assert {k: state[k] for k in HELD} == dict.fromkeys(HELD, True), state
    assert state["uid"] == boundary.DEFAULT_WORKER_UID and state["missing"] == []


@pytest.fixture(scope="module")
def native_verdicts(tmp_path_factory):
    """Every native escape fixture (tests/adversarial/native) through the full evaluator, plus the honest
    candidate they all extend; the decoy process stands for the evaluator (same user, canary secret)."""
    import os
    import shutil
    import subprocess
    import tempfile

    sys.path.insert(0, str(Path(__file__).parents[1] / "adversarial" / "native"))
    import fixtures
    from test_native_boundary import CHECKOUT_FILE, TMP_FILE, _lingering

    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
    from cudaperf.solutions import solution_from_text
    from cudaperf.tasks import load_tasks
    from cudaperf.tasks.examples import example_tasks_dir

    task = {t.task_id: t for t in load_tasks(example_tasks_dir())}[fixtures.TASK]
    cache, out = Path(tempfile.mkdtemp(prefix="cudaperf-native-cache-")), tmp_path_factory.mktemp("out")
    cache.chmod(0o777)
    results_file = Path(tempfile.mkdtemp(prefix="cudaperf-native-results-")) / "results.jsonl"
    results_file.parent.chmod(0o777)
    results_file.write_text('{"outcome": "correct"}\n')
    results_file.chmod(0o666)
    canary = {"NATIVE_CANARY_SECRET": secrets.token_hex(8)}
    decoy = subprocess.Popen(["sleep", "1200"], env={**os.environ, **canary})
    os.environ.update(CUDAPERF_NATIVE_EVALUATOR_PID=str(decoy.pid), CUDAPERF_NATIVE_TARGETS=str(results_file))
    names = (None, *fixtures.ATTEMPTS)
    pairs = [(task, solution_from_text(fixtures.candidate_source(a), f"native_{a or 'honest'}"))
             for a in names]
    try:
        config = EvalConfig(device="cuda", cache_dir=str(cache), timing=TimingConfig(baselines=("eager",)),
                            stage_timeouts_s={"import": 900.0})  # fmt: skip
        with Evaluator(config) as ev:
            verdicts = {r.solution_id: r for r in ev.evaluate_many(pairs)}
        time.sleep(1.0)
        seen = {"verdicts": verdicts, "lingering": _lingering(), "tmp_file": TMP_FILE.exists(),
                "checkout_file": CHECKOUT_FILE.exists(), "results": results_file.read_text(),
                "cache_escape": (cache / "cudaperf-native-escape").exists()}  # fmt: skip
    finally:
        decoy.kill()
        decoy.wait()
        for key in ("CUDAPERF_NATIVE_EVALUATOR_PID", "CUDAPERF_NATIVE_TARGETS"):
            os.environ.pop(key, None)
        for path in (TMP_FILE, CHECKOUT_FILE):
            path.unlink(missing_ok=True)
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(results_file.parent, ignore_errors=True)
    print("\n[sandbox-gpu] native escape fixtures (blocked: CORRECT, the attempt failed; detected: a flag)")
    for sid, r in sorted(verdicts.items()):
        flags = ",".join(f.code for f in r.flags if f.code in ("lingering_processes", "channel_forged"))
        print(f"[sandbox-gpu] {sid:24s} {r.outcome.value:18s} {flags or '-'}  {r.message[:80]}")
    (out / "native_verdicts.txt").write_text("\n".join(f"{k} {v.outcome.value}" for k, v in verdicts.items()))
    return seen


NATIVE_BLOCKED = ("write_outside", "read_environ", "read_memory", "signal", "trace")


def test_honest_native_candidate_is_correct_inside_the_boundary(native_verdicts):
    result = native_verdicts["verdicts"]["native_honest"]
    assert result.outcome is Outcome.CORRECT, (result.message, result.logs[-3000:])
    import json

    state = json.loads(result.environment["sandbox"])
    assert {k: state[k] for k in HELD} == dict.fromkeys(HELD, True), state


@pytest.mark.parametrize("attempt", NATIVE_BLOCKED)
def test_native_escape_attempt_is_blocked(native_verdicts, attempt):
    """CORRECT means the attempt failed: an escape doubles the kernel's output (INCORRECT)."""
    result = native_verdicts["verdicts"][f"native_{attempt}"]
    assert result.outcome is Outcome.CORRECT, (result.outcome, result.message, result.logs[-3000:])


def test_native_writes_reach_no_file_outside_the_job(native_verdicts):
    seen = native_verdicts
    assert not (seen["tmp_file"] or seen["checkout_file"] or seen["cache_escape"]), seen
    assert seen["results"] == '{"outcome": "correct"}\n'


def test_native_process_outliving_the_job_is_killed_and_flagged(native_verdicts):
    result = native_verdicts["verdicts"]["native_linger"]
    assert "lingering_processes" in [f.code for f in result.flags], (result.outcome, result.flags)
    assert native_verdicts["lingering"] == []


def test_native_forged_reply_is_detected(native_verdicts):
    result = native_verdicts["verdicts"]["native_forge_reply"]
    assert result.outcome is Outcome.POLICY_VIOLATION
    assert "channel_forged" in [f.code for f in result.flags], result.flags


# -- the referee (issue 24, part 2): native attacks on the verdict ------------------------------------


def _referee_off():
    """While an Evaluator starts: its WorkerPool gets the referee switched off (the control arm)."""
    import contextlib
    import dataclasses

    from cudaperf.execute import sandbox

    @contextlib.contextmanager
    def switch():
        original = sandbox.WorkerPool

        def pool(devices=None, limits=None, **kwargs):
            return original(devices, dataclasses.replace(limits or sandbox.Limits(), referee=False), **kwargs)

        sandbox.WorkerPool = pool
        try:
            yield
        finally:
            sandbox.WorkerPool = original

    return switch()


@pytest.fixture(scope="module")
def referee_verdicts(tmp_path_factory):
    """The attacks of tests/adversarial/native/referee_attacks.cpp through the full evaluator, with the
    referee (the default) and without it (the control: there the attacks must succeed, which shows they
    are real). The builds (~1 min each) are shared by both arms through one cache."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).parents[1] / "adversarial" / "native"))
    import fixtures

    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
    from cudaperf.solutions import solution_from_text
    from cudaperf.tasks import load_tasks
    from cudaperf.tasks.examples import example_tasks_dir

    task = {t.task_id: t for t in load_tasks(example_tasks_dir())}[fixtures.TASK]
    cache = Path(tempfile.mkdtemp(prefix="cudaperf-referee-cache-"))
    cache.chmod(0o777)
    honest = [(task, solution_from_text(fixtures.candidate_source(None), "native_honest"))]
    attacks = [(task, solution_from_text(fixtures.referee_attack_source(a), a))
               for a in fixtures.REFEREE_ATTACKS]
    config = EvalConfig(device="cuda", cache_dir=str(cache), timing=TimingConfig(baselines=("eager",)),
                        stage_timeouts_s={"import": 900.0})
    verdicts = {}
    with Evaluator(config) as ev:
        # The honest candidate first: the task's references are then in every cache an attack could read.
        verdicts["on"] = {r.solution_id: r for r in ev.evaluate_many(honest + attacks)}
    with _referee_off(), Evaluator(config) as ev:
        verdicts["off"] = {r.solution_id: r for r in ev.evaluate_many(honest + attacks)}
    print("\n[sandbox-gpu] native attacks on the verdict (with the referee / without it)")
    for sid in verdicts["on"]:
        on, off = verdicts["on"][sid], verdicts["off"][sid]
        codes = ",".join(f.code for f in on.flags if f.code == "verdict_mismatch") or "-"
        print(f"[sandbox-gpu] {sid:16s} referee: {on.outcome.value:18s} {codes:16s} "
              f"without: {off.outcome.value}")
    return verdicts


def test_honest_native_candidate_is_correct_with_the_referee(referee_verdicts):
    result = referee_verdicts["on"]["native_honest"]
    assert result.outcome is Outcome.CORRECT, (result.message, result.logs[-3000:])


def test_native_copy_of_the_reference_finds_nothing_with_the_referee(referee_verdicts):
    result = referee_verdicts["on"]["copy_reference"]
    assert result.outcome is Outcome.INCORRECT, (result.outcome, result.message, result.logs[-3000:])


def test_native_copy_of_the_reference_works_without_the_referee(referee_verdicts):
    """The control: the worker judging itself keeps its references, and native code copies them, so every
    configuration passes correctness; only timing's unseen input sets, whose answers it cannot have found
    beforehand, catch it (the H100, session 24: 5 re-checked outputs wrong)."""
    result = referee_verdicts["off"]["copy_reference"]
    assert result.correctness and all(c.correct for c in result.correctness), (
        result.outcome, result.message, result.logs[-3000:])


def test_native_forged_verdict_with_the_real_nonce_is_a_verdict_mismatch(referee_verdicts):
    result = referee_verdicts["on"]["forge_verdict"]
    assert result.outcome is Outcome.POLICY_VIOLATION, (result.outcome, result.message)
    assert "verdict_mismatch" in [f.code for f in result.flags], result.flags


def test_native_forged_verdict_is_taken_without_the_referee(referee_verdicts):
    """The control: a well-formed reply with the job's nonce, read from the worker's own frames."""
    result = referee_verdicts["off"]["forge_verdict"]
    assert result.outcome is Outcome.CORRECT, (result.outcome, result.message, result.logs[-3000:])


BIG_TASK = '''
import torch
import torch.nn as nn

CUDAPERF_TASK = {"no_derived_configs": "one large output is what this test is about"}

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.randn(1 << 28)]

def get_init_inputs():
    return []
'''
BIG_CANDIDATE = '''
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2
'''


def test_a_gigabyte_output_reaches_the_referee_in_chunks_and_is_judged():
    """1 GiB per output, 2 seeds x 2 runs, through the 64 MiB region; prints the time spent on the referee
    (shipping, its references, its comparisons) against the job's."""
    from cudaperf.anticheat.policy import Policy
    from cudaperf.jobs import EvalJob, TimingConfig, job_message
    from cudaperf.tasks import task_from_source
    from cudaperf.types import Solution, SolutionFormat

    job = EvalJob(task=task_from_source(BIG_TASK, "big"), solution=Solution("s", BIG_CANDIDATE,
                  SolutionFormat.PYTORCH), device="cuda:0", seeds=(1, 2), policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(enabled=False))
    with WorkerPool([0], Limits(), timeouts=TIMEOUTS) as p:
        p.warm_up()
        start = time.monotonic()
        reply = p.run(job_message(job, secrets.token_hex(16)))
        took = time.monotonic() - start
    assert reply.outcome is None and [c["correct"] for c in reply.payload["correctness"]] == [True], (
        reply.message, reply.logs[-3000:])
    print(f"\n[sandbox-gpu] 4 x 1 GiB outputs judged by the referee: job {took:.2f} s, of which waiting "
          f"for the referee {reply.sandbox['referee_s']:.2f} s")
