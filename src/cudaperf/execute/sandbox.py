"""Parent side of sandboxed execution: long-lived worker processes that run untrusted candidate code.

Covers:
- `WorkerPool(devices, limits)`: one worker per GPU (CUDA_VISIBLE_DEVICES set per worker, so each sees
  its GPU as cuda:0) or one CPU-mode worker (`devices=None`, used in CI). `run(job, timeouts)` sends a
  job to an idle worker and always returns a `WorkerReply`: candidate faults are values, never
  exceptions. Safe to call from one thread per worker.
- `Worker`: one child process, `python -m cudaperf.execute.child`, started with `subprocess.Popen`
  (`start_new_session=True` so the child leads its own process group and a single killpg takes down
  everything it forked; `pass_fds` for the two pipes). Why Popen and not multiprocessing: we need the
  process group, the exact fds and environment, and no pickling of anything the child sends back.
- The wire: length-prefixed JSON over two pipes, jobs in and heartbeats/results out on a private fd
  (never stdout/stderr, which go to a log file whose tail is attached to the reply). Each job carries a
  random nonce; a message with another nonce, one that does not parse, or a frame longer than the limit
  (the child never sends one) is a forgery attempt (POLICY_VIOLATION, flag `channel_forged`). JSON
  only: the parent never unpickles child data.
- Deadlines per stage (`StageTimeouts`): the child reports each stage it enters; the parent applies that
  stage's deadline. Past it: SIGKILL to the process group, TIMEOUT naming the stage. Child death: CRASH
  with the signal or exit code. Reply `worker_poisoned`, a CUDA error, or a sandbox finding (lingering
  threads, tampered harness) -> the worker is replaced before the next job. A result over
  `Limits.max_reply_bytes` -> OUTPUT_TOO_LARGE (the child measures it and sends that verdict instead).

- The operating-system boundary (`boundary.py`, on unless `Limits(boundary=False)`): the pool probes once
  what the machine offers and logs what is missing; each child starts inside bubblewrap (read-only root
  but for its temp directory, its own pid/ipc/uts/network namespaces, the seccomp filter), as a uid of
  its own when the evaluator is root (`boundary.DEFAULT_WORKER_UID + i` unless `run_as_uid` is set).
  Before each job the parent refreshes the child's private views of the build cache (`views.py`). After
  start the parent reads from /proc what holds for the child (`boundary.observe`): every reply carries it
  in `sandbox["boundary"]` and, when the payload has an `environment`, in `environment["sandbox"]`.
  `sandbox["pid"]` is the child's pid on the host (inside its namespace it sees itself as pid 2).
- The referee (`referee.py`, on unless `Limits(referee=False)`): beside each worker, outside its boundary,
  a process that judges evaluation jobs. The parent gives it the job, forwards the worker's shipping
  messages (frames of type "referee" on the reply pipe; the bytes are in a shared region) and answers the
  worker on its job pipe; after the worker's result it merges the referee's verdict into the payload
  (`referee.apply_verdict`) and replaces a worker whose report the referee contradicted. A referee that
  fails or misses a deadline is a HARNESS_ERROR (never the candidate's fault), and it is restarted. A
  pool's referees share one store of C references in this process (`shared_references.Broker`,
  `Limits.shared_c_references_bytes`), each referee through a socket of its own that no worker holds.
- `Spawner`: every worker and referee of a pool is forked from one long-lived thread, because the
  parent-death signal (bubblewrap's `--die-with-parent`, the child's own) follows the forking thread.

Not covered: what runs inside the child (`child.py`, the guards in `guards.py`, the evaluation recipe in
`session.py`), multi-node scale-out (Ray actors wrap a `WorkerPool`), and GPU scheduling beyond
"one job at a time per GPU". The sandbox's limits are listed in `guards.py`'s docstring.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import queue
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Self

from cudaperf.execute import boundary, guards, job_profile, referee, shared_references, views
from cudaperf.execute.cpu_share import cpu_threads_per_process, thread_settings
from cudaperf.execute.framing import HEADER, encode_message, read_message, write_all  # noqa: F401 - re-exported
from cudaperf.jobs import TimingConfig, narrowed_timing
from cudaperf.types import Flag, Outcome, Severity, TaskKind, from_dict, to_dict

DEFAULT_HANDLER = "cudaperf.execute.dispatch:run_eval_job"
# Imported (and, for "module:function", called) by each worker before it reports ready: jobs do not pay
# for torch's import, and CUDA Python's libraries are loaded outside any candidate scope (see warm_up_cuda).
# torch._dynamo because importing it replaces `torch.manual_seed` with a wrapped version: imported lazily
# during a job (torch.compile baselines, dispatch modes) it would look like tampering to the integrity check.
DEFAULT_PRELOAD: tuple[str, ...] = ("torch", "torch._dynamo", "cudaperf.execute.child:warm_up_cuda")
_EVALUATION_PRELOAD = "cudaperf.execute.child:warm_up_cuda"  # marks a pool made for evaluations

# Deadlines of the contract's stages (CONTRACTS.md, "The job sent to a worker"). Generous: they catch
# hangs, not slowness; a tighter budget belongs to the timing code.
DEFAULT_STAGE_S: dict[str, float] = {
    "setup": 120.0,
    "reference": 300.0,
    "import": 300.0,  # INLINE solutions may still run ninja to relink a prebuilt extension
    "construct": 120.0,
    "correctness": 300.0,
    "timing_prep": 300.0,  # a refereed job's host work before timing; the gate's wait is added to it
    "timing": 600.0,
    "coverage": 300.0,
    "cleanup": 60.0,  # the child's own sweep; a candidate kernel still spinning shows up here
}


@dataclass(frozen=True)
class StageTimeouts:
    """Wall-clock deadlines, in seconds, applied by the parent to each stage the child reports."""

    default_s: float = 300.0
    """Deadline of a stage not listed in `stages`."""
    stages: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_STAGE_S))
    """Per-stage deadlines; replaces the defaults as a whole (unlisted stages get `default_s`)."""
    start_s: float = 300.0
    """Worker start: interpreter, guards and preloaded modules (torch, the CUDA context) until ready."""
    job_s: float | None = None
    """Optional cap on a whole job, whatever its stages report."""

    def __post_init__(self) -> None:
        values = {"default_s": self.default_s, "start_s": self.start_s, "job_s": self.job_s, **self.stages}
        bad = {k: v for k, v in values.items() if v is not None and not v > 0}
        if bad:
            raise ValueError(f"StageTimeouts: deadlines must be positive seconds, got {bad}")

    def for_stage(self, name: str) -> float:
        return self.stages.get(name, self.default_s)

    @classmethod
    def from_overrides(
        cls, stages_s: dict[str, float] | None = None, **fields: float | None
    ) -> StageTimeouts:
        """The default deadlines with some stages changed (`stages` given directly replaces them all)."""
        return cls(stages={**DEFAULT_STAGE_S, **(stages_s or {})}, **fields)


@dataclass(frozen=True)
class Limits:
    """What a worker may consume. Applied by the child before any candidate code (see guards.py)."""

    max_reply_bytes: int = 64 << 20
    """A result message larger than this is refused: OUTPUT_TOO_LARGE."""
    max_log_bytes: int = 32 << 10
    """How much of the tail of the candidate's stdout/stderr is attached to the reply."""
    file_bytes: int | None = 1 << 30
    """RLIMIT_FSIZE: largest file the worker may write (its log included). Must fit built extensions."""
    open_files: int | None = 4096
    """RLIMIT_NOFILE."""
    address_space_bytes: int | None = 16 << 30
    """RLIMIT_AS, CPU mode only: the CUDA driver reserves huge virtual ranges, so GPU workers skip it."""
    data_bytes: int | None = None
    """RLIMIT_DATA (private writable memory), applied in both modes when set. Experimental with CUDA."""
    processes: int | None = None
    """RLIMIT_NPROC. Off by default: it counts every thread of the uid machine-wide and root ignores it
    (meaningful with `run_as_uid`, where the uid is the worker's own)."""
    isolate_network: bool = True
    """Put the worker in an empty network namespace (falls back to the audit hook alone if refused)."""
    max_jobs_per_worker: int | None = None
    """Replace a worker after this many jobs (1 = a fresh process per job, the strongest isolation)."""
    run_as_uid: int | None = None
    """Needs root: worker i runs as uid and gid `run_as_uid + i` (see guards.drop_privileges); the GPU
    nodes must be world-accessible. None with `boundary` on and a root evaluator: the uids start at
    `boundary.DEFAULT_WORKER_UID`; None with `boundary` off: the worker keeps the evaluator's uid."""
    boundary: bool = True
    """The operating-system boundary of boundary.py (bubblewrap namespaces, read-only root, seccomp, a uid
    of the worker's own). Off only to measure what it costs; what is missing is logged and recorded."""
    cache_dir: str | None = None
    """The build cache the workers read and whose private views they get (views.py). None: the default
    cache ($CUDAPERF_CACHE_DIR or ~/.cache/cudaperf). A job naming another cache restarts its worker once."""
    read_paths: tuple[str, ...] = ()
    """Extra paths workers must read that a root-only directory could hide from their uid (the boundary
    exposes the interpreter, the package and the build cache by itself)."""
    env_allow: tuple[str, ...] = ()
    """Extra environment variable names to pass through (see guards.ENV_ALLOW for the defaults)."""
    kill_wait_s: float = 30.0
    """How long to wait for a killed worker to be reaped (a GPU context can take seconds to tear down)."""
    referee: bool = True
    """Judge evaluation jobs in a referee process beside each worker (referee.py): the verdict then comes
    from a process the candidate never runs in. Off only to measure what it costs: the worker then judges
    its own candidate, as far as native code lets it."""
    shared_c_references_bytes: int = shared_references.DEFAULT_BUDGET_BYTES
    """Byte budget of the one store of C reference outputs a pool's referees share
    (`shared_references`: sealed memfds in the parent, least recently used evicted; an entry larger
    than the budget is not stored), so each (task, configuration, seed) is computed once per pool, not
    once per referee. 0: each referee computes its own (as a lone `Worker` always does)."""
    output_region_bytes: int = 64 << 20
    """Size of the shared region through which outputs travel to the referee (chunk size, not a cap)."""
    cpu_threads: int | None = None
    """torch's CPU threads (OMP_NUM_THREADS, MKL_NUM_THREADS) in each worker and referee. None: a pool
    shares out the CPUs the evaluator may use between its processes (a worker and its referee count two;
    `cpu_threads_per_process`), and an OMP_NUM_THREADS the evaluator was started with is kept. Why: every
    process's OpenMP pool otherwise takes every CPU and spins after each parallel region; on the 2-core
    machine the RL mode's two workers and referees went from 719 to 1,329 evaluations/min with one thread
    each (dev/LOG.md, s21)."""

    def __post_init__(self) -> None:
        if self.max_reply_bytes <= 0 or self.max_log_bytes < 0:
            raise ValueError("Limits: max_reply_bytes must be > 0 and max_log_bytes >= 0")
        if self.max_jobs_per_worker is not None and self.max_jobs_per_worker < 1:
            raise ValueError("Limits: max_jobs_per_worker must be >= 1 or None (never recycle)")
        if self.shared_c_references_bytes < 0:
            raise ValueError(f"Limits.shared_c_references_bytes={self.shared_c_references_bytes}: use 0 "
                             "to turn the shared store off, or a positive byte budget")
        if self.output_region_bytes < 4096:
            raise ValueError(f"Limits.output_region_bytes={self.output_region_bytes}: at least 4096 bytes")


@dataclass(frozen=True)
class WorkerReply:
    """What came back from one job. `outcome` None means "ran; decide from correctness" (payload)."""

    outcome: Outcome | None
    stage: str  # the stage that decided the outcome, or the last stage reported
    message: str = ""
    payload: dict[str, Any] = field(default_factory=dict)  # the handler's result, as it sent it
    logs: str = ""  # tail of the candidate's stdout/stderr (and tracebacks), truncated
    durations_s: dict[str, float] = field(default_factory=dict)  # per stage, measured by the parent
    flags: tuple[Flag, ...] = ()  # the sandbox's own findings (channel_forged, lingering_processes...)
    worker_replaced: bool = False
    sandbox: dict[str, Any] = field(default_factory=dict)  # pid, device, network isolation, start time...


# --------------------------------------------------------------------------------------------------
# Wire format (framing.py; re-exported here for child.py and the tests)

_HEADER = HEADER


# --------------------------------------------------------------------------------------------------
# One worker

_SIGNAL_TEXT = {
    signal.SIGSEGV: "segmentation fault",
    signal.SIGBUS: "bus error",
    signal.SIGABRT: "aborted",
    signal.SIGFPE: "floating-point exception",
    signal.SIGILL: "illegal instruction",
    signal.SIGKILL: "killed (SIGKILL; the host may be out of memory)",
    signal.SIGXFSZ: "file size limit exceeded",
    signal.SIGXCPU: "CPU time limit exceeded",
}


def describe_exit(returncode: int | None) -> str:
    """'segmentation fault (SIGSEGV)', 'exited with code 3'..."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        sig = signal.Signals(-returncode)
        return f"{_SIGNAL_TEXT.get(sig, 'killed by a signal')} ({sig.name})"
    return f"exited with code {returncode}"


class Spawner:
    """One long-lived thread that starts every process of a pool: its workers and their referees.

    Why: bubblewrap's `--die-with-parent`, and the parent-death signal a child sets for itself, use
    PR_SET_PDEATHSIG, which fires when the *thread* that forked the child exits, not the process. A worker
    started (or restarted) from a short-lived thread, such as a batch thread of `evaluate_many`, died with
    that thread. Forking from this thread, which lives until the pool is closed, ties the children's death
    to the pool's. `call(fn)` runs `fn` there and returns its result (or raises its exception)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def call(self, fn):
        if threading.current_thread() is self._thread:
            return fn()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="cudaperf-spawner", daemon=True)
                self._thread.start()
        done: queue.SimpleQueue = queue.SimpleQueue()
        self._jobs.put((fn, done))
        ok, value = done.get()
        if not ok:
            raise value
        return value

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, done = job
            try:
                done.put((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                done.put((False, exc))

    def close(self) -> None:
        """Let the thread end (after the processes it started are gone)."""
        if self._thread is not None:
            self._jobs.put(None)


@dataclass
class _Event:
    kind: str  # message | timeout | exited | eof | garbled
    message: dict[str, Any] | None = None
    detail: str = ""


class Worker:
    """One sandboxed child process. Not thread-safe: the pool gives each worker to one caller at a time.

    `device`: GPU index (the child sees only that GPU) or None for a CPU-mode worker.
    """

    def __init__(
        self, device: int | None, limits: Limits, *, preload: tuple[str, ...] = (), uid: int | None = None,
        plan: boundary.Plan | None = None, spawner: Spawner | None = None,
        references: shared_references.Broker | None = None,
    ):
        self.device = device
        self.limits = limits
        self.preload = tuple(preload)
        self.uid = uid  # run the child as this uid/gid (Limits.run_as_uid); None: as ourselves
        self.plan = plan  # what the OS boundary can do here (probed at the first start when None)
        self.boundary_state: dict[str, Any] = {}  # what holds for the running child (boundary.observe)
        self.cache_dir = limits.cache_dir or _default_cache_dir()  # what its views cover (views.py)
        self.info: dict[str, Any] = {}  # the child's "ready" message: pid, network, limits, python...
        self.jobs_done = 0
        self.replacements = 0
        self.profile_dir = job_profile.profile_dir()  # developers: CUDAPERF_PROFILE_JOBS (job_profile.py)
        self._proc: subprocess.Popen | None = None
        self._root: str | None = None
        self._reply_fd = -1
        self._job_fd = -1
        self._pidfd = -1
        self._buffer = bytearray()
        self._ready = False
        self._hello_nonce = ""
        self._started_at = 0.0
        self._closed = False
        self._busy = False  # a job is running (close() from another thread must not pull fds from under it)
        self._own_spawner = spawner is None
        self.spawner = spawner or Spawner()
        self.referee: referee.RefereeLink | None = (
            referee.RefereeLink(device, limits.output_region_bytes, kill_wait_s=limits.kill_wait_s,
                                references=references)
            if limits.referee else None)
        self.cpu_threads = limits.cpu_threads  # the pool sets its share (WorkerPool)
        self._engaged = False  # the current job is judged by the referee
        self.referee_s = 0.0  # this job's time spent waiting for the referee
        self.referee_wait_ms: dict[str, float] = {}  # the same, per message kind (instrumentation)
        self._on_proceed: Callable[[], Any] | None = None  # this job's (run)
        self._on_checked: Callable[[], None] | None = None  # likewise
        self._on_result: Callable[[], None] | None = None  # likewise
        self._go_ahead_at: float | None = None  # when this job's "all correct" answer or go-ahead was sent
        self._may_time = False  # this job's "all correct" answer was sent and its "ready" not yet seen
        self._asked_to_time = False  # this job's worker said it was about to time (`outputs.Shipper.ready`)
        self._timing_asked: dict[str, Any] | None = None  # the timing this job's go-ahead named (wire form)
        self._result_at: float | None = None  # when this job's result was read
        self._activity: tuple[str, float] | None = None  # what this job does now, since (monotonic)

    # -- lifecycle ---------------------------------------------------------------------------------

    def activity(self, now: float | None = None) -> str:
        """What the worker's job does now and for how long ("stage 'correctness' for 41 s", "waiting for
        its turn to time for 3 s"), or "idle"; read from another thread to say where a batch is held."""
        doing = self._activity
        if doing is None:
            return "idle"
        what, since = doing
        return f"{what} for {(now if now is not None else time.monotonic()) - since:.0f} s"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        """Spawn the child and send its configuration; readiness is awaited by the next `run`."""
        if self._proc is not None:
            return
        if self.plan is None:
            self.plan = boundary.probe(self.limits.boundary)
        self._root = tempfile.mkdtemp(prefix="cudaperf-worker-")
        for sub in ("home", "tmp"):
            os.mkdir(os.path.join(self._root, sub))
        job_r, job_w = os.pipe()
        reply_r, reply_w = os.pipe()
        log_fd = os.open(
            os.path.join(self._root, "worker.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        argv, filter_fd = self._boundary_argv(self._argv(job_r, reply_w))
        if self.uid is not None:  # the child, once it has dropped root, must own its directory
            for path in (self._root, *(os.path.join(self._root, p) for p in ("home", "tmp", "worker.log"))):
                os.chown(path, self.uid, self.uid)
        inherited = (job_r, reply_w) if filter_fd is None else (job_r, reply_w, filter_fd)
        region = (self.referee.region_fd,) if self.referee is not None else ()
        env = self._environment()
        try:
            self._proc = self.spawner.call(lambda: subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, pass_fds=(*inherited, *region),
                start_new_session=True, env=env, cwd=self._root))
        finally:
            for fd in (*inherited, log_fd):
                os.close(fd)
        self._job_fd, self._reply_fd = job_w, reply_r
        os.set_blocking(self._reply_fd, False)
        self._pidfd = _pidfd_open(self._proc.pid)
        self._buffer.clear()
        self._ready = False
        self._started_at = time.monotonic()
        self._hello_nonce = secrets.token_hex(16)
        # The hello is a few hundred bytes: it fits the pipe buffer, so this never blocks.
        write_all(self._job_fd, encode_message(self._hello()))
        if self.referee is not None and _EVALUATION_PRELOAD in self.preload:  # an evaluation pool: start
            self.referee.start(self.spawner.call)  # it alongside (other pools start it on a first job)

    def close(self) -> None:
        """Kill the child and its process group, remove its temp directory. A job running in another
        thread sees the worker die and returns HARNESS_ERROR (and cleans up itself)."""
        self._closed = True
        if self._busy:
            self._signal_group()
        else:
            self._retire()

    def _argv(self, job_fd: int, reply_fd: int) -> list[str]:
        argv = [sys.executable, "-u", "-X", "faulthandler", "-m", "cudaperf.execute.child",
                "--job-fd", str(job_fd), "--reply-fd", str(reply_fd), "--root", str(self._root)]  # fmt: skip
        if self.referee is not None:
            link = self.referee
            argv += ["--region-fd", str(link.region_fd), "--region-bytes", str(link.region_bytes)]
        return argv

    def _boundary_argv(self, argv: list[str]) -> tuple[list[str], int | None]:
        """The child's command inside bubblewrap (when the plan has one) and the seccomp filter's fd."""
        if self.plan.bwrap is None:
            return argv, None
        mounts = boundary.Mounts(
            writable=(str(self._root),),
            views=views.mounts(str(self._root), self.cache_dir),
            readable=(*boundary.python_paths(), self.cache_dir, *self.limits.read_paths),
        )
        if self.uid is not None:
            boundary.let_uid_enter(self.cache_dir)
            views.prepare({}, str(self._root), self.cache_dir, self.uid)  # hand the views to the uid
        fd = boundary.seccomp_fd(self.plan)
        return boundary.wrap(self.plan, argv, mounts, drops_uid=self.uid is not None, seccomp_fd=fd), fd

    @property
    def _bwrap(self) -> bool:
        return self.plan is not None and self.plan.bwrap is not None

    def _environment(self) -> dict[str, str]:
        root = str(self._root)
        # The child must import cudaperf even when the parent found it through sys.path tweaks.
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(guards.__file__)))
        python_path = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p)
        return guards.scrub_environment(
            os.environ,
            home=os.path.join(root, "home"),
            tmpdir=os.path.join(root, "tmp"),
            extra_allow=self.limits.env_allow,
            overrides={
                "CUDA_VISIBLE_DEVICES": "" if self.device is None else str(self.device),
                "PYTHONPATH": python_path,
                # Inductor's cache in the worker's own temp directory (where the worker's TMPDIR would put
                # it): Inductor writes its default cache dir, /tmp/torchinductor_<user>, into the parent's
                # environment at its first compile, and a worker under its own uid cannot write that one
                # (the torch.compile baseline failed with EACCES on its lock files). Likewise Triton's
                # cache: Inductor writes TRITON_CACHE_DIR (under its own cache dir) into the parent's
                # environment at its first Triton kernel, and inside the boundary that path is read-only
                # (the compiled baseline failed with EROFS in every worker of a process that had compiled
                # on the GPU before: dev/LOG.md, session 27).
                "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "tmp", "torchinductor"),
                "TRITON_CACHE_DIR": os.path.join(root, "tmp", "torchinductor", "triton"),
                **self._user_names(),
                **self._heap_settings(),
                **thread_settings(self.cpu_threads),
            },
        )

    def _heap_settings(self) -> dict[str, str]:
        """A refereed CPU-mode worker runs without glibc's per-thread cache: its baselines' freed chunks
        then all reach the bins, where the perturbation overwrites them at free, and the scrub after each
        baseline call has no cache to drain (`baseline_memory.GlibcHeap`; the drain took ~1 s of a CPU job's
        timing stage, session 20). The worker checks that the setting took (`tcache_caches_frees`)."""
        if self.device is not None or self.referee is None:
            return {}
        return {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}

    def _user_names(self) -> dict[str, str]:
        """USER and LOGNAME for a worker under its own uid: getpass.getuser() (torch's and Triton's cache
        directories ask for it) otherwise looks the uid up in /etc/passwd, which has no entry for it, and
        raises (seen on the H200 machine, whose environment has no USER)."""
        if self.uid is None:
            return {}
        name = f"cudaperf-{self.uid}"
        return {"USER": name, "LOGNAME": name}

    def _hello(self) -> dict[str, Any]:
        limits = asdict(self.limits)
        # Inside bubblewrap the network namespace exists already and the seccomp filter refuses unshare;
        # the child's parent is bubblewrap's init (pid 1 of the worker's pid namespace), which takes the
        # whole namespace down with it when the evaluator dies (--die-with-parent).
        limits["isolate_network"] = self.limits.isolate_network and not self._bwrap
        return {
            "type": "hello",
            "nonce": self._hello_nonce,
            "mode": "cpu" if self.device is None else "cuda",
            "limits": limits,
            "preload": [*self._boundary_preload(), *self.preload],
            "parent_pid": 1 if self._bwrap else os.getpid(),
            "parent_death_signal": True,  # forked from the pool's spawner thread, which lives as long as it
            "default_handler": DEFAULT_HANDLER,
            "uid": self.uid,
            "profile": self.profile_dir is not None,
        }

    def _boundary_preload(self) -> tuple[str, ...]:
        """Without bubblewrap the worker loads the seccomp filter itself, first thing before any import."""
        plan = self.plan
        if plan is None or not plan.enabled or plan.bwrap is not None or plan.seccomp_bpf is None:
            return ()
        return ("cudaperf.execute.boundary:load_seccomp",)

    def _retire(self) -> None:
        self._kill()
        for fd in (self._job_fd, self._reply_fd, self._pidfd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._job_fd = self._reply_fd = self._pidfd = -1
        if self._root:
            shutil.rmtree(self._root, ignore_errors=True)
        self._proc, self._root, self._ready = None, None, False
        if self._closed:  # the referee outlives replacements of the worker, not its closing
            if self.referee is not None:
                self.referee.close()
            if self._own_spawner:
                self.spawner.close()

    def _replace(self) -> None:
        self._retire()
        self.replacements += 1
        self.jobs_done = 0
        if not self._closed:
            self.start()

    def _signal_group(self) -> None:
        # killpg before reaping: while the leader is an unreaped zombie its pid (= the group id) cannot
        # be reused, so the signal cannot reach an unrelated group.
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._signal_group()
        try:
            proc.wait(timeout=self.limits.kill_wait_s)
        except subprocess.TimeoutExpired:  # stuck in the driver; reap it later, off our path
            threading.Thread(target=proc.wait, daemon=True).start()

    # -- one job -----------------------------------------------------------------------------------

    def run(self, job: dict[str, Any], timeouts: StageTimeouts,
            on_proceed: Callable[[], TimingConfig | None] | None = None,
            on_checked: Callable[[], None] | None = None,
            on_result: Callable[[], None] | None = None) -> WorkerReply:
        """Run one job to a reply. Never raises: a fault of the sandbox itself is HARNESS_ERROR.

        `on_proceed`, when given, is called before the candidate can be timed and may block (a scheduler
        taking the GPU for itself, `eval_modes`): when the referee judges the job, as the worker says it
        is ready to time (after the referee's "all correct" answer and the host work its timing stage
        does first, `Session.prepare_timing`; the worker waits for the answer to that before timing; the
        time waited is recorded as `gate_wait` and added to the stage's deadline); otherwise before the
        job is sent. It is not called for a job that fails before that point. What it returns, a
        `TimingConfig` (anything else: None), narrows the job's timing (`jobs.narrowed_timing`: fewer
        baselines, a smaller budget): sent with the answer, or in the job when there is none to wait for,
        and to the referee with the worker's timings, which it holds to it. `on_checked`, when given, is
        called (refereed jobs only) as the referee's "all correct" answer passes through, before the
        worker's host work for timing: a scheduler may let go of what it holds for the checks then.
        `on_result`, when given, is called once the worker's result is in (after its cleanup stage, which
        waits for everything it queued on the device), before the referee's verdict is asked for: the job's
        code runs no more; what follows is the parent's and the referee's host work (the verdict, the
        referee giving cached device memory back to the driver, the region zeroed). Not called for a job
        that fails before it is sent, nor for one whose worker died or was killed (the driver's teardown
        of its context and its replacement's start are still that job's)."""
        self._busy = True
        self._on_proceed, self._on_checked, self._on_result = on_proceed, on_checked, on_result
        self._go_ahead_at = self._result_at = None
        self._may_time = self._asked_to_time = False
        self._timing_asked = None
        self._activity = ("starting the job", time.monotonic())
        try:
            return self._run(job, timeouts)
        except Exception:  # noqa: BLE001 - our own bug: report it, never reuse a worker in an unknown state
            text = traceback.format_exc()
            self._replace()
            return WorkerReply(Outcome.HARNESS_ERROR, "sandbox", f"sandbox error:\n{text}"[-4000:],
                               worker_replaced=True)  # fmt: skip
        finally:
            self._busy = False
            self._on_proceed = self._on_checked = self._on_result = None
            self._activity = None

    def _run(self, job: dict[str, Any], timeouts: StageTimeouts) -> WorkerReply:
        if self._closed:
            return WorkerReply(Outcome.HARNESS_ERROR, "start", "the worker pool is closed")
        self._engaged = self.referee is not None and referee.engages(job)
        try:
            data, nonce = self._job_message(job)
        except (TypeError, ValueError) as exc:
            return WorkerReply(Outcome.HARNESS_ERROR, "dispatch", f"job is not JSON-serialisable: {exc}")
        self._follow_cache(job)
        start_s, failure = self._ensure_ready(timeouts)
        if failure is not None:
            return failure
        if self._engaged:
            failure = self._referee_begin(job, timeouts)
            if failure is not None:
                return failure
        note = self._prepare_views(job)
        if self._on_proceed is not None and not self._engaged:
            # no answer to wait for before timing: the whole job is gated, and any narrowing is the job's
            self._activity = ("waiting for its turn to run", time.monotonic())
            asked = _timing_of(self._on_proceed())
            self._on_proceed = None
            if asked is not None:
                data, nonce = self._job_message(_narrowed(job, asked))
        if not self._send(data, time.monotonic() + timeouts.for_stage("setup")):
            # Died between the readiness check and the job: not the candidate's doing; retry once.
            self._replace()
            start_s, failure = self._ensure_ready(timeouts)
            if failure is not None:
                return failure
            if not self._send(data, time.monotonic() + timeouts.for_stage("setup")):
                self._replace()
                return WorkerReply(Outcome.HARNESS_ERROR, "dispatch", "the worker did not accept the job")
        info, state = dict(self.info), dict(self.boundary_state)  # of this job's worker, even if replaced
        reply = self._collect(nonce, timeouts)
        if self._on_result is not None and not reply.worker_replaced:
            result_in, self._on_result = self._on_result, None
            result_in()
        if self._engaged:
            self._activity = ("waiting for the referee's verdict", time.monotonic())
            reply = self._referee_end(reply, timeouts)
        sandbox = {**reply.sandbox, "pid": info.get("pid"), "device": self.device,
                   "network": info.get("network"), "worker_start_s": start_s, "boundary": state}  # fmt: skip
        if note:
            sandbox["views"] = note
        waited = reply.sandbox.get("referee_s")
        extra = {"referee_wait_s": f"{waited:.4f}"} if waited is not None else {}
        if reply.sandbox.get("referee_ms"):
            extra["referee_ms"] = json.dumps(reply.sandbox["referee_ms"], sort_keys=True)
        if isinstance(reply.sandbox.get("region"), dict):  # whether each side's mapping is pinned, or why not
            extra["region"] = json.dumps(reply.sandbox["region"], sort_keys=True)
        payload = _with_boundary(reply.payload, state, extra)
        return dataclasses.replace(reply, sandbox=sandbox, payload=payload)

    def _follow_cache(self, job: dict[str, Any]) -> None:
        """A job on another build cache than the one this worker's views cover: restart it on that one
        (once per cache: an Evaluator keeps one cache dir)."""
        wanted = job.get("cache_dir")
        if not self._bwrap or not wanted or os.path.realpath(wanted) == os.path.realpath(self.cache_dir):
            return
        self.cache_dir = str(wanted)
        if self._proc is not None:
            self._replace()

    def _prepare_views(self, job: dict[str, Any]) -> str:
        if not self._bwrap or self._root is None:
            return ""
        try:
            return views.prepare(job, self._root, self.cache_dir, self.uid)
        except OSError as exc:  # a full disk, say: the worker then builds what it needs in its view
            return f"views not prepared: {exc}"

    # -- the referee -------------------------------------------------------------------------------

    def _referee_begin(self, job: dict[str, Any], timeouts: StageTimeouts) -> WorkerReply | None:
        """Start the referee if needed and give it the job (secret included, candidate source left out:
        it never sees candidate code). It begins computing references at once."""
        link = self.referee
        link.start(self.spawner.call)
        record = {k: v for k, v in job.items() if k not in ("handler", "referee")}
        record["solution"] = dict(job.get("solution") or {}, source="")
        error = link.send({"type": "job", "job": record}, time.monotonic() + timeouts.start_s)
        if not error:
            return None
        link.close_process()
        return WorkerReply(Outcome.HARNESS_ERROR, "start", f"referee: {error}"[:4000], logs=link.log_tail())

    def _forward(self, message: Any, deadline: float, stage: str, durations: dict,
                 stage_start: float) -> tuple[WorkerReply | None, float]:
        """A shipping message of the worker to the referee, and the referee's answer back to the worker.
        (None, seconds waited in `on_proceed`) when done; (a reply, 0) when the job must end here (a
        malformed message, a failed referee)."""
        if isinstance(message, dict) and message.get("type") == "ready":
            return self._go_ahead(deadline, stage, durations, stage_start)
        body = referee.forwardable(message)
        if body is None:
            durations[stage] = durations.get(stage, 0.0) + time.monotonic() - stage_start
            return self._forged(stage, durations, "a shipping message of an unknown kind"), 0.0
        link = self.referee
        link.used_bytes = max(link.used_bytes, min(referee.region_used(body), link.region_bytes))
        started = time.monotonic()
        doing, self._activity = self._activity, (f"stage '{stage}', the referee answering '{body['type']}'",
                                                 started)
        answer, error = self.referee.request(body, deadline)
        self._activity = doing
        self._waited(body["type"], time.monotonic() - started)
        if error:
            durations[stage] = durations.get(stage, 0.0) + time.monotonic() - stage_start
            logs = self.referee.log_tail()
            self.referee.close_process()
            self._replace()
            return WorkerReply(Outcome.HARNESS_ERROR, stage, f"referee: {error}"[:4000], logs=logs,
                               durations_s=durations, worker_replaced=True), 0.0
        ack = {k: v for k, v in answer.items() if k != "type"}
        if body["type"] == "done":
            self._may_time = bool(ack.get("proceed"))
            self._go_ahead_at = time.monotonic()  # the worker's timing stage cannot start before this
            if self._may_time and self._on_checked is not None:
                checked, self._on_checked = self._on_checked, None
                checked()
        if not self._send(encode_message({"type": "ack", **ack}), deadline):
            pass  # the worker is gone: the next event reports how
        return None, 0.0

    def _go_ahead(self, deadline: float, stage: str, durations: dict,
                  stage_start: float) -> tuple[WorkerReply | None, float]:
        """The worker's "ready" (`outputs.Shipper.ready`), once per job and only after an "all correct"
        answer: `on_proceed` (the scheduler's turn; the time waited is `gate_wait`), then the answer that
        lets it time, with the timing `on_proceed` named, if any. The timing window (`_timing_window_s`)
        starts here."""
        if not self._may_time:
            durations[stage] = durations.get(stage, 0.0) + time.monotonic() - stage_start
            return self._forged(stage, durations, "a ready message without the referee's go-ahead"), 0.0
        self._may_time, self._asked_to_time, waited_s = False, True, 0.0
        if self._on_proceed is not None:
            started, proceed, self._on_proceed = time.monotonic(), self._on_proceed, None
            doing, self._activity = self._activity, ("waiting for its turn to time", started)
            self._timing_asked = _timing_of(proceed())
            waited_s = time.monotonic() - started
            durations["gate_wait"] = durations.get("gate_wait", 0.0) + waited_s
            self._activity = doing if doing is None else (doing[0], doing[1] + waited_s)
        self._go_ahead_at = time.monotonic()
        answer = {"type": "ack"} if self._timing_asked is None else {"type": "ack",
                                                                       "timing": self._timing_asked}
        if not self._send(encode_message(answer), deadline + waited_s):
            pass  # the worker is gone: the next event reports how
        return None, waited_s

    def _referee_end(self, reply: WorkerReply, timeouts: StageTimeouts) -> WorkerReply:
        """The referee's verdict into a finished job's reply (see referee.apply_verdict); a job that ended
        on a fault of the worker only tells the referee it is over."""
        link = self.referee
        deadline = time.monotonic() + timeouts.for_stage("cleanup")
        if not reply.payload:
            if link.alive:
                link.send({"type": "end"}, deadline)
            link.zero_region()
            self.referee_s, self.referee_wait_ms = 0.0, {}  # not this job's to carry into the next
            return reply
        payload = reply.payload
        if link.alive:
            started = time.monotonic()
            verdict, error = link.request({
                "type": "finish", "outcome": payload.get("outcome"),
                "claim": payload.get("correctness") or [], "timings": payload.get("timings") or [],
                "extra_baselines": payload.get("extra_baselines") or {}, "timing": self._timing_asked,
                "timing_wall_s": self._timing_window_s(reply), "asked_to_time": self._asked_to_time,
            }, deadline)
            self._waited("finish", time.monotonic() - started)
        else:  # a payload is never taken on the worker's word alone: no verdict, no correctness
            error = "the referee was gone before its verdict"
        link.zero_region()
        if error:
            link.close_process()
            verdict = {"error": error}
        payload = referee.readable(referee.apply_verdict(payload, verdict), verdict, reply.stage)
        outcome, message, stage = reply.outcome, reply.message, reply.stage
        # the payload's word (a ran outcome, or a fault beside a wrong output), which the referee set aside
        cleared = outcome is not None and payload.get("outcome") is None and (
            outcome.value == (reply.payload or {}).get("outcome"))
        if outcome is None or cleared:
            outcome, message, stage = _payload_verdict(payload, reply.stage)
        replaced = reply.worker_replaced
        if referee.mismatched(verdict) and not replaced:  # the worker's process is not to be trusted again
            self._replace()
            replaced = True
        spent = verdict.get("referee_ms") if isinstance(verdict.get("referee_ms"), dict) else {}
        waits = {f"wait_{k}": round(v, 3) for k, v in self.referee_wait_ms.items()}
        sandbox = {**reply.sandbox, "referee_s": self.referee_s, "referee_starts": link.starts,
                   "referee_ms": {**spent, **waits}}
        if isinstance(verdict.get("region"), dict):
            sandbox["region"] = {k: str(v)[:300] for k, v in verdict["region"].items()}
        self.referee_s, self.referee_wait_ms = 0.0, {}
        return dataclasses.replace(reply, outcome=outcome, message=message, stage=stage, payload=payload,
                                   worker_replaced=replaced, sandbox=sandbox)

    def _waited(self, kind: str, seconds: float) -> None:
        """This job's wait for the referee's answers, in all and per message kind."""
        self.referee_s += seconds
        self.referee_wait_ms[kind] = self.referee_wait_ms.get(kind, 0.0) + 1e3 * seconds

    def _timing_window_s(self, reply: WorkerReply) -> float:
        """The most time the worker's timing stage can have had: from the go-ahead this process sent
        (the worker waits for it before timing) to the moment its result was read. A parent slow to read
        the worker's messages (a loaded CPU) only widens it, where the stage as the parent saw it (its
        `stage` messages, read late) could be shorter than the timing really took. The stage's duration
        when no go-ahead was sent (a job that ended before it)."""
        if self._go_ahead_at is None or self._result_at is None or self._result_at < self._go_ahead_at:
            return reply.durations_s.get("timing", 0.0)
        return self._result_at - self._go_ahead_at

    def _job_message(self, job: dict[str, Any]) -> tuple[bytes, str]:
        nonce = secrets.token_hex(16)
        job = dict(job)
        job.setdefault("device", "cpu" if self.device is None else "cuda:0")
        job["referee"] = self._engaged  # the child gives the handler its output channel only then
        return encode_message({"type": "job", "nonce": nonce, "job": job}), nonce

    def _ensure_ready(self, timeouts: StageTimeouts) -> tuple[float | None, WorkerReply | None]:
        """(seconds spent waiting for a start, or None if the worker was warm; a failure reply)."""
        if self._proc is not None and self._proc.poll() is not None:
            self._replace()  # died while idle (host OOM killer, parent-side kill): just start a new one
        if self._proc is None:
            self.start()
        if self._ready:
            return None, None
        error = self._await_ready(self._started_at + timeouts.start_s)
        if error is None:
            return time.monotonic() - self._started_at, None
        logs = self._log_tail()
        self._retire()
        return None, WorkerReply(
            Outcome.HARNESS_ERROR, "start", f"worker failed to start: {error}", logs=logs
        )

    def wait_ready(self, timeouts: StageTimeouts) -> float | None:
        """Start if needed and block until ready; seconds since spawn, or None if it failed to start."""
        start_s, failure = self._ensure_ready(timeouts)
        if failure is not None:
            return None
        return start_s if start_s is not None else 0.0

    def _await_ready(self, deadline: float) -> str | None:
        event = self._next_event(deadline)
        if event.kind == "message" and event.message.get("type") == "ready":
            if event.message.get("nonce") != self._hello_nonce:
                return "ready message with a wrong nonce"
            self.info = {k: v for k, v in event.message.items() if k not in ("type", "nonce")}
            self._observe_boundary()
            self._ready = True
            return None
        if event.kind == "timeout":
            return f"not ready after {deadline - self._started_at:.0f} s"
        if event.kind in ("exited", "eof"):
            return describe_exit(self._reap())
        return f"unexpected {event.kind} before ready {event.detail}"

    def _observe_boundary(self) -> None:
        """Record what holds for the child, read from the kernel (the child reports its in-namespace pid;
        the parent finds its host pid below bubblewrap, for /proc and for the reply's `pid`)."""
        pid = self._proc.pid
        if self._bwrap:
            self.info["ns_pid"] = self.info.get("pid")
            pid = boundary.inner_pid(self._proc.pid, int(self.info.get("pid") or 0)) or pid
            self.info["pid"] = pid
            if self.limits.isolate_network:
                self.info["network"] = "bwrap netns"
        self.boundary_state = boundary.observe(pid, self.plan)

    def _send(self, data: bytes, deadline: float) -> bool:
        """Write the job with a deadline (a large job does not fit the pipe buffer)."""
        os.set_blocking(self._job_fd, False)
        view = memoryview(data)
        with selectors.DefaultSelector() as sel:
            sel.register(self._job_fd, selectors.EVENT_WRITE)
            while view:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    return False
                if not sel.select(0.1):
                    continue
                try:
                    view = view[os.write(self._job_fd, view) :]
                except BlockingIOError:
                    continue
                except (BrokenPipeError, OSError):
                    return False
        return True

    def _collect(self, nonce: str, timeouts: StageTimeouts) -> WorkerReply:
        started = time.monotonic()
        job_deadline = started + timeouts.job_s if timeouts.job_s else float("inf")
        stage, stage_start = "setup", started
        deadline = started + timeouts.for_stage(stage)
        durations: dict[str, float] = {}
        self._activity = (f"stage '{stage}'", stage_start)
        while True:
            event = self._next_event(min(deadline, job_deadline))
            now = time.monotonic()
            if event.kind != "message":
                durations[stage] = durations.get(stage, 0.0) + now - stage_start
                return self._fault(event, stage, durations, timeouts, job_deadline)
            message = event.message
            kinds = ("stage", "result", "referee") if self._engaged else ("stage", "result")
            if self.profile_dir is not None and (message.get("type"), message.get("nonce")) == ("profile",
                                                                                                  nonce):
                self._write_profile(message.get("stats"))
                continue
            if message.get("nonce") != nonce or message.get("type") not in kinds:
                durations[stage] = durations.get(stage, 0.0) + now - stage_start
                return self._forged(stage, durations, "a message with a wrong nonce or type")
            if message["type"] == "referee":
                fault, waited_s = self._forward(message.get("message"), min(deadline, job_deadline), stage,
                                                durations, stage_start)
                if fault is not None:
                    return fault
                deadline, job_deadline = deadline + waited_s, job_deadline + waited_s
                stage_start += waited_s  # the stage's duration leaves the gate's wait out
                continue
            durations[stage] = durations.get(stage, 0.0) + now - stage_start
            if message["type"] == "result":
                self._result_at = now
                return self._result(message, stage, durations, now - started)
            stage, stage_start = str(message.get("name", "?"))[:64], now
            deadline = now + timeouts.for_stage(stage)
            self._activity = (f"stage '{stage}'", stage_start)

    def _write_profile(self, stats: Any) -> None:
        """A profiled job's statistics to the folder `CUDAPERF_PROFILE_JOBS` names now, else to the one it
        named when this worker started (`job_profile`)."""
        folder = job_profile.profile_dir() or self.profile_dir  # set: this is called only when profiling
        job_profile.write_profile(folder, int(self.info.get("pid") or 0), stats)

    # -- building replies --------------------------------------------------------------------------

    def _result(self, message: dict, stage: str, durations: dict, total_s: float) -> WorkerReply:
        payload, sandbox = message.get("payload"), message.get("sandbox") or {}
        logs = self._log_tail()
        flags = tuple(Flag(str(f.get("code")), str(f.get("message")), Severity(f.get("severity", "warning")))
                      for f in sandbox.get("flags", ()))  # fmt: skip
        outcome, message_text, stage = _payload_verdict(payload, stage)
        if sandbox.get("tampered"):
            outcome = Outcome.POLICY_VIOLATION
            message_text = next((f.message for f in flags if f.code == "harness_tampered"), message_text)
        poisoned = bool(sandbox.get("poisoned")) or outcome is Outcome.CUDA_ERROR
        if isinstance(payload, dict) and payload.get("worker_poisoned"):
            poisoned = True
        self.jobs_done += 1
        recycle = (
            self.limits.max_jobs_per_worker is not None and self.jobs_done >= self.limits.max_jobs_per_worker
        )
        if poisoned or recycle:
            self._replace()
        return WorkerReply(
            outcome=outcome,
            stage=stage,
            message=message_text,
            payload=payload if isinstance(payload, dict) else {},
            logs=logs,
            durations_s=durations,
            flags=flags,
            worker_replaced=poisoned or recycle,
            sandbox={"job_s": total_s, "child_job_s": sandbox.get("child_s")},
        )

    def _fault(
        self, event: _Event, stage: str, durations: dict, timeouts: StageTimeouts, job_deadline: float
    ) -> WorkerReply:
        if self._closed:  # the pool was closed under this job: not the candidate's doing
            self._retire()
            return WorkerReply(Outcome.HARNESS_ERROR, stage, "the worker pool was closed during the job",
                               durations_s=durations)  # fmt: skip
        if event.kind == "garbled":
            return self._forged(stage, durations, event.detail)
        if event.kind == "timeout":
            self._kill()
            logs = self._log_tail()
            if time.monotonic() >= job_deadline:
                text = f"the job ran past its {timeouts.job_s:.1f} s deadline (in stage '{stage}')"
            else:
                text = f"stage '{stage}' ran past its {timeouts.for_stage(stage):.1f} s deadline"
            outcome = Outcome.TIMEOUT
        else:  # exited, or closed its end of the channel (then give it a moment to exit by itself)
            if event.kind == "eof":
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=2.0)
            returncode = self._reap()
            logs = self._log_tail()
            text, outcome = f"the worker died in stage '{stage}': {describe_exit(returncode)}", Outcome.CRASH
        self._replace()
        return WorkerReply(outcome, stage, text, logs=logs, durations_s=durations, worker_replaced=True)

    def _forged(self, stage: str, durations: dict, why: str) -> WorkerReply:
        self._kill()
        logs = self._log_tail()
        self._replace()
        text = f"forged or corrupted message on the result channel: {why}"
        flags = (Flag("channel_forged", text, Severity.ERROR),)
        return WorkerReply(Outcome.POLICY_VIOLATION, stage, text, logs=logs, durations_s=durations,
                           flags=flags, worker_replaced=True)  # fmt: skip

    def _reap(self) -> int | None:
        """Exit status of a child that has died (kills the rest of its group first)."""
        self._signal_group()
        try:
            status = self._proc.wait(timeout=self.limits.kill_wait_s)
        except subprocess.TimeoutExpired:
            return None
        # bubblewrap exits with 128 + N when the worker was killed by signal N (a shell's convention).
        return -(status - 128) if self._bwrap and 128 < status < 128 + 65 else status

    def _log_tail(self) -> str:
        if not self._root or self.limits.max_log_bytes == 0:
            return ""
        try:
            with open(os.path.join(self._root, "worker.log"), "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - self.limits.max_log_bytes))
                tail = f.read(self.limits.max_log_bytes)
        except OSError:
            return ""
        text = tail.decode("utf-8", errors="replace")
        return f"[... {size - len(tail)} earlier bytes cut]\n{text}" if size > len(tail) else text

    # -- reading the result channel ----------------------------------------------------------------

    def _next_event(self, deadline: float) -> _Event:
        """The next complete message, or why none will come before `deadline`."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._reply_fd, selectors.EVENT_READ)
            if self._pidfd >= 0:
                sel.register(self._pidfd, selectors.EVENT_READ)
            while True:
                event = self._parse_buffer()
                if event is not None:
                    return event
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return _Event("timeout")
                # Without a pidfd (old kernels), poll the process every 0.1 s.
                ready = sel.select(remaining if self._pidfd >= 0 else min(remaining, 0.1))
                eof = self._drain()
                if eof:
                    return self._parse_buffer() or _Event("eof")
                if not ready and self._pidfd < 0 and self._proc.poll() is not None:
                    return self._parse_buffer() or _Event("exited")
                if any(key.fd == self._pidfd for key, _ in ready):
                    self._drain()
                    return self._parse_buffer() or _Event("exited")

    def _drain(self) -> bool:
        """Read what is available into the buffer; True at end of file."""
        while len(self._buffer) <= self.limits.max_reply_bytes + _HEADER.size:
            try:
                chunk = os.read(self._reply_fd, 1 << 20)
            except BlockingIOError:
                return False
            if not chunk:
                return True
            self._buffer += chunk
        return False

    def _parse_buffer(self) -> _Event | None:
        if len(self._buffer) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack_from(self._buffer)
        if size > self.limits.max_reply_bytes:
            # The child replaces an oversized result by a small OUTPUT_TOO_LARGE one before sending, so
            # a header announcing more than the limit was not written by the worker's own code.
            detail = (
                f"a frame header announcing {size} bytes, over the {self.limits.max_reply_bytes} byte limit"
            )
            return _Event("garbled", detail=detail)
        if len(self._buffer) < _HEADER.size + size:
            return None
        body = bytes(self._buffer[_HEADER.size : _HEADER.size + size])
        del self._buffer[: _HEADER.size + size]
        try:
            message = json.loads(body)
        except (ValueError, RecursionError) as exc:
            return _Event("garbled", detail=f"unparseable message ({type(exc).__name__})")
        if not isinstance(message, dict):
            return _Event("garbled", detail="a message that is not a JSON object")
        return _Event("message", message=message)


def _timing_of(asked: Any) -> dict[str, Any] | None:
    """The wire form of the timing an `on_proceed` returned; None for anything but a `TimingConfig`."""
    return to_dict(asked) if isinstance(asked, TimingConfig) else None


def _narrowed(job: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    """`job` (wire form) with its timing narrowed by `asked` (`jobs.narrowed_timing`); as it is when its
    task or timing does not parse (the worker then reports the job malformed)."""
    try:
        kind, sent = TaskKind(job["task"]["kind"]), from_dict(TimingConfig, job["timing"])
    except (KeyError, TypeError, ValueError):
        return job
    return {**job, "timing": to_dict(narrowed_timing(kind, sent, asked))}


def _with_boundary(payload: dict[str, Any], state: dict[str, Any],
                   extra: dict[str, str] | None = None) -> dict[str, Any]:
    """The payload with `environment["sandbox"]` set to the parent's observation of the boundary (a JSON
    string: `EvalResult.environment` holds strings), so every result says what held for it, and `extra`
    (`referee_wait_s`: the seconds this process waited for the referee's answers during the job)."""
    if not state or not isinstance(payload.get("environment"), dict):
        return payload
    environment = {**payload["environment"], "sandbox": json.dumps(state, sort_keys=True), **(extra or {})}
    return {**payload, "environment": environment}


def _payload_verdict(payload: object, stage: str) -> tuple[Outcome | None, str, str]:
    if not isinstance(payload, dict):
        return Outcome.HARNESS_ERROR, f"the job handler returned {type(payload).__name__}, not a dict", stage
    stage = str(payload.get("stage") or stage)
    message = str(payload.get("message", ""))
    value = payload.get("outcome")
    if value is None:
        return None, message, stage
    try:
        return Outcome(value), message, stage
    except ValueError:
        return Outcome.HARNESS_ERROR, f"the job handler returned an unknown outcome {value!r}", stage


def _pidfd_open(pid: int) -> int:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


# --------------------------------------------------------------------------------------------------
# The pool


class _IdleWorkers:
    """The pool's idle workers: `take()` the longest idle one, or `take(worker)` that one, waiting until
    it is idle; `give(worker)` back."""

    def __init__(self) -> None:
        self._workers: collections.deque[Worker] = collections.deque()
        self._changed = threading.Condition()

    def take(self, wanted: Worker | None = None) -> Worker:
        with self._changed:
            self._changed.wait_for(lambda: wanted in self._workers if wanted is not None else self._workers)
            if wanted is None:
                return self._workers.popleft()
            self._workers.remove(wanted)
            return wanted

    def give(self, worker: Worker) -> None:
        with self._changed:
            self._workers.append(worker)
            self._changed.notify_all()


class WorkerPool:
    """Sandboxed workers, one per GPU (or one CPU-mode worker when `devices` is None).

    `run(job, timeouts)` blocks until a worker is free and returns its `WorkerReply`; call it from up to
    `size` threads at once to use every GPU. Faulty workers are replaced automatically. `preload` names
    modules each worker imports (`module`) or imports and calls (`module:function`) before it reports
    ready; the default loads torch and CUDA Python's libraries, so jobs do not pay for them.
    """

    def __init__(
        self,
        devices: list[int] | None = None,
        limits: Limits | None = None,
        *,
        timeouts: StageTimeouts | None = None,
        preload: tuple[str, ...] = DEFAULT_PRELOAD,
    ):
        if devices is not None and not devices:
            raise ValueError("WorkerPool: devices=[] has no worker; pass GPU indices, or None for CPU mode")
        self.limits = limits or Limits()
        self.timeouts = timeouts or StageTimeouts()
        self.plan, base_uid = _plan_and_uid(self.limits)
        boundary.log_missing(self.plan)
        self.spawner = Spawner()  # every worker and referee is forked from its one long-lived thread
        # one store of C references for every referee of the pool (each computed once, not per referee)
        self.references = (shared_references.Broker(self.limits.shared_c_references_bytes)
                           if self.limits.referee and self.limits.shared_c_references_bytes > 0 else None)
        self.workers = [
            Worker(d, self.limits, preload=preload, uid=None if base_uid is None else base_uid + i,
                   plan=self.plan, spawner=self.spawner, references=self.references)
            for i, d in enumerate(devices or [None])
        ]
        threads = self.limits.cpu_threads or cpu_threads_per_process(
            len(self.workers) * (2 if self.limits.referee else 1), len(os.sched_getaffinity(0)))
        for worker in self.workers:
            worker.cpu_threads = threads
            if worker.referee is not None:
                worker.referee.cpu_threads = threads
        self._idle = _IdleWorkers()
        for worker in self.workers:
            worker.start()  # all start in parallel; readiness is awaited by the first job of each
            self._idle.give(worker)
        self._finalizer = weakref.finalize(self, _close_all, list(self.workers), self.spawner,
                                           self.references)

    @property
    def size(self) -> int:
        return len(self.workers)

    def run(self, job: dict[str, Any], timeouts: StageTimeouts | None = None,
            on_proceed: Callable[[], None] | None = None,
            on_checked: Callable[[], None] | None = None,
            on_result: Callable[[], None] | None = None) -> WorkerReply:
        """One job on the next idle worker (`Worker.run`; the callbacks as there)."""
        worker = self._idle.take()
        try:
            return worker.run(job, timeouts or self.timeouts, on_proceed, on_checked, on_result)
        finally:
            self._idle.give(worker)

    def run_on(self, index: int, job: dict[str, Any], timeouts: StageTimeouts | None = None,
               on_proceed: Callable[[], None] | None = None,
               on_checked: Callable[[], None] | None = None,
               on_result: Callable[[], None] | None = None) -> WorkerReply:
        """`run` on `self.workers[index]`, once it is idle (a caller keeping a task's jobs on one worker,
        whose referee then holds that task's references already)."""
        worker = self._idle.take(self.workers[index])
        try:
            return worker.run(job, timeouts or self.timeouts, on_proceed, on_checked, on_result)
        finally:
            self._idle.give(worker)

    def warm_up(self) -> list[float | None]:
        """Block until every idle worker (and its referee, when one was started) is ready; seconds each
        worker took since spawn (None: failed)."""
        taken = [self._idle.take() for _ in self.workers]
        try:
            ready = [w.wait_ready(self.timeouts) for w in taken]
            for w in taken:
                if w.referee is not None and w.referee.alive:
                    w.referee.wait_ready(time.monotonic() + self.timeouts.start_s)
            return ready
        finally:
            for w in taken:
                self._idle.give(w)

    def activity(self) -> tuple[str, ...]:
        """Each worker's `Worker.activity`, with its index and its child's pid."""
        now = time.monotonic()
        return tuple(f"worker {i} (pid {w.pid}): {w.activity(now)}" for i, w in enumerate(self.workers))

    def reference_store_report(self) -> dict[str, int]:
        """What the referees' shared store of C references did (`shared_references.Broker.report`:
        computed, served, waited, evicted...); {} when the pool has none."""
        return self.references.report() if self.references is not None else {}

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _default_cache_dir() -> str:
    from cudaperf.toolchain.cache import resolve_cache_dir  # here: the child imports this module too

    return str(resolve_cache_dir(None))


def _plan_and_uid(limits: Limits) -> tuple[boundary.Plan, int | None]:
    """The boundary plan and the first worker uid. A root evaluator gives workers uids of their own by
    default, unless nothing could make its interpreter readable to them (no bubblewrap to expose it)."""
    plan = boundary.probe(limits.boundary)
    if limits.run_as_uid is not None or not plan.enabled or not plan.root:
        return plan, limits.run_as_uid
    if plan.bwrap is None and boundary.hidden_from_others(boundary.python_paths()):
        why = "uid: the interpreter is not readable by another uid and no bubblewrap can expose it"
        return dataclasses.replace(plan, missing=(*plan.missing, why)), None
    return plan, boundary.DEFAULT_WORKER_UID


def _close_all(workers: list[Worker], spawner: Spawner,
               references: shared_references.Broker | None = None) -> None:
    for worker in workers:
        worker.close()
    spawner.close()
    if references is not None:
        references.close()
