"""The guards a worker installs, checked from inside real worker processes (CPU mode), plus the pure
helpers in-process. The audit hook is never installed in the pytest process itself."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cudaperf.execute import Limits, StageTimeouts, WorkerPool, guards

sys.path.insert(0, str(Path(__file__).parent))
import sandbox_handlers  # next to this file; the workers load it by path

HANDLERS = str(Path(__file__).with_name("sandbox_handlers.py"))
TIMEOUTS = StageTimeouts(default_s=20.0, stages={}, start_s=30.0)
# The audit hook alone: with the operating-system boundary on, the kernel refuses most probes before the
# hook sees them (a read-only root, another uid), which would hide what the hook does. The boundary's own
# tests are test_boundary.py; the run_as_uid tests below keep it on.
LIMITS = Limits(address_space_bytes=4 << 30, file_bytes=256 << 20, boundary=False)
REFUSED_IN_SCOPE = [
    "subprocess", "shell", "os_system", "fork", "posix_spawn", "exec", "kill_parent", "socket",
    "ctypes_call", "write_outside", "write_outside_os_open", "remove_outside", "dir_fd_escape",
    "read_own_memory", "read_parent_environ", "reopen_channel_fd", "gc_get_objects", "gc_get_referrers",
    "getframe", "traceback_frame", "settrace", "setprofile", "add_audit_hook", "swap_code",
    "import_forbidden", "import_written_extension", "import_written_extension_renamed", "setrlimit",
]  # fmt: skip
ALLOWED_IN_SCOPE = ["write_inside", "read_inside", "write_dev_null", "read_stdlib", "namedtuple", "logging"]
THREADS = ["thread"]  # refused from 3.12 (an audit event exists), allowed before: see guards.py
AFTER_SCOPE = ["subprocess", "gc_get_objects", "getframe", "write_outside"]


def job(name: str, **fields) -> dict:
    return {"handler": f"{HANDLERS}:{name}", **fields}


@pytest.fixture(scope="module")
def secret_env():
    """Credentials in the evaluator's environment when the pool starts."""
    saved = {k: os.environ.get(k) for k in ("HF_TOKEN", "CUDAPERF_API_KEY", "CUDAPERF_CACHE_DIR")}
    os.environ.update(HF_TOKEN="hf_secret", CUDAPERF_API_KEY="k", CUDAPERF_CACHE_DIR="/tmp/cudaperf-cache")
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def pool(secret_env):
    with WorkerPool(None, LIMITS, timeouts=TIMEOUTS, preload=()) as p:
        yield p


@pytest.fixture(scope="module")
def environment(pool):
    return pool.run(job("report_environment")).payload


@pytest.fixture(scope="module")
def probes(pool, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "target.txt"
    outside.write_text("keep me")
    names = REFUSED_IN_SCOPE + ALLOWED_IN_SCOPE + THREADS
    reply = pool.run(job("probe_guards", names=names, after=AFTER_SCOPE, outside_path=str(outside)))
    assert reply.outcome is None, reply
    return {**reply.payload, "outside": outside}


# -- environment, working directory, limits --------------------------------------------------------


def test_credentials_do_not_reach_the_worker(environment):
    assert "HF_TOKEN" not in environment["environ"] and "CUDAPERF_API_KEY" not in environment["environ"]


def test_allow_listed_variables_reach_the_worker(environment):
    assert environment["environ"]["CUDAPERF_CACHE_DIR"] == "/tmp/cudaperf-cache"
    assert environment["environ"]["PATH"] == os.environ["PATH"]


def test_cpu_worker_sees_no_gpu(environment):
    assert environment["environ"]["CUDA_VISIBLE_DEVICES"] == ""


def test_home_and_tmpdir_point_into_the_workers_temp_directory(environment):
    env = environment["environ"]
    root = os.path.dirname(environment["cwd"])
    assert env["HOME"] == os.path.join(root, "home") and env["TMPDIR"] == os.path.join(root, "tmp")


def test_candidate_stdout_goes_to_the_log_file_in_the_temp_directory(environment):
    assert environment["stdout"] == os.path.join(os.path.dirname(environment["cwd"]), "worker.log")


def test_core_dumps_are_off_and_file_size_is_limited(environment):
    assert environment["rlimits"]["RLIMIT_CORE"] == 0
    assert environment["rlimits"]["RLIMIT_FSIZE"] == 256 << 20


def test_cpu_worker_has_an_address_space_limit(environment):
    assert environment["rlimits"]["RLIMIT_AS"] == 4 << 30


def test_working_directory_is_deleted_after_each_job(pool):
    reply = pool.run(job("write_in_cwd"))
    assert not Path(reply.payload["cwd"], "left-behind.txt").exists()


def test_network_is_unreachable_outside_any_scope(pool):
    if not str(pool.workers[0].info.get("network", "none")).endswith("netns"):
        pytest.skip(f"no network namespace here: {pool.workers[0].info.get('network')}")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        reply = pool.run(job("connect", port=server.getsockname()[1]))
    assert reply.payload["connected"] is False


def test_worker_reports_its_isolation_and_flags(pool):
    pool.run(job("ok"))
    info = pool.workers[0].info
    assert "child_subreaper" in info["process_flags"] and "no_new_privs" in info["process_flags"]
    assert info["rlimits"]["RLIMIT_CORE"] == 0


def unreadable_for_others(*paths: str) -> str | None:
    """The first of `paths` (or a directory above it) that another uid could not read, if any."""
    for path in map(Path, paths):
        for p in (path, *path.parents):
            mode = p.stat().st_mode
            if not mode & (stat.S_IXOTH if p.is_dir() else stat.S_IROTH):
                return str(p)
    return None


def skip_unless_run_as_uid_possible() -> None:
    """Root is needed; a Python under a root-only directory (/root/.pyenv) is exposed by the boundary's
    bubblewrap, so only a machine without one needs a world-readable Python."""
    from cudaperf.execute import boundary

    if os.getuid() != 0:
        pytest.skip("run_as_uid needs root")
    blocked = unreadable_for_others(os.__file__, guards.__file__, HANDLERS)
    if blocked and boundary.probe().bwrap is None:
        pytest.skip(f"run_as_uid needs a world-readable Python and checkout, or bubblewrap; {blocked} is not")


@pytest.fixture(scope="module")
def unprivileged(tmp_path_factory):
    skip_unless_run_as_uid_possible()
    secret = tmp_path_factory.mktemp("root-only") / "secret.txt"
    secret.write_text("root only")
    secret.chmod(0o600)
    with WorkerPool(
        None, Limits(run_as_uid=61000, address_space_bytes=4 << 30), timeouts=TIMEOUTS, preload=()
    ) as p:
        reply = p.run(job("privileges", root_only_file=str(secret)))
        reply_after = p.run(job("ok"))
        named = p.run(job("user_name"))
    assert reply.outcome is None and reply_after.outcome is None, (reply, reply.logs)
    return {**reply.payload, "user_name_reply": named}


def test_run_as_uid_gives_the_worker_its_own_uid_and_no_groups(unprivileged):
    assert (unprivileged["uid"], unprivileged["gid"], unprivileged["groups"]) == (61000, 61000, [])


def test_run_as_uid_worker_has_a_user_name_without_a_passwd_entry(unprivileged):
    """getpass.getuser() (torch's and Triton's cache directories) works for a uid /etc/passwd lacks."""
    named = unprivileged["user_name_reply"]
    assert named.outcome is None and named.payload["user"] == "cudaperf-61000", (named.message, named.logs)


def test_run_as_uid_worker_cannot_read_root_files(unprivileged):
    assert unprivileged["read_root_file"] == "PermissionError"


def test_run_as_uid_worker_cannot_signal_the_evaluator(unprivileged):
    assert unprivileged["signal_parent"] == "PermissionError"


def test_run_as_uid_worker_cannot_raise_its_rlimits(unprivileged):
    assert unprivileged["raise_rlimit"] != "allowed"


def test_run_as_uid_worker_writes_its_own_working_directory(unprivileged):
    assert unprivileged["write_cwd"] == "allowed"


# -- the audit hook inside candidate_scope ---------------------------------------------------------


@pytest.mark.parametrize("name", REFUSED_IN_SCOPE)
def test_scope_refuses(probes, name):
    assert probes["inside"][name] == "refused"


@pytest.mark.parametrize("name", ALLOWED_IN_SCOPE)
def test_scope_allows(probes, name):
    assert probes["inside"][name] == "allowed"


def test_thread_creation_is_refused_where_python_audits_it(probes):
    expected = "refused" if sys.version_info >= (3, 12) else "allowed"
    assert probes["inside"]["thread"] == expected


@pytest.mark.parametrize("name", AFTER_SCOPE)
def test_closed_scope_allows_again(probes, name):
    assert probes["after"][name] == "allowed"


def test_refused_writes_left_the_outside_directory_as_it_was(probes):
    # AFTER_SCOPE's write_outside truncated the file after the scope closed; inside, nothing got through
    assert sorted(p.name for p in probes["outside"].parent.iterdir()) == ["target.txt"]


@pytest.fixture(scope="module")
def escapes(pool):
    reply = pool.run(job("escape_scope"))
    assert reply.outcome is None, reply
    return reply.payload["results"]


def test_forged_exit_event_does_not_close_the_scope(escapes):
    assert escapes["forged_exit"] == "refused"


def test_exiting_an_own_scope_twice_does_not_close_the_outer_one(escapes):
    assert escapes["double_exit"] == "refused"


def test_nested_scope_cannot_widen_the_policy(escapes):
    assert escapes["nested_wider"] == "refused"


def test_allowed_programs_run_in_a_scope_that_allows_them(escapes):
    assert escapes["allowed_program"] == "allowed" and escapes["after"] == "allowed"


def test_scope_without_an_installed_hook_raises():
    # In a fresh interpreter: audit hooks cannot be removed, and other tests of this process install one.
    code = ("from cudaperf.execute import guards\n"
            "try:\n    guards.candidate_scope().__enter__()\nexcept RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=False)
    assert "install_audit_hook" in out.stdout, out.stdout + out.stderr


def test_real_torch_work_with_the_default_preload_trips_no_integrity_check():
    pytest.importorskip("torch")
    with WorkerPool(None, LIMITS, timeouts=TIMEOUTS) as p:  # torch, torch._dynamo, CUDA Python warm-up
        replies = [p.run(job("torch_work")) for _ in range(2)]
    assert [r.outcome for r in replies] == [None, None], replies[0].logs[-2000:]
    assert [r.flags for r in replies] == [(), ()]
    assert replies[0].sandbox["pid"] == replies[1].sandbox["pid"]


# -- the FAST format's helper under the guards (CPU: compile only) ---------------------------------


@pytest.fixture(scope="module")
def cuda_pool():
    pytest.importorskip("cuda.bindings.nvrtc")
    with WorkerPool(None, LIMITS, timeouts=TIMEOUTS, preload=("cudaperf.execute.child:warm_up_cuda",)) as p:
        yield p


def test_helper_compiles_inside_scope_from_the_prebuilt_cache(cuda_pool, tmp_path, monkeypatch):
    from cudaperf import cuda

    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path))
    cuda.compile(
        sandbox_handlers.helper_source(tmp_path.name), "scale", arch="sm_90"
    )  # the build pool's part
    reply = cuda_pool.run(job("helper_in_scope", cache_dir=str(tmp_path), salt=tmp_path.name, arch="sm_90"))
    assert reply.payload["error"] is None, reply.payload["error"]


def test_helper_compiles_inside_scope_without_a_cache_entry(cuda_pool, tmp_path):
    reply = cuda_pool.run(job("helper_in_scope", cache_dir=str(tmp_path), salt=tmp_path.name, arch="sm_90"))
    assert reply.payload["error"] is None, reply.payload["error"]


def test_candidate_cannot_write_into_the_shared_cache(cuda_pool, tmp_path):
    cuda_pool.run(job("helper_in_scope", cache_dir=str(tmp_path), salt=tmp_path.name, arch="sm_90"))
    assert not list(tmp_path.rglob("*.cubin"))


# -- pure helpers ----------------------------------------------------------------------------------


def test_scrub_environment_keeps_the_allow_list_and_drops_credentials():
    env = {"PATH": "/bin", "AWS_SECRET_ACCESS_KEY": "x", "CUDAPERF_TOKEN": "y", "LC_ALL": "C", "FOO": "z"}
    out = guards.scrub_environment(env, home="/h", tmpdir="/t")
    assert out["PATH"] == "/bin" and out["LC_ALL"] == "C" and out["HOME"] == "/h" and out["TMPDIR"] == "/t"
    assert not {"AWS_SECRET_ACCESS_KEY", "CUDAPERF_TOKEN", "FOO"} & set(out)


def test_scrub_environment_applies_overrides_last():
    out = guards.scrub_environment({"CUDA_VISIBLE_DEVICES": "0,1"}, home="/h", tmpdir="/t",
                                   overrides={"CUDA_VISIBLE_DEVICES": "1"})  # fmt: skip
    assert out["CUDA_VISIBLE_DEVICES"] == "1" and out["TORCHINDUCTOR_COMPILE_THREADS"] == "1"


@pytest.mark.parametrize(
    ("path", "private"),
    [("/proc/self/mem", True), ("/proc/1/environ", True), ("/proc/self/fd/3", True),
     ("/proc/self/status", False), ("/proc/cpuinfo", False), ("/dev/mem", True), ("/usr/lib/x", False)],
)  # fmt: skip
def test_private_paths(path, private):
    assert guards._private_path(path, os.getpid()) is private


def test_integrity_check_sees_a_replaced_function(monkeypatch):
    snapshot = guards.integrity_snapshot()
    monkeypatch.setattr(os, "getcwd", lambda: "/")
    assert [code for code, _ in guards.integrity_changes(snapshot)] == ["harness_tampered"]


def test_integrity_check_sees_a_replaced_method_of_torch_s_module_class(monkeypatch):
    import torch.nn as nn

    snapshot = guards.integrity_snapshot()
    monkeypatch.setattr(nn.Module, "parameters", lambda self, recurse=True: iter(()))
    changes = guards.integrity_changes(snapshot)
    assert [code for code, _ in changes] == ["harness_tampered"] and "Module.parameters" in changes[0][1]


def test_integrity_check_sees_a_method_added_over_an_inherited_one(monkeypatch):
    import torch.nn as nn

    snapshot = guards.integrity_snapshot()
    monkeypatch.setattr(nn.ReLU, "to", lambda self, *a, **k: self, raising=False)
    changes = guards.integrity_changes(snapshot)
    assert [code for code, _ in changes] == ["harness_tampered"] and "ReLU.to" in changes[0][1]


def test_integrity_check_is_quiet_after_torch_compile_wraps_module_init(monkeypatch):
    import torch.nn as nn
    from torch._dynamo.mutation_guard import install_generation_tagging_init

    for name in ("__init__", "__setstate__"):  # put back after the test, whatever it installs
        monkeypatch.setattr(nn.Module, name, nn.Module.__dict__[name])
    monkeypatch.delattr(nn.Module, "___needs_generation_tag_patch", raising=False)
    snapshot = guards.integrity_snapshot()
    install_generation_tagging_init()  # what torch.compile's first call does
    assert guards.integrity_changes(snapshot) == ()


def test_integrity_check_is_quiet_when_nothing_changed():
    snapshot = guards.integrity_snapshot()
    assert guards.integrity_changes(snapshot) == ()


def test_integrity_check_ignores_task_modules_the_harness_drops(monkeypatch):
    import types

    monkeypatch.setitem(sys.modules, "cudaperf_task_add_0123456789", types.ModuleType("t"))
    snapshot = guards.integrity_snapshot()
    monkeypatch.delitem(sys.modules, "cudaperf_task_add_0123456789")
    assert guards.integrity_changes(snapshot) == ()


def test_integrity_check_sees_a_replaced_package_module(monkeypatch):
    import types

    import cudaperf.timing

    snapshot = guards.integrity_snapshot()
    monkeypatch.setitem(sys.modules, "cudaperf.timing", types.ModuleType("cudaperf.timing"))
    assert "worker_state_changed" in [code for code, _ in guards.integrity_changes(snapshot)]
    assert cudaperf.timing is not None


def test_integrity_check_sees_an_import_hook(monkeypatch):
    snapshot = guards.integrity_snapshot()
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, object()])
    assert [code for code, _ in guards.integrity_changes(snapshot)] == ["worker_state_changed"]


def test_forbidden_modules_are_listed_once_and_cover_process_and_network():
    assert {"subprocess", "socket", "ctypes", "multiprocessing"} <= guards.FORBIDDEN_MODULES


def test_a_worker_under_its_own_uid_gets_a_user_name_in_its_environment():
    """Checked without root: the environment names the uid, so getpass.getuser() needs no passwd entry."""
    from cudaperf.execute.sandbox import Worker

    worker = Worker(None, Limits(), uid=61000)
    worker._root = "/nonexistent-root"
    env = worker._environment()
    assert (env["USER"], env["LOGNAME"]) == ("cudaperf-61000", "cudaperf-61000")


def test_a_workers_inductor_cache_is_its_own_even_after_the_parent_compiled(monkeypatch):
    """Inductor puts /tmp/torchinductor_<user> into the parent's environment at its first compile; a worker
    under another uid cannot write there, so its torch.compile baseline used to fail with EACCES."""
    from cudaperf.execute.sandbox import Worker

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_root")
    worker = Worker(None, Limits(), uid=61000)
    worker._root = "/nonexistent-root"
    assert worker._environment()["TORCHINDUCTOR_CACHE_DIR"] == "/nonexistent-root/tmp/torchinductor"


def test_a_workers_triton_cache_is_its_own_even_after_the_parent_compiled_on_the_gpu(monkeypatch):
    """Inductor puts TRITON_CACHE_DIR (its own cache dir's triton/<device>) into the parent's environment
    at its first Triton kernel; inside the boundary that path is read-only, so a worker inheriting it had
    its torch.compile baseline fail with EROFS."""
    from cudaperf.execute.sandbox import Worker

    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/torchinductor_root/triton/0")
    worker = Worker(None, Limits(), uid=61000)
    worker._root = "/nonexistent-root"
    assert worker._environment()["TRITON_CACHE_DIR"] == "/nonexistent-root/tmp/torchinductor/triton"
