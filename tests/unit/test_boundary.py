"""The operating-system boundary of the sandbox workers (execute/boundary.py, seccomp_policy.py, views.py).

Pool tests start real CPU-mode workers inside bubblewrap (skipped where there is none: CI installs it);
the handlers they run are the `h_*` functions of this file, which the worker loads by path. Pure tests
check the command line, the exposure of root-only directories and the filter's rule list.
The native-code attempts against the same boundary are tests/adversarial/native/.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cudaperf.execute import Limits, StageTimeouts, WorkerPool, boundary, seccomp_policy, views

THIS = str(Path(__file__).resolve())
TIMEOUTS = StageTimeouts(default_s=60.0, stages={}, start_s=120.0)
LIMITS = Limits(address_space_bytes=4 << 30)
HELD = ("mount_ns", "pid_ns", "net_ns", "ipc_ns", "no_new_privs", "seccomp")


def job(name: str, **fields) -> dict:
    return {"handler": f"{THIS}:{name}", **fields}


def needs_bwrap() -> None:
    if boundary.probe().bwrap is None:
        pytest.skip("no bubblewrap here: apt-get install bubblewrap (CI installs it)")


# -- handlers (run inside the worker) --------------------------------------------------------------


def h_self(job, report):
    return {"outcome": None, "self": boundary.describe_self(), "pid": os.getpid(),
            "environment": {"gpu": "none"}}  # fmt: skip


def h_write(job, report):
    """Outside any candidate scope: only the operating system decides."""
    results = {}
    for path in job["paths"]:
        try:
            with open(path, "w") as fh:
                fh.write("x")
            results[path] = "written"
        except OSError as exc:
            results[path] = errno.errorcode.get(exc.errno, str(exc.errno))
    return {"outcome": None, "results": results}


def h_syscalls(job, report):
    """What the filter refuses and what it must let through (a subprocess, a thread, a fork)."""
    import ctypes
    import threading

    libc = ctypes.CDLL(None, use_errno=True)

    def errno_of(call):
        return 0 if call() == 0 else ctypes.get_errno()

    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    return {"outcome": None,
            "ptrace": errno_of(lambda: libc.ptrace(16, os.getppid(), 0, 0)),
            "unshare_user": errno_of(lambda: libc.unshare(0x10000000)),
            "mount": errno_of(lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
            "subprocess": subprocess.run(["true"], check=False).returncode,
            "processes": sum(p.isdigit() for p in os.listdir("/proc"))}  # fmt: skip


def h_holes(job, report):
    """Holes punched in a shared memfd of the worker's own (as it holds the region it shares with its
    referee): by fallocate and by madvise on the mapping; and a plain preallocation of a file."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def errno_of(call):
        return 0 if call() == 0 else ctypes.get_errno()

    size = 1 << 20
    fd = os.memfd_create("cudaperf-holes-probe")
    os.ftruncate(fd, size)
    shared = mmap.mmap(fd, size)
    shared[:4] = b"\x01\x02\x03\x04"
    address = ctypes.addressof(ctypes.c_char.from_buffer(shared))
    out = {"outcome": None,
           "punch": errno_of(lambda: libc.fallocate(fd, 0x02 | 0x01, 0, size)),  # PUNCH_HOLE | KEEP_SIZE
           "zero": errno_of(lambda: libc.fallocate(fd, 0x10, 0, size)),  # ZERO_RANGE
           "remove": errno_of(lambda: libc.madvise(address, size, 9)),  # MADV_REMOVE
           "dontneed": errno_of(lambda: libc.madvise(address, size, 4)),  # MADV_DONTNEED: allowed
           "kept": bytes(shared[:4]) == b"\x01\x02\x03\x04"}
    with tempfile.NamedTemporaryFile() as f:
        out["preallocate"] = errno_of(lambda: libc.fallocate(f.fileno(), 0, 0, size))
    shared.close()
    os.close(fd)
    return out


def h_compile(job, report):
    """NVRTC (and, when asked, torch.compile, whose inductor runs a C++ compiler in a subprocess) under the
    boundary: the filter must not refuse anything they need."""
    from cudaperf.toolchain.nvrtc import compile_cuda

    os.environ["CUDAPERF_CACHE_DIR"] = job["cache_dir"]
    out = compile_cuda('extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }', arch="sm_90",
                       report_resources=False)  # fmt: skip
    result = {"outcome": None, "cubin_bytes": len(out.cubin)}
    if job.get("torch_compile"):
        import torch

        fn = torch.compile(lambda x: torch.relu(x) * 2.0)
        result["compiled"] = float(fn(torch.ones(8)).sum())
    return result


def h_segfault(job, report):
    import ctypes

    report("correctness")
    ctypes.string_at(0)


def h_hang(job, report):
    import time

    report("hang")
    time.sleep(600)


# -- the pool under the boundary -------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool():
    needs_bwrap()
    with WorkerPool(None, LIMITS, timeouts=TIMEOUTS, preload=()) as p:
        yield p


@pytest.fixture(scope="module")
def self_reply(pool):
    reply = pool.run(job("h_self"))
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    return reply


def test_parent_observes_every_mechanism_holding(self_reply):
    state = self_reply.sandbox["boundary"]
    assert {k: state[k] for k in HELD} == dict.fromkeys(HELD, True), state
    assert state["tool"].startswith("bwrap ") and state["missing"] == []


def test_root_evaluator_gives_the_worker_a_uid_of_its_own(self_reply):
    if os.geteuid() != 0:
        pytest.skip("as an unprivileged user the worker keeps the uid, in a user namespace")
    assert self_reply.sandbox["boundary"]["uid"] == boundary.DEFAULT_WORKER_UID
    assert self_reply.payload["self"]["uid"] == boundary.DEFAULT_WORKER_UID


def test_worker_sees_the_same_boundary_from_inside(self_reply):
    seen = self_reply.payload["self"]
    visible = [k for k in HELD if k not in ("ipc_ns", "pid_ns")]  # not visible from inside
    assert {k: seen[k] for k in visible} == dict.fromkeys(visible, True), seen


def test_reply_pid_is_the_workers_host_pid(self_reply):
    status = Path(f"/proc/{self_reply.sandbox['pid']}/status").read_text()
    nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
    assert nspid[-1] == str(self_reply.payload["pid"]) and len(nspid) == 2


def test_result_environment_records_the_boundary(self_reply):
    recorded = json.loads(self_reply.payload["environment"]["sandbox"])
    assert recorded == self_reply.sandbox["boundary"] and self_reply.payload["environment"]["gpu"] == "none"


def test_root_filesystem_is_read_only_except_the_temp_directory(pool, tmp_path):
    open_dir = Path(tempfile.mkdtemp(prefix="cudaperf-boundary-"))
    open_dir.chmod(0o777)  # world-writable: only the mount can refuse
    reply = pool.run(job("h_write", paths=[str(open_dir / "x"), "/tmp/cudaperf-boundary-probe", "x"]))
    results = reply.payload["results"]
    assert results[str(open_dir / "x")] == "EROFS" and results["/tmp/cudaperf-boundary-probe"] == "EROFS"
    assert results["x"] == "written"  # the job's working directory
    assert not (open_dir / "x").exists() and not Path("/tmp/cudaperf-boundary-probe").exists()
    open_dir.rmdir()


def test_filter_refuses_tracing_namespaces_and_mounts_but_not_processes(pool):
    reply = pool.run(job("h_syscalls"))
    out = reply.payload
    assert (out["ptrace"], out["unshare_user"], out["mount"]) == (errno.EPERM,) * 3, out
    assert out["subprocess"] == 0


def test_filter_refuses_holes_in_shared_memory_and_allows_preallocation(pool):
    out = pool.run(job("h_holes")).payload
    assert (out["punch"], out["zero"], out["remove"]) == (errno.EPERM,) * 3, out
    assert out["kept"] and out["dontneed"] == 0 and out["preallocate"] == 0, out


def test_worker_sees_only_its_own_processes(pool):
    assert pool.run(job("h_syscalls")).payload["processes"] <= 4  # init, the worker, its `true`, a spare


def test_nvrtc_compiles_under_the_filter(pool, tmp_path):
    pytest.importorskip("cuda.bindings.nvrtc")
    reply = pool.run(job("h_compile", cache_dir=str(tmp_path)))
    assert reply.outcome is None and reply.payload["cubin_bytes"] > 0, (reply.message, reply.logs[-2000:])


@pytest.mark.slow
def test_torch_compile_runs_its_compiler_subprocesses_under_the_boundary(pool, tmp_path):
    pytest.importorskip("torch")
    reply = pool.run(job("h_compile", cache_dir=str(tmp_path), torch_compile=True), StageTimeouts(
        default_s=600.0, stages={}, start_s=120.0))
    assert reply.outcome is None and reply.payload["compiled"] == 16.0, (reply.message, reply.logs[-3000:])


def test_boundary_off_records_that_nothing_holds():
    with WorkerPool(None, Limits(address_space_bytes=4 << 30, boundary=False), timeouts=TIMEOUTS,
                    preload=()) as p:  # fmt: skip
        state = p.run(job("h_self")).sandbox["boundary"]
    assert state["tool"] == "off" and state["mount_ns"] is False and state["pid_ns"] is False
    assert state["missing"] == ["boundary: turned off (Limits.boundary=False)"]


def test_without_bubblewrap_evaluation_runs_weaker_and_says_so_once(monkeypatch, caplog):
    monkeypatch.setenv(boundary.BWRAP_ENV, "/nonexistent/bwrap")
    caplog.set_level(logging.WARNING, logger="cudaperf.execute.boundary")
    with WorkerPool(None, LIMITS, timeouts=TIMEOUTS, preload=()) as p:
        reply = p.run(job("h_self"))
    with WorkerPool(None, LIMITS, timeouts=TIMEOUTS, preload=()):
        pass
    state = reply.sandbox["boundary"]
    assert reply.outcome is None and state["mount_ns"] is False and state["pid_ns"] is False
    assert any("mount_ns, pid_ns, ipc_ns: no bubblewrap" in m for m in state["missing"])
    if seccomp_policy.export_bpf().bpf is not None:
        assert state["seccomp"] is True  # loaded by the worker itself
    lines = [r for r in caplog.records if "boundary is weaker" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]


def test_a_job_on_another_cache_restarts_the_worker_with_views_over_it(pool, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)  # as pytest's and mkdtemp's directories are: the worker's uid must still enter
    before = pool.run(job("h_self")).sandbox["pid"]
    probe = [str(cache / "torch_extensions" / "mine"), str(cache / "cref" / "mine"), str(cache / "other")]
    reply = pool.run(job("h_write", cache_dir=str(cache), paths=probe))
    assert reply.sandbox["pid"] != before
    results = reply.payload["results"]
    assert [results[p] for p in probe] == ["written", "written", "EROFS"] or os.geteuid() != 0, results
    assert not (cache / "torch_extensions" / "mine").exists() and not (cache / "cref" / "mine").exists()


# -- pure parts ------------------------------------------------------------------------------------


def test_rules_name_every_call_the_brief_lists_with_a_reason():
    refused = set(seccomp_policy.refused_syscalls())
    wanted = {"ptrace", "process_vm_readv", "process_vm_writev", "mount", "unshare", "setns", "bpf",
              "perf_event_open", "keyctl", "kexec_load", "init_module", "reboot", "io_uring_setup",
              "userfaultfd"}  # fmt: skip
    assert wanted <= refused
    assert all(rule.why and rule.syscalls for rule in seccomp_policy.RULES)


def test_exported_filter_is_a_whole_number_of_bpf_instructions():
    report = seccomp_policy.export_bpf()
    if report.bpf is None:
        pytest.skip(report.reason)
    assert len(report.bpf) > 0 and len(report.bpf) % 8 == 0 and report.skipped == ()


def test_filter_loaded_in_process_refuses_ptrace_and_keeps_threads_and_subprocesses():
    if seccomp_policy.export_bpf().bpf is None:
        pytest.skip("no libseccomp binding")
    code = ("import ctypes, subprocess, threading\n"
            "from cudaperf.execute import seccomp_policy as s\n"
            "assert s.apply_in_process() == ''\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
            "print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno(), subprocess.run(['true']).returncode,"
            " s.seccomp_mode())\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert out.stdout.split() == ["thread", "-1", str(errno.EPERM), "0", "2"], out.stderr


def plan(**fields) -> boundary.Plan:
    return boundary.Plan(True, bwrap="/usr/bin/bwrap", bwrap_version="0.8.0", **fields)


def test_wrap_without_bubblewrap_leaves_the_command_alone():
    assert boundary.wrap(boundary.Plan(True), ["python", "-c", "1"], boundary.Mounts(), drops_uid=True) == [
        "python", "-c", "1"]


def test_wrap_makes_root_read_only_and_unshares_everything_but_the_user():
    argv = boundary.wrap(plan(), ["python"], boundary.Mounts(writable=("/tmp/w",)), drops_uid=False,
                         seccomp_fd=7)  # fmt: skip
    assert argv[:5] == ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev-bind"]
    unshared = {"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--die-with-parent"}
    assert unshared <= set(argv)
    assert argv[argv.index("--seccomp") + 1] == "7" and argv[-2:] == ["--", "python"]
    assert "--unshare-user" not in argv  # a root evaluator drops the uid itself; bwrap adds one otherwise


def test_wrap_binds_views_after_the_writable_temp_directory():
    argv = boundary.wrap(plan(), ["p"], boundary.Mounts(writable=("/tmp/w",), views=(("/tmp/w/v", "/c/x"),)),
                         drops_uid=False)  # fmt: skip
    assert argv.index("/tmp/w/v") > argv.index("/tmp/w")
    assert argv[argv.index("/tmp/w/v") - 1] == "--bind"


def open_temp_dir() -> Path:
    """A directory every uid can enter (pytest's tmp_path sits below a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="cudaperf-boundary-"))
    path.chmod(0o755)
    return path


def test_root_only_directory_is_hidden_and_the_needed_path_bound_back():
    tmp_path = open_temp_dir()
    locked = tmp_path / "locked"
    needed = locked / "a" / "b" / "python"
    needed.mkdir(parents=True)
    locked.chmod(0o700)
    tmp_path.chmod(0o755)
    argv = boundary.wrap(plan(), ["p"], boundary.Mounts(readable=(str(needed),)), drops_uid=True)
    text = " ".join(argv)
    assert f"--perms 0755 --tmpfs {locked}" in text and f"--ro-bind {needed} {needed}" in text
    assert f"--perms 0755 --dir {locked}/a --perms 0755 --dir {locked}/a/b" in text
    shutil.rmtree(tmp_path)


def test_first_untraversable_finds_the_outermost_closed_directory():
    tmp_path = open_temp_dir()
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "x" / "y").chmod(0o700)
    (tmp_path / "x").chmod(0o700)
    assert boundary._first_untraversable(str(tmp_path / "x" / "y" / "z")) == str(tmp_path / "x")
    shutil.rmtree(tmp_path)


def test_turned_off_plan_says_so():
    off = boundary.probe(False)
    assert not off.enabled and off.bwrap is None
    assert off.missing == ("boundary: turned off (Limits.boundary=False)",)


def test_views_copy_the_jobs_extension_with_its_times_and_drop_leftovers(tmp_path):
    cache, root = tmp_path / "cache", tmp_path / "root"
    ext = cache / "torch_extensions" / "abc" / "relu"
    ext.mkdir(parents=True)
    (ext / "relu.so").write_bytes(b"so")
    os.utime(ext / "relu.so", ns=(1_000_000_123, 1_000_000_123))
    pairs = views.mounts(str(root), str(cache))
    (root / "view" / "cref" / "stale.so").write_bytes(b"planted")
    note = views.prepare({"torch_extensions_dir": str(cache / "torch_extensions" / "abc")}, str(root),
                         str(cache), None)  # fmt: skip
    copied = root / "view" / "torch_extensions" / "abc" / "relu" / "relu.so"
    assert note == "" and copied.read_bytes() == b"so" and copied.stat().st_mtime_ns == 1_000_000_123
    assert not (root / "view" / "cref" / "stale.so").exists()
    assert pairs == ((str(root / "view" / "torch_extensions"), str(cache / "torch_extensions")),
                     (str(root / "view" / "cref"), str(cache / "cref")))  # fmt: skip


def test_state_text_names_what_holds_and_what_is_missing():
    text = boundary.state_text({"tool": "bwrap 0.8.0", "uid": 61000, "mount_ns": True, "pid_ns": False,
                                "missing": ["pid_ns: x"]})  # fmt: skip
    assert text == "bwrap 0.8.0; uid 61000; mount_ns; missing: pid_ns: x"


def test_evaluator_results_record_the_boundary_in_their_environment(tmp_path):
    """Through the whole recipe (CPU mode): the stored result says what held for the worker that ran it."""
    needs_bwrap()
    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
    from cudaperf.results import ResultStore
    from cudaperf.solutions import solution_from_text
    from cudaperf.tasks import load_task
    from cudaperf.tasks.examples import example_tasks_dir

    task = load_task(Path(example_tasks_dir()) / "vector_add.py")
    source = ("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
              "        return a + b\n")
    config = EvalConfig(device="cpu", cache_dir=str(tmp_path), build_workers=1, seeds=1,
                        policy=Policy(allow_torch_ops=True), timing=TimingConfig(enabled=False))  # fmt: skip
    with Evaluator(config) as ev:
        result = ev.evaluate(task, solution_from_text(source, "plain-add"))
    store = ResultStore(tmp_path / "results.jsonl")
    store.append(result)
    (stored,) = [r for r in ResultStore(tmp_path / "results.jsonl").load() if r.solution_id == "plain-add"]
    state = json.loads(stored.environment["sandbox"])
    assert result.outcome.value == "correct", result.message
    assert {k: state[k] for k in HELD} == dict.fromkeys(HELD, True), state


def test_worker_killed_by_a_signal_inside_bubblewrap_is_reported_by_that_signal(pool):
    """bubblewrap exits 128 + N when its child dies of signal N; the reply names the signal itself."""
    reply = pool.run(job("h_segfault"))
    assert reply.outcome.value == "crash" and "segmentation fault (SIGSEGV)" in reply.message, reply.message
    assert pool.run(job("h_self")).outcome is None


def test_deadline_kill_reaches_the_worker_inside_bubblewrap(pool):
    reply = pool.run(job("h_hang"), StageTimeouts(default_s=60.0, stages={"hang": 0.5}, start_s=120.0))
    assert reply.outcome.value == "timeout" and reply.worker_replaced
    assert _gone_within(reply.sandbox["pid"], 10.0)
    assert pool.run(job("h_self")).outcome is None


def _gone_within(pid: int, seconds: float) -> bool:
    """The process has exited (gone, or a zombie waiting for bubblewrap's init) within `seconds`."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False
