"""Process guards a sandbox worker installs before any candidate code runs.

Covers, in the order the child applies them:
- `scrub_environment`: the worker's environment is rebuilt from an allow-list (PATH, CUDA and torch
  settings, cudaperf's cache paths...); anything that looks like a credential is dropped even when its
  prefix is allowed; HOME and TMPDIR point into the worker's temp directory. The parent applies it when it
  spawns the worker, so secrets of the evaluating process never reach the child's memory.
- `isolate_network`: a private network namespace (`unshare(CLONE_NEWNET)`, root or user namespaces),
  holding only a loopback interface that is down: no packet leaves, not even to localhost services.
- `apply_limits`: rlimits for core dumps (off), file size, open files, optionally address space (CPU mode
  only: the CUDA driver reserves hundreds of GiB of virtual address space, so RLIMIT_AS breaks CUDA),
  data segment and process count (RLIMIT_NPROC counts every thread of the uid system-wide and root ignores
  it, so it is off by default).
- `drop_privileges` (`Limits.run_as_uid`, or by default under the boundary when the evaluator is root):
  the worker switches to a uid of its own before any candidate code (see the function).
- `set_process_flags`: no_new_privs (setuid binaries gain nothing) and child-subreaper, so every orphaned
  descendant is re-parented to the worker and `reap_descendants` can kill it after each job.
- `install_audit_hook` + `candidate_scope`: a `sys.addaudithook` hook that, while at least one
  `candidate_scope` is open, refuses process creation, signals, sockets, ctypes, writes outside the temp
  directory, reads of other processes' /proc entries and of the worker's own memory and channel fds,
  gc / frame / trace introspection, rlimit changes, new audit hooks, `__code__` swaps, imports of
  `FORBIDDEN_MODULES` and of shared libraries from the temp directory (an extension module's name or an
  ELF header: a library the candidate wrote there would be native code of its own). Refusals raise
  PermissionError (ValueError for `sys._getframe`, the error the stdlib's fallbacks in logging, typing,
  collections and enum already expect).
- `integrity_snapshot` / `integrity_changes`: identities of the callables of the modules the harness
  relies on (builtins, time, torch, torch.cuda, torch.Tensor, cudaperf.*) and of the import machinery,
  compared after a job to detect monkey-patching (hack #7) and state that would leak into the next job.
- `reap_descendants`, `python_threads`: what the candidate left running.

How the switch is protected: the "candidate active" state lives only in the hook's closure, and no Python
object references the hook (the interpreter keeps it in a C-level list). A scope is opened and closed by
an audit event carrying the scope object itself; the hook counts only objects it saw enter, so candidate
code can close only scopes it opened. The outer scope object lives on the harness frame's value stack
(`with candidate_scope():`, never `as name` and never stored), and frames are refused while active.

What stands around these guards: the operating-system boundary of `boundary.py` (on by default,
`Limits.boundary`): bubblewrap gives the worker a read-only root but for its temp directory and private
cache views, its own pid, ipc, uts and network namespaces and its own /proc, no_new_privs and the
seccomp filter of `seccomp_policy.py`; a root evaluator's worker runs under a uid of its own. The hook
here is the Python-level layer inside it; the boundary is the one that holds against native code.

Not covered, with the boundary on (`boundary.observe` records per worker what actually held; a missing
mechanism is logged once and the worker runs weaker):
- Native code inside the worker's own process. A `load_inline` extension bypasses the audit hook and can
  read the worker's memory (the job's secret, the channel nonce) and write a well-formed reply. The
  correctness verdict no longer rests on it: the referee (referee.py) computes it in a process the
  candidate never runs in, from outputs the worker ships before it computes any reference of the job,
  and the worker keeps no reference output across jobs (references, kept outputs and every free block
  of the allocator are overwritten before the memory goes back to the driver, and the shared output
  region is zeroed by the parent after each job). What native code can no longer do: write outside the
  temp directory and its private views (the cache, the checkout, results files, /tmp), see, signal,
  trace or read the memory or /proc of any process outside its pid namespace (the referee's included),
  reach a network, raise privileges (no_new_privs, no capabilities after the uid switch), make the calls
  the seccomp filter refuses, copy a reference output it cannot find, or make a wrong answer correct by
  forging the reply (the referee's verdict replaces the worker's, and a claim it contradicts is
  `verdict_mismatch`, a violation). Forged frames with a wrong nonce are still detected (`channel_forged`).
- What still travels only from the worker, and so stays forgeable by native code, with what bounds it:
  timings (the referee flags `impossible_speed` from its own speed-of-light floor and its own time of the
  reference, so a forged baseline cannot switch the floor off; timed calls that add up to more than the
  timing stage lasted, as the parent measured it, are `verdict_mismatch`; a time between the floor and
  the truth is not caught), coverage and the own-kernel times, the torch-op monitor's and the process
  watch's findings, input mutation (the referee judges on inputs of its own, so a mutation cannot
  change its verdict, only the candidate's timing inputs), a fault the worker reports instead of a
  verdict (it costs the candidate its result, so it gains nothing), and the speed-of-light check of C
  tasks (it stays in the worker). With `Limits(referee=False)` (an A/B switch only) the worker judges
  itself and none of the referee's guarantees hold.
- The referee shares the GPU with the worker: a kernel can read stale device memory the referee freed
  (its cached references stay allocated, so the live ones are not stale), and the two contexts compete
  while the referee computes references (during correctness only: it is idle from the last output on,
  before timing starts). Outputs of an earlier candidate may remain in the CUDA driver's own staging
  buffers of this worker (at most one copy chunk), and in memory a candidate allocated outside torch.
- Reads: the worker can read what the read-only tree shows its uid (task files, the checkout, world-
  readable files); the evaluator's home is hidden, root-only directories stay closed to its uid except
  the paths it needs (its interpreter, the package, the build cache), which are exposed read-only.
- Without bubblewrap (no binary, or namespaces refused): no mount or pid namespace, so native code can
  write wherever the worker's uid may and see the machine's processes; the uid switch needs a Python
  readable by other users; seccomp is then loaded by the worker itself (still before candidate code);
  descendants that call setsid() escape the process-group kill when the worker itself is killed (with
  the pid namespace, its teardown kills them).
  As an unprivileged evaluator with bubblewrap, the worker keeps the evaluator's uid inside a user
  namespace: the read-only mounts and the pid namespace give it the same reach as its own uid would.
- The GPU and its driver are shared with everything else on the machine: a kernel can read stale device
  memory of other processes, hold the GPU, or leave the context unusable (the pool then replaces the
  worker); timing side channels and GPU contention are not addressed.
- Compile time: the build pool compiles the candidate's C++/CUDA as the evaluator (the compiler, not the
  candidate, runs; an `#include` of a readable file can copy it into the build log).
- Threads: Python 3.11 raises no audit event for thread creation, so threads cannot be refused there
  (3.12 raises `_thread.start_new_thread`, 3.13 `_thread.start_joinable_thread`: both refused); a
  Python thread still alive after a job is detected (`python_threads`) and the worker replaced, but
  while the job runs it can act outside the scope (e.g. during timing, hack #5).
- Candidate code running outside the scope: finalizers (`__del__`, weakref callbacks), dunder methods or
  `__torch_function__` of objects the harness touches, module-level state read later. The harness must
  type-check outputs before using them and release candidate objects inside the scope.
- Imports: the hook sees only modules not yet in `sys.modules`; already imported modules (subprocess is
  imported by torch) are reachable, which is why the events themselves are refused.
- Attribute monkey-patching (`torch.allclose = ...`) raises no event; it is detected after the fact by
  `integrity_changes`, not prevented.
- State across jobs: a worker runs many jobs, and what the integrity check does not look at (module
  globals, library caches, allocator contents, files in its own temp directory such as torch's inductor
  cache) can carry a candidate's leftovers into later jobs of that worker (the cache views are refreshed
  per job; what `process_registries` reads is put back: the warnings module's state, torch's safe
  globals, numpy's error state, print options; `integrity_changes` watches torch.nn's classes; a worker
  holding most of its address space is replaced: `address_space_held`);
  `Limits.max_jobs_per_worker=1` gives each job a fresh process, at the price of a start. Timing's unseen
  input sets are drawn per job (`EvalJob.unseen_nonce`), so outputs kept from an earlier job never
  match them.
- Completeness: the hook refuses the escape routes listed above; Python's introspection has more
  (attributes of objects the harness hands to candidate code, C accessors in third-party extensions),
  and the seccomp filter is a deny-list (see seccomp_policy.py for why).
"""

from __future__ import annotations

import errno
import importlib.machinery
import os
import re
import resource
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

# One list of modules candidate code may not import fresh. Why each group: ctypes/cffi reach libc
# directly (syscalls, memory reads); process modules start programs outside the worker's guards;
# network modules have no use in a kernel and are how data leaves. (The static policy of the anti-cheat
# keeps its own list for source checks; this one is the runtime backstop.)
_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)  # read once: the hook imports nothing
FORBIDDEN_MODULES: frozenset[str] = frozenset(
    {
        "ctypes", "_ctypes", "cffi",
        "subprocess", "_posixsubprocess", "multiprocessing", "_multiprocessing", "pty", "pexpect",
        "socket", "_socket", "ssl", "_ssl", "http", "urllib", "urllib3", "ftplib", "smtplib",
        "telnetlib", "xmlrpc", "requests", "httpx", "aiohttp", "paramiko", "websocket", "websockets",
    }
)  # fmt: skip

# Programs `torch.utils.cpp_extension.load_inline` runs even when the extension is already built
# (it checks `ninja --version` and the compiler version, then runs ninja, which finds nothing to do).
# Pass these as `candidate_scope(allowed_programs=...)` for INLINE solutions only.
INLINE_BUILD_PROGRAMS: frozenset[str] = frozenset(
    {"ninja", "c++", "g++", "gcc", "cc", "clang++", "clang", "nvcc", "x86_64-linux-gnu-g++", "which"}
)

# Environment variables kept in a worker. Everything else is dropped.
ENV_ALLOW: frozenset[str] = frozenset(
    {
        "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LANG", "LC_ALL", "TZ",
        "CUDA_HOME", "CUDA_PATH", "CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING", "CUDA_LAUNCH_BLOCKING",
        "CUDA_CACHE_PATH", "TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST", "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_NVML_BASED_CUDA_CHECK", "MAX_JOBS", "CC", "CXX", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS", "CUDAPERF_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_PTXAS_PATH",
    }
)  # fmt: skip
ENV_ALLOW_PREFIXES: tuple[str, ...] = ("LC_", "CUDAPERF_", "TORCHINDUCTOR_", "NVIDIA_")
# A name containing any of these is dropped even if allowed above (CUDAPERF_API_KEY, NVIDIA_API_KEY...).
ENV_DENY_MARKERS: tuple[str, ...] = ("TOKEN", "KEY", "SECRET", "PASSW", "CREDENTIAL", "AUTH", "COOKIE")
# Set in every worker. Why TORCHINDUCTOR_COMPILE_THREADS: inductor keeps a pool of compile processes,
# which the per-job descendant sweep would kill; compiling in-process keeps baselines working.
ENV_FIXED: dict[str, str] = {"PYTHONDONTWRITEBYTECODE": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_SCOPE_EVENT = "cudaperf.candidate_scope"


# --------------------------------------------------------------------------------------------------
# Environment


def scrub_environment(
    env: Mapping[str, str],
    *,
    home: str,
    tmpdir: str,
    extra_allow: Iterable[str] = (),
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment a worker gets: allow-listed names of `env`, minus credentials, plus fixed values.

    `overrides` (e.g. CUDA_VISIBLE_DEVICES) are applied last and are not filtered.
    """
    allow = ENV_ALLOW | frozenset(extra_allow)
    kept = {
        name: value
        for name, value in env.items()
        if (name in allow or name.startswith(ENV_ALLOW_PREFIXES))
        and not any(marker in name.upper() for marker in ENV_DENY_MARKERS)
    }
    kept.setdefault("PATH", os.defpath)
    kept.update(ENV_FIXED)
    kept.update({"HOME": home, "TMPDIR": tmpdir})
    kept.update(overrides or {})
    return kept


# --------------------------------------------------------------------------------------------------
# Namespaces, limits, process flags (called once, early in the child)


def _libc():
    import ctypes  # imported here: the guard module itself must load without ctypes side effects

    return ctypes.CDLL(None, use_errno=True), ctypes


def _unshare(flags: int) -> int:
    """0 or an errno. Python 3.12 has os.unshare; 3.11 needs libc."""
    if hasattr(os, "unshare"):
        try:
            os.unshare(flags)
            return 0
        except OSError as err:
            return err.errno or errno.EPERM
    libc, ctypes = _libc()
    return 0 if libc.unshare(flags) == 0 else ctypes.get_errno()


def isolate_network() -> str:
    """Move this process into a new, empty network namespace. Must run before any thread starts.

    Returns "netns" (root or CAP_SYS_ADMIN), "userns+netns" (unprivileged, via a user namespace mapping
    our own uid) or "none: <reason>" (then only the audit hook stands between candidate code and the
    network, and native code is not stopped).
    """
    err = _unshare(_CLONE_NEWNET)
    if err == 0:
        return "netns"
    uid, gid = os.getuid(), os.getgid()
    err2 = _unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
    if err2 != 0:
        return f"none: unshare failed ({os.strerror(err)}; with a user namespace: {os.strerror(err2)})"
    try:  # map our uid/gid so files keep their owner inside the namespace
        for path, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{uid} {uid} 1"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            with open(f"/proc/self/{path}", "w") as f:
                f.write(text)
    except OSError as exc:
        return f"userns+netns (uid map failed: {exc})"
    return "userns+netns"


def apply_limits(
    *,
    file_bytes: int | None,
    open_files: int | None,
    address_space_bytes: int | None,
    data_bytes: int | None,
    processes: int | None,
) -> dict[str, int]:
    """Set rlimits (soft = hard, never above the current hard limit); return what was applied.

    RLIMIT_CORE is always 0: a segfaulting candidate must not write gigabytes of core dump.
    """
    wanted = {
        "RLIMIT_CORE": 0,
        "RLIMIT_FSIZE": file_bytes,
        "RLIMIT_NOFILE": open_files,
        "RLIMIT_AS": address_space_bytes,
        "RLIMIT_DATA": data_bytes,
        "RLIMIT_NPROC": processes,
    }
    applied: dict[str, int] = {}
    for name, value in wanted.items():
        if value is None:
            continue
        which = getattr(resource, name)
        _soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))
        applied[name] = value
    if file_bytes is not None:
        # A write past RLIMIT_FSIZE then fails with EFBIG (an exception in the writer) instead of
        # killing the worker with SIGXFSZ.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return applied


def drop_privileges(uid: int, gid: int) -> str:
    """Become `uid`/`gid` with no supplementary groups (needs root; call after `isolate_network` and
    `apply_limits`, before `set_process_flags`, because a uid change clears the parent-death signal).

    Why: as root, native candidate code could read and write any file, signal or inspect the evaluator,
    and raise its own rlimits back. Under a uid of its own it can do none of that, cannot ptrace or
    signal the other workers (each gets its own uid) and, being non-dumpable, cannot be ptraced by
    them either. What it still needs: world-readable Python and CUDA installs, world-accessible
    /dev/nvidia* nodes, and a temp directory it owns (the parent chowns it).
    """
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    libc, _ = _libc()
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    return f"uid {os.getuid()} gid {os.getgid()}"


def set_process_flags(*, parent_death_signal: bool = False) -> tuple[str, ...]:
    """no_new_privs + child subreaper (+ SIGKILL on parent death when asked); returns the flags set.

    PR_SET_PDEATHSIG fires when the *thread* that spawned us exits, so the parent asks for it only when
    it spawns from its main thread; the child's parent watchdog covers the other case.
    """
    libc, _ = _libc()
    flags = []
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        flags.append("no_new_privs")
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
        flags.append("child_subreaper")
    if parent_death_signal and libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0:
        flags.append("parent_death_signal")
    return tuple(flags)


# --------------------------------------------------------------------------------------------------
# The audit hook and the candidate scope


class candidate_scope:  # lower case: used like a function, `with guards.candidate_scope():`
    """Context manager: while open, the audit hook refuses what candidate code may not do.

    Use it as `with candidate_scope(): ...` around import, construction and every call of candidate
    code; do not bind it (`as x`) or store it: the open scope object is the capability that closes it.
    `allowed_programs` (basenames) and `writable_dirs` widen the policy for this scope; when scopes are
    nested, a program or directory is allowed only if every open scope allows it, so candidate code can
    narrow the policy but never widen it. Raises RuntimeError if `install_audit_hook` was not called.
    """

    __slots__ = ("_acknowledged", "allowed_programs", "writable_dirs")

    def __init__(self, *, allowed_programs: Iterable[str] = (), writable_dirs: Iterable[str] = ()):
        self.allowed_programs = frozenset(allowed_programs)
        self.writable_dirs = tuple(os.path.realpath(d) for d in writable_dirs)
        self._acknowledged = False

    def __enter__(self) -> None:
        sys.audit(_SCOPE_EVENT, "enter", self)
        if not self._acknowledged:
            raise RuntimeError("candidate_scope used without guards.install_audit_hook() in this process")

    def __exit__(self, *exc_info: object) -> None:
        sys.audit(_SCOPE_EVENT, "exit", self)


_OPEN_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Audit events whose listed arguments are paths that the event writes to (create, delete, modify).
_PATH_WRITE_EVENTS: dict[str, tuple[int, ...]] = {
    "os.chflags": (0,), "os.chmod": (0,), "os.chown": (0,), "os.link": (0, 1), "os.mkdir": (0,),
    "os.remove": (0,), "os.rename": (0, 1), "os.rmdir": (0,), "os.symlink": (1,), "os.truncate": (0,),
    "os.utime": (0,), "os.setxattr": (0,), "os.removexattr": (0,), "shutil.chown": (0,),
    "shutil.copyfile": (1,), "shutil.copymode": (1,), "shutil.copystat": (1,), "shutil.copytree": (1,),
    "shutil.move": (0, 1), "shutil.rmtree": (0,), "shutil.make_archive": (0,),
    "shutil.unpack_archive": (1,),
}  # fmt: skip
# Refused outright while a scope is open.
_REFUSED_EVENTS: frozenset[str] = frozenset(
    {
        "os.system", "os.exec", "os.spawn", "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg",
        "signal.pthread_kill", "_thread.start_new_thread", "_thread.start_joinable_thread",
        "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
        "sys._current_exceptions", "sys.settrace", "sys.setprofile", "sys.addaudithook",
        "sys.monitoring.register_callback", "resource.setrlimit", "resource.prlimit", "os.unshare",
        "os.setns",
    }
)  # fmt: skip
_REFUSED_PREFIXES: tuple[str, ...] = ("ctypes.", "socket.", "cffi.")
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
_PROC_PATH = re.compile(r"^/proc/(?:self|thread-self|(\d+))(?:/task/\d+)?(/.*)?$")
_PROC_PRIVATE = re.compile(r"^/(?:mem|fd(?:/|$)|fdinfo|map_files|pagemap|environ|syscall|stack)")
_DEVICE_READ_REFUSED = ("/dev/mem", "/dev/kmem", "/dev/port", "/proc/kcore")

_installed = threading.Event()  # only tells `install_audit_hook` it already ran; not the switch


def install_audit_hook(*, temp_root: str, protected_fds: Iterable[int] = ()) -> None:
    """Install the hook (once per process). Inactive until a `candidate_scope` opens.

    `temp_root`: the worker's temp directory, the only place candidate code may write (plus /dev/null
    and each scope's `writable_dirs`). `protected_fds`: the job and result pipes, which candidate code
    may not reopen.
    """
    if _installed.is_set():
        raise RuntimeError("the cudaperf audit hook is already installed in this process")
    sys.addaudithook(_make_hook(os.path.realpath(temp_root), frozenset(protected_fds), os.getpid()))
    _installed.set()


def _make_hook(temp_root: str, protected_fds: frozenset[int], own_pid: int):
    live: dict[int, candidate_scope] = {}  # the switch: open scopes by id, reachable only from here

    def refuse(event: str, what: str = "") -> None:
        raise PermissionError(
            f"cudaperf sandbox: {event}{' ' + what if what else ''} is not allowed in candidate code"
        )

    def writable(path: object) -> bool:
        real = _realpath(path)
        if real is None:  # an fd or something we cannot resolve: judged elsewhere
            return not isinstance(path, int) or path not in protected_fds
        if real == os.devnull or _under(real, temp_root):
            return True
        return bool(live) and all(any(_under(real, d) for d in s.writable_dirs) for s in live.values())

    def program_allowed(program: object) -> bool:
        name = os.path.basename(os.fsdecode(program)) if isinstance(program, (str, bytes)) else None
        return name is not None and all(name in s.allowed_programs for s in live.values())

    def check_open(path: object, flags: int | None) -> None:
        if isinstance(path, int):
            if path in protected_fds:
                refuse("open", f"of the worker's channel fd {path}")
            return
        if flags is not None and flags & _OPEN_WRITE_FLAGS and not writable(path):
            refuse("open", f"for writing of {_text(path)} (outside the temp directory)")
        if _private_path(path, own_pid):
            refuse("open", f"of {_text(path)}")
        # A directory fd outside the temp dir would let `os.open(name, ..., dir_fd=fd)` create files
        # there: the event shows only `name`, which resolves inside the temp dir.
        if not writable(path) and os.path.isdir(_realpath(path) or ""):
            refuse("open", f"of the directory {_text(path)} (outside the temp directory)")

    def scope_event(args: tuple) -> None:
        action, scope = args[0], args[1]
        if not isinstance(scope, candidate_scope):
            return
        if action == "enter":
            live.setdefault(id(scope), scope)
            scope._acknowledged = True
        elif action == "exit" and live.get(id(scope)) is scope:
            del live[id(scope)]

    def hook(event: str, args: tuple) -> None:
        if event == _SCOPE_EVENT:
            scope_event(args)
            return
        if not live:
            return
        if event == "open":
            check_open(args[0], args[2])
        elif event in _REFUSED_EVENTS or event.startswith(_REFUSED_PREFIXES):
            refuse(event)
        elif event in ("subprocess.Popen", "os.posix_spawn"):
            program = args[0] if args[0] is not None else (args[1][0] if args[1] else None)
            if not program_allowed(program):
                refuse(event, f"of {_text(program)}")
        elif event == "sys._getframe":
            raise ValueError("cudaperf sandbox: frame access is not allowed in candidate code")
        elif event in ("object.__getattr__", "object.__setattr__", "object.__delattr__"):
            name = args[1]
            if name in _FRAME_ATTRIBUTES or (name == "__code__" and event != "object.__getattr__"):
                refuse(event, repr(name))
        elif event == "import":
            module = args[0]
            if module in FORBIDDEN_MODULES or module.partition(".")[0] in FORBIDDEN_MODULES:
                refuse("import", f"of {module}")
            where = args[1] if len(args) > 1 else None
            real = _realpath(where) if isinstance(where, str) else None
            if real is not None and _under(real, temp_root) and _native_library(real):
                # candidate code writes there: an ELF it wrote would run as native code in this process
                refuse("import", f"of the native library {_text(where)} (in the temp directory)")
        elif event in _PATH_WRITE_EVENTS:
            for index in _PATH_WRITE_EVENTS[event]:
                if index < len(args) and not writable(args[index]):
                    refuse(event, f"of {_text(args[index])} (outside the temp directory)")

    return hook


def _native_library(path: str) -> bool:
    """Whether an import's file is a shared library: an extension module's name, or an ELF header
    whatever the name (an extension loader takes any file name)."""
    if path.endswith(_EXTENSION_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:  # an "open" event for reading: the hook allows it
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _realpath(path: object) -> str | None:
    if isinstance(path, int) or path is None:
        return None
    try:
        return os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return None


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _text(path: object) -> str:
    return repr(os.fsdecode(path)) if isinstance(path, (str, bytes)) else repr(path)


def _private_path(path: object, own_pid: int) -> bool:
    """Another process's /proc entry, our own memory, fds or environment, or raw machine memory."""
    try:
        plain = os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    for candidate in (plain, _realpath(path) or plain):
        if candidate.startswith(_DEVICE_READ_REFUSED):
            return True
        match = _PROC_PATH.match(candidate)
        if match is None:
            continue
        pid, rest = match.group(1), match.group(2) or ""
        if pid is not None and int(pid) != own_pid:
            return True
        if _PROC_PRIVATE.match(rest):
            return True
    return False


# --------------------------------------------------------------------------------------------------
# After a job: what did the candidate leave behind?


def reap_descendants(*, max_rounds: int = 20) -> list[int]:
    """SIGKILL and reap every child of this process, repeating while orphans get re-parented to us
    (we are their subreaper). Returns the pids killed; an empty list is the normal case."""
    killed: list[int] = []
    for _ in range(max_rounds):
        children = _children()
        if not children:
            break
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return killed


def _children() -> list[int]:
    pids: list[int] = []
    base = f"/proc/{os.getpid()}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return pids


def python_threads() -> frozenset[int]:
    """Identities of the live Python threads (compare before/after a job)."""
    return frozenset(t.ident for t in threading.enumerate() if t.ident is not None)


# Modules whose callables the harness relies on for a verdict (timers, synchronise, comparison).
INTEGRITY_MODULES: tuple[str, ...] = (
    "cudaperf", "builtins", "time", "math", "torch", "torch.cuda", "torch.testing", "torch.nn.functional",
    "torch.cuda.memory", "torch.profiler", "json", "os", "sys",
)  # fmt: skip
_INTEGRITY_CLASSES: tuple[tuple[str, str], ...] = (
    ("torch", "Tensor"), ("torch._C", "TensorBase"), ("torch.cuda", "Event"), ("torch.cuda", "Stream"),
)  # fmt: skip


# After a job, a worker whose address space is past this share of its limit is replaced: what a job
# left reserved (a red team kept 58 untouched 256 MiB tensors alive across jobs, so every later job of
# the worker failed to allocate) must not decide the next jobs' verdicts.
HELD_ADDRESS_SPACE_FRACTION = 0.75


def address_space_held(limit_bytes: int | None = None) -> str:
    """Why the worker should be replaced for the address space it holds now ("" when it need not):
    `VmSize` past `HELD_ADDRESS_SPACE_FRACTION` of `RLIMIT_AS` (`limit_bytes`: the process's own limit;
    none set, as for GPU workers, whose driver reserves huge ranges: never)."""
    if limit_bytes is None:
        limit_bytes = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit_bytes in (None, resource.RLIM_INFINITY) or limit_bytes <= 0:
        return ""
    try:
        with open("/proc/self/status") as status:
            size_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return ""
    if size_kib * 1024 <= HELD_ADDRESS_SPACE_FRACTION * limit_bytes:
        return ""
    return (f"the worker holds {size_kib / 2**20:.1f} GiB of address space after the job, over "
            f"{HELD_ADDRESS_SPACE_FRACTION:.0%} of its {limit_bytes / 2**30:.1f} GiB limit: replaced")


def _torch_compiler_own(value: object) -> bool:
    """A callable torch's compiler puts in place itself (dynamo wraps `nn.Module.__init__` and
    `__setstate__` on its first compile, to tag the modules it creates): not a candidate's patch. A
    candidate's function cannot claim that module (static `dunder_access`; `functools.wraps` copies the
    wrapped function's, not dynamo's)."""
    module = getattr(value, "__module__", None)
    return isinstance(module, str) and module.startswith("torch._dynamo.")


def _is_method_like(value: object) -> bool:
    """A callable or a descriptor that makes one (what shadows an inherited method); a flag torch's
    compiler keeps on a class (`___needs_generation_tag_patch`) is not."""
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


def _watched_classes() -> dict[str, type]:
    """`_INTEGRITY_CLASSES`, and every class defined in `torch.nn.modules.*` (`Module`, `Linear`, ...):
    the reference models and baselines call their methods, so one replaced or added (shadowing an
    inherited one) changes every later job's reference (a red team slowed eager 6.5x through
    `nn.Module.parameters`)."""
    classes: dict[str, type] = {}
    for module_name, cls_name in _INTEGRITY_CLASSES:
        cls = getattr(sys.modules.get(module_name), cls_name, None)
        if isinstance(cls, type):
            classes[f"{module_name}.{cls_name}"] = cls
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("torch.nn.modules."):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and value.__module__ == name:
                classes[f"{name}.{attr}"] = value
    return classes


def process_registries() -> dict[str, Any]:
    """Process-wide state a candidate can change through public API without replacing anything, as it is
    now: `warnings.filters`, `defaultaction` and `onceregistry`, torch's safe globals for `torch.load`,
    torch's and numpy's print options, numpy's floating-point error handling. The worker reads it before
    its first job and puts it back after every job (`restore_process_registries`), so nothing a job stored
    or switched there reaches a later one (red teams kept outputs across jobs in the first lists, and
    turned a later honest candidate's warning into an error with `defaultaction`). Some channels of many:
    the module docstring's "State across jobs" says what is not covered."""
    import warnings

    saved: dict[str, Any] = {"warnings.filters": list(warnings.filters),
                             "warnings.defaultaction": warnings.defaultaction,
                             "warnings.onceregistry": dict(warnings.onceregistry)}
    torch = sys.modules.get("torch")
    serialization = getattr(torch, "serialization", None)
    if hasattr(serialization, "get_safe_globals"):
        saved["torch safe globals"] = list(serialization.get_safe_globals())
    if torch is not None:
        saved["torch print options"] = _torch_print_options(torch)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        saved["numpy error state"] = numpy.geterr()
        saved["numpy print options"] = numpy.get_printoptions()
    return saved


def _torch_print_options(torch: Any) -> dict[str, Any]:
    options = torch._tensor_str.PRINT_OPTS  # torch has no getter; the harness reads its own state
    names = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")
    return {k: getattr(options, k) for k in names}


def restore_process_registries(saved: dict[str, Any]) -> None:
    """`process_registries`' state as it was saved (the warnings module's caches told they changed); each
    part on its own, so one that cannot be put back does not keep the others as the job left them."""
    import warnings

    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")

    def warnings_state() -> None:
        warnings.filters[:] = saved["warnings.filters"]
        warnings.defaultaction = saved["warnings.defaultaction"]
        warnings.onceregistry.clear()
        warnings.onceregistry.update(saved["warnings.onceregistry"])
        getattr(warnings, "_filters_mutated", lambda: None)()

    def safe_globals() -> None:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(saved["torch safe globals"])

    steps = [warnings_state]
    if "torch safe globals" in saved:
        steps.append(safe_globals)
    if "torch print options" in saved:
        steps.append(lambda: torch.set_printoptions(**saved["torch print options"]))
    if "numpy error state" in saved and numpy is not None:
        steps.append(lambda: numpy.seterr(**saved["numpy error state"]))
        steps.append(lambda: numpy.set_printoptions(**saved["numpy print options"]))
    for step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001, S112 -- best effort: the others still go back
            continue


def integrity_snapshot(extra_prefixes: tuple[str, ...] = ("cudaperf.",), *, _id=id, _vars=vars) -> dict:
    """Identities of callables in the harness-critical namespaces and of the import machinery.

    The harness's own package counts (`cudaperf` and `cudaperf.*`); modules the harness creates per job
    (`cudaperf_task_*`, the candidate's module) do not: the harness itself loads and drops them, and the
    first H200 runs showed that counting them flagged every job and replaced the worker each time.
    Builtins are bound as default arguments so that a candidate replacing `id` or `vars` later cannot
    change what the check computes.
    """
    namespaces: dict[str, dict] = {}
    for name in list(sys.modules):
        module = sys.modules.get(name)
        if module is None or not (name in INTEGRITY_MODULES or name.startswith(extra_prefixes)):
            continue
        namespaces[name] = _vars(module)
    classes = _watched_classes()
    namespaces.update((name, _vars(cls)) for name, cls in classes.items())
    return {
        "callables": {
            (ns, attr): _id(value)
            for ns, space in namespaces.items()
            for attr, value in list(space.items())
            if callable(value) or isinstance(value, (staticmethod, classmethod))
        },
        "spaces": namespaces,
        "class_keys": {name: frozenset(_vars(cls)) for name, cls in classes.items()},
        "modules": {name: _id(sys.modules[name]) for name in namespaces if name in sys.modules},
        "import": (_id(sys.meta_path), tuple(map(_id, sys.meta_path)), tuple(map(_id, sys.path_hooks))),
    }


def integrity_changes(snapshot: dict, *, _id=id) -> tuple[tuple[str, str], ...]:
    """(code, message) for each difference from `snapshot`.

    `harness_tampered`: a callable the harness relies on was replaced or deleted (the verdict of this job
    cannot be trusted). `worker_state_changed`: a module was swapped out of sys.modules or the import
    machinery changed (the next job would inherit it).
    """
    changed = sorted(
        f"{ns}.{attr}"
        for (ns, attr), ident in snapshot["callables"].items()
        if _id(value := snapshot["spaces"][ns].get(attr)) != ident and not _torch_compiler_own(value)
    )
    added = sorted(f"{ns}.{attr}" for ns, keys in snapshot.get("class_keys", {}).items()
                   for attr in set(snapshot["spaces"][ns]) - keys
                   if _is_method_like(value := snapshot["spaces"][ns].get(attr))
                   and not _torch_compiler_own(value))
    out: list[tuple[str, str]] = []
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        out.append(("harness_tampered", f"harness callables replaced during the job: {shown}"))
    if added:
        shown = ", ".join(added[:8]) + (f" and {len(added) - 8} more" if len(added) > 8 else "")
        out.append(("harness_tampered", f"attributes added to torch classes the reference runs on: {shown}"))
    swapped = [n for n, ident in snapshot["modules"].items() if _id(sys.modules.get(n)) != ident]
    if swapped:
        out.append(("worker_state_changed", f"modules replaced or removed in sys.modules: {swapped[:8]}"))
    now = (_id(sys.meta_path), tuple(map(_id, sys.meta_path)), tuple(map(_id, sys.path_hooks)))
    if now != snapshot["import"]:
        out.append(("worker_state_changed", "the import machinery (sys.meta_path / sys.path_hooks) changed"))
    return tuple(out)


def watch_parent(parent_pid: int, *, interval_s: float = 1.0) -> threading.Thread:
    """Start a daemon thread that kills this process group when the parent goes away (re-parenting
    changes getppid), so workers never outlive the evaluator."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os.killpg(0, signal.SIGKILL)

    thread = threading.Thread(target=watch, name="cudaperf-parent-watch", daemon=True)
    thread.start()
    return thread
