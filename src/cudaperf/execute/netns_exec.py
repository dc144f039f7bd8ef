"""Run a command (ncu and the candidate it profiles) inside the sandbox boundary, with a private network
that has only loopback: `python -m cudaperf.execute.netns_exec CMD ...`.

Why it exists: Nsight Compute talks to the process it profiles over local sockets (loopback TCP and
abstract Unix sockets are both per network namespace), so a profiled candidate cannot move itself into a
private namespace the way the evaluator's worker does without cutting ncu off. Instead ncu and its target
are started together in one new namespace: the pair can talk over loopback, and neither reaches any other
network.

Covers: with bubblewrap (`boundary.probe`), the command runs in the boundary of `boundary.wrap`: `/`
read-only, a private `/tmp` (ncu writes its lock file there) and the evaluator's home hidden, the
directories of the temp-directory paths named on the command line writable (the job file's and ncu's
report's), its own pid, ipc and network namespaces (bubblewrap brings `lo` up), no_new_privs and the
seccomp filter. Without bubblewrap, or with `CUDAPERF_PROFILE_BOUNDARY=0`: a network namespace of its
own (`guards.isolate_network`), `lo` brought up by an ioctl, exec; the reasons are printed to stderr (the
caller reports them). Not covered: a uid of its own (ncu may need root for the GPU's performance
counters, so the profiled pair keeps the evaluator's user), the guards inside the target
(`execute.profile_target` installs them).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import sys
import tempfile

from cudaperf.execute import boundary, guards

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
SWITCH_ENV = "CUDAPERF_PROFILE_BOUNDARY"


def loopback_up() -> str:
    """Set IFF_UP on `lo` in this namespace; "" or the reason it failed."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            request = struct.pack("16sH14x", b"lo", 0)
            flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
        return ""
    except OSError as exc:
        return f"loopback not brought up: {exc}"


def temp_dirs(argv: list[str]) -> tuple[str, ...]:
    """Directories of the command line's paths that lie in a directory of the temp root (the job file's,
    `--log-file`'s): the only places the profiled pair may write."""
    root = os.path.realpath(tempfile.gettempdir())
    found = set()
    for arg in argv:
        value = arg.split("=", 1)[-1] if arg.startswith("-") else arg
        if not value.startswith("/"):
            continue
        directory = os.path.realpath(value if os.path.isdir(value) else os.path.dirname(value))
        if os.path.isdir(directory) and directory.startswith(root + os.sep):
            found.add(directory)
    return tuple(sorted(found))


def _exec_in_boundary(argv: list[str]) -> None:
    """exec bubblewrap around `argv`; returns only when there is no boundary to enter."""
    plan = boundary.probe(os.environ.get(SWITCH_ENV, "1") != "0")
    boundary.log_missing(plan)
    if plan.bwrap is None:
        for why in plan.missing:
            print(f"cudaperf netns_exec: {why}", file=sys.stderr)
        return
    fd = boundary.seccomp_fd(plan)
    if fd is not None:
        os.set_inheritable(fd, True)  # bubblewrap reads the filter from it after exec
    mounts = boundary.Mounts(writable=temp_dirs(argv), readable=boundary.python_paths())
    command = boundary.wrap(plan, argv, mounts, drops_uid=False, seccomp_fd=fd, private_tmp=True)
    os.execv(command[0], command)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m cudaperf.execute.netns_exec CMD [ARG ...]", file=sys.stderr)
        return 2
    _exec_in_boundary(argv)
    network = guards.isolate_network()
    problems = [f"network namespace: {network}"] if network.startswith("none") else []
    if not problems and (why := loopback_up()):
        problems.append(why)
    for p in problems:
        print(f"cudaperf netns_exec: {p}", file=sys.stderr)
    os.execvp(argv[0], argv)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
