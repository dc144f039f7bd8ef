"""The referee: a trusted process beside each worker that computes the reference outputs and the verdict.

Why: native code of a candidate (a `load_inline` extension's static initialiser, any host function) runs
inside the worker with the worker's memory and channel, so it can forge the worker's reply or copy a
reference output it finds there; a plain CUDA kernel can scan its context's device memory for one. So the
correctness verdict is computed here, in a process the candidate never runs in, from reference outputs that
never exist in the candidate's process: a refereed PyTorch worker computes none (it runs the candidate on
every (configuration, seed) and ships each output, `outputs.Shipper`; in its timing stage the reference
model runs as the eager and compiled baselines, each output overwritten once its call is over,
`torch_session`); C workers compute a reference only for timing, after shipping, its outputs zeroed at
once.

Covers:
- the process, `python -m cudaperf.execute.referee` (`main`): started by `sandbox.Worker` beside its worker
  (`RefereeLink`), on the same GPU, outside the worker's boundary (the evaluator's uid, its own session:
  the worker can neither see nor signal it, having another uid and pid namespace); it never imports
  candidate code. Per job it receives, from the parent only: the job (task, configurations, seeds, the
  secret, tolerances), computes the references (`Judge.prepare`: C tasks at once; PyTorch ones when the
  worker's `sync` arrives, after the worker has given back its own cache for other tasks: then, when the
  driver has too little free, this store's references of other tasks give way too, as far as the job
  needs (`Referee.make_room`, `memory_plan.room_bytes`), and the cache goes back to the driver after each
  reference computed, so no kept reference is carved from a freed temporary's block that `empty_cache`
  could then not return; a reference out of device memory even then makes the job SKIPPED, not
  HARNESS_ERROR) and answers the sync with their sizes (`RefereeJob.reference_sizes`: the worker's memory
  plan), then takes each output announcement the parent forwards from the worker (the bytes are in the
  shared region, `outputs.Region`, pinned for its context where the driver allows: all of a message's
  copies first, one synchronise, then the judging), judges it (`torch_judge.TorchJudge`, `c_judge.CJudge`:
  `correctness.compare` under the task's tolerances), and answers `done` with whether all was correct
  (the worker skips timing otherwise). After each configuration's bench, with the worker waiting (never
  during a bench), it judges the outputs the timing stage re-checked (`timed` messages,
  `outputs.TimedOutputs`: the candidate's first on each input set, and its later ones there that were
  not bit for bit that first, each with its re-check index) against the first seed's model on that set
  (`TorchJudge.check_timed`), under the task's tolerance. PyTorch references are kept across jobs (a
  quarter of the device's memory), C ones in host memory, and, in a pool that shares them
  (`shared_references`, `Limits.shared_c_references_bytes`), computed once for all its referees: a
  socket to the parent's store (`--store-fd`), which the worker has no way to reach. Device memory it
  cached beyond `RELEASE_ABOVE_BYTES` goes back to the driver after each message (`Referee._release`):
  the worker plans its memory from what the driver reports free.
- `finish`: the parent sends what the worker reported (any claim of its own, its timings, the time from
  its go-ahead to the worker's result, an upper bound on the timing stage that a slow parent only widens)
  and the timing its go-ahead named, if any (which can only narrow the job's: `jobs.narrowed_timing`), and
  gets the verdict back: the correctness, the judging flags, `timed_output_mismatch` (ERROR) or
  `baseline_output_mismatch` (WARNING) for re-checked timing outputs it found wrong, the speed-of-light
  figures and flags of PyTorch tasks (from the referee's own reference time, so a forged baseline cannot
  switch the floor off), its time per message kind and per part (`referee_ms`, instrumentation, with the
  bytes assembled and judged and their rates, and the worker's own account of filling the region:
  `RefereeJob.figures`), whether each side's mapping of the region is pinned (`region`), and
  `verdict_mismatch` (ERROR, a violation: `anticheat.policy`) where the worker's report is not what its
  own code sends: a correctness verdict of its own (a refereed worker writes none), a verdict with outputs
  never shipped, an outcome of "correct" or "incorrect" (its code leaves the outcome to correctness),
  timings of a configuration whose re-checked outputs never came, of one the job does not time or twice
  of one, timings or re-checked outputs of a baseline the timing (as the go-ahead narrowed it) does not
  time, an announcement no honest worker sends (among the timed ones: a key sent twice, a negative
  re-check index, a later output of a baseline or before its set's first, more than
  `outputs.KEPT_RECHECKS` later ones per set: `RefereeJob.check_timed_key`), a payload that does not
  parse, timed calls adding up (by every figure of theirs: `_least_ms`) to more than the timing stage
  can have lasted.
- `RefereeLink` (parent side, no torch): the process, its pipes, the region, requests with deadlines.
- `apply_verdict` (parent side, no torch): the verdict into the worker's payload.

Not covered: what stays forgeable because only the worker sees it (timings, coverage, the torch-op
monitor, input mutation: guards.py, "Not covered"; and which of the timing stage's later re-checked
outputs differ from the candidate's first on their set, so which come here: the worker's word), the
later re-checked outputs beyond those the worker keeps (`outputs.KEPT_RECHECKS` per set), compared in
the worker with the candidate's first only, so within twice the tolerance from the reference
(`timed_recheck_partial` says when there were any), a baseline's output that native code of the
candidate copies in the worker while it exists (from the baseline's call until the worker overwrites it
and the memory the call freed: `torch_session`, "Not covered"), the sandbox's own deadlines and
replacement (`sandbox.py`), judging itself (`judge.py` and the kinds).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from cudaperf.execute import shared_references
from cudaperf.execute.cpu_share import thread_settings
from cudaperf.execute.framing import HEADER, encode_message, read_message, write_all

SOL_CODES = ("impossible_speed", "below_compute_floor", "sol_floor_unreliable")
MISMATCH = "verdict_mismatch"
CANDIDATE = "candidate"  # the candidate's name among the timed functions (session.CANDIDATE)
# Outcomes the worker's own code never writes: it leaves the outcome None whenever correctness decides.
RAN_OUTCOMES = ("correct", "incorrect")
TIMED_FUNCTIONS = (CANDIDATE, "eager", "compile")  # whose re-checked timing outputs the worker ships
# Cached device memory the referee may keep between messages of a job: below it, giving the blocks back
# (cudaFree, which synchronises) would cost more than the worker could gain; above, the worker needs it.
RELEASE_ABOVE_BYTES = 256 << 20
WALL_SLACK = 1.05  # timed calls may add up to this share of the timing stage's wall time (clock skew)
_PIPE_BYTES = 1 << 20  # job messages (a task's source) fit the pipe without blocking the parent
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


# --------------------------------------------------------------------------------------------------
# Parent side


class RefereeLink:
    """One referee process and its shared output region, owned by a `sandbox.Worker`.

    The region (a sealed memfd) lives as long as the link: every incarnation of the worker and of the
    referee gets the same one. `spawn(fn)` runs `fn` on the pool's spawner thread (see sandbox.Spawner)."""

    def __init__(self, device: int | None, region_bytes: int, *, kill_wait_s: float = 30.0,
                 references: Any = None):
        self.device = device
        self.references = references  # the pool's `shared_references.Broker`, or None (a store of its own)
        self.region_bytes = region_bytes
        self.region_fd = create_region_fd(region_bytes)
        self.kill_wait_s = kill_wait_s
        self.cpu_threads: int | None = None  # torch's CPU threads here (sandbox.Limits.cpu_threads)
        self.used_bytes = 0  # the most of the region a chunk used since the last `zero_region`
        self._proc: subprocess.Popen | None = None
        self._cmd_fd = self._reply_fd = -1
        self._dir: str | None = None
        self._buffer = bytearray()
        self._ready = False
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, spawn: Callable[[Callable[[], Any]], Any]) -> None:
        """Spawn the process (it reports ready once torch and the device are up)."""
        if self.alive:
            return
        self.close_process()
        self._dir = tempfile.mkdtemp(prefix="cudaperf-referee-")
        cmd_r, cmd_w = os.pipe()
        reply_r, reply_w = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(cmd_w, _F_SETPIPE_SZ, _PIPE_BYTES)
        log_path = os.path.join(self._dir, "referee.log")
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        argv = [sys.executable, "-u", "-X", "faulthandler", "-m", "cudaperf.execute.referee",
                "--cmd-fd", str(cmd_r), "--reply-fd", str(reply_w), "--region-fd", str(self.region_fd),
                "--region-bytes", str(self.region_bytes), "--parent-pid", str(os.getpid())]
        ours, theirs = shared_references.socket_pair() if self.references is not None else (None, None)
        passed = (cmd_r, reply_w, self.region_fd, *((theirs.fileno(),) if theirs is not None else ()))
        if theirs is not None:
            argv += ["--store-fd", str(theirs.fileno())]
        try:
            self._proc = spawn(lambda: subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd,
                pass_fds=passed, start_new_session=True, env=self._environment()))
        except BaseException:
            if ours is not None:
                ours.close()
            raise
        finally:
            for fd in (cmd_r, reply_w, log_fd):
                os.close(fd)
            if theirs is not None:
                theirs.close()
        if ours is not None:
            self.references.attach(ours)  # served until this referee's end closes (it exits or is killed)
        self._cmd_fd, self._reply_fd = cmd_w, reply_r
        os.set_blocking(self._reply_fd, False)
        self._buffer.clear()
        self._ready = False
        self.starts += 1

    def _environment(self) -> dict[str, str]:
        """The evaluator's own environment (the referee is trusted and runs as the evaluator), on the
        worker's GPU only, and able to import this cudaperf."""
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        python_path = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p)
        return {**os.environ, "CUDA_VISIBLE_DEVICES": "" if self.device is None else str(self.device),
                "PYTHONPATH": python_path, **thread_settings(self.cpu_threads)}

    def wait_ready(self, deadline: float) -> str:
        """'' once the referee is ready, else why not (it is then stopped)."""
        if self._ready:
            return ""
        reply, error = self._read_reply(deadline)
        if error or reply.get("type") != "ready":
            self.close_process()
            return error or f"an unexpected first message {str(reply)[:200]}"
        self._ready = True
        return ""

    def send(self, message: dict[str, Any], deadline: float) -> str:
        """Write one message ('' or why it failed); waits for readiness first."""
        error = self.wait_ready(deadline)
        if error:
            return error
        data = encode_message(message)
        os.set_blocking(self._cmd_fd, False)
        view = memoryview(data)
        with selectors.DefaultSelector() as sel:
            sel.register(self._cmd_fd, selectors.EVENT_WRITE)
            while view:
                if time.monotonic() > deadline or not self.alive:
                    return "the referee did not take the message in time" if self.alive else self._died()
                if not sel.select(0.1):
                    continue
                try:
                    view = view[os.write(self._cmd_fd, view):]
                except BlockingIOError:
                    continue
                except OSError:
                    return self._died()
        return ""

    def request(self, message: dict[str, Any], deadline: float) -> tuple[dict[str, Any], str]:
        """Send one message and read its reply: (reply, '') or ({}, why not)."""
        error = self.send(message, deadline)
        if error:
            return {}, error
        return self._read_reply(deadline)

    def _read_reply(self, deadline: float) -> tuple[dict[str, Any], str]:
        import json

        with selectors.DefaultSelector() as sel:
            sel.register(self._reply_fd, selectors.EVENT_READ)
            while True:
                if len(self._buffer) >= HEADER.size:
                    (size,) = HEADER.unpack_from(self._buffer)
                    if len(self._buffer) >= HEADER.size + size:
                        body = bytes(self._buffer[HEADER.size:HEADER.size + size])
                        del self._buffer[:HEADER.size + size]
                        return json.loads(body), ""
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return {}, "the referee did not answer in time"
                sel.select(min(remaining, 0.5))
                try:
                    chunk = os.read(self._reply_fd, 1 << 20)
                except BlockingIOError:
                    if not self.alive:
                        return {}, self._died()
                    continue
                if not chunk:
                    return {}, self._died()
                self._buffer += chunk

    def _died(self) -> str:
        code = self._proc.poll() if self._proc is not None else None
        return f"the referee died (exit status {code}): {self.log_tail()[-1500:]}"

    def log_tail(self, max_bytes: int = 4096) -> str:
        if not self._dir:
            return ""
        try:
            with open(os.path.join(self._dir, "referee.log"), "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - max_bytes))
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def zero_region(self) -> None:
        """Overwrite what this job's outputs left in the region: the next job's candidate, in the same
        worker, must not find an earlier candidate's outputs there."""
        if self.used_bytes:
            os.pwrite(self.region_fd, bytes(self.used_bytes), 0)
            self.used_bytes = 0

    def close_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=self.kill_wait_s)
        for fd in (self._cmd_fd, self._reply_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._cmd_fd = self._reply_fd = -1
        if self._dir:
            import shutil

            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._ready = False

    def close(self) -> None:
        self.close_process()
        if self.region_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.region_fd)
            self.region_fd = -1


def create_region_fd(size_bytes: int) -> int:
    """A memfd of exactly `size_bytes`, sealed so that nobody can shrink or grow it (a shrunk file would
    fault the reader's mapping) nor remove the seals (`outputs.Region` maps it)."""
    fd = os.memfd_create("cudaperf-outputs", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    os.ftruncate(fd, size_bytes)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd


def engages(job: dict[str, Any]) -> bool:
    """Whether a job is an evaluation the referee judges: the default handler on a task, or a job that
    asks for it (`"referee": True`, test handlers standing in for a worker's session)."""
    asked = job.get("referee") is True or "handler" not in job
    return asked and isinstance(job.get("task"), dict)


MAX_PARTS = 4096  # outputs (or chunks) in one shipping message
_PART_FIELDS = ("key", "spec", "mutated", "start", "nbytes", "offset")
# The worker's account of filling the region, passed on as instrumentation (`Shipper._filled`).
_FILL_FIELDS = {"fill_bytes": (int,), "fill_ms": (int, float), "pin": (str,)}


def forwardable(message: Any) -> dict[str, Any] | None:
    """What of a worker's shipping message the parent passes on: `output` (its parts' known fields),
    `failed` (a key) or `done`; None for anything else (a forged message)."""
    kind = message.get("type") if isinstance(message, dict) else None
    if kind in ("done", "sync"):
        return {"type": kind}
    if kind == "failed":
        return {"type": "failed", "key": message.get("key")}
    parts = message.get("parts") if kind in ("output", "timed") else None
    if not isinstance(parts, list) or not parts or len(parts) > MAX_PARTS or not all(
            isinstance(p, dict) for p in parts):
        return None
    body = {"type": kind, "parts": [{k: p[k] for k in _PART_FIELDS if k in p} for p in parts]}
    fill = {k: message[k] for k in _FILL_FIELDS if type(message.get(k)) in _FILL_FIELDS[k]}
    if "pin" in fill:
        fill["pin"] = fill["pin"][:300]
    return {**body, **fill}


def region_used(message: dict[str, Any]) -> int:
    """The end of the region a forwarded `output` message's parts occupy (for zeroing after the job)."""
    ends = [p.get("offset", 0) + p.get("nbytes", 0) for p in message.get("parts") or ()
            if type(p.get("offset", 0)) is int and type(p.get("nbytes", 0)) is int]
    return max(ends, default=0)


def apply_verdict(payload: dict[str, Any], verdict: dict[str, Any]) -> dict[str, Any]:
    """The worker's payload with the referee's verdict in it: its correctness replaces the worker's
    claim, its flags join the worker's (the worker's speed-of-light flags and dropped configurations give
    way to the referee's), the timings take its speed-of-light figures; a referee that failed makes a
    payload that let correctness decide a HARNESS_ERROR. The payload's own outcome is set aside (None:
    the referee's correctness decides) where it is "correct" or "incorrect" (never the worker's code) or
    a harness error or skip beside an output the referee judged wrong."""
    out = dict(payload)
    if out.get("outcome") in RAN_OUTCOMES:  # never the worker's own code (RefereeJob.finish's mismatch)
        out["outcome"] = None  # the referee's correctness decides
    judged = verdict.get("correctness") or []
    judged_wrong = any(isinstance(c, dict) and c.get("correct") is False for c in judged)
    if out.get("outcome") in ("harness_error", "skipped") and judged_wrong:
        out["outcome"] = None  # the referee judged every output and found one wrong: the candidate's doing
    if verdict.get("error"):
        if out.get("outcome") is None:
            out.update(outcome="harness_error", message=f"referee: {verdict['error']}"[:4000])
        return out
    if verdict.get("skipped"):  # the device's memory, not the candidate's nor the task's fault
        if out.get("outcome") is None:
            out.update(outcome="skipped", message=f"referee: {verdict['skipped']}"[:4000], correctness=[])
        return out
    if "correctness" in verdict:
        out["correctness"] = verdict["correctness"]
    sol = verdict.get("sol") or {}

    def replaced(flag: Any) -> bool:  # the worker's flags on what the referee decides itself
        code = flag.get("code") if isinstance(flag, dict) else None
        return (code in SOL_CODES and flag.get("config") in sol) or (code == "derived_config_dropped"
                                                                     and "dropped" in verdict)

    flags = [f for f in out.get("flags") or [] if not replaced(f)]
    seen, merged = set(), []
    for flag in [*flags, *(verdict.get("flags") or [])]:
        key = (flag.get("code"), flag.get("config"), flag.get("message")) if isinstance(flag, dict) else None
        if key not in seen:
            seen.add(key)
            merged.append(flag)
    out["flags"] = merged
    timings = []
    for timing in out.get("timings") or []:
        figures = sol.get(timing.get("config")) if isinstance(timing, dict) else None
        if figures:
            timing = {**timing, "speed_of_light_ms": figures.get("floor_ms"),
                      "bytes_moved": figures.get("bytes_moved"), "flops": figures.get("flops")}
        timings.append(timing)
    out["timings"] = timings
    return out


def readable(payload: dict[str, Any], verdict: dict[str, Any], stage: str) -> dict[str, Any]:
    """`payload` when it parses as an `EvalPayload`; else (the worker's own code never sends one that does
    not) a payload with the referee's verdict alone and `verdict_mismatch`, which `verdict` then carries
    too (so the worker is replaced)."""
    from cudaperf.jobs import read_payload

    if read_payload(payload).stage != "payload" or verdict.get("error"):
        return payload
    flag = {"code": MISMATCH, "message": "the worker's payload does not parse: it was not written by its own "
            "code", "severity": "error", "config": None}
    verdict.setdefault("flags", []).append(flag)
    return {"outcome": None, "stage": stage, "message": "", "correctness": verdict.get("correctness") or [],
            "flags": list(verdict["flags"])}


def mismatched(verdict: dict[str, Any]) -> bool:
    """Whether the verdict says the worker's report was contradicted (the worker is then replaced)."""
    return any(isinstance(f, dict) and f.get("code") == MISMATCH and f.get("severity") == "error"
               for f in verdict.get("flags") or [])


# --------------------------------------------------------------------------------------------------
# The process


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="cudaperf.execute.referee")
    for name in ("--cmd-fd", "--reply-fd", "--region-fd", "--region-bytes", "--parent-pid"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--store-fd", type=int, default=-1)  # the pool's shared C references, if any
    args = parser.parse_args(argv)
    from cudaperf.execute import guards

    guards.set_process_flags(parent_death_signal=True)  # spawned from the pool's long-lived thread
    guards.watch_parent(args.parent_pid)
    shared = shared_references.Client.from_fd(args.store_fd) if args.store_fd >= 0 else None
    referee = Referee.start(args.region_fd, args.region_bytes, shared)
    _send(args.reply_fd, {"type": "ready", "pid": os.getpid()})
    while True:
        message = read_message(args.cmd_fd)
        if message is None:
            os._exit(0)
        reply = referee.handle(message)
        if reply is not None:
            _send(args.reply_fd, reply)
        if referee.poisoned:
            os._exit(3)  # the parent starts a fresh referee: this CUDA context is gone


def _send(fd: int, message: dict[str, Any]) -> None:
    try:
        write_all(fd, encode_message(message))
    except OSError:
        os._exit(70)


class Referee:
    """The referee's state: the region, the reference stores (kept across jobs) and the current job.
    `shared`: the pool's store of C references (`shared_references.Client`), consulted on a miss of
    `c_store`; None: this referee computes every C reference it needs."""

    def __init__(self, region: Any, device: Any, shared: Any = None):
        from cudaperf.execute.judge import ReferenceStore, Spent
        from cudaperf.execute.torch_judge import cache_budget

        self.region, self.device = region, device
        self.torch_store = ReferenceStore(lambda: cache_budget(device), fingerprinted=False)
        self.c_store = ReferenceStore(lambda: 4 << 30, fingerprinted=False)
        self.shared = shared
        self.job: RefereeJob | None = None
        self.poisoned = False
        self.spent = Spent()  # this job's time per message kind and per part (`referee_ms` at finish)
        self.figures: dict[str, float] = {}  # this job's bytes moved and rates (`RefereeJob.figures`)

    @classmethod
    def start(cls, region_fd: int, region_bytes: int, shared: Any = None) -> Referee:
        """Load torch and create the CUDA context (when there is a GPU) before reporting ready."""
        import torch

        from cudaperf.execute.outputs import Region
        from cudaperf.execute.session import preload_lazy_modules

        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
            torch.ones(1, device=device).add_(1)
            torch.cuda.synchronize()
        preload_lazy_modules()
        region = Region(region_fd, region_bytes)
        if device.type == "cuda":
            region.pin()  # or pageable copies, with why in `pin_note` (each verdict's "region")
        else:
            region.pin_note = "a CPU referee: its copies are memcpy"
        return cls(region, device, shared)

    def handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """One message from the parent to its reply (None: no reply). Never raises. The time it takes
        goes to `spent` under its kind; the `finish` reply carries the job's (`referee_ms`)."""
        from cudaperf.execute.judge import Spent

        kind = message.get("type")
        if kind == "job":
            self.spent, self.figures = Spent(), {}
        start = time.perf_counter()
        reply = self._handle(kind, message)
        self.spent.add(str(kind)[:32], time.perf_counter() - start)
        if isinstance(reply, dict) and reply.get("type") == "verdict":
            reply["referee_ms"] = {**self.spent.rounded(), **self.figures}
        return reply

    def _handle(self, kind: Any, message: dict[str, Any]) -> dict[str, Any] | None:
        try:
            if kind == "job":  # the last job's finish or end left at most RELEASE_ABOVE_BYTES cached
                self.job = None
                self.job = RefereeJob(self, message.get("job") or {})
                return None
            if kind == "end":
                self.job = None
                self._release(above_bytes=RELEASE_ABOVE_BYTES)
                return None
            if self.job is None:
                return {"type": "error", "error": f"a {kind!r} message outside a job"}
            if kind == "output":
                return {"type": "ack", **self.job.output(message.get("parts") or [], message)}
            if kind == "timed":  # after a configuration's bench, the worker waiting: never during one
                return {"type": "ack", **self.job.timed_outputs(message.get("parts") or [], message)}
            if kind == "failed":
                return {"type": "ack", **self.job.failed(message.get("key"))}
            if kind == "done":
                return {"type": "ack", **self.job.done()}
            if kind == "sync":  # answered once the job's references exist (see Shipper.sync)
                self.job.prepare_references()
                return {"type": "ack", "references": self.job.reference_sizes()}
            if kind == "finish":
                reply = {"type": "verdict", **self.job.finish(message)}
                self.figures = self.job.figures()
                reply["region"] = {"referee": self.region.pin_note,
                                   "worker": self.job.worker_pin or "not said"}
                self.job = None
                self._release(above_bytes=RELEASE_ABOVE_BYTES)
                return reply
            return {"type": "error", "error": f"an unknown message type {kind!r}"}
        except Exception as exc:  # noqa: BLE001 - ours: a HARNESS_ERROR for this job, the loop goes on
            self.job = None
            return {"type": "verdict" if kind == "finish" else "error", "error": _describe(exc)}
        finally:
            if kind in ("job", "sync", "timed", "failed", "done"):  # where the task's code ran on the device
                self._check_context()
            if kind in ("job", "sync", "output", "timed", "failed", "done") and not self.poisoned:
                self._release(above_bytes=RELEASE_ABOVE_BYTES)

    def _release(self, above_bytes: int = 0) -> None:
        """Give the allocator's cached blocks back to the driver when they exceed `above_bytes` (the
        worker beside us plans its memory from what the driver reports free, and a block cached here is
        lost to it); the stored references stay. After the references of a job (their clones, the
        determinism re-run and evicted entries are cached otherwise), after each judged output (the
        assembled tensors and the comparison's blocks) and at the end of the job."""
        import torch

        if self.device.type != "cuda":
            return
        with self.spent("release"):
            idle = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
            if idle > above_bytes:
                torch.cuda.empty_cache()

    def make_room(self, needed_bytes: int, own: Callable[[Any], bool]) -> int:
        """Give back stored references of other tasks (`own(key)` False), least recently used first,
        until the driver's free bytes reach `needed_bytes` (`memory_plan.to_evict`), and the cache with
        them; the bytes given back. References kept for later jobs give way to the job at hand; nothing
        is given back when the driver has the bytes free already."""
        import torch

        from cudaperf.execute.memory_plan import to_evict

        if self.device.type != "cuda":
            return 0
        free, _ = torch.cuda.mem_get_info(self.device)
        if free >= needed_bytes:  # the job fits already: no synchronising cudaFree, no fresh allocations
            return 0
        self._release()
        free, _ = torch.cuda.mem_get_info(self.device)
        sizes = self.torch_store.sizes()
        keys = to_evict([(k, nbytes, own(k)) for k, nbytes in sizes], free, needed_bytes)
        given = self.torch_store.evict(keys)
        if keys:
            self._release()
        return given

    def _check_context(self) -> None:
        from cudaperf.execute.device_state import context_alive

        if self.device.type != "cuda":
            return
        with self.spent("context"):
            self.poisoned = self.poisoned or not context_alive(self.device)


class RefereeJob:
    """One job on the referee's side: the judge, the outputs being assembled, what went wrong and whose
    fault it is (`harness`: the task's or cudaperf's; `forged`: announcements no honest worker sends)."""

    def __init__(self, referee: Referee, wire_job: dict[str, Any]):
        self.referee = referee
        self.harness = ""
        self.forged: list[str] = []
        self.assembling: dict[Any, Any] = {}
        self.meta: dict[Any, str] = {}
        self.shipped_done = False
        self.verdict = None
        self.judge = None
        self.policy: Any = None
        self.timed: tuple[str, ...] = ()
        self.kind: Any = None  # the task's kind and the job's timing: what the go-ahead may narrow
        self.timing: Any = None
        # timing's re-checked outputs: per (configuration, function), [(input set, re-check, comparison)]
        self.timed_results: dict[tuple[str, str], list[tuple[int, Any]]] = {}
        self.timed_received: set[Any] = set()
        self.memory = ""  # why the job's references do not fit on the device (SKIPPED, not HARNESS_ERROR)
        self.prepared = False
        from cudaperf.execute.outputs import Moved

        self.assembled, self.judged, self.timed_judged, self.filled = Moved(), Moved(), Moved(), Moved()
        self.worker_pin = ""  # the worker's region: "pinned" or why not (its word)
        try:
            self.judge = self._make_judge(wire_job)
            self.judge.spent = referee.spent
            if not self.on_device:
                self.prepare_references()
        except Exception as exc:  # noqa: BLE001 - the task, its reference or the job failed: not the candidate
            self.harness = _describe(exc)

    @property
    def on_device(self) -> bool:
        """Whether the references live on the shared device (PyTorch tasks; C ones are host arrays)."""
        from cudaperf.execute.torch_judge import TorchJudge

        return isinstance(self.judge, TorchJudge)

    def prepare_references(self) -> None:
        """Every reference of the job, once: for PyTorch tasks when the worker's sync arrives (the worker
        has given back its own cache for other tasks by then), after room is made for the job in the
        store (`TorchJudge.room_bytes`); C tasks at once. A reference out of device memory even after
        that: SKIPPED with why; any other failure of a declared configuration: HARNESS_ERROR."""
        if self.prepared or self.judge is None or self.harness:
            return
        self.prepared = True
        if self.on_device and self.referee.device.type == "cuda":
            with self.referee.spent("room"):
                self.referee.make_room(self.judge.room_bytes(), self.judge.own_key)
        self._guarded(self.judge.prepare)

    def _make_judge(self, wire_job: dict[str, Any]) -> Any:
        from cudaperf.correctness import derive_seed
        from cudaperf.jobs import read_job
        from cudaperf.tasks import timed_configs
        from cudaperf.types import TaskKind

        job, secret = read_job(dict(wire_job))
        seeds = tuple(derive_seed(s, secret) for s in job.seeds)
        # the unseen input sets' after the rotated ones: a timed output's index `timing.input_sets + j`
        timing_seeds = tuple(derive_seed(s, secret) for s in job.timing_seeds() + job.unseen_seeds())
        del secret
        referee = self.referee
        self.policy, self.kind, self.timing = job.policy, job.task.kind, job.timing
        # the configurations whose timings may come back (and whose speed-of-light floors are needed)
        self.timed = timed_configs(job.task) if job.timing.enabled else ()
        if job.task.kind is TaskKind.C:
            from cudaperf.execute.c_judge import CJudge
            from cudaperf.tasks.ctask import from_task, validate

            ctask = from_task(job.task)
            problems = validate(ctask)
            if problems:
                raise ValueError(f"the C task {ctask.task_id} is malformed: " + "; ".join(problems))
            return CJudge(job, seeds, referee.device, referee.c_store, ctask, referee.shared)
        import torch

        from cudaperf.execute.session import set_precision
        from cudaperf.execute.torch_judge import TorchJudge

        set_precision(job.task.allow_tf32)
        torch.set_grad_enabled(False)
        judge: Any = None

        def make_room() -> None:  # a reference ran out of memory: every other task's references go
            referee.make_room(1 << 62, judge.own_key)

        judge = TorchJudge(job, seeds, referee.device, referee.torch_store, check_determinism=True,
                           after_compute=lambda: referee._release(above_bytes=RELEASE_ABOVE_BYTES),
                           make_room=make_room, timing_seeds=timing_seeds)
        return judge

    def reference_sizes(self) -> dict[str, Any]:
        """What the worker plans its memory from (`TorchJudge.reference_sizes`); {} for C tasks or when
        the references failed (the worker then measures one itself, and the verdict says why)."""
        if not self.on_device or self.harness or self.memory:
            return {}
        return self.judge.reference_sizes()

    def output(self, parts: list[dict[str, Any]], message: Any = None) -> dict[str, Any]:
        """One announcement: outputs (or chunks of one) in the region, each judged once whole."""
        from cudaperf.execute.outputs import Key

        return self._announced(Key.parse, parts, message or {})

    def timed_outputs(self, parts: list[dict[str, Any]], message: Any = None) -> dict[str, Any]:
        """Outputs the worker's timing stage re-checked (`outputs.TimedOutputs`), each judged once whole
        against the first seed's model on its input set (`TorchJudge.check_timed`)."""
        from cudaperf.execute.outputs import TimedKey

        return self._announced(TimedKey.parse, parts, message or {})

    def _announced(self, parse: Callable[[Any], Any], parts: list[dict[str, Any]],
                   message: dict[str, Any]) -> dict[str, Any]:
        """Every part's bytes out of the region first (asynchronous copies from a pinned region), one
        synchronise, then the outputs made whole judged: the answer, which lets the worker overwrite the
        region, leaves only after every copy has landed."""
        from cudaperf.execute.outputs import settle_device

        self._worker_filled(message)
        whole: list[tuple[Any, Any]] = []
        copied = [0, 0.0]  # bytes out of the region, seconds copying them (settling included)
        for part in parts:
            if self.harness or self.forged or self.memory:
                break
            self._guarded(lambda part=part: self._take(parse(part.get("key")), part, whole, copied))
        began = time.perf_counter()
        with self.referee.spent("assemble"):
            self._guarded(lambda: settle_device(self.referee.device))
        self.assembled.add(int(copied[0]), copied[1] + time.perf_counter() - began)
        for key, assembler in whole:
            if self.harness or self.memory:
                break
            self._guarded(lambda key=key, assembler=assembler: self._judge(key, assembler))
        return {}

    def _worker_filled(self, message: dict[str, Any]) -> None:
        """The worker's own account of filling the region (its word, instrumentation only)."""
        nbytes, ms = message.get("fill_bytes"), message.get("fill_ms")
        if type(nbytes) is int and type(ms) in (int, float) and nbytes >= 0 and 0 <= ms < 1e9:
            self.filled.add(nbytes, ms / 1e3)
        if isinstance(message.get("pin"), str):
            self.worker_pin = message["pin"][:300]

    def figures(self) -> dict[str, float]:
        """Bytes moved and judged per job and their rates (`referee_ms`, beside the milliseconds):
        `assemble_*` (region to the referee's tensors, both message kinds: the copies and their settling,
        as `assemble`), `compare_*` (correctness outputs, output and inputs after, over the time judging
        them: the comparison, the input check and, at a configuration's last output, the degenerate
        checks), `timed_compare_*` (re-checked timing outputs against the model's), `worker_fill_*` (the
        worker's account of filling the region), and whether each side's mapping is pinned (1 or 0)."""
        return {**self.assembled.figures("assemble"), **self.judged.figures("compare"),
                **self.timed_judged.figures("timed_compare"), **self.filled.figures("worker_fill"),
                "referee_pinned": float(self.referee.region.pinned), "worker_pinned":
                float(self.worker_pin == "pinned")}

    def failed(self, key: Any) -> dict[str, Any]:
        """The candidate raised on `key`: whether the reference runs there (a derived configuration whose
        reference fails too is dropped, not blamed on the candidate)."""
        from cudaperf.execute.outputs import Key

        answer: dict[str, Any] = {}

        def ask() -> None:
            parsed = Key.parse(key)
            ok, why = self.judge.reference_ok(parsed.config)
            answer.update(reference_ok=ok, why=why[:2000])

        if not self.harness and not self.memory:
            self._guarded(ask)
        return answer

    def _guarded(self, step: Callable[[], None]) -> None:
        """Run `step`, filing what goes wrong under the party at fault."""
        from cudaperf.execute.judge import ReferenceFailed
        from cudaperf.execute.outputs import Malformed
        from cudaperf.execute.torch_judge import ReferenceOutOfMemory

        try:
            step()
        except Malformed as bad:
            self.forged.append(str(bad)[:500])
        except ReferenceOutOfMemory as oom:
            self.memory = str(oom)[:4000]
        except ReferenceFailed as failed:
            self.harness = str(failed)[:4000]
        except Exception as exc:  # noqa: BLE001 - our own fault while judging: the verdict cannot stand
            self.harness = _describe(exc)

    def _take(self, key: Any, message: dict[str, Any], whole: list[tuple[Any, Any]],
              copied: list) -> None:
        """A part's bytes into its output's tensors (their count and the seconds copying them added to
        `copied`); (key, assembler) appended to `whole` when the output is complete."""
        from cudaperf.execute.outputs import Assembler, Key, Malformed, TimedKey

        timed = isinstance(key, TimedKey)
        if key not in self.assembling:
            self.check_timed_key(key) if timed else self.judge.check_key(key)
            spec = message.get("spec")
            pair = isinstance(spec, dict) and spec.get("t") == "tuple" and len(spec.get("items") or ()) == 2
            if not pair:
                raise Malformed(f"an output item that is not (output, inputs after): {str(spec)[:200]}")
            limit = self._limit(Key(key.config, 0, 1) if timed else key)
            self.assembling[key] = Assembler(spec, self.referee.device, limit)
            self.meta[key] = str(message.get("mutated") or "")
        assembler = self.assembling[key]
        before, began = assembler.copied, time.perf_counter()
        with self.referee.spent("assemble"):
            complete = assembler.take(self.referee.region, message.get("start"), message.get("nbytes"),
                                      message.get("offset", 0))
        copied[0] += assembler.copied - before
        copied[1] += time.perf_counter() - began
        if complete:
            del self.assembling[key]
            whole.append((key, assembler))

    def _judge(self, key: Any, assembler: Any) -> None:
        """A whole output (its copies settled) judged: against the references, or a timed one against
        the first seed's model on its input set."""
        from cudaperf.execute.outputs import TimedKey

        output, inputs_after = assembler.value()
        item = {"output": output, "inputs_after": inputs_after, "mutated": self.meta.pop(key)}
        began = time.perf_counter()
        if isinstance(key, TimedKey):
            try:
                result = self.judge.check_timed(key.config, key.input_set, output)
            finally:
                self.timed_judged.add(assembler.total, time.perf_counter() - began)
            self.timed_results.setdefault((key.config, key.function), []).append(
                (key.input_set, key.recheck, result))
        else:
            try:
                self.judge.add(key, item)
            finally:
                self.judged.add(assembler.total, time.perf_counter() - began)

    def check_timed_key(self, key: Any) -> None:
        """A re-checked timing output the worker's code can send: after `done` on a job that times, of a
        timed configuration that was not dropped, an input set of the job, once per re-check index; a
        later one (`recheck` > 0: an output that was not bit for bit the first on its set) only of the
        candidate, after that set's first, and at most `outputs.KEPT_RECHECKS` of them per set; never of
        a C job (its worker re-checks its timing outputs itself and ships none, and `CJudge` has no model
        to judge them by: such a message is a forgery, not a fault of the harness)."""
        from cudaperf.execute.outputs import KEPT_RECHECKS, Malformed, TimedKey

        if not self.on_device:
            raise Malformed(f"a timed output in a C job, whose worker ships none: {str(key)[:200]}")
        if not self.shipped_done or key.config not in self.timed or key.function not in TIMED_FUNCTIONS:
            raise Malformed(f"a timed output the job does not have: {str(key)[:200]}")
        if not 0 <= key.input_set < len(self.judge.timing_seeds) or key in self.timed_received:
            raise Malformed(f"a timed output outside the job's input sets, or sent twice: {str(key)[:200]}")
        if key.config in self.judge.dropped:
            raise Malformed(f"a timed output of a dropped configuration: {key.config[:100]!r}")
        if key.recheck < 0:
            raise Malformed(f"a timed output with a negative re-check index: {str(key)[:200]}")
        if key.recheck > 0:  # the worker keeps later outputs of the candidate only
            first = TimedKey(key.config, key.input_set, key.function, 0)
            later = sum(k.recheck > 0 and (k.config, k.input_set, k.function) == (
                key.config, key.input_set, key.function) for k in self.timed_received)
            if key.function != CANDIDATE or first not in self.timed_received or later >= KEPT_RECHECKS:
                raise Malformed(f"a later timed output of a baseline, before its set's first, or more than "
                                f"{KEPT_RECHECKS} of them on one set: {str(key)[:200]}")
        self.timed_received.add(key)

    def _limit(self, key: Any) -> int:
        """The most bytes an output of `key` can hold and still be right (the reference's outputs and
        inputs, plus room for small structure): larger ones are counted, not stored."""
        from cudaperf.execute.judge import ReferenceFailed

        try:
            return self.judge.output_limit(key) + (1 << 20)
        except ReferenceFailed:
            if self.judge.is_derived(key.config):
                return 0  # dropped: its outputs are not judged
            raise

    def done(self) -> dict[str, Any]:
        """Every output is shipped: the speed-of-light figures (now, with the worker waiting and the GPU
        otherwise idle) and the verdict; `proceed` tells the worker whether timing is worth it."""
        self.shipped_done = True
        if not self.harness and not self.memory:
            try:
                if self.timed and hasattr(self.judge, "prepare_sol"):
                    self.judge.prepare_sol(self.timed)
                self.verdict = self.judge.verdict()
            except Exception as exc:  # noqa: BLE001 - ours or the task's: the verdict cannot stand
                self.harness = _describe(exc)
        ok = (not self.harness and not self.memory and not self.forged and self.verdict is not None
              and self.verdict.all_correct)
        return {"proceed": ok}

    def finish(self, message: dict[str, Any]) -> dict[str, Any]:
        """The verdict against what the worker reported (see the module docstring)."""
        from cudaperf.types import to_dict

        if self.harness:
            return {"error": self.harness}
        if self.memory:
            return {"skipped": f"the references do not fit on the device: {self.memory}"}
        if self.verdict is None:
            if message.get("outcome") is not None and message.get("outcome") not in RAN_OUTCOMES:
                return {}  # the worker stopped on a fault before correctness decided: nothing to judge
            self.verdict = self.judge.verdict()
        flags = (list(self.verdict.flags) + self._timed_flags() + self._mismatches(message)
                 + self._speed_flags(message))
        return {"correctness": [to_dict(c) for c in self.verdict.correctness],
                "flags": [to_dict(f) for f in flags], "sol": self.verdict.sol,
                "dropped": list(self.verdict.dropped)}

    def _mismatches(self, message: dict[str, Any]) -> list[Any]:
        from cudaperf.types import Flag, Severity

        flags = []

        def mismatch(text: str, config: str | None = None, severity: Severity = Severity.ERROR) -> None:
            flags.append(Flag(MISMATCH, text[:1000], severity, config))

        if self.forged:
            mismatch(f"the worker's announcements were not what its own code sends: {self.forged[0]}")
        outcome = message.get("outcome")
        if outcome in RAN_OUTCOMES:
            mismatch(f"the worker's payload decides its own outcome ({outcome!r}); its code leaves it to the "
                     "correctness verdict")
        if not self.shipped_done and (outcome is None or outcome in RAN_OUTCOMES):
            mismatch("the worker reports a correctness verdict, but never shipped all its outputs to the "
                     "referee")
        claims = message.get("claim")
        if claims:  # the worker's code judges nothing when refereed: any claim was written by other code
            mismatch(f"the worker's payload carries a correctness verdict of its own ({str(claims)[:300]}); "
                     "its code never writes one when a referee judges")
        shipped = {c for c, f in self.timed_results if f == CANDIDATE}
        checked = self.timed_checked()
        reported: set[str] = set()
        for timing in _dicts(message.get("timings")):
            config = timing.get("config")
            if not isinstance(config, str) or config not in self.timed or config in reported:
                mismatch(f"the worker reports timings of {str(config)[:100]!r}, a configuration the job does "
                         "not time or one it reported already")  # out of the speed-of-light check's sight
                continue
            reported.add(config)
            if config in checked and config not in shipped:
                mismatch(f"the worker reports timings of {str(config)[:100]} but never shipped the outputs "
                         "its timing stage re-checked", str(config)[:100])
        unasked = sorted(self._baselines_reported(message) - self._baselines_timed(message.get("timing")))
        if unasked:
            mismatch(f"the worker reports timings or re-checked outputs of {', '.join(unasked)[:200]}, "
                     "baselines its timing (as the go-ahead narrowed it) does not time")
        if message.get("timings") and message.get("asked_to_time") is False:
            mismatch("the worker reports timings but never said it was ready to time (its own code asks for "
                     "its turn on the GPU first)")
        wall_ms = 1e3 * float(message.get("timing_wall_s") or 0.0)
        timed_ms = _timed_ms(_dicts(message.get("timings")))
        if timed_ms > WALL_SLACK * wall_ms + 1.0:
            mismatch(f"the timed calls add up to {timed_ms:.1f} ms (by their counts, means, minimums, "
                     f"medians and samples), more than the {wall_ms:.1f} ms the timing stage can have "
                     "lasted (from the go-ahead to the result)")
        return flags

    def _baselines_timed(self, asked: Any) -> set[str]:
        """The baselines the worker was told to time: the job's timing narrowed by the go-ahead's
        (`jobs.narrowed_timing`, as the worker applies it); a C job's inout restore is timed beside them."""
        from cudaperf.execute.c_session import RESTORE
        from cudaperf.jobs import narrowed_timing, timed_baselines
        from cudaperf.types import TaskKind

        timing = narrowed_timing(self.kind, self.timing, asked)
        restore = {RESTORE} if self.kind is TaskKind.C else set()
        return set(timed_baselines(self.kind, timing.baselines)) | restore

    def _baselines_reported(self, message: dict[str, Any]) -> set[str]:
        """The baselines the worker's timings name (a PyTorch task's `eager` and `compiled` fields, a C
        task's `extra_baselines`) and those whose re-checked timing outputs it shipped."""
        named = {name for t in _dicts(message.get("timings"))
                 for name, field in (("eager", "eager"), ("compile", "compiled")) if t.get(field)}
        named |= {str(b)[:100] for t in _dicts(message.get("timings")) if isinstance(t.get("baselines"), dict)
                  for b in t["baselines"]}
        extra = message.get("extra_baselines")
        named |= {str(b)[:100] for per in (extra.values() if isinstance(extra, dict) else ())
                  if isinstance(per, dict) for b in per}
        return named | {f for _, f in self.timed_results if f != CANDIDATE}

    def timed_checked(self) -> set[str]:
        """Timed configurations whose outputs the worker's timing stage re-checks (and so ships): those
        whose reference leaves its inputs alone (PyTorch tasks; C ones re-check in the worker)."""
        if not self.on_device or self.judge is None:
            return set()
        sizes = self.judge.reference_sizes()
        return {c for c in self.timed if c in sizes and not sizes[c]["in_place"]}

    def _timed_flags(self) -> list[Any]:
        """`timed_output_mismatch` (ERROR, under the job's policy) for a candidate whose re-checked timing
        outputs the referee found wrong; `baseline_output_mismatch` (WARNING) for a baseline's."""
        from cudaperf.anticheat.policy import RULES
        from cudaperf.types import Flag, Severity

        flags = []
        for (config, function), results in sorted(self.timed_results.items()):
            wrong = [(i, n, r) for i, n, r in results if not r.ok]
            if not wrong:
                continue
            input_set, recheck, first = wrong[0]
            which = "its first re-checked output" if recheck == 0 else f"re-checked call {recheck} after it"
            where = f"input set {input_set}, {which}: {first.message}"[:600]
            if function == CANDIDATE:
                code = "timed_output_mismatch"
                if code not in RULES or self.policy.active(code):
                    text = (f"{function}: {len(wrong)} of the {len(results)} re-checked outputs the referee "
                            f"judged were wrong during timing ({where})")
                    flags.append(Flag(code, text, Severity.ERROR, config))
            else:
                text = f"the {function} baseline's outputs failed the referee's re-check {len(wrong)} times"
                flags.append(Flag("baseline_output_mismatch", f"{text} ({where})", Severity.WARNING, config))
        return flags

    def _speed_flags(self, message: dict[str, Any]) -> list[Any]:
        """`sol.speed_flags` on the worker's candidate times against the referee's own floors."""
        from cudaperf.sol import SolEstimate, speed_flags

        flags = []
        for timing in _dicts(message.get("timings")):
            figures = self.verdict.sol.get(timing.get("config"))
            candidate = timing.get("candidate")
            candidate = candidate.get("median_ms") if figures and isinstance(candidate, dict) else None
            if type(candidate) not in (int, float):
                continue
            estimate = SolEstimate(*(figures[k] for k in ("floor_ms", "memory_floor_ms", "compute_floor_ms",
                                                          "bandwidth_gbps", "peak_tflops", "bytes_moved",
                                                          "flops")))
            flags += speed_flags(float(candidate), figures.get("reference_ms"), estimate,
                                 config=timing["config"])
        return flags


def _dicts(value: Any) -> list[dict]:
    """The dicts of a list the worker sent (anything else in it, or instead of it, is ignored)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _timed_ms(timings: list[Any]) -> float:
    """Event-timed milliseconds the worker's figures imply its timed calls took, at the least (`_least_ms`
    of each function's); infinite where a figure is no finite, non-negative number."""
    total = 0.0
    for timing in timings:
        if not isinstance(timing, dict):
            continue
        baselines = timing.get("baselines")
        named = [timing.get("candidate"), timing.get("eager"), timing.get("compiled"),
                 *(baselines.values() if isinstance(baselines, dict) else ())]
        total += sum(_least_ms(t) for t in named if isinstance(t, dict))
    return total


def _least_ms(timing: dict) -> float:
    """The least time one function's samples can add up to, from each of its figures: n x mean, n x min,
    their sum, and half of them (rounded up) at or above the median; samples are never negative. Why
    each: a forged median (the speedups are ratios of medians) or a negative count must not pass the
    bound that the mean alone would."""
    samples = timing.get("samples_ms")
    figures = [timing.get(k) or 0 for k in ("n_samples", "mean_ms", "median_ms", "min_ms")]
    figures += list(samples) if isinstance(samples, (list, tuple)) else []
    if not all(type(v) in (int, float) and math.isfinite(v) and v >= 0 for v in figures):
        return math.inf
    n, mean, median, least = figures[:4]
    return max(n * mean, n * least, math.ceil(n / 2) * median, math.fsum(figures[4:]))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc))[-2000:]}"[:4000]


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # noqa: BLE001 - a start-up error goes to the log the parent tails
        traceback.print_exc()
    os._exit(1)
