"""The system-call filter of a sandbox worker: what a kernel evaluation never needs, refused by the kernel.

Covers: `RULES`, one entry per group of system calls with the reason it is refused (the comment above
it) and the errno the caller sees; `build_filter` (a libseccomp filter: everything else allowed);
`export_bpf` (the compiled classic-BPF program, the form bubblewrap's `--seccomp FD` loads just before
it starts the worker); `apply_in_process` (the fallback where no bubblewrap is available: the worker
loads the same filter itself, before any candidate code). The binding is libseccomp's own Python module
(`seccomp`, where the distribution ships it) or `pyseccomp`, a ctypes binding with the same API.

Why a deny-list and not an allow-list: the CUDA driver, torch, NVRTC, Triton's compiler subprocesses and
ninja together make hundreds of distinct system calls that change with every driver release; an
allow-list would break evaluation on the next driver. What is refused here instead is the short list of
calls that reach other processes, the kernel's configuration or a namespace, none of which an honest
kernel needs. Calls of another architecture's ABI (32-bit `int 0x80` on x86-64) are killed by
libseccomp's default bad-architecture action, so the numbers below cannot be dodged that way.

Arguments are read for three calls: `clone`'s namespace flags; `fallocate`'s modes that remove, zero or
shift a file's existing bytes, and `madvise`'s MADV_REMOVE (the same as a hole punched through a shared
mapping): the worker holds the region it shares with its referee (`referee.py`, a sealed memfd), whose
pages a hole would take from under the referee (where the referee pinned them for the GPU's copies, its
copies could go on reading the old pages). Plain preallocation (`posix_fallocate`) stays allowed.

Not covered: which process loads the filter (`boundary.py`), arguments of other calls (`clone3` passes
its flags in memory a filter cannot read: it answers ENOSYS, and libc then falls back to `clone`), and
anything the filter does not name (a deny-list is as good as its list).
"""

from __future__ import annotations

import errno
import tempfile
from dataclasses import dataclass
from typing import Any

# clone(2) flags that create namespaces; any of them in clone's first argument is refused.
CLONE_NAMESPACE_FLAGS: tuple[int, ...] = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)
# fallocate(2) modes that change a file's existing bytes; any of them in its mode argument is refused.
FALLOCATE_CHANGING_MODES: tuple[int, ...] = (
    0x02,  # FALLOC_FL_PUNCH_HOLE
    0x08,  # FALLOC_FL_COLLAPSE_RANGE
    0x10,  # FALLOC_FL_ZERO_RANGE
    0x20,  # FALLOC_FL_INSERT_RANGE
)
MADV_REMOVE = 9  # madvise(2): free a shared mapping's pages and their backing store (a punched hole)


@dataclass(frozen=True)
class Rule:
    """System calls refused with `errno_value`; `why` is the reason in one line."""

    syscalls: tuple[str, ...]
    errno_value: int
    why: str


RULES: tuple[Rule, ...] = (
    # Tracing reads and writes another process's memory and registers (the parent's secret, another
    # worker's results); a kernel evaluation never traces anything.
    Rule(("ptrace",), errno.EPERM, "tracing another process"),
    # The same reach without ptrace: copy memory out of or into another process.
    Rule(("process_vm_readv", "process_vm_writev"), errno.EPERM, "another process's memory"),
    # Duplicating another process's file descriptors (its result pipe, its log) through a pidfd.
    Rule(("pidfd_getfd", "kcmp"), errno.EPERM, "another process's file descriptors"),
    # Changing the filesystem view: a worker could unmount or remount its read-only root.
    Rule(("mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
          "fsmount", "fspick", "mount_setattr"), errno.EPERM, "changing the filesystem view"),
    # New namespaces: a user namespace gives a fake root with capabilities inside it (a large kernel
    # attack surface); joining one (setns) would leave the worker's. clone's flags are checked below.
    Rule(("unshare", "setns"), errno.EPERM, "creating or joining namespaces"),
    # Loading programs into the kernel.
    Rule(("bpf",), errno.EPERM, "loading BPF programs into the kernel"),
    # Hardware and kernel performance counters: a side channel on other processes and a frequent source
    # of kernel bugs. GPU profiling goes through the CUDA driver, not through this call.
    Rule(("perf_event_open",), errno.EPERM, "performance counters"),
    # Kernel keyrings can hold other users' credentials.
    Rule(("keyctl", "add_key", "request_key"), errno.EPERM, "kernel keyrings"),
    # Replacing or extending the running kernel.
    Rule(("kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module"), errno.EPERM,
         "loading kernel code"),
    Rule(("reboot", "swapon", "swapoff", "acct"), errno.EPERM, "machine administration"),
    # Setting the clock would skew every timing on the machine, other workers' included.
    Rule(("settimeofday", "clock_settime", "clock_adjtime"), errno.EPERM, "setting the clock"),
    # io_uring performs file and network operations the filter never sees (a way around this list) and
    # has been a steady source of kernel exploits; nothing in an evaluation uses it.
    Rule(("io_uring_setup", "io_uring_enter", "io_uring_register"), errno.EPERM, "io_uring"),
    # userfaultfd is how kernel exploits widen race windows; no evaluation pages memory by hand.
    Rule(("userfaultfd",), errno.EPERM, "user page-fault handling"),
    # Opening files by handle bypasses path permissions (the classic container escape).
    Rule(("open_by_handle_at",), errno.EPERM, "opening files by handle"),
    # The kernel log, raw I/O ports, other processes' memory placement.
    Rule(("syslog", "iopl", "ioperm", "move_pages", "migrate_pages"), errno.EPERM,
         "kernel log, I/O ports, other processes' pages"),
    # clone3 hides its flags in memory: ENOSYS makes libc fall back to clone, whose flags are checked.
    Rule(("clone3",), errno.ENOSYS, "clone3 (libc falls back to clone)"),
)


@dataclass(frozen=True)
class FilterReport:
    """What was built: the BPF program (None when no filter could be built) and why not, and the
    syscall names this architecture does not have (skipped, e.g. `iopl` on arm64)."""

    bpf: bytes | None
    reason: str = ""
    skipped: tuple[str, ...] = ()
    binding: str = ""


def _binding() -> tuple[Any, str]:
    """libseccomp's own binding where installed, else pyseccomp (same API); (None, why) without both."""
    try:
        import seccomp  # the distribution's python3-seccomp

        return seccomp, "seccomp"
    except ImportError:
        pass
    try:
        import pyseccomp

        return pyseccomp, "pyseccomp"
    except (ImportError, OSError) as exc:  # OSError: libseccomp.so.2 missing
        return None, f"no libseccomp binding ({type(exc).__name__}: {exc}); pip install pyseccomp"


def build_filter() -> tuple[Any, tuple[str, ...], str]:
    """(filter, skipped names, binding name); filter None (and the reason as the binding) on failure."""
    lib, name = _binding()
    if lib is None:
        return None, (), name
    try:
        filt = lib.SyscallFilter(lib.ALLOW)
    except Exception as exc:  # noqa: BLE001 - libseccomp refused to start: report, run without a filter
        return None, (), f"libseccomp failed: {exc}"
    skipped: list[str] = []
    for rule in RULES:
        for call in rule.syscalls:
            try:
                filt.add_rule(lib.ERRNO(rule.errno_value), call)
            except Exception:  # noqa: BLE001 - a name this architecture lacks
                skipped.append(call)
    for flag in CLONE_NAMESPACE_FLAGS:
        # Any one namespace flag set in clone's flags argument: refused (several rules are OR-ed).
        filt.add_rule(lib.ERRNO(errno.EPERM), "clone", lib.Arg(0, lib.MASKED_EQ, flag, flag))
    for mode in FALLOCATE_CHANGING_MODES:
        filt.add_rule(lib.ERRNO(errno.EPERM), "fallocate", lib.Arg(1, lib.MASKED_EQ, mode, mode))
    filt.add_rule(lib.ERRNO(errno.EPERM), "madvise", lib.Arg(2, lib.EQ, MADV_REMOVE))
    return filt, tuple(skipped), name


def export_bpf() -> FilterReport:
    """The compiled filter, ready for `bwrap --seccomp FD`."""
    filt, skipped, name = build_filter()
    if filt is None:
        return FilterReport(None, reason=name)
    try:
        with tempfile.TemporaryFile() as fh:
            filt.export_bpf(fh)
            fh.seek(0)
            program = fh.read()
    except Exception as exc:  # noqa: BLE001 - an export failure leaves the worker without a filter
        return FilterReport(None, reason=f"seccomp_export_bpf failed: {exc}", binding=name)
    return FilterReport(program, skipped=skipped, binding=name)


def apply_in_process() -> str:
    """Load the filter into this process (and every process it starts); "" or why it was not loaded.

    libseccomp sets no_new_privs first, which the kernel requires of a process without CAP_SYS_ADMIN.
    """
    filt, _skipped, name = build_filter()
    if filt is None:
        return name
    try:
        filt.load()
    except Exception as exc:  # noqa: BLE001 - reported by the worker, evaluation goes on weaker
        return f"seccomp load failed: {exc}"
    return ""


def seccomp_mode(pid: int | str = "self") -> int | None:
    """The `Seccomp:` field of /proc/<pid>/status (0 none, 1 strict, 2 filter), None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Seccomp:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def refused_syscalls() -> tuple[str, ...]:
    """Every name the policy refuses (for reports and tests)."""
    by_argument = ("clone (namespace flags)", "fallocate (modes that punch, zero or shift bytes)",
                   "madvise (MADV_REMOVE)")
    return tuple(call for rule in RULES for call in rule.syscalls) + by_argument


__all__ = ["RULES", "FilterReport", "Rule", "apply_in_process", "build_filter", "export_bpf",
           "refused_syscalls", "seccomp_mode"]
