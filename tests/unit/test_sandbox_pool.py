"""The worker pool against real misbehaving child processes (CPU mode): every fault gets its outcome, and
the job after it runs normally. Handlers live in sandbox_handlers.py (loaded by file path in the child)."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import pytest

from cudaperf.execute import Limits, StageTimeouts, WorkerPool, describe_exit
from cudaperf.types import Outcome

HANDLERS = str(Path(__file__).with_name("sandbox_handlers.py"))
# "hang" is the stage the hanging handlers report; its short deadline keeps the file fast.
TIMEOUTS = StageTimeouts(default_s=20.0, stages={"hang": 0.5}, start_s=30.0)
LIMITS = Limits(address_space_bytes=4 << 30, max_log_bytes=4096, max_reply_bytes=1 << 20)


def job(name: str, **fields) -> dict:
    return {"handler": f"{HANDLERS}:{name}", **fields}


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(None, LIMITS, timeouts=TIMEOUTS, preload=()) as p:
        yield p


def assert_recovers(pool: WorkerPool) -> None:
    after = pool.run(job("ok", echo=7))
    assert after.outcome is None and after.payload["echo"] == 7, after


def test_ok_job_returns_the_handlers_payload(pool):
    reply = pool.run(job("ok", echo="hi"))
    assert (reply.outcome, reply.stage, reply.message, reply.payload["echo"]) == (
        None,
        "correctness",
        "fine",
        "hi",
    )
    assert reply.flags == () and not reply.worker_replaced


def test_job_device_defaults_to_cpu_and_caller_dict_is_untouched(pool):
    sent = job("report_environment")
    reply = pool.run(sent)
    assert "device" not in sent and "handler" in sent
    assert "device" in reply.payload["job_keys"] and "handler" not in reply.payload["job_keys"]


def test_durations_are_recorded_per_reported_stage(pool):
    reply = pool.run(job("stages", stages=["setup", "import", "correctness"], sleep_s=0.05))
    assert {"setup", "import", "correctness", "cleanup"} <= set(reply.durations_s)
    assert reply.durations_s["import"] >= 0.04


def test_deadline_restarts_at_each_stage(pool):
    # three stages of 0.3 s each under a 0.5 s per-stage deadline: 0.9 s in all, yet no timeout
    reply = pool.run(job("stages", stages=["hang", "hang", "hang"], sleep_s=0.3))
    assert reply.outcome is None, reply


def test_sleeping_candidate_times_out_naming_its_stage(pool):
    reply = pool.run(job("sleep_forever", stage="hang"))
    assert reply.outcome is Outcome.TIMEOUT and reply.stage == "hang"
    assert "0.5 s deadline" in reply.message and reply.worker_replaced
    assert_recovers(pool)


def test_busy_loop_holding_the_gil_times_out(pool):
    start = time.monotonic()
    reply = pool.run(job("busy_loop", stage="hang"))
    assert reply.outcome is Outcome.TIMEOUT and reply.stage == "hang"
    assert time.monotonic() - start < 5
    assert_recovers(pool)


def test_job_deadline_caps_the_whole_job(pool):
    timeouts = StageTimeouts(default_s=20.0, stages={}, job_s=0.6)
    reply = pool.run(job("stages", stages=["a", "b", "c", "d"], sleep_s=0.3), timeouts)
    assert reply.outcome is Outcome.TIMEOUT and "job ran past its 0.6 s deadline" in reply.message
    assert_recovers(pool)


def test_segfault_is_a_crash_named_segmentation_fault(pool):
    reply = pool.run(job("segfault"))
    assert reply.outcome is Outcome.CRASH and reply.stage == "correctness"
    assert "segmentation fault (SIGSEGV)" in reply.message
    assert "Fatal Python error: Segmentation fault" in reply.logs  # faulthandler's dump in the log tail
    assert_recovers(pool)


def test_os_exit_is_a_crash_with_its_exit_code(pool):
    reply = pool.run(job("exit_code_3"))
    assert (
        reply.outcome is Outcome.CRASH
        and reply.stage == "construct"
        and "exited with code 3" in reply.message
    )
    assert_recovers(pool)


def test_exception_escaping_the_handler_is_a_harness_error_with_traceback(pool):
    reply = pool.run(job("raise_value_error"))
    assert reply.outcome is Outcome.HARNESS_ERROR and reply.stage == "import"
    assert reply.message == "ValueError: boom from the handler"
    assert "Traceback" in reply.logs and not reply.worker_replaced


def test_system_exit_is_a_runtime_error_and_the_worker_survives(pool):
    before = pool.run(job("ok")).sandbox["pid"]
    reply = pool.run(job("raise_system_exit"))
    assert reply.outcome is Outcome.RUNTIME_ERROR and reply.message == "SystemExit: 4"
    assert pool.run(job("ok")).sandbox["pid"] == before


def test_escaping_candidate_exception_is_described_without_running_its_code(pool, tmp_path):
    marker = tmp_path / "sprung"
    reply = pool.run(job("raise_booby_trapped", marker=str(marker)))
    assert reply.outcome is Outcome.RUNTIME_ERROR and reply.message == "Trap: quiet, 7"
    assert not marker.exists()


def test_cuda_error_text_poisons_and_replaces_the_worker(pool):
    reply = pool.run(job("raise_cuda_like_error"))
    assert reply.outcome is Outcome.CUDA_ERROR and reply.payload["worker_poisoned"] and reply.worker_replaced
    after = pool.run(job("ok"))
    assert after.outcome is None and after.sandbox["pid"] != reply.sandbox["pid"]


def test_fake_verdict_on_stdout_is_ignored(pool):
    reply = pool.run(job("fake_verdict"))
    assert reply.outcome is Outcome.INCORRECT and reply.message == "real verdict"
    assert '"outcome": "correct"' in reply.logs  # it is in the log, and only there


def test_logs_keep_only_the_tail(pool):
    reply = pool.run(job("chatty", nbytes=100_000))
    assert reply.logs.endswith("THE-END\n") and "earlier bytes cut" in reply.logs
    assert len(reply.logs) < LIMITS.max_log_bytes + 100


def test_logs_start_empty_for_each_job(pool):
    pool.run(job("fake_verdict"))
    assert "outcome" not in pool.run(job("ok")).logs


def test_memory_hog_is_out_of_memory_under_the_address_space_limit(pool):
    reply = pool.run(job("memory_hog", nbytes=8 << 30))
    assert reply.outcome is Outcome.OUT_OF_MEMORY and reply.stage == "construct"
    assert_recovers(pool)


def test_lingering_child_process_is_killed_and_flagged(pool):
    reply = pool.run(job("fork_linger"))
    assert [f.code for f in reply.flags] == ["lingering_processes"] and not reply.worker_replaced
    assert pool.run(job("pid_alive", pid=reply.payload["pid"])).payload["alive"] is False
    assert_recovers(pool)


def test_setsid_grandchild_is_caught_by_the_subreaper_sweep(pool):
    reply = pool.run(job("fork_linger", double=True))
    assert "lingering_processes" in [f.code for f in reply.flags] and not reply.worker_replaced
    assert pool.run(job("pid_alive", pid=reply.payload["pid"])).payload["alive"] is False


def test_lingering_thread_replaces_the_worker(pool):
    reply = pool.run(job("linger_thread"))
    assert [f.code for f in reply.flags] == ["lingering_threads"] and reply.worker_replaced
    assert_recovers(pool)


def test_huge_reply_is_output_too_large_and_the_worker_is_kept(pool):
    reply = pool.run(job("huge_reply", nbytes=2 << 20))
    assert reply.outcome is Outcome.OUTPUT_TOO_LARGE and "over the 1048576 byte limit" in reply.message
    assert not reply.worker_replaced
    assert_recovers(pool)


def test_oversized_frame_is_a_forgery_refused_without_reading_it(pool):
    reply = pool.run(job("oversized_frame"))
    assert reply.outcome is Outcome.POLICY_VIOLATION and "2147483647 bytes" in reply.message
    assert [f.code for f in reply.flags] == ["channel_forged"] and reply.worker_replaced
    assert_recovers(pool)


def test_forged_result_with_a_guessed_nonce_is_a_policy_violation(pool):
    reply = pool.run(job("forge_message"))
    assert reply.outcome is Outcome.POLICY_VIOLATION and [f.code for f in reply.flags] == ["channel_forged"]
    assert reply.worker_replaced
    assert_recovers(pool)


def test_unframed_json_written_to_every_fd_is_a_forgery(pool):
    reply = pool.run(job("spray_fds"))  # adversarial fixture hack_08_forge_result_fd, as a handler
    assert reply.outcome is Outcome.POLICY_VIOLATION and [f.code for f in reply.flags] == ["channel_forged"]
    assert_recovers(pool)


def test_garbage_on_the_channel_is_a_policy_violation(pool):
    reply = pool.run(job("garble_channel"))
    assert reply.outcome is Outcome.POLICY_VIOLATION and "unparseable" in reply.message
    assert_recovers(pool)


def test_closing_the_channel_is_a_crash(pool):
    reply = pool.run(job("close_channel"))
    assert reply.outcome is Outcome.CRASH and "exited with code 70" in reply.message
    assert_recovers(pool)


def test_monkey_patched_timer_is_a_policy_violation(pool):
    reply = pool.run(job("tamper_timer"))
    assert reply.outcome is Outcome.POLICY_VIOLATION and "time.perf_counter" in reply.message
    assert "harness_tampered" in [f.code for f in reply.flags] and reply.worker_replaced
    assert_recovers(pool)


def test_payload_that_is_not_json_is_a_harness_error(pool):
    reply = pool.run(job("not_json"))
    assert reply.outcome is Outcome.HARNESS_ERROR and "not JSON-serialisable" in reply.message


def test_unknown_outcome_from_the_handler_is_a_harness_error(pool):
    reply = pool.run(job("unknown_outcome"))
    assert reply.outcome is Outcome.HARNESS_ERROR and "unknown outcome 'great'" in reply.message


def test_unknown_handler_is_a_harness_error(pool):
    reply = pool.run(job("no_such_handler"))
    assert reply.outcome is Outcome.HARNESS_ERROR and "AttributeError" in reply.message


def test_job_that_is_not_json_is_a_harness_error(pool):
    reply = pool.run({"handler": f"{HANDLERS}:ok", "x": object()})
    assert reply.outcome is Outcome.HARNESS_ERROR and reply.stage == "dispatch"


def test_worker_killed_while_idle_is_restarted_without_blame(pool):
    pid = pool.run(job("ok")).sandbox["pid"]
    os.kill(pid, 9)
    time.sleep(0.05)
    reply = pool.run(job("ok", echo=1))
    assert reply.outcome is None and reply.sandbox["pid"] != pid


def test_worker_is_recycled_after_max_jobs():
    with WorkerPool(None, Limits(max_jobs_per_worker=2), timeouts=TIMEOUTS, preload=()) as p:
        pids = [p.run(job("ok")).sandbox["pid"] for _ in range(4)]
    assert pids[0] == pids[1] != pids[2] == pids[3]


def test_worker_that_cannot_start_is_a_harness_error_not_an_exception():
    with WorkerPool(None, LIMITS, timeouts=TIMEOUTS, preload=("no_such_module_xyz",)) as p:
        reply = p.run(job("ok"))
    assert reply.outcome is Outcome.HARNESS_ERROR and reply.stage == "start"
    assert "ModuleNotFoundError" in reply.logs


def test_closing_the_pool_during_a_job_is_a_harness_error_not_a_crash():
    p = WorkerPool(None, LIMITS, timeouts=TIMEOUTS, preload=())
    timer = threading.Timer(0.3, p.close)
    timer.start()
    start = time.monotonic()
    reply = p.run(job("sleep_forever", stage="correctness"))
    timer.join()
    assert reply.outcome is Outcome.HARNESS_ERROR and "closed" in reply.message
    assert time.monotonic() - start < 5


def test_closed_pool_answers_harness_error():
    p = WorkerPool(None, LIMITS, timeouts=TIMEOUTS, preload=())
    p.close()
    assert p.run(job("ok")).outcome is Outcome.HARNESS_ERROR


def test_warm_up_reports_start_seconds():
    with WorkerPool(None, LIMITS, timeouts=TIMEOUTS, preload=()) as p:
        (seconds,) = p.warm_up()
    assert seconds is not None and 0 < seconds < 10


def test_stage_timeouts_from_overrides_keeps_the_other_defaults():
    timeouts = StageTimeouts.from_overrides({"timing": 5.0}, job_s=60.0)
    assert timeouts.for_stage("timing") == 5.0 and timeouts.for_stage("import") == 300.0
    assert timeouts.for_stage("unlisted") == timeouts.default_s and timeouts.job_s == 60.0


def test_stage_timeouts_reject_non_positive_deadlines():
    with pytest.raises(ValueError, match="positive"):
        StageTimeouts(stages={"timing": 0})


def test_describe_exit_names_signals_and_codes():
    assert describe_exit(-11) == "segmentation fault (SIGSEGV)"
    assert describe_exit(-6) == "aborted (SIGABRT)"
    assert describe_exit(3) == "exited with code 3"


def test_wire_header_is_a_big_endian_length():
    from cudaperf.execute.sandbox import encode_message

    data = encode_message({"a": 1})
    assert struct.unpack(">I", data[:4])[0] == len(data) - 4 == len(b'{"a":1}')


def test_a_worker_restarted_by_a_thread_that_exits_survives_it(tmp_path):
    """`evaluate_many`'s batch threads restart a worker when a job names another build cache; the
    restarted worker must outlive the thread (it is forked from the pool's spawner thread)."""
    with WorkerPool(None, Limits(address_space_bytes=4 << 30, referee=False), timeouts=TIMEOUTS,
                    preload=()) as p:  # fmt: skip
        p.run(job("ok"))
        replies = []
        batch = threading.Thread(target=lambda: replies.append(p.run(job("ok", cache_dir=str(tmp_path)))))
        batch.start()
        batch.join()
        time.sleep(0.5)  # a parent-death signal would have killed it by now
        after = p.run(job("ok", echo=3, cache_dir=str(tmp_path)))
    if p.workers[0].plan.bwrap is None:
        pytest.skip("without bubblewrap a job's cache does not restart the worker")
    assert replies[0].sandbox["worker_start_s"] is not None  # the batch thread did restart it
    assert after.outcome is None and after.payload["echo"] == 3
    assert after.sandbox["worker_start_s"] is None and after.sandbox["pid"] == replies[0].sandbox["pid"]


# -- a job on a named worker (`WorkerPool.run_on`: the evaluator's task affinity) --------------------

@pytest.fixture(scope="module")
def two():
    with WorkerPool([None, None], LIMITS, timeouts=TIMEOUTS, preload=()) as p:
        yield p


def test_jobs_run_on_a_named_worker_stay_on_it(two):
    pids = [two.run_on(i, job("ok", echo=i)).sandbox["pid"] for i in (1, 1, 0)]
    assert pids[0] == pids[1] != pids[2]


def test_while_a_named_worker_is_busy_another_job_runs_on_the_other(two):
    busy = two.run_on(0, job("ok")).sandbox["pid"]
    held = threading.Thread(target=two.run_on, args=(0, job("stages", stages=["setup"], sleep_s=1.0)))
    held.start()
    time.sleep(0.3)
    elsewhere = two.run(job("ok")).sandbox["pid"]
    held.join()
    assert elsewhere != busy
