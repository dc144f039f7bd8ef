"""Run a command in a fresh network namespace with only loopback up: `python -m cudaperf.execute.netns_exec
CMD ...`.

Why it exists: Nsight Compute talks to the process it profiles over local sockets (loopback TCP and
abstract Unix sockets are both per network namespace), so a profiled candidate cannot move itself into a
private namespace the way the evaluator's worker does without cutting ncu off. Instead ncu and its target are started together in one
new namespace: the pair can talk over loopback, and neither reaches any other network.

Covers: the namespace (`guards.isolate_network`), bringing `lo` up (an ioctl: no `ip` binary needed), exec.
When the namespace cannot be created the command still runs and the reason is printed to stderr (the
caller reports it). Not covered: the guards inside the target (`analysis.profile_target` installs them).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import sys

from cudaperf.execute import guards

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


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


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m cudaperf.execute.netns_exec CMD [ARG ...]", file=sys.stderr)
        return 2
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
