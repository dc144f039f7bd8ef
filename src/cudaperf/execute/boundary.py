"""The operating-system boundary around processes that run candidate code (issue 24): bubblewrap + seccomp.

Covers:
- `probe()`: once per `WorkerPool`, which mechanisms this machine offers: a bubblewrap binary
  (`$CUDAPERF_BWRAP`, else `bwrap` on PATH) that can create mount, pid, ipc, uts and network namespaces,
  a libseccomp binding that compiles `seccomp_policy.RULES`, and root (for a uid of the worker's own).
  What is missing is logged once per process, in one line, and recorded in every result.
- `wrap(...)`: the bubblewrap command line around a worker's command. Inside it the worker sees `/`
  read-only except its own temp directory and the private views it is given, `/dev` (the GPU) with a
  private `/dev/shm`, its own `/proc` in its own pid namespace (no other process is visible, so none can
  be signalled, traced or read), private ipc/uts/network namespaces, no_new_privs (bubblewrap always
  sets it) and the seccomp filter, which bubblewrap loads just before it starts the worker.
- The uid: when the evaluator is root, bubblewrap runs as root (it must, to bind root-only paths) and the
  worker drops to a uid of its own before any candidate code (`guards.drop_privileges`, as before); files
  that uid could not reach (a Python under /root, the build cache) are exposed read-only by mounting a
  tmpfs over the blocking directory and binding back only the paths the worker needs. When the evaluator
  is not root, bubblewrap puts the worker in a user namespace of that user: it cannot write the user's
  files (read-only mounts) or see the user's processes (pid namespace): the same effect on the host. The
  evaluator's home directory is hidden the same way in both cases (it may hold credentials).
- `observe(pid)`: what holds for a running worker, read by the parent from the kernel (/proc/<pid>/status
  and namespace links), so candidate code cannot forge it; `describe_self()` is the same view from inside.

Part 2 of issue 24 (a verdict re-checked in a process the candidate never runs in) fits beside this: a
second, trusted process per worker is one more `subprocess.Popen` of the parent, outside `wrap` (or
wrapped with another uid and only the worker's output directory readable), talking to the parent over
its own pipe; nothing here assumes the worker is the only child.

Not covered: the rules themselves (`seccomp_policy.py`), the in-process guards (`guards.py`), GPU memory
and timing side channels, what the worker may read inside the read-only tree (task files, the checkout).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from cudaperf.execute import seccomp_policy

BWRAP_ENV = "CUDAPERF_BWRAP"
DEFAULT_WORKER_UID = 61000
"""First uid of the workers when the evaluator is root and `Limits.run_as_uid` is not set: worker i of a
pool runs as DEFAULT_WORKER_UID + i (no /etc/passwd entry needed)."""
_NAMESPACES = ("mnt", "pid", "net", "ipc", "uts", "user")
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """What the boundary can do on this machine (probed once per pool)."""

    enabled: bool
    bwrap: str | None = None  # path of a working bubblewrap
    bwrap_version: str = ""
    seccomp_bpf: bytes | None = None
    seccomp_binding: str = ""
    root: bool = False  # the evaluator runs as root: workers get uids of their own
    missing: tuple[str, ...] = ()  # "mechanism: why", one per mechanism that will not hold

    @property
    def tool(self) -> str:
        return f"bwrap {self.bwrap_version}".strip() if self.bwrap else "none"


@dataclass(frozen=True)
class Mounts:
    """The worker's filesystem inside the boundary.

    `writable`: directories bound read-write at their own path (the worker's temp directory).
    `views`: (private source, target): a private writable directory shown at `target` (which must exist),
    e.g. the worker's own copy of one extension directory where the shared cache holds them all.
    `readable`: paths the worker must be able to read (its Python, the package, the cache); used only to
    expose what a hidden or root-only directory would otherwise keep from it.
    """

    writable: tuple[str, ...] = ()
    views: tuple[tuple[str, str], ...] = ()
    readable: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------------
# Probing the machine


def find_bwrap() -> str | None:
    """`$CUDAPERF_BWRAP` (e.g. a binary unpacked from a .deb with `dpkg -x`), else `bwrap` on PATH."""
    explicit = os.environ.get(BWRAP_ENV)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("bwrap")


def probe(enabled: bool = True) -> Plan:
    """Find out what holds here; never raises. `enabled=False` (the A/B switch) plans no boundary."""
    if not enabled:
        return Plan(False, missing=("boundary: turned off (Limits.boundary=False)",))
    missing: list[str] = []
    path, version, why = _working_bwrap()
    if path is None:
        missing.append(f"mount_ns, pid_ns, ipc_ns: {why}")
    filt = seccomp_policy.export_bpf()
    if filt.bpf is None:
        missing.append(f"seccomp: {filt.reason}")
    root = os.geteuid() == 0
    if not root and path is None:
        missing.append("uid: the evaluator is not root and has no user namespace (bubblewrap) either")
    return Plan(True, path, version, filt.bpf, filt.binding, root, tuple(missing))


def _working_bwrap() -> tuple[str | None, str, str]:
    """(path, version, why not): a bubblewrap that really creates the namespaces the worker gets."""
    path = find_bwrap()
    if path is None:
        hint = f"${BWRAP_ENV} is not executable" if os.environ.get(BWRAP_ENV) else "no bwrap on PATH"
        return None, "", f"no bubblewrap ({hint}; apt-get install bubblewrap)"
    trial = [path, "--ro-bind", "/", "/", "--proc", "/proc", "--unshare-pid", "--unshare-ipc",
             "--unshare-net", "--unshare-uts", "--die-with-parent", "--", "true"]  # fmt: skip
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                                 check=False).stdout.split()[-1:]  # fmt: skip
        done = subprocess.run(trial, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, "", f"bubblewrap at {path} does not run ({exc})"
    if done.returncode != 0:
        return None, "", f"bubblewrap at {path} cannot create namespaces here: {done.stderr.strip()[:200]}"
    return path, (version[0] if version else "?"), ""


def log_missing(plan: Plan) -> None:
    """One warning line per process for each distinct set of missing mechanisms."""
    if plan.missing:
        _warn_once("cudaperf sandbox boundary is weaker here: " + "; ".join(plan.missing))


@functools.lru_cache(maxsize=64)
def _warn_once(text: str) -> None:  # lru_cache makes "once per distinct text" without a global set
    _log.warning(text)


# --------------------------------------------------------------------------------------------------
# The command line


def wrap(plan: Plan, command: Sequence[str], mounts: Mounts, *, drops_uid: bool, share_net: bool = False,
         seccomp_fd: int | None = None, private_tmp: bool = False) -> list[str]:
    """`command` inside bubblewrap, or `command` unchanged when the plan has no bubblewrap.

    `drops_uid`: the worker will switch to an unprivileged uid itself, so root-only directories on the
    way to `mounts.readable` are exposed. `share_net`: keep the caller's network namespace (a caller that
    made a private one already, such as `netns_exec`). `seccomp_fd`: a readable fd holding
    `plan.seccomp_bpf` (see `seccomp_fd`), inherited by bubblewrap. `private_tmp`: an empty, writable
    /tmp of the sandbox's own (for programs that write fixed paths there, such as ncu's lock file).
    """
    if plan.bwrap is None:
        return list(command)
    args = [plan.bwrap, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev",
            "--perms", "1777", "--tmpfs", "/dev/shm", "--proc", "/proc"]  # fmt: skip
    if private_tmp:
        args += ["--perms", "1777", "--tmpfs", "/tmp"]
    hidden = _hidden_dirs(mounts.readable, drops_uid)
    made: set[str] = set()
    for top in hidden:
        args += ["--perms", "0755", "--tmpfs", top]
        for path in _outermost(p for p in _existing(mounts.readable) if _under(p, top)):
            args += _dirs_between(top, path, made) + ["--ro-bind", path, path]
    for path in mounts.writable:
        args += _dirs_between(_hidden_above(path, hidden), path, made) + ["--bind", path, path]
    for source, target in mounts.views:
        args += ["--bind", source, target]
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    if not share_net:
        args.append("--unshare-net")
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return [*args, "--", *command]


def seccomp_fd(plan: Plan) -> int | None:
    """A pipe's read end holding the compiled filter (the caller passes it to the child, then closes it).
    The program is a few hundred bytes: it fits the pipe buffer, so the write never blocks."""
    if plan.bwrap is None or plan.seccomp_bpf is None:
        return None
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, plan.seccomp_bpf)
    finally:
        os.close(write_fd)
    return read_fd


def python_paths() -> tuple[str, ...]:
    """What a worker needs to read to run this interpreter and import cudaperf and its dependencies."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable),
                  os.path.dirname(os.path.realpath(sys.executable)), package_parent,
                  *(p for p in sys.path if p)}  # fmt: skip
    # The evaluator's working directory (a checkout whose tests name handler files by path), unless it is
    # the home directory or above it: exposing that would undo hiding the home.
    cwd, home = os.path.realpath(os.getcwd()), os.path.realpath(os.path.expanduser("~"))
    if not _under(home, cwd):
        candidates.add(cwd)
    return tuple(sorted(os.path.realpath(p) for p in candidates))


def _hidden_dirs(readable: Iterable[str], drops_uid: bool) -> tuple[str, ...]:
    """Directories replaced by an empty tmpfs: the evaluator's home (it may hold credentials) and, for
    a worker that drops to another uid, every directory that uid could not traverse on the way to a path
    it must read. Outermost only (a tmpfs over /root already hides /root/.pyenv)."""
    tops = set()
    home = os.path.realpath(os.path.expanduser("~"))
    if home != "/" and os.path.isdir(home):
        tops.add(home)
    if drops_uid:
        for path in _existing(readable):
            blocked = _first_untraversable(path)
            if blocked is not None:
                tops.add(blocked)
    return tuple(_outermost(tops))


def _first_untraversable(path: str) -> str | None:
    """The outermost strict ancestor of `path` that other users cannot enter (no o+x), if any."""
    parts = path.strip("/").split("/")[:-1]
    current = ""
    for part in parts:
        current += "/" + part
        try:
            if not os.stat(current).st_mode & stat.S_IXOTH:
                return current
        except OSError:
            return None
    return None


def let_uid_enter(directory: str) -> bool:
    """Add o+x (enter, not list) to `directory` when the evaluator owns it and other uids cannot enter
    it; True when it changed. For the build cache, which a worker that drops its uid must enter to reach
    its views (`views.py`) and the NVRTC cubins: a cache made by `mkdtemp` or pytest's `tmp_path` is
    0700. Its ancestors need no change (`_hidden_dirs` exposes them); the path itself is bound as it is."""
    try:
        info = os.stat(directory)
        if info.st_mode & stat.S_IXOTH or info.st_uid != os.geteuid():
            return False
        os.chmod(directory, stat.S_IMODE(info.st_mode) | stat.S_IXOTH)
    except OSError:
        return False
    return True


def _existing(paths: Iterable[str]) -> list[str]:
    return [os.path.realpath(p) for p in paths if p and os.path.exists(p)]


def _outermost(paths: Iterable[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(_under(path, k) for k in kept):
            kept.append(path)
    return kept


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _hidden_above(path: str, hidden: Sequence[str]) -> str | None:
    return next((top for top in hidden if _under(path, top) and path != top), None)


def _dirs_between(top: str | None, path: str, made: set[str]) -> list[str]:
    """`--dir` for each directory strictly between `top` (a tmpfs) and `path`, world-traversable:
    bubblewrap would otherwise create them 0700, closed to the worker's uid."""
    if top is None:
        return []
    args: list[str] = []
    current = top
    for part in os.path.relpath(path, top).split("/")[:-1]:
        current = os.path.join(current, part)
        if current not in made:
            made.add(current)
            args += ["--perms", "0755", "--dir", current]
    return args


# --------------------------------------------------------------------------------------------------
# What holds for a running worker


def observe(pid: int, plan: Plan) -> dict:
    """The boundary of process `pid` as the kernel reports it, compared with this (the parent's) process.

    Keys: tool, uid, user_ns, mount_ns, pid_ns, net_ns, ipc_ns, no_new_privs, seccomp (bools; None where
    /proc could not be read), missing (the plan's). Computed by the parent: candidate code cannot change it.
    """
    status = _status(pid)
    seccomp = None if "Seccomp" not in status else status["Seccomp"].strip() == "2"
    state: dict = {"tool": plan.tool if plan.enabled else "off", "uid": _first_int(status.get("Uid")),
                   "no_new_privs": _flag(status.get("NoNewPrivs")), "seccomp": seccomp}  # fmt: skip
    for ns in _NAMESPACES:
        key = "mount_ns" if ns == "mnt" else f"{ns}_ns"
        state[key] = _own_namespace(pid, ns)
    state["missing"] = list(plan.missing)
    return state


def describe_self() -> dict:
    """Most keys of `observe`, seen from inside the worker (for its reply's environment): the user
    namespace from /proc/self/uid_map, a read-only `/` for the mount namespace, a network with nothing but
    loopback. `pid_ns` is None: a pid namespace's own /proc looks like the host's from inside. Weaker than
    `observe` (candidate native code could make it lie): a report, not proof."""
    status = _status("self")
    return {
        "uid": _first_int(status.get("Uid")),
        "pid_ns": None,
        "user_ns": _own_user_namespace(),
        "mount_ns": bool(os.statvfs("/").f_flag & os.ST_RDONLY),
        "net_ns": _only_loopback(),
        "no_new_privs": _flag(status.get("NoNewPrivs")),
        "seccomp": status.get("Seccomp", "0").strip() == "2",
    }


def state_text(state: dict) -> str:
    """A one-line summary for logs: 'bwrap 0.8.0; uid 61000; mount_ns pid_ns ...; missing: ...'."""
    held = " ".join(k for k, v in state.items() if v is True)
    missing = "; ".join(state.get("missing") or []) or "nothing"
    return f"{state.get('tool')}; uid {state.get('uid')}; {held or 'no isolation'}; missing: {missing}"


def inner_pid(outer_pid: int, ns_pid: int, *, max_depth: int = 4) -> int | None:
    """Host pid of the process that is `ns_pid` in its own pid namespace, below `outer_pid` (bubblewrap):
    the worker reports its own pid, which inside a pid namespace is a small number (2)."""
    frontier = [outer_pid]
    for _ in range(max_depth):
        children = [c for p in frontier for c in _children(p)]
        for child in children:
            nspids = _status(child).get("NSpid", "").split()
            if len(nspids) > 1 and nspids[-1] == str(ns_pid):
                return child
        frontier = children
    return None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                found.extend(int(c) for c in fh.read().split())
    except OSError:
        pass
    return found


def _status(pid: int | str) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)
    except OSError:
        return {}


def _first_int(text: str | None) -> int | None:
    try:
        return int(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def _flag(text: str | None) -> bool | None:
    return None if text is None else text.strip() == "1"


def _own_namespace(pid: int, ns: str) -> bool | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
    except OSError:
        return None


def _own_user_namespace() -> bool:
    try:
        with open("/proc/self/uid_map") as fh:
            return fh.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def _only_loopback() -> bool:
    try:
        with open("/proc/net/dev") as fh:
            names = [line.split(":")[0].strip() for line in fh.readlines()[2:]]
    except OSError:
        return False
    return names == ["lo"]


def plan_dict(plan: Plan) -> dict:
    """The plan without the filter's bytes (for logs and reports)."""
    out = asdict(plan)
    out["seccomp_bpf"] = None if plan.seccomp_bpf is None else len(plan.seccomp_bpf)
    return out


def hidden_from_others(paths: Iterable[str]) -> str | None:
    """The first directory on the way to `paths` that another uid cannot enter, if any (then a worker
    under its own uid needs bubblewrap to expose them)."""
    return next((b for b in map(_first_untraversable, _existing(paths)) if b is not None), None)


def load_seccomp() -> None:
    """Preload entry of a worker started without bubblewrap: load the filter in the worker itself.
    A failure is printed to the worker's log; the parent's `observe` records that no filter holds."""
    why = seccomp_policy.apply_in_process()
    if why:
        print(f"cudaperf boundary: no seccomp filter: {why}", file=sys.stderr)
