"""The measuring children and the parent's pool of them: each GPU gets a child that measures one task at
a time and tells the parent what it is doing; the parent dispatches jobs, writes every record, and decides
who is to blame when a child dies.

Why child processes: a sticky CUDA error (an illegal address) leaves the context unusable and the process
with it. So each GPU gets a child (spawned: a forked CUDA context is unusable) that measures one task at a
time and tells the parent what it is doing (`phase` messages naming the implementations in flight). When a
child dies, the parent blames those implementations (failed rows with the reason), starts a new child and
sends the task again without them; see `after_death` for the rule. The parent is the only writer of the
results file.

Why not the evaluator's sandboxed `cudaperf.execute.WorkerPool`: it runs one untrusted candidate per job
(a job round trip, a fresh reference per job, import guards, the runtime monitor, coverage), which would
multiply the device time of ~20,000 implementations that must fit in a few 30-minute GPU sessions, and
it has no way to measure many implementations of one task in one child against one reference, nor to
share a GPU between children under a lock (`GpuLock`). The implementations are our own generated code,
trusted like the references; what the measurement shares with the evaluator is below the process level
(`cudaperf.cuda`, `cudaperf.correctness`, `cudaperf.timing`, `execute.device_state.context_alive`).

Time budget: dispatching stops when the next task would not fit, the tasks in flight finish, and a child
still running `grace_s` after the budget is killed (its finished configurations are kept, the rest is
measured next time).

Not covered: what a child measures (`Runner`: task_measurement.py on the GPU), which tasks (runner.py),
the results files (results.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import sys
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_any
from pathlib import Path
from typing import Any, Protocol

from cudaperf.datasets.jsonl import ResultsWriter
from cudaperf.datasets.measure.options import EXPECTED_MARGIN, RUNNERS, MeasureOptions
from cudaperf.datasets.measure.results import ROW_VERSION, Key
from cudaperf.datasets.records import GeneratedTask
from cudaperf.types import TaskKind

EXIT_DONE, EXIT_USAGE, EXIT_BUDGET = 0, 2, 3
STARTUP_ALLOWANCE_S = 180.0  # a child's import of torch + CUDA init before its first task starts
STARTUP_FAILED = "the measuring process could not start"


# --------------------------------------------------------------------------------------------------
# What happens when a child dies


@dataclass
class Job:
    """One task sent to a child, across its attempts."""

    task: GeneratedTask
    skip: set[Key]
    hashes: dict[str, str] = field(default_factory=dict)  # impl id -> impl_hash of its source
    attempt: int = 0
    planned: list[Key] | None = None  # the keys the child said it would measure (None: died before)
    received: set[Key] = field(default_factory=set)
    deaths: Counter = field(default_factory=Counter)  # (phase, config, culprits) -> deaths there
    fruitless: int = 0  # deaths that failed no key (capped by max_attempts)
    no_compile_baseline: bool = False  # a child died inside torch.compile: the retry goes without it
    failed_rows: int = 0
    t_start: float = 0.0

    def remaining(self) -> set[Key]:
        return set(self.planned or ()) - self.received - self.skip


@dataclass(frozen=True)
class Phase:
    """What a child was doing: a phase name, the configuration, the implementations in flight."""

    name: str = "setup"
    config: str | None = None
    culprits: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeathVerdict:
    failed: frozenset[Key]  # keys to record as failed now
    retry: bool  # send the task again (without the failed keys)


def after_death(job: Job, phase: Phase, *, timed_out: bool, max_attempts: int) -> DeathVerdict:
    """Decide who is to blame when a child died (or was killed for a timeout) in `phase`.

    One implementation in flight (its build or correctness check): it fails at once. Several (the
    interleaved timing of a configuration): the first death there is retried, the second fails them all;
    a timeout fails them at once (a hang repeats, and costs the timeout each time). None in flight (the
    reference, setup): the configuration's (or the task's) remaining keys fail on the second death there.
    A death that fails some key always makes progress; deaths that fail nothing are capped: after
    `max_attempts` of those, everything left fails."""
    job.attempt += 1
    signature = (phase.name, phase.config, phase.culprits)
    job.deaths[signature] += 1
    remaining = job.remaining()
    in_scope = {k for k in remaining if phase.config is None or k[1] == phase.config}
    blamed = {k for k in in_scope if k[2] in phase.culprits} if phase.culprits else in_scope
    decisive = len(phase.culprits) == 1 or timed_out or job.deaths[signature] > 1
    failed = blamed if decisive else set()
    if not failed:
        job.fruitless += 1
        if job.fruitless >= max_attempts:
            failed = remaining
    retry = job.fruitless < max_attempts and (bool(remaining - failed) or job.planned is None)
    return DeathVerdict(frozenset(failed), retry)


def failed_row(task: GeneratedTask, key: Key, status: str, message: str,
               hash_: str | None = None) -> dict[str, Any]:
    return {"record": "row", "v": ROW_VERSION, "task_id": task.task_id, "kind": task.kind.value,
            "family": task.family, "config": key[1], "impl_id": key[2], "strategy": key[2].rsplit("/", 1)[-1],
            "status": status, "correct": False, "message": message[:800], "source_hash": hash_,
            "t": time.time()}



# --------------------------------------------------------------------------------------------------
# Children


class ContextLost(Exception):
    """Raised by a runner when the CUDA context is unusable (a sticky error): the child reports the
    culprit and exits, and the parent starts a new one."""


class GpuLock:
    """Orders the GPU phases of the children sharing one GPU (per_gpu > 1): a readers-writer lock made of
    flocks. Untimed GPU work (references, correctness checks, torch.compile's warm-up) holds it `shared`,
    so children overlap it with each other; a timed run holds it `exclusive`, so it never shares the GPU
    with another child's work. Both first pass a turnstile flock, which an exclusive taker keeps while it
    waits for the shared holders to leave: flock alone lets new shared holders in ahead of a waiting
    exclusive one, and a stream of checks could then keep timing waiting for ever. Holders must finish
    their GPU work (synchronise) before leaving. The kernel releases flocks when their holder dies, so a
    crashed child cannot leave the others waiting. `wait_s` adds up the time spent waiting, per mode."""

    def __init__(self, path: Path | None):
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644) if path else None
        self._turnstile = os.open(f"{path}.turnstile", os.O_RDWR | os.O_CREAT, 0o644) if path else None
        self.wait_s = {"shared": 0.0, "exclusive": 0.0}

    def shared(self) -> contextlib.AbstractContextManager[None]:
        return self._held(fcntl.LOCK_SH, "shared")

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        return self._held(fcntl.LOCK_EX, "exclusive")

    @contextlib.contextmanager
    def _held(self, operation: int, mode: str):
        if self._fd is None or self._turnstile is None:
            yield
            return
        start = time.perf_counter()
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._fd, operation)
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self.wait_s[mode] += time.perf_counter() - start
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)




def task_to_job(task: GeneratedTask, skip: Iterable[Key],
                no_compile_baseline: bool = False) -> dict[str, Any]:
    return {"task_id": task.task_id, "kind": task.kind.value, "family": task.family, "variant": task.variant,
            "text": task.text, "skip": sorted(skip), "no_compile_baseline": no_compile_baseline}


def task_from_job(job: dict[str, Any]) -> GeneratedTask:
    return GeneratedTask(job["task_id"], TaskKind(job["kind"]), job["family"], job["variant"], job["text"],
                         "")


class Runner(Protocol):
    """What a measuring child runs, named by `MeasureOptions.runner` and built once per child as
    `Runner(options, lock)` (after CUDA_VISIBLE_DEVICES is set, before the first job).

    `info()`: a description of the device for the records (`device`, versions, host).
    `measure(job, emit)`: measure one job (`task_to_job`), skipping its `skip` keys, and return the task
    record's extra fields (`status`, `durations_s`). It reports through `emit(*message)` as it goes:
    ("plan", task_id, keys) before the first phase, ("phase", task_id, name, config, culprits) whenever the
    implementations in flight change (whom the parent blames if the process dies now), and ("row", record)
    per measured key. It raises ContextLost when the CUDA context is gone; any other exception is a harness
    fault recorded on the task."""

    def info(self) -> dict[str, Any]: ...

    def measure(self, job: dict[str, Any], emit: Callable[..., None]) -> dict[str, Any]: ...


def _load_runner(options: MeasureOptions, lock: GpuLock) -> Runner:
    import importlib

    module, _, name = RUNNERS.get(options.runner, options.runner).partition(":")
    return getattr(importlib.import_module(module), name)(options, lock)


def child_main(conn: Any, options: MeasureOptions, gpu: str | None, lock_path: str | None,
               threads: int) -> None:
    """A child: keep off the CPUs reserved for serial-C timing, pin its GPU and size inductor's compile
    pool (before torch loads and starts threads), build the runner, then measure tasks as they come."""
    from cudaperf.host_timing import keep_off_timing_cpus

    keep_off_timing_cpus()  # its threads and compilers too (they inherit it); its own serial timing not
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(threads))  # the host's cores, shared
    emit = conn.send
    try:
        runner = _load_runner(options, GpuLock(Path(lock_path) if lock_path else None))
        emit(("ready", runner.info()))
    except Exception as exc:  # noqa: BLE001 - a child that cannot start says why, then exits
        emit(("startup_failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"))
        return
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == "stop":
            return
        job = message[1]
        emit(("start", job["task_id"]))
        try:
            info = runner.measure(job, lambda *m: emit(m))
        except ContextLost as fatal:
            emit(("fatal", job["task_id"], str(fatal)[:2000]))
            conn.close()
            os._exit(71)  # the CUDA context is gone; the parent starts a new child
        except Exception as exc:  # noqa: BLE001 - a harness bug in one task must not stop the others
            info = {"status": "harness_error", "message": f"{type(exc).__name__}: {exc}\n"
                                                         f"{traceback.format_exc()[-1500:]}"}
        emit(("done", job["task_id"], info))


# --------------------------------------------------------------------------------------------------
# The parent: a pool of children, one job each


@dataclass
class _Worker:
    slot: int
    gpu: str | None
    lock_path: str | None
    process: Any = None
    conn: Any = None
    job: Job | None = None
    phase: Phase = field(default_factory=Phase)
    info: dict[str, Any] = field(default_factory=dict)
    tasks_done: int = 0
    started_at: float = 0.0  # when the job was sent
    task_started_at: float | None = None  # when the child began it
    fatal: str = ""
    timed_out: bool = False
    budget_killed: bool = False

    @property
    def busy(self) -> bool:
        return self.job is not None


@dataclass
class RunSummary:
    """What one `measure` invocation did."""

    selected: int
    already_done: int
    finished: int = 0
    failed_tasks: int = 0
    rows: int = 0
    failed_rows: int = 0
    stopped_by_budget: bool = False
    left: int = 0
    elapsed_s: float = 0.0
    torn_lines: int = 0
    no_impls: int = 0  # selected tasks whose family has no implementations yet (not measured, not recorded)
    filtered: int = 0  # tasks of the shard that the CPU filter left out (validate*.jsonl[.gz])
    error: str = ""  # why the run stopped early (children could not start)

    @property
    def exit_code(self) -> int:
        if self.error:
            return EXIT_USAGE
        return EXIT_BUDGET if self.stopped_by_budget and self.left else EXIT_DONE


class Pool:
    """Children, the job queue, the results writer, and the rules for deaths, timeouts and the budget."""

    def __init__(self, options: MeasureOptions, writer: ResultsWriter, run_id: str, gpus: list[str | None],
                 on_task: Callable[[GeneratedTask], None] | None = None):
        self.options, self.writer, self.run_id = options, writer, run_id
        self.ctx = multiprocessing.get_context("spawn")  # fork would copy a CUDA context: unusable
        lock_dir = options.out_dir / ".locks"
        self.workers = []
        for gpu_pos, gpu in enumerate(gpus):
            lock = str(lock_dir / f"gpu{gpu_pos}.lock") if options.per_gpu > 1 else None
            for _ in range(options.per_gpu):
                self.workers.append(_Worker(len(self.workers), gpu, lock))
        if options.per_gpu > 1:
            lock_dir.mkdir(parents=True, exist_ok=True)
        self.queue: deque[Job] = deque()
        self.durations: dict[str, list[float]] = {}
        self.on_task = on_task
        self.summary: RunSummary | None = None
        self.stopping = False
        self.unfinished = 0  # tasks killed at the end of the time budget (measured next time)
        self.startup_failures = 0
        self.error = ""

    # -- children ---------------------------------------------------------------------------------
    def _spawn(self, w: _Worker) -> None:
        parent_conn, child_conn = self.ctx.Pipe()
        threads = max(1, (os.cpu_count() or 1) // max(1, len(self.workers)))
        w.process = self.ctx.Process(target=child_main,
                                     args=(child_conn, self.options, w.gpu, w.lock_path, threads),
                                     daemon=True, name=f"cudaperf-measure-{w.slot}")
        w.process.start()
        child_conn.close()
        w.conn, w.info, w.tasks_done, w.fatal = parent_conn, {}, 0, ""

    def _retire(self, w: _Worker) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            w.conn.send(("stop",))
        w.process.join(timeout=30)
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        w.conn.close()
        w.process = w.conn = None

    def _kill(self, w: _Worker) -> None:
        if w.process is not None and w.process.is_alive():
            w.process.kill()  # SIGKILL: the child may be stuck in a kernel or a driver call
        if w.process is not None:
            w.process.join(timeout=30)

    # -- dispatch ---------------------------------------------------------------------------------
    def expected_s(self, job: Job) -> float:
        """A task's likely duration: the 90th percentile of this run's recent tasks of its kind, +20%."""
        seen = sorted(self.durations.get(job.task.kind.value, [])[-30:])
        assumed = self.options.assumed_s(job.task.kind.value)
        return (seen[int(0.9 * (len(seen) - 1))] if seen else assumed) * EXPECTED_MARGIN

    def _dispatch(self, deadline: float) -> None:
        for w in self.workers:
            if w.busy or not self.queue or self.stopping:
                continue
            if w.process is not None and not w.process.is_alive():  # died while idle
                self._forget(w)
            job = self.queue[0]
            startup = 0.0 if w.process is not None else self.options.assumed_startup_s
            if time.time() + startup + self.expected_s(job) > deadline:
                self.stopping = True  # the next task would not fit: finish what is in flight
                return
            self.queue.popleft()
            if w.process is None:
                self._spawn(w)
            w.job, w.phase, w.started_at, w.task_started_at = job, Phase(), time.time(), None
            w.timed_out = w.budget_killed = False
            if not job.t_start:
                job.t_start = time.time()
            with contextlib.suppress(OSError):  # a child dying right now is seen by its sentinel
                w.conn.send(("task", task_to_job(job.task, job.skip, job.no_compile_baseline)))

    def _forget(self, w: _Worker) -> None:
        with contextlib.suppress(OSError):
            w.conn.close()
        w.process.join(timeout=5)
        w.process = w.conn = None

    # -- messages ---------------------------------------------------------------------------------
    def _handle(self, w: _Worker, message: tuple) -> None:
        kind = message[0]
        if kind == "ready":
            w.info = message[1]
            self.startup_failures = 0
        elif kind == "start":
            w.task_started_at = time.time()
        elif kind == "plan" and w.job:
            w.job.planned = [tuple(k) for k in message[2]]
        elif kind == "phase":
            w.phase = Phase(message[2], message[3], tuple(message[4]))
        elif kind == "row" and w.job:
            self._write_row(w, message[1])
        elif kind == "fatal":
            w.fatal = message[2]
        elif kind == "startup_failed":
            w.fatal = f"{STARTUP_FAILED}: {message[1]}"
        elif kind == "done" and w.job:
            self._finish(w, message[2])

    def _write_row(self, w: _Worker, row: dict[str, Any]) -> None:
        row = {**row, "run": self.run_id, "worker": w.slot, "device": w.info.get("device")}
        self.writer.append(row)
        assert w.job is not None
        w.job.received.add((row["task_id"], row["config"], row["impl_id"]))
        self.summary.rows += 1
        self.summary.failed_rows += row.get("status") != "ok"

    def _finish(self, w: _Worker, info: dict[str, Any]) -> None:
        job = w.job
        assert job is not None
        status = info.get("status", "ok")
        if status == "ok" and job.failed_rows:
            status = "partial"  # some implementations were blamed for a dead child
        self._task_record(job, status, info.get("message", ""), w, info)
        w.job = None
        w.tasks_done += 1
        if w.tasks_done >= self.options.max_tasks_per_child:
            self._retire(w)

    def _task_record(self, job: Job, status: str, message: str, w: _Worker | None,
                     info: dict[str, Any] | None = None) -> None:
        now = time.time()
        elapsed = now - job.t_start if job.t_start else 0.0
        if w is not None and status in ("ok", "partial"):  # a failure's time says little about the next task
            self.durations.setdefault(job.task.kind.value, []).append(elapsed)
        self.writer.append({"record": "task", "v": ROW_VERSION, "task_id": job.task.task_id,
                            "kind": job.task.kind.value, "family": job.task.family, "status": status,
                            "message": message[:2000], "attempts": job.attempt + 1, "t_start": job.t_start,
                            "t_end": now, "elapsed_s": elapsed, "rows": len(job.received),
                            "failed_rows": job.failed_rows, "run": self.run_id, "impls": job.hashes,
                            "worker": None if w is None else w.slot,
                            "device": None if w is None else w.info.get("device"),
                            "durations_s": (info or {}).get("durations_s", {})})
        self.summary.finished += 1
        self.summary.failed_tasks += status != "ok"
        if self.on_task:
            self.on_task(job.task)

    # -- deaths, timeouts, the budget -------------------------------------------------------------
    def _drain(self, w: _Worker) -> None:
        with contextlib.suppress(EOFError, OSError):
            while w.conn.poll(0):
                self._handle(w, w.conn.recv())

    def _on_death(self, w: _Worker) -> None:
        self._drain(w)
        self._kill(w)
        code = w.process.exitcode if w.process is not None else None
        job, phase = w.job, w.phase
        w.process = w.conn = None  # a new child is spawned at the next dispatch
        w.job = None
        if job is None or w.budget_killed:
            self.unfinished += job is not None
            return  # an idle child exited, or the budget ended the run: the keys stay unfinished
        if not w.info:  # it never became ready: not the task's fault
            self._startup_failed(job, w.fatal or f"{STARTUP_FAILED} (exit code {code})")
            return
        what = f"during {phase.name}" + (f" of {', '.join(phase.culprits)}" if phase.culprits else "") + (
            f" on config {phase.config}" if phase.config else "")
        if w.timed_out:
            status, reason = "timeout", f"killed after {self.options.task_timeout_s:.0f} s {what}"
        else:
            status = "worker_died"
            reason = (f"the measuring process died (exit code {code}) {what}"
                      + (f": {w.fatal}" if w.fatal else ""))
        job.no_compile_baseline |= phase.name == "compile_baseline"  # the baseline, not an implementation
        verdict = after_death(job, phase, timed_out=w.timed_out, max_attempts=self.options.max_attempts)
        for key in sorted(verdict.failed):
            self.writer.append({**failed_row(job.task, key, status, reason, job.hashes.get(key[2])),
                                "run": self.run_id})
            job.received.add(key)
            job.failed_rows += 1
            self.summary.rows += 1
            self.summary.failed_rows += 1
        if verdict.retry:
            job.skip |= job.received
            self.queue.appendleft(job)
        else:
            self._task_record(job, "failed", reason, w)

    def _startup_failed(self, job: Job, why: str) -> None:
        """Not the task's fault: it goes back to the queue; three failed starts in a row end the run."""
        self.queue.appendleft(job)
        self.startup_failures += 1
        if self.startup_failures >= 3:
            self.stopping = True
            self.error = why
            print(f"cudaperf dataset measure: stopping, children cannot start: {why}", file=sys.stderr)

    def _check_clocks(self, deadline: float) -> None:
        now = time.time()
        for w in self.workers:
            if not w.busy or w.process is None:
                continue
            began = w.task_started_at or (w.started_at + STARTUP_ALLOWANCE_S)
            if now > deadline + self.options.grace_s:
                w.budget_killed = self.stopping = True
                self._kill(w)
            elif now - began > self.options.task_timeout_s:
                w.timed_out = True
                self._kill(w)

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, jobs: list[Job], summary: RunSummary, tick: Callable[[], None] = lambda: None) -> None:
        self.summary = summary
        self.queue.extend(jobs)
        start = time.time()
        budget = self.options.time_budget_s
        deadline = start + budget if budget > 0 else float("inf")
        try:
            while True:
                self._dispatch(deadline)
                busy = [w for w in self.workers if w.busy]
                if not busy:
                    break
                owner: dict[Any, tuple[_Worker, Any]] = {}
                for w in busy:
                    owner[w.conn] = owner[w.process.sentinel] = (w, w.process)
                for ready in wait_any(list(owner), timeout=1.0):
                    w, process = owner[ready]
                    if w.process is not process or not w.busy:
                        continue  # already handled in this round (a death seen on both handles)
                    if ready is w.conn:
                        try:
                            self._handle(w, w.conn.recv())
                        except (EOFError, OSError):
                            self._on_death(w)
                    else:
                        self._on_death(w)
                for w in busy:
                    if w.busy and w.process is not None and not w.process.is_alive():
                        self._on_death(w)
                self._check_clocks(deadline)
                tick()
        finally:
            for w in self.workers:
                if w.process is not None:
                    if w.busy:
                        self._kill(w)
                    else:
                        self._retire(w)
        summary.stopped_by_budget = self.stopping or bool(self.queue)
        summary.left = len(self.queue) + self.unfinished
        summary.error = self.error
        summary.elapsed_s = time.time() - start


