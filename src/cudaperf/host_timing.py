"""Host-side timing away from the machine's other work: the serial-C baseline on a CPU of its own.

Serial C is timed on the CPU while the machine's other processes compile (the build pool, the dataset's
measuring children: g++, NVRTC, Inductor) and run candidates. On the H200, the serial-C baseline of the
same 67 tasks differed by a median 33.8% between two measurements, 30.8% even for calls of 500 µs and more
(issue 18), while the GPU-timed implementations agreed to 0.7%. The protocol here:

- `timing_cpus()`: the highest-numbered CPU this process may use, with its SMT siblings (a busy
  hyperthread twin slows its sibling), is reserved for host timing; none on machines with fewer than
  `MIN_CPUS` CPUs (taking one of two would halve everything else);
- `keep_off_timing_cpus()`: a process that does other work (a build process, a measuring child, an
  evaluation worker) calls it first thing, before it starts threads; its threads and the programs it
  starts inherit the narrower set;
- `isolated_host_timing()`: the timing thread holds a machine-wide lock (a `flock` on a file in the
  cudaperf cache, so sandboxed workers that see the cache share it: one serial timing at a time, machine
  wide) and runs on the reserved CPUs for the block, its previous CPU set restored after.

`CUDAPERF_BASELINE_PROTOCOL=legacy` switches this off (and `timing.compile_baseline`'s deterministic,
static-shape settings): the earlier protocol, kept for A/B measurements (scripts/baseline_repeatability.sh).

`steal_ticks()` reads how much time the hypervisor gave the CPUs to someone else (/proc/stat's `steal`),
a diagnostic beside the serial-C baseline (a VM neighbour shifts a whole run's serial times).

Not covered: CPU frequency (boost clocks fall as more cores are busy), memory-bandwidth contention from
the other CPUs, processes outside cudaperf, machines where the OS refuses affinity changes (then the lock
alone applies; `TimingSlot` says so). Those show in a calibration workload timed beside the baseline
(`cudaperf.datasets.measure.serial`), not here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PROTOCOL_ENV = "CUDAPERF_BASELINE_PROTOCOL"
STABLE, LEGACY = "stable", "legacy"
MIN_CPUS = 4
LOCK_NAME = "serial-timing.lock"


def baseline_protocol() -> str:
    """"stable" (the default) or "legacy" (`CUDAPERF_BASELINE_PROTOCOL=legacy`, for A/B runs only)."""
    return LEGACY if os.environ.get(PROTOCOL_ENV, "").strip().lower() == LEGACY else STABLE


def _allowed() -> frozenset[int]:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset()


def _siblings(cpu: int) -> frozenset[int]:
    """`cpu` and its SMT siblings (Linux sysfs; just `cpu` where that is not readable)."""
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    try:
        text = path.read_text().strip()
    except OSError:
        return frozenset({cpu})
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return frozenset(cpus | {cpu})


def timing_cpus(allowed: frozenset[int] | None = None, min_cpus: int = MIN_CPUS) -> frozenset[int]:
    """The CPUs reserved for host timing: the highest allowed CPU and its SMT siblings among the allowed;
    empty when fewer than `min_cpus` are allowed or the protocol is legacy."""
    allowed = _allowed() if allowed is None else allowed
    if len(allowed) < min_cpus or baseline_protocol() == LEGACY:
        return frozenset()
    return _siblings(max(allowed)) & allowed


# The CPU set before `keep_off_timing_cpus` narrowed it: the timing thread of the same process must find
# the same reserved CPUs afterwards (computed from the narrowed set, they would be another one).
_BEFORE_KEEP_OFF: dict[str, frozenset[int]] = {}


def keep_off_timing_cpus() -> frozenset[int]:
    """Narrow the calling thread's CPU set (inherited by the threads and processes it starts later) to
    exclude the timing CPUs; returns what was excluded (empty: nothing to do, or the OS refused)."""
    allowed = _BEFORE_KEEP_OFF.get("cpus") or _allowed()
    reserved = timing_cpus(allowed)
    if not reserved or not allowed - reserved:
        return frozenset()
    try:
        os.sched_setaffinity(0, allowed - reserved)
    except OSError:
        return frozenset()
    _BEFORE_KEEP_OFF.setdefault("cpus", allowed)
    return reserved


@dataclass(frozen=True)
class TimingSlot:
    """What `isolated_host_timing` obtained: the CPUs the block ran on (empty: not pinned), whether the
    machine-wide lock was held, and how long it waited for it."""

    cpus: tuple[int, ...]
    locked: bool
    waited_ms: float


def lock_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """The machine-wide lock: in the cudaperf cache ($CUDAPERF_CACHE_DIR, default ~/.cache/cudaperf)."""
    root = Path(cache_dir or os.environ.get("CUDAPERF_CACHE_DIR") or Path.home() / ".cache" / "cudaperf")
    return root / LOCK_NAME


def ensure_lock_file(cache_dir: str | os.PathLike | None = None) -> Path:
    """Create the lock file, readable by all: sandboxed workers see the cache read-only, under other
    uids, so the evaluator creates it before they start (flock works on a file opened read-only)."""
    path = lock_path(cache_dir)
    fd = _open_lock(path)
    if fd is not None:
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o644)  # the umask may have left it private
        os.close(fd)
    return path


def _open_lock(path: Path) -> int | None:
    """The lock file, created when missing; read-only where the cache is (a sandboxed worker's view):
    flock works on any open file. None when it cannot be opened at all."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        pass
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None


@contextlib.contextmanager
def isolated_host_timing(cache_dir: str | os.PathLike | None = None) -> Iterator[TimingSlot]:
    """The block runs holding the machine-wide serial-timing lock, on the reserved CPUs (module
    docstring); under the legacy protocol, as it is."""
    if baseline_protocol() == LEGACY:
        yield TimingSlot((), False, 0.0)
        return
    fd = _open_lock(lock_path(cache_dir))
    start = time.perf_counter()
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
    waited_ms = (time.perf_counter() - start) * 1e3
    try:
        with pinned(timing_cpus(_BEFORE_KEEP_OFF.get("cpus") or _allowed())) as cpus:
            yield TimingSlot(tuple(sorted(cpus)), fd is not None, waited_ms)
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


@contextlib.contextmanager
def pinned(cpus: frozenset[int]) -> Iterator[frozenset[int]]:
    """The calling thread on `cpus` for the block (its set restored after); yields the CPUs it ran on,
    empty when `cpus` is empty or the OS refused."""
    if not cpus:
        yield frozenset()
        return
    try:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpus)
    except OSError:  # refused (a sandbox's seccomp policy, a cpuset without them): the lock alone
        yield frozenset()
        return
    try:
        yield cpus
    finally:
        os.sched_setaffinity(0, before)


PROC_STAT = Path("/proc/stat")
STEAL_FIELD = 7  # user nice system idle iowait irq softirq steal: the 8th count of a `cpu` line


def steal_ticks(cpus: Iterable[int] | None = None, stat_text: str | None = None) -> tuple[int, int]:
    """(steal, total) clock ticks so far of `cpus` (all CPUs when None) from /proc/stat (`stat_text`:
    its contents, for tests); (0, 0) where it cannot be read (not Linux, a sandbox without /proc)."""
    if stat_text is None:
        try:
            stat_text = PROC_STAT.read_text()
        except OSError:
            return 0, 0
    wanted = None if cpus is None else {f"cpu{c}" for c in cpus}
    steal = total = 0
    for line in stat_text.splitlines():
        name, *counts = line.split()
        if not name.startswith("cpu") or (name != "cpu" if wanted is None else name not in wanted):
            continue
        numbers = [int(c) for c in counts[: STEAL_FIELD + 1]]
        steal += numbers[STEAL_FIELD] if len(numbers) > STEAL_FIELD else 0
        total += sum(numbers)
    return steal, total
