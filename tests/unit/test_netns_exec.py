"""execute.netns_exec: the command runs in a namespace with loopback and no route out, inside the sandbox
boundary where bubblewrap exists (read-only root but for the temp dirs it names, its own processes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

PROBE = """
import socket
listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen()
socket.create_connection(listener.getsockname(), timeout=5).close()
out = socket.socket(); out.settimeout(5)
print("outside", out.connect_ex(("192.0.2.1", 80)))
"""


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudaperf.execute.netns_exec", *argv], capture_output=True,
                          text=True, timeout=60, check=False)


def _namespace_permitted() -> bool:
    code = "from cudaperf.execute import guards; print(guards.isolate_network())"
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           check=False)
    return not probe.stdout.startswith("none")


def test_loopback_works_and_nothing_outside_is_reachable():
    if not _namespace_permitted():  # asked here, not at collection: it starts a process
        pytest.skip("this machine forbids network namespaces")
    proc = _run(sys.executable, "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() != ["outside", "0"]  # unreachable (an errno), never connected


def test_without_a_command_it_says_how_to_use_it():
    proc = _run()
    assert proc.returncode == 2 and "usage" in proc.stderr



def _boundary_here() -> bool:
    from cudaperf.execute import boundary

    return boundary.probe().bwrap is not None


WRITES = """
import os, sys
job_dir = os.path.dirname(sys.argv[1])
open(os.path.join(job_dir, "report.csv"), "w").write("ok")
for target in (os.environ["OUTSIDE"], "/tmp/cudaperf-netns-probe"):
    try:
        open(target, "w").write("escaped")
        print("wrote", target)
    except OSError as exc:
        print("refused", type(exc).__name__)
print("processes", sum(p.isdigit() for p in os.listdir("/proc")))
"""


def test_profiled_pair_writes_only_the_temp_dirs_named_on_its_command_line(tmp_path, monkeypatch):
    if not _boundary_here():
        pytest.skip("no bubblewrap here")
    import tempfile

    job_dir = tempfile.mkdtemp(prefix="cudaperf-netns-test-")
    job = os.path.join(job_dir, "job.json")
    open(job, "w").close()
    outside = tmp_path / "outside.txt"
    monkeypatch.setenv("OUTSIDE", str(outside))
    proc = _run(sys.executable, "-c", WRITES, job)
    assert proc.returncode == 0, proc.stderr
    assert "refused" in proc.stdout and f"wrote {outside}" not in proc.stdout, proc.stdout
    assert os.path.exists(os.path.join(job_dir, "report.csv")) and not outside.exists()
    assert not os.path.exists("/tmp/cudaperf-netns-probe")  # written, if at all, to the private /tmp
    shutil.rmtree(job_dir)


def test_profiled_pair_sees_only_its_own_processes():
    if not _boundary_here():
        pytest.skip("no bubblewrap here")
    proc = _run(sys.executable, "-c", "import os; print(sum(p.isdigit() for p in os.listdir('/proc')))")
    assert proc.returncode == 0 and int(proc.stdout) <= 3, (proc.stdout, proc.stderr)


def test_temp_dirs_are_the_directories_of_temp_paths_on_the_command_line(tmp_path):
    import tempfile

    from cudaperf.execute.netns_exec import temp_dirs

    job = tmp_path / "job.json"
    job.write_text("{}")
    if not str(tmp_path).startswith(os.path.realpath(tempfile.gettempdir())):
        pytest.skip("pytest's tmp_path is outside the temp root here")
    found = temp_dirs(["ncu", "--log-file", str(tmp_path / "ncu.csv"), "python", "-m", "x", str(job), "/usr"])
    assert found == (str(tmp_path),)
