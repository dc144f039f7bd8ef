"""Native code against the operating-system boundary (CPU mode): raw system calls from inside a worker.

The attempts (escape_attempts.c) run inside a real worker process, loaded with ctypes by
native_handlers.py, outside any candidate scope: only the boundary (bubblewrap namespaces, read-only
root, a uid of the worker's own, seccomp) can stop them. Every target the attempts write to is
world-writable, so the read-only mounts, not file permissions, are what must refuse them. The
"evaluator" they aim at is a decoy process started here (same user as the evaluator, a canary secret in
its environment). The same attempts with the boundary off are the control: they must get out, which
shows the fixtures work and the boundary is what stops them.

The GPU side (the same C code inside load_inline candidates, through the full evaluator) is
tests/gpu/test_sandbox_gpu.py. Why no fast-format fixture: the fast format runs only NVRTC device code;
native host code reaches a worker only through load_inline (or ctypes, which the static policy refuses).
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cudaperf.execute import Limits, StageTimeouts, WorkerPool, boundary

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fixtures  # next to this file

HERE = Path(__file__).resolve().parent
HANDLERS = str(HERE / "native_handlers.py")
ESCAPES = ("write_outside", "read_environ", "read_memory", "signal", "trace")
TIMEOUTS = StageTimeouts(default_s=60.0, stages={}, start_s=60.0)
CHECKOUT_FILE = HERE.parents[2] / "cudaperf-native-escape"  # src/../ as the attempt computes it
TMP_FILE = Path("/tmp/cudaperf-native-escape")

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or shutil.which("gcc") is None, reason="x86-64 raw syscalls and gcc needed"
)


def _world_writable_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="cudaperf-native-"))
    path.chmod(0o777)
    return path


@pytest.fixture(scope="module")
def library():
    out = _world_writable_dir()
    lib = out / "attempts.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(HERE / "attempts_main.c")],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    lib.chmod(0o755)
    yield str(lib)
    shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def decoy():
    """A process outside the sandbox standing for the evaluator: same user, a secret in its environment."""
    env = {**os.environ, "NATIVE_CANARY_SECRET": secrets.token_hex(8)}
    proc = subprocess.Popen(["sleep", "600"], env=env)
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def targets(decoy):
    """The evaluator's environment the workers start from: the decoy's pid, a build cache and a results
    file (world-writable), and the paths the attempts write to."""
    cache, results = _world_writable_dir(), _world_writable_dir() / "results.jsonl"
    results.write_text('{"outcome": "correct"}\n')
    results.chmod(0o666)
    cache_file = cache / "nvrtc" / "entry.cubin"
    cache_file.parent.mkdir(mode=0o777)
    cache_file.write_bytes(b"cubin")
    cache_file.chmod(0o666)
    saved = {k: os.environ.get(k) for k in ("CUDAPERF_NATIVE_EVALUATOR_PID", "CUDAPERF_NATIVE_TARGETS",
                                            "CUDAPERF_CACHE_DIR")}  # fmt: skip
    os.environ.update(CUDAPERF_NATIVE_EVALUATOR_PID=str(decoy), CUDAPERF_CACHE_DIR=str(cache),
                      CUDAPERF_NATIVE_TARGETS=f"{results}:{cache_file}")  # fmt: skip
    yield {"cache": cache, "results": results, "cache_file": cache_file}
    for k, v in saved.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(results.parent, ignore_errors=True)


def _run(limits: Limits, library: str, names: tuple[str, ...]):
    with WorkerPool(None, limits, timeouts=TIMEOUTS, preload=()) as pool:
        reply = pool.run({"handler": f"{HANDLERS}:run_attempts", "library": library, "names": list(names)})
        return reply, pool.workers[0].boundary_state


def _lingering() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "cpnative-linger":
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


@pytest.fixture(scope="module")
def sandboxed(library, targets):
    if boundary.probe().bwrap is None:
        pytest.skip("no bubblewrap here: apt-get install bubblewrap (CI installs it)")
    reply, state = _run(Limits(address_space_bytes=4 << 30), library, (*ESCAPES, "linger"))
    time.sleep(0.2)
    seen = {"reply": reply, "state": state, "lingering": _lingering(),
            "tmp_file": TMP_FILE.exists(), "checkout_file": CHECKOUT_FILE.exists(),
            "cache_escape": (targets["cache"] / "cudaperf-native-escape").exists(),
            "results": targets["results"].read_text(),
            "cache_file": targets["cache_file"].read_bytes()}  # fmt: skip
    for path in (TMP_FILE, CHECKOUT_FILE):
        path.unlink(missing_ok=True)
    return seen


@pytest.mark.parametrize("name", ESCAPES)
def test_boundary_refuses_native_escape(sandboxed, name):
    reply = sandboxed["reply"]
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    assert reply.payload["results"][name] == 0


def test_native_writes_leave_tmp_checkout_and_cache_untouched(sandboxed):
    assert not sandboxed["tmp_file"] and not sandboxed["checkout_file"] and not sandboxed["cache_escape"]


def test_native_writes_leave_the_results_file_and_cache_entries_as_they_were(sandboxed):
    assert sandboxed["results"] == '{"outcome": "correct"}\n' and sandboxed["cache_file"] == b"cubin"


def test_setsid_double_fork_does_not_outlive_the_job(sandboxed):
    assert sandboxed["lingering"] == []
    assert "lingering_processes" in [f.code for f in sandboxed["reply"].flags]


def test_every_mechanism_holds_for_the_worker(sandboxed):
    state = sandboxed["state"]
    held = {k: state[k] for k in ("mount_ns", "pid_ns", "net_ns", "ipc_ns", "no_new_privs", "seccomp")}
    assert all(held.values()), held
    if os.geteuid() == 0:
        assert state["uid"] == boundary.DEFAULT_WORKER_UID


def test_forged_reply_from_native_code_is_detected(library, targets):
    if boundary.probe().bwrap is None:
        pytest.skip("no bubblewrap here")
    reply, _ = _run(Limits(address_space_bytes=4 << 30), library, ("forge_reply",))
    assert "channel_forged" in [f.code for f in reply.flags], reply


@pytest.fixture(scope="module")
def unsandboxed(library, targets):
    """The control: the same attempts with the boundary off (as root they get out)."""
    if os.geteuid() != 0:
        pytest.skip("the control expects root, as on the GPU machine and in CI")
    reply, _ = _run(Limits(address_space_bytes=4 << 30, boundary=False), library, ESCAPES)
    escaped_tmp = TMP_FILE.exists()
    for path in (TMP_FILE, CHECKOUT_FILE):
        path.unlink(missing_ok=True)
    return reply, escaped_tmp


@pytest.mark.parametrize("name", ESCAPES)
def test_without_the_boundary_the_native_escape_gets_out(unsandboxed, name):
    reply, _ = unsandboxed
    assert reply.payload["results"][name] == 1, reply


def test_without_the_boundary_native_code_writes_tmp(unsandboxed):
    assert unsandboxed[1]


# -- the GPU fixtures, checked without a GPU --------------------------------------------------------


@pytest.mark.parametrize("attempt", [None, *fixtures.ATTEMPTS])
def test_native_fixture_passes_the_static_policy(attempt):
    """The source scan sees nothing (raw syscalls, no libc names): the boundary is what must stop it."""
    from cudaperf.anticheat.policy import Policy
    from cudaperf.anticheat.static import check_source
    from cudaperf.solutions import solution_from_text
    from cudaperf.types import SolutionFormat

    source = fixtures.candidate_source(attempt)
    assert solution_from_text(source, "native").format is SolutionFormat.INLINE
    assert [f.code for f in check_source(source, Policy())] == []


def test_native_attempts_compile_as_the_cpp_of_a_load_inline_extension(tmp_path):
    if shutil.which("g++") is None:
        pytest.skip("no g++")
    unit = tmp_path / "unit.cpp"
    calls = "".join(f"static int r_{a} = cpn_{a}();\n" for a in fixtures.ATTEMPTS)
    unit.write_text((HERE / "escape_attempts.c").read_text() + calls)
    out = subprocess.run(["g++", "-fsyntax-only", "-Wall", "-Werror", "-Wno-unused-variable", str(unit)],
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr


# -- attacks on the verdict (referee_attacks.cpp), checked without a GPU ---------------------------------


@pytest.mark.parametrize("attack", fixtures.REFEREE_ATTACKS)
def test_referee_attack_passes_the_static_policy(attack):
    """The scan sees nothing: what stops these is that the verdict is not the worker's (the GPU tests)."""
    from cudaperf.anticheat.policy import Policy
    from cudaperf.anticheat.static import check_source
    from cudaperf.solutions import solution_from_text
    from cudaperf.types import SolutionFormat

    source = fixtures.referee_attack_source(attack)
    assert solution_from_text(source, "attack").format is SolutionFormat.INLINE
    assert [f.code for f in check_source(source, Policy())] == []


@pytest.mark.slow
def test_referee_attacks_compile_against_torch_python_and_cuda_headers(tmp_path):
    """~25 s (torch/extension.h): the attacks' host C++ is valid where load_inline will build it."""
    import sysconfig

    torch_ext = pytest.importorskip("torch.utils.cpp_extension")
    cuda_include = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
    if shutil.which("g++") is None or not (cuda_include / "cuda_runtime.h").exists():
        pytest.skip("no g++ or no CUDA headers")
    code = "".join((fixtures.HERE / f).read_text() for f in ("escape_attempts.c", "referee_attacks.cpp"))
    unit = tmp_path / "unit.cpp"
    unit.write_text(f"#include <torch/extension.h>\n{code}\nint cpa_use() {{ return cpa_forge_verdict() + "
                    "(int)cpa_find_reference(torch::Tensor()).defined(); }\n")
    paths = (*torch_ext.include_paths(), sysconfig.get_paths()["include"], cuda_include)
    includes = [f"-I{p}" for p in paths]
    out = subprocess.run(["g++", "-std=c++20", "-fsyntax-only", "-w", *includes, str(unit)],
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
