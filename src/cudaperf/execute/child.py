"""The sandbox worker's main loop: `python -m cudaperf.execute.child --job-fd N --reply-fd M --root DIR`.

Covers: start-up (network namespace, rlimits, process flags, preloaded modules, audit hook, parent
watchdog, then a "ready" message), and per job: a fresh working directory, the handler call
(`handler(job, report)`, default `cudaperf.execute.dispatch:run_eval_job`), classification of an exception
that escapes the handler (a payload with the verdict fields of `jobs.EvalPayload`), the after-job sweep
(candidate finalizers run inside a candidate scope, leftover processes killed, leftover threads and
tampered harness callables detected, CUDA context checked, environment and sys.path restored, working
directory deleted) and the reply on the private channel, refused when larger than the limit.

Not covered: the evaluation itself (the sessions decide what runs inside `candidate_scope`), and
anything the parent does (deadlines, kills, replacement: sandbox.py). Secrets stay out of this module:
the channel nonce lives only in locals and in the `report` closure, never in module globals, and the job
(which holds the secret until the session pops it) is never printed.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from cudaperf.execute import guards, job_profile
from cudaperf.execute.framing import encode_message, read_message, write_all
from cudaperf.jobs import EvalPayload
from cudaperf.types import Outcome, to_dict

# Text that marks a CUDA error in an exception message (torch, cuda-core, cuda-bindings).
_CUDA_ERROR_MARKERS = (
    "CUDA error", "CUDA_ERROR_", "cudaError", "illegal memory access", "misaligned address",
    "unspecified launch failure", "device-side assert", "an illegal instruction was encountered",
)  # fmt: skip
_EXIT_CHANNEL_BROKEN = 70  # the result fd is gone (closed by candidate code, or the parent died)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="cudaperf.execute.child")
    parser.add_argument("--job-fd", type=int, required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--region-fd", type=int, default=-1)  # the shared output region (referee.py)
    parser.add_argument("--region-bytes", type=int, default=0)
    args = parser.parse_args(argv)
    for fd in (args.job_fd, args.reply_fd, args.region_fd):
        if fd >= 0:
            os.set_inheritable(fd, False)  # programs the harness starts must not hold our channel
    hello = read_message(args.job_fd)
    if not hello or hello.get("type") != "hello":
        os._exit(2)
    ready = _set_up(hello, args)
    _send(args.reply_fd, {"type": "ready", "nonce": hello["nonce"], **ready})
    region = {"fd": args.region_fd, "bytes": args.region_bytes, "map": None}
    _serve(args.job_fd, args.reply_fd, args.root, hello, region)


def _set_up(hello: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Guards first (network before any thread exists), then the preloaded modules, then the hook."""
    limits, cpu = hello["limits"], hello["mode"] == "cpu"
    network = guards.isolate_network() if limits["isolate_network"] else "off"
    applied = guards.apply_limits(
        file_bytes=limits["file_bytes"],
        open_files=limits["open_files"],
        address_space_bytes=limits["address_space_bytes"] if cpu else None,
        data_bytes=limits["data_bytes"],
        processes=limits["processes"],
    )
    uid = hello.get("uid")
    user = guards.drop_privileges(uid, uid) if uid is not None else "unchanged"
    flags = guards.set_process_flags(parent_death_signal=hello["parent_death_signal"])
    sys.dont_write_bytecode = True
    from cudaperf.host_timing import keep_off_timing_cpus

    keep_off_timing_cpus()  # before torch starts threads: they and the candidate's inherit it (serial C)
    started = time.monotonic()
    preload(hello["preload"])
    preload_s = time.monotonic() - started
    gc.freeze()  # see _sweep: the per-job collection then scans only what the job created
    channel = tuple(fd for fd in (args.job_fd, args.reply_fd, args.region_fd) if fd >= 0)
    guards.install_audit_hook(temp_root=args.root, protected_fds=channel)
    guards.watch_parent(hello["parent_pid"])
    return {
        "pid": os.getpid(),
        "network": network,
        "rlimits": applied,
        "process_flags": list(flags),
        "user": user,
        "python": sys.version.split()[0],
        "preload_s": preload_s,
    }


def preload(entries) -> None:
    """Import each entry before any candidate scope exists: "module" is imported; "module:function" is
    also called. (Inside a scope, lazy imports that reach refused modules such as multiprocessing fail.)"""
    for entry in entries:
        module, _, function = entry.partition(":")
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()


def warm_up_cuda() -> None:
    """Load what CUDA Python opens lazily, and create torch's CUDA context, before any candidate scope.

    Why: cuda-bindings finds and dlopens libcuda and libnvrtc through `cuda.pathfinder`, which uses
    ctypes, on the first call into each library; inside a candidate scope ctypes is refused, so a FAST
    solution's first `cudaperf.cuda.compile` would fail there. One call per library here is enough.
    Each step may fail (no driver on a CPU machine): it is reported in the log and start-up goes on.
    """
    steps = (
        _create_torch_context,
        lambda: importlib.import_module("cuda.bindings.nvrtc").nvrtcVersion(),
        lambda: importlib.import_module("cuda.bindings.driver").cuInit(0),
        lambda: importlib.import_module("cuda.core"),
        lambda: importlib.import_module("cudaperf.cuda"),
        lambda: importlib.import_module("cudaperf.toolchain.nvrtc"),
    )
    for step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - no driver on a CPU machine, no cuda-python...: not fatal
            print(f"warm_up_cuda: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)


def _create_torch_context() -> None:
    """GPU mode: create the CUDA context now (~0.5 s), not in the first job's timed stages."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()


def _serve(job_fd: int, reply_fd: int, root: str, hello: dict[str, Any], region: dict[str, Any]) -> None:
    handlers: dict[str, Callable] = {}
    environ, path, registries = dict(os.environ), list(sys.path), guards.process_registries()
    while True:
        message = read_message(job_fd)
        if message is None:  # the parent closed the pipe: we are done
            os._exit(0)
        if message.get("type") != "job":
            continue
        channel = (job_fd, reply_fd, region)
        reply = _run_job(message["job"], message["nonce"], channel, root, hello, handlers)
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        try:
            guards.restore_process_registries(registries)
        except Exception:  # noqa: BLE001, S110 - the reply must still go out (each item is best effort)
            pass
        _send(reply_fd, reply)


def _run_job(job: dict, nonce: str, channel: tuple, root: str, hello: dict, handlers: dict) -> bytes:
    job_fd, reply_fd, region = channel
    started = time.monotonic()
    work = _fresh_workdir(root)
    _truncate_log()
    current = ["setup"]

    def report(stage: str) -> None:
        current[0] = str(stage)
        _send(reply_fd, {"type": "stage", "nonce": nonce, "name": current[0]})

    if job.pop("referee", False) and region["fd"] >= 0:
        _give_output_channel(report, nonce, job_fd, reply_fd, region)

    spec = job.pop("handler", hello["default_handler"])
    threads = guards.python_threads()
    snapshot = guards.integrity_snapshot()
    try:
        handler = handlers.get(spec) or handlers.setdefault(spec, _load_handler(spec))
        if hello.get("profile"):
            payload, stats = job_profile.run_profiled(lambda: handler(job, report))
            _send(reply_fd, {"type": "profile", "nonce": nonce, "stats": stats})
        else:
            payload = handler(job, report)
    except BaseException as exc:  # noqa: BLE001 - every escape is classified, none may kill the loop
        payload = _classify(exc, current[0])
    report("cleanup")
    findings = _sweep(threads, snapshot)
    payload = _blame_held_memory(payload, findings)
    os.chdir(root)
    shutil.rmtree(work, ignore_errors=True)
    _flush_output()
    sandbox = {**findings, "child_s": time.monotonic() - started}
    return _encode_bounded({"type": "result", "nonce": nonce, "payload": payload, "sandbox": sandbox},
                           hello["limits"]["max_reply_bytes"], current[0])  # fmt: skip


def _give_output_channel(report: Callable, nonce: str, job_fd: int, reply_fd: int, region: dict) -> None:
    """Give the handler (as attributes of its `report`, which candidate code cannot reach) the way to ship
    outputs to the referee: `report.exchange(message) -> answer`, one round trip through the parent on the
    job's channel, and `report.region`, the shared region (mapped once per process)."""

    def exchange(message: dict[str, Any]) -> dict[str, Any]:
        _send(reply_fd, {"type": "referee", "nonce": nonce, "message": message})
        answer = read_message(job_fd)
        if answer is None:  # the parent is gone
            os._exit(0)
        if answer.get("type") != "ack":
            raise RuntimeError(f"the parent answered a shipping message with {str(answer)[:200]}")
        return {k: v for k, v in answer.items() if k != "type"}

    if region["map"] is None:
        from cudaperf.execute.outputs import Region

        region["map"] = Region(region["fd"], region["bytes"])
    report.exchange = exchange
    report.region = region["map"]


def _fresh_workdir(root: str) -> str:
    work = os.path.join(root, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.mkdir(work)
    os.chdir(work)
    return work


def _load_handler(spec: str) -> Callable:
    """`package.module:function` or `/path/to/file.py:function` (the escape hatch tests use)."""
    target, _, name = spec.rpartition(":")
    if target.endswith(".py"):
        module_spec = importlib.util.spec_from_file_location(f"cudaperf_handler_{abs(hash(target))}", target)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, name)


def _classify(exc: BaseException, stage: str) -> dict[str, Any]:
    """An exception escaped the handler. The sessions turn candidate exceptions into outcomes themselves,
    so an escaping Exception is most likely the harness's (HARNESS_ERROR), except for the kinds the
    candidate can cause anywhere: memory exhaustion, CUDA errors, and BaseExceptions (SystemExit...)
    that `except Exception` in the harness does not catch.

    The exception may be a candidate-defined class, and this runs outside any candidate scope: nothing
    here may call its methods (`__str__`, a `__class__` or `__traceback__` property...), hence the
    descriptor-level reads and `issubclass(type(exc), ...)` instead of `isinstance`.
    """
    kind, name, text = _exception_text(exc)
    tb = BaseException.__traceback__.__get__(exc)
    frames = "".join(traceback.format_tb(tb))
    sys.stderr.write(f"Traceback (most recent call last):\n{frames}{text}\n")  # into the log the parent tails
    if issubclass(kind, MemoryError) or name == "OutOfMemoryError":
        outcome, poisoned = Outcome.OUT_OF_MEMORY, False
    elif any(marker in text for marker in _CUDA_ERROR_MARKERS):
        outcome, poisoned = Outcome.CUDA_ERROR, True
    elif not issubclass(kind, Exception):
        outcome, poisoned = Outcome.RUNTIME_ERROR, False
    else:
        outcome, poisoned = Outcome.HARNESS_ERROR, False
    return _fault(outcome, stage, text, poisoned)


def _fault(outcome: Outcome, stage: str, message: str, poisoned: bool = False) -> dict[str, Any]:
    """The payload the child sends in place of the handler's: the verdict fields alone."""
    return to_dict(EvalPayload(outcome=outcome, stage=stage, message=message, worker_poisoned=poisoned))


def _exception_text(exc: BaseException) -> tuple[type, str, str]:
    """(real type, its name, "Name: args") without running any code of the exception's class."""
    kind = type(exc)
    type_name = type.__dict__["__name__"].__get__
    name = type_name(kind)
    args = BaseException.args.__get__(exc)
    plain = [str(a) if type(a) in (str, int, float, bool) else f"<{type_name(type(a))}>" for a in args]
    detail = plain[0] if len(plain) == 1 else ", ".join(plain)
    return kind, name, (f"{name}: {detail}"[:2000] if detail else name)


def _sweep(threads: frozenset[int], snapshot: dict) -> dict[str, Any]:
    """What the job left behind. Poisoned = the next job must not run in this process."""
    flags: list[dict[str, str]] = []
    with guards.candidate_scope():
        gc.collect()  # finalizers of candidate objects run here, under the guards
    # What survived (harness caches, lazily imported modules) moves to the permanent generation, so the
    # next job's collection does not rescan it: a full collection with torch loaded costs ~90 ms, this ~ms.
    gc.freeze()
    killed = guards.reap_descendants()
    if killed:
        flags.append(
            _flag("lingering_processes", f"killed {len(killed)} process(es) left running by the job")
        )
    extra = guards.python_threads() - threads
    if extra:
        flags.append(_flag("lingering_threads", f"{len(extra)} Python thread(s) still running after the job"))
    changes = guards.integrity_changes(snapshot)
    flags += [
        _flag(code, text, "error" if code == "harness_tampered" else "warning") for code, text in changes
    ]
    cuda_error = _cuda_error()
    if cuda_error:
        flags.append(_flag("cuda_context_unusable", cuda_error))
    held = guards.address_space_held()
    if held:
        flags.append(_flag("worker_memory_held", held))
    return {
        "flags": flags,
        "poisoned": bool(extra or changes or cuda_error or held),
        "tampered": any(code == "harness_tampered" for code, _ in changes),
    }


def _blame_held_memory(payload: dict[str, Any], findings: dict[str, Any]) -> dict[str, Any]:
    """A HARNESS_ERROR in a job after which the worker still holds most of its address space is the
    candidate's: the memory it kept made the harness's own allocations fail (OUT_OF_MEMORY, which RL
    counts, rather than a harness error, which it leaves out of the loss)."""
    held = any(f["code"] == "worker_memory_held" for f in findings["flags"])
    if not held or payload.get("outcome") != Outcome.HARNESS_ERROR.value:
        return payload
    message = f"the job's own memory held the worker's address space: {payload.get('message', '')}"
    return {**payload, "outcome": Outcome.OUT_OF_MEMORY.value, "message": message[:2000]}


def _flag(code: str, message: str, severity: str = "warning") -> dict[str, str]:
    return {"code": code, "message": message, "severity": severity}


def _cuda_error() -> str:
    """Empty if CUDA was not used or still works; else the error (a sticky error poisons the context).

    Asks torch when it initialised CUDA, and the driver directly for the context current on this thread
    (candidate code may have used cuda-core alone). Both synchronise: a kernel still running (spinning)
    blocks here, in the "cleanup" stage, until the parent's deadline.
    """
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any failure here means the context is unusable
        return f"{type(exc).__name__}: {exc}"[:500]
    driver = sys.modules.get("cuda.bindings.driver")
    try:
        err, context = driver.cuCtxGetCurrent() if driver is not None else (None, 0)
        if err != driver.CUresult.CUDA_SUCCESS or not int(context):
            return ""
        (err,) = driver.cuCtxSynchronize()
    except Exception:  # noqa: BLE001 - no driver library (CPU machine): nothing to check
        return ""
    return "" if err == driver.CUresult.CUDA_SUCCESS else f"cuCtxSynchronize: {err.name}"


def _truncate_log() -> None:
    """Each job's log starts empty (stdout and stderr share one file opened with O_APPEND)."""
    _flush_output()
    try:
        os.ftruncate(1, 0)
    except OSError:
        pass


def _flush_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    try:  # printf from native code sits in libc's buffers
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def _encode_bounded(message: dict[str, Any], max_bytes: int, stage: str) -> bytes:
    """The encoded message, or a small OUTPUT_TOO_LARGE / HARNESS_ERROR reply in its place."""
    try:
        data = encode_message(message)
    except (TypeError, ValueError, RecursionError) as exc:
        text = f"the job's result is not JSON-serialisable: {exc}"[:2000]
        return encode_message({**message, "payload": _fault(Outcome.HARNESS_ERROR, stage, text)})
    if len(data) <= max_bytes:
        return data
    text = f"the job's result is {len(data)} bytes, over the {max_bytes} byte limit"
    return encode_message({**message, "payload": _fault(Outcome.OUTPUT_TOO_LARGE, stage, text)})


def _send(fd: int, message: dict[str, Any] | bytes) -> None:
    try:
        write_all(fd, message if isinstance(message, bytes) else encode_message(message))
    except OSError:
        os._exit(_EXIT_CHANNEL_BROKEN)


if __name__ == "__main__":
    # Never run interpreter shutdown: atexit handlers and finalizers registered by candidate code would
    # run outside any scope. A start-up error goes to the log (stderr), whose tail the parent reports.
    try:
        main()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    _flush_output()
    os._exit(1)
