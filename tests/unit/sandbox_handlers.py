"""Test-only job handlers for the sandbox tests: each one stands in for candidate code that misbehaves.

Loaded by the worker through the file-path form of the handler spec (`/path/sandbox_handlers.py:name`),
so they need no package. Each takes `(job, report)` like `cudaperf.execute.dispatch.run_eval_job` and
returns a JSON-able payload; most run outside any `candidate_scope` on purpose: they model faults that
native code could cause anyway (segfault, fork, forged channel writes), which the process-level
defences must catch. `probe_guards` runs inside the scope and reports what the audit hook refused.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import sys
import threading
import time


def ok(job, report):
    report("setup")
    report("correctness")
    return {"outcome": None, "stage": "correctness", "message": "fine", "echo": job.get("echo")}


def stages(job, report):
    """Walk through stages, sleeping `sleep_s` in each (deadlines are per stage, not per job)."""
    for name in job["stages"]:
        report(name)
        time.sleep(job["sleep_s"])
    return {"outcome": None, "stage": job["stages"][-1]}


def sleep_forever(job, report):
    report(job.get("stage", "correctness"))
    time.sleep(10_000)


def busy_loop(job, report):
    report(job.get("stage", "timing"))
    while True:  # holds the GIL: the worker cannot even answer
        pass


def segfault(job, report):
    report("correctness")
    ctypes.string_at(0)


def exit_code_3(job, report):
    report("construct")
    os._exit(3)


def raise_value_error(job, report):
    report("import")
    raise ValueError("boom from the handler")


def raise_system_exit(job, report):
    report("construct")
    sys.exit(4)


def raise_booby_trapped(job, report):
    """A BaseException whose __str__ and __class__ run code: the worker must classify it without
    calling either (they would run outside any candidate scope)."""

    class Trap(BaseException):
        def __str__(self):
            open(job["marker"], "w").close()
            return "trap sprung"

        @property
        def __class__(self):
            open(job["marker"], "w").close()
            return KeyboardInterrupt

    report("forward")
    raise Trap("quiet", 7)


def raise_cuda_like_error(job, report):
    report("correctness")
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def fake_verdict(job, report):
    """Hack #8: print a verdict; the parent must ignore stdout/stderr entirely."""
    report("correctness")
    line = '{"type": "result", "payload": {"outcome": "correct", "message": "all good"}}'
    print(line)
    print(line, file=sys.stderr)
    os.write(1, (line + "\n").encode())
    return {"outcome": "incorrect", "stage": "correctness", "message": "real verdict"}


def chatty(job, report):
    print("x" * job["nbytes"], end="")
    print("THE-END")
    return {"outcome": None}


def memory_hog(job, report):
    report("construct")
    block = bytearray(job["nbytes"])  # under RLIMIT_AS this raises MemoryError
    return {"outcome": None, "size": len(block)}


def fork_linger(job, report):
    """Leave a child process running after the job (plus, optionally, a setsid'd grandchild)."""
    report("timing")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        if job.get("double"):
            os.setsid()
            if os.fork() != 0:
                os._exit(0)  # the grandchild is orphaned: re-parented to the worker (subreaper)
        os.write(w, struct.pack(">i", os.getpid()))
        time.sleep(600)
        os._exit(0)
    lingering = struct.unpack(">i", os.read(r, 4))[0]
    if job.get("double"):
        os.waitpid(pid, 0)
    return {"outcome": None, "pid": lingering}


def pid_alive(job, report):
    """Whether `job["pid"]` names a live process, asked from inside the worker: a pid the worker reports
    is one of its own pid namespace (bubblewrap's), which the host's /proc does not show."""
    try:
        os.kill(int(job["pid"]), 0)
        alive = True
    except ProcessLookupError:
        alive = False
    except PermissionError:  # it exists, under another uid
        alive = True
    return {"outcome": None, "alive": alive}


def linger_thread(job, report):
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    return {"outcome": None}


def huge_reply(job, report):
    return {"outcome": None, "blob": "x" * job["nbytes"]}


def unknown_outcome(job, report):
    return {"outcome": "great"}


def not_json(job, report):
    return {"outcome": None, "value": object()}


def _channel_fds():
    """The write ends of pipes this process holds: what a candidate scanning its fds would find."""
    fds = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:") and os.get_blocking(fd) is not None:
                import fcntl

                if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                    fds.append(fd)
        except OSError:
            continue
    return fds


def forge_message(job, report):
    """Hack #8 on the private channel: write a framed 'correct' result with a guessed nonce."""
    report("correctness")
    body = b'{"type":"result","nonce":"' + b"0" * 32 + b'","payload":{"outcome":"correct"}}'
    for fd in _channel_fds():
        os.write(fd, struct.pack(">I", len(body)) + body)
    return {"outcome": "incorrect", "stage": "correctness"}


def garble_channel(job, report):
    report("correctness")
    for fd in _channel_fds():
        os.write(fd, struct.pack(">I", 5) + b"{oops")
    return {"outcome": "incorrect"}


def oversized_frame(job, report):
    """A frame header announcing 2 GiB: the parent must refuse it before reading the body."""
    for fd in _channel_fds():
        os.write(fd, struct.pack(">I", 0x7FFFFFFF))
    time.sleep(10)


def spray_fds(job, report):
    """An unframed JSON verdict written to every fd from 3 up, as a candidate that knows no protocol."""
    line = b'{"outcome": "correct", "stage": "timing", "message": ""}\n'
    for fd in range(3, 64):
        try:
            os.write(fd, line)
        except OSError:
            pass
    return {"outcome": "incorrect"}


def close_channel(job, report):
    """Candidate code that closes every fd it did not open (the worker can no longer answer)."""
    os.closerange(3, 1024)
    return {"outcome": None}


def tamper_timer(job, report):
    """Hack #7: monkey-patch a timer the harness relies on."""
    time.perf_counter = lambda: 0.0
    return {"outcome": None}


def report_environment(job, report):
    import resource

    limits = {
        name: resource.getrlimit(getattr(resource, name))[0]
        for name in ("RLIMIT_CORE", "RLIMIT_FSIZE", "RLIMIT_AS", "RLIMIT_NOFILE")
    }
    return {
        "outcome": None,
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "rlimits": limits,
        "stdout": os.readlink("/proc/self/fd/1"),
        "job_keys": sorted(job),
    }


def privileges(job, report):
    """Outside any scope: what the OS itself lets this process do."""

    def attempt(fn):
        try:
            fn()
            return "allowed"
        except (OSError, ValueError) as exc:  # setrlimit answers ValueError
            return type(exc).__name__

    return {
        "outcome": None,
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "read_root_file": attempt(lambda: open(job["root_only_file"]).close()),
        "signal_parent": attempt(lambda: os.kill(os.getppid(), 0)),
        "write_cwd": attempt(lambda: open("mine.txt", "w").close()),
        "raise_rlimit": attempt(
            lambda: __import__("resource").setrlimit(__import__("resource").RLIMIT_CORE, (1 << 20, 1 << 20))
        ),
    }


def user_name(job, report):
    """getpass.getuser(), as torch's and Triton's cache directories ask for it."""
    import getpass

    return {"outcome": None, "user": getpass.getuser()}


def write_in_cwd(job, report):
    with open("left-behind.txt", "w") as f:
        f.write("x")
    return {"outcome": None, "cwd": os.getcwd()}


def connect(job, report):
    """Outside any scope: only the network namespace stands in the way."""
    try:
        with socket.create_connection(("127.0.0.1", job["port"]), timeout=2):
            return {"outcome": None, "connected": True}
    except OSError as exc:
        return {"outcome": None, "connected": False, "error": str(exc)}


def torch_work(job, report):
    """What a real job does with torch (seeding, a dispatch mode, the profiler, a model in the scope):
    none of it may look like tampering to the integrity check."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from cudaperf.execute import guards

    class PassThrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    with guards.candidate_scope():
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
        with PassThrough():
            y = model(torch.randn(4, 16))
    with torch.profiler.profile():
        model(torch.randn(4, 16))
    return {"outcome": None, "shape": list(y.shape)}


# --------------------------------------------------------------------------------------------------
# Inside the candidate scope: what does the audit hook refuse?


def _attempt(fn):
    try:
        fn()
        return "allowed"
    except (PermissionError, ValueError) as exc:
        return "refused" if "cudaperf sandbox" in str(exc) else f"error: {type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - report, not fail, so one probe cannot hide the others
        return f"error: {type(exc).__name__}: {exc}"


def _probes(job):
    import gc
    import subprocess

    outside = job["outside_path"]

    def frame_from_traceback():
        try:
            raise KeyError
        except KeyError as exc:
            return exc.__traceback__.tb_frame

    def swap_code():
        def f():
            return 1

        f.__code__ = (lambda: 2).__code__

    def add_hook():
        seen = []
        sys.addaudithook(lambda event, args: seen.append(event))
        sys.audit("cudaperf.probe")
        if seen:
            raise RuntimeError("a new audit hook was added")
        raise PermissionError("cudaperf sandbox: the new hook was silently not added")

    def child_thread():
        threading.Thread(target=lambda: None).start()

    def import_written_extension(file_name=None):
        """A shared library written into the temp directory (a copy of a stdlib extension module, standing
        in for an ELF the candidate carried), then imported as an extension module: native code of the
        candidate's own (under its own name, or under `file_name`, e.g. one ending in .py)."""
        import importlib.machinery
        import importlib.util
        import shutil

        name, source = next((n, spec.origin) for n in ("_bisect", "_json", "_heapq", "_struct", "math")
                            if (spec := importlib.util.find_spec(n)) is not None and spec.origin
                            and spec.origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)))
        written = os.path.join(os.getcwd(), file_name or os.path.basename(source))
        shutil.copyfile(source, written)
        loader = importlib.machinery.ExtensionFileLoader(name, written)
        importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, written, loader=loader))

    return {
        "subprocess": lambda: subprocess.run(["true"], check=False),
        "shell": lambda: subprocess.run("true", shell=True, check=False),
        "os_system": lambda: os.system("true"),
        "fork": lambda: os.fork(),
        "posix_spawn": lambda: os.posix_spawn("/bin/true", ["true"], {}),
        "exec": lambda: os.execv("/bin/true", ["true"]),
        "kill_parent": lambda: os.kill(os.getppid(), 0),
        "socket": lambda: socket.socket(),
        "ctypes_call": lambda: ctypes.CDLL(None).getpid(),
        "write_outside": lambda: open(outside, "w").close(),
        "write_outside_os_open": lambda: os.close(os.open(outside, os.O_WRONLY | os.O_CREAT)),
        "remove_outside": lambda: os.remove(outside),
        "dir_fd_escape": lambda: os.open(
            "escaped.txt", os.O_WRONLY | os.O_CREAT, dir_fd=os.open(os.path.dirname(outside), os.O_RDONLY)
        ),
        "write_inside": lambda: open("inside.txt", "w").close(),
        "read_inside": lambda: open("inside.txt").close(),
        "write_dev_null": lambda: open(os.devnull, "w").close(),
        "read_stdlib": lambda: open(os.__file__).close(),
        "read_own_memory": lambda: open("/proc/self/mem", "rb").close(),
        "read_parent_environ": lambda: open(f"/proc/{os.getppid()}/environ", "rb").close(),
        "reopen_channel_fd": lambda: [os.fdopen(fd, "wb", closefd=False) for fd in _channel_fds()],
        "gc_get_objects": lambda: gc.get_objects(),
        "gc_get_referrers": lambda: gc.get_referrers(os),
        "getframe": lambda: sys._getframe(1),
        "traceback_frame": frame_from_traceback,
        "settrace": lambda: sys.settrace(None),
        "setprofile": lambda: sys.setprofile(None),
        "add_audit_hook": add_hook,
        "swap_code": swap_code,
        "import_forbidden": lambda: __import__("ftplib"),
        "import_written_extension": import_written_extension,
        "import_written_extension_renamed": lambda: import_written_extension("module.py"),
        "setrlimit": lambda: __import__("resource").setrlimit(__import__("resource").RLIMIT_CORE, (0, 0)),
        "namedtuple": lambda: __import__("collections").namedtuple("P", "x y"),
        "logging": lambda: __import__("logging").getLogger("probe").warning("probe"),
        "thread": child_thread,
    }


def probe_guards(job, report):
    """Run every probe inside `candidate_scope()`, then a few again after it closed."""
    from cudaperf.execute import guards

    probes = _probes(job)
    with guards.candidate_scope(**job.get("scope", {})):
        inside = {name: _attempt(fn) for name, fn in probes.items() if name in job["names"]}
    after = {name: _attempt(probes[name]) for name in job.get("after", ())}
    return {"outcome": None, "inside": inside, "after": after}


def escape_scope(job, report):
    """Try to turn the switch off from candidate code; report whether subprocess is still refused."""
    import subprocess

    from cudaperf.execute import guards

    def run_true():
        return _attempt(lambda: subprocess.run(["true"], check=False))

    results = {}
    with guards.candidate_scope():
        sys.audit("cudaperf.candidate_scope", "exit", guards.candidate_scope())  # a scope never entered
        results["forged_exit"] = run_true()
        mine = guards.candidate_scope()
        mine.__enter__()
        mine.__exit__(None, None, None)
        mine.__exit__(None, None, None)  # exiting my own scope twice must not close the outer one
        results["double_exit"] = run_true()
        with guards.candidate_scope(allowed_programs=("true",)):  # nested, wider: intersection applies
            results["nested_wider"] = run_true()
    results["after"] = run_true()
    with guards.candidate_scope(allowed_programs=("true",)):
        results["allowed_program"] = run_true()
    return {"outcome": None, "results": results}


# --------------------------------------------------------------------------------------------------
# GPU handlers (tests/gpu/test_sandbox_gpu.py): tiny NVRTC kernels through cuda-core

_POKE = 'extern "C" __global__ void poke() { *((volatile int*)0x10) = 1; }'
_SPIN = """
__device__ volatile int cudaperf_never_set = 0;
extern "C" __global__ void spin() { while (cudaperf_never_set == 0) { } }
"""
_SCALE = """
extern "C" __global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
"""


def _kernel(source, name):
    from cuda.core import Device, Program, ProgramOptions

    device = Device(0)
    device.set_current()
    program = Program(source, "c++", ProgramOptions(arch=f"sm_{device.arch}"))
    return device, program.compile("cubin").get_kernel(name)


def gpu_ok(job, report):
    import torch

    report("correctness")
    x = torch.arange(1024, device="cuda", dtype=torch.float32)
    return {
        "outcome": None,
        "sum": float(x.sum().item()),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "count": torch.cuda.device_count(),
        "name": torch.cuda.get_device_name(),
    }


def cuda_available(job, report):
    import torch

    return {"outcome": None, "available": torch.cuda.is_available()}


def gpu_illegal_address(job, report):
    """A kernel writing to address 0x10, compiled and launched inside the candidate scope."""
    from cuda.core import LaunchConfig, launch

    from cudaperf.execute import guards

    report("correctness")
    with guards.candidate_scope():
        device, kernel = _kernel(_POKE, "poke")
        stream = device.create_stream()
        launch(stream, LaunchConfig(grid=1, block=1), kernel)
        stream.sync()  # raises CUDA_ERROR_ILLEGAL_ADDRESS
    return {"outcome": None, "reached": "after a kernel that should have faulted"}


def gpu_device_assert(job, report):
    """torch indexing out of bounds on the device: a device-side assert, sticky for the context."""
    import torch

    report("correctness")
    x = torch.zeros(4, device="cuda")
    x[torch.tensor([1000], device="cuda")] += 1
    torch.cuda.synchronize()
    return {"outcome": None, "reached": "after a device-side assert"}


def gpu_spin(job, report):
    """A kernel that never ends; with sync=False the job returns and leaves it running."""
    from cuda.core import LaunchConfig, launch

    report(job.get("stage", "hang"))
    device, kernel = _kernel(_SPIN, "spin")
    stream = device.create_stream()
    launch(stream, LaunchConfig(grid=1, block=1), kernel)
    if job.get("sync", True):
        stream.sync()
    return {"outcome": None}


def gpu_scale_in_scope(job, report):
    """A correct kernel compiled and launched on a torch tensor inside the candidate scope."""
    import numpy as np
    import torch
    from cuda.core import LaunchConfig, launch

    from cudaperf.execute import guards

    x = torch.arange(256, device="cuda", dtype=torch.float32)
    with guards.candidate_scope():
        device, kernel = _kernel(_SCALE, "scale")
        stream = device.create_stream()
        launch(stream, LaunchConfig(grid=1, block=256), kernel, np.uint64(x.data_ptr()), np.int32(256))
        stream.sync()
    expected = torch.arange(256, device="cuda", dtype=torch.float32) * 2
    return {"outcome": None, "correct": bool(torch.equal(x, expected))}


def helper_in_scope(job, report):
    """The FAST format's path: `cudaperf.cuda` compiles (and with `launch`, runs) inside the scope.
    `helper_source(salt)` is the source; tests may build it first in the parent, as the build pool would."""
    import torch

    from cudaperf import cuda
    from cudaperf.execute import guards

    os.environ["CUDAPERF_CACHE_DIR"] = job["cache_dir"]
    x = torch.arange(256, device="cuda", dtype=torch.float32) if job.get("launch") else None
    try:
        with guards.candidate_scope():
            kernel = cuda.compile(helper_source(job["salt"]), "scale", arch=job.get("arch"))
            if x is not None:
                kernel(1, 256, x, 256)
                torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported to the test, which says what failed
        return {"outcome": None, "error": f"{type(exc).__name__}: {exc}"}
    correct = (
        None if x is None else bool(torch.equal(x, torch.arange(256, device="cuda", dtype=torch.float32) * 2))
    )
    return {"outcome": None, "error": None, "correct": correct}


def helper_source(salt: str) -> str:
    return _SCALE + f"\n// {salt}\n"


# -- the referee (issue 24, part 2): a worker whose reply native code rewrote --------------------------
# Each runs the real evaluation (dispatch.run_eval_job, shipping its outputs to the referee), then does to
# its payload what native code in the worker could do to the reply before it leaves.


def forge_claim(job, report):
    """Every configuration claimed correct, whatever the outputs were (a refereed worker's own payload
    carries no correctness: the claims are written in)."""
    from cudaperf.execute import dispatch

    payload = dispatch.run_eval_job(job, report)
    seeds = len(job["seeds"])
    payload["correctness"] = [{"config": c["name"], "correct": True, "seeds": seeds, "message": ""}
                              for c in job["task"]["configs"]]
    return payload


def claim_without_outputs(job, report):
    """A correctness verdict claimed without running or shipping anything."""
    report("setup")
    report("correctness")
    configs = [c["name"] for c in job["task"]["configs"]]
    return {"outcome": None, "stage": "correctness", "message": "", "flags": [], "timings": [],
            "correctness": [{"config": c, "correct": True, "seeds": len(job["seeds"])} for c in configs]}


def inflate_timing(job, report):
    """The candidate's timing claims a million samples: more timed work than the timing stage lasted."""
    from cudaperf.execute import dispatch

    payload = dispatch.run_eval_job(job, report)
    for timing in payload["timings"]:
        timing["candidate"].update(n_samples=10**6, mean_ms=1.0)
    return payload


def references_left(job, report):
    """The real evaluation, then what of it stays in this process: reference outputs in the cross-job
    cache (a later job's candidate could copy them)."""
    from cudaperf.execute import dispatch, torch_session

    payload = dispatch.run_eval_job(job, report)
    entries = list(torch_session.REFERENCES._entries.values())
    payload["with_outputs"] = sum(1 for e in entries if e.outputs is not None)
    payload["entries"] = len(entries)
    return payload


def malformed_payload(job, report):
    """The real evaluation, then a payload its own code never writes (a field of the wrong kind)."""
    from cudaperf.execute import dispatch

    payload = dispatch.run_eval_job(job, report)
    payload["timings"] = "fast, trust me"
    payload["correctness"] = {"all": True}
    return payload
