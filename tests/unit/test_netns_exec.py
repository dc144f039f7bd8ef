"""execute.netns_exec: the command runs in a namespace with loopback and no route out."""

from __future__ import annotations

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
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
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

