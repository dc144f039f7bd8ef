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
