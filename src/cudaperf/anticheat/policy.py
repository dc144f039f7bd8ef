"""The anti-cheat policy: what a candidate solution may do, one rule per known reward hack.

Covers: the `Policy` configuration record (per task set; travels in the worker job, `jobs.EvalJob.policy`),
`RULES`, the registry of every flag code the anti-cheat can raise (static, runtime and coverage checks
share it), each with its default severity and a one-line summary, and `VIOLATION_CODES_ELSEWHERE`, the
codes other checks raise that also mean cheating (`is_violation` decides for any code). The rationale of
each rule is the comment above it; `docs/evaluation.md` (table of 16 known hacks) says which hack each
rule answers.

Not covered: the checks themselves (`static.py`, `runtime.py`, `coverage.py`) and what the evaluator does
with a flag (an ERROR flag makes the outcome POLICY_VIOLATION; a WARNING is reported, not penalised).
This module imports neither torch nor CUDA.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cudaperf.types import Flag, Severity


@dataclass(frozen=True)
class Rule:
    """One anti-cheat rule: a stable flag code, its default severity, and what it means in one line."""

    code: str
    severity: Severity
    summary: str


_E, _W = Severity.ERROR, Severity.WARNING

RULES: dict[str, Rule] = {
    r.code: r
    for r in (
        # The file must parse; a file that does not is reported, never executed.
        Rule("syntax_error", _E, "the solution is not valid Python"),
        # A checker crash must fail closed: crafted inputs (deep nesting...) must not buy a free pass.
        Rule("static_check_failed", _E, "the static checker could not analyse the file"),
        # Allow-list of imports: everything else (os, sys, subprocess, socket, ctypes, gc, inspect, importlib,
        # pickle, signal, time, cudaperf internals, cuda-python, triton...) reaches the process, the harness
        # or a second way to run GPU code that the other rules cannot see (hacks #7, #10, #16).
        Rule("forbidden_import", _E, "imports a module outside the allow-list"),
        # `from m import *` hides which names are bound, and name resolution is what the other rules use.
        Rule("star_import", _E, "star import defeats name resolution"),
        # eval/exec/compile/__import__/globals()/locals()/vars()/type(name, bases, dict): code or names the
        # AST cannot see, the classic way around a static checker (KernelBench's regex checker, hack #10).
        Rule("dynamic_code", _E, "builds or runs code dynamically"),
        # getattr family with computed names, or on modules: `getattr(torch, "mat" + "mul")` aliasing.
        Rule("dynamic_attribute", _E, "attribute looked up by a computed name, or on a module"),
        # __dict__, __class__, __subclasses__, __globals__, __code__, __traceback__... are the road to the
        # harness's frames, builtins and classes (sandbox escapes, hack #16).
        Rule("dunder_access", _E, "accesses a dunder attribute or name"),
        # Dunder hooks (__del__, __getattr__, __eq__, __bool__...) run candidate code at moments the harness
        # does not control: finalisers after timing, comparisons while checking (hacks #5, #6).
        Rule("dunder_definition", _E, "defines a dunder hook the harness would call implicitly"),
        # A torch.Tensor subclass or __torch_function__/__torch_dispatch__ can compute lazily at comparison
        # time or lie about its contents (hack #6, CUDA-L1's lazy-tensor check).
        Rule("tensor_subclass", _E, "defines or creates a torch.Tensor subclass / torch function hook"),
        # Subclassing, instantiating or calling the reference `Model` is returning the reference (hack #10).
        Rule("reference_reuse", _E, "uses the reference Model"),
        # The candidate must do the work in its own kernels: torch compute ops (Python or C++ API) in the
        # forward path are a PyTorch fallback (hack #10). Allocation, views and shape queries are allowed.
        Rule("torch_compute_op", _E, "calls a torch compute op instead of its own kernel"),
        # Arithmetic/comparison operators on tensors are torch compute ops in disguise (`a + b`, `A @ B`).
        Rule("torch_operator", _E, "applies a Python operator to a tensor"),
        # Calling a torch nn module (self.linear(x)), or inheriting one, runs torch's kernels (hack #10).
        Rule("torch_module_call", _E, "calls or inherits a torch.nn module"),
        # Moving data to the host (.cpu(), .numpy(), .tolist(), .item()) is how a CPU fallback starts.
        Rule("host_transfer", _E, "moves tensor data to the host in the forward path"),
        # A try/except that does not re-raise around a launch hides kernel failures and is the usual shape
        # of a torch fallback (`except: return torch.matmul(a, b)`, hack #10).
        Rule("exception_fallback", _E, "swallows an exception in the forward path"),
        # Work keyed on data_ptr()/id()/hash() of an input returns results cached from earlier calls (#3).
        Rule("identity_cache", _E, "keys state on the identity (pointer, id) of a tensor"),
        # Side streams let the end event fire before the work finishes (hack #4); kernels must launch on
        # torch's current stream. Python (torch.cuda.Stream...) and C++ (cudaStreamCreate...) alike.
        Rule("stream_created", _E, "creates or selects a CUDA stream other than the current one"),
        # A background thread can finish the work after the timer stops (hack #5).
        Rule("thread_created", _E, "creates a thread (threading, multiprocessing, std::thread...)"),
        # Graph capture replays work recorded for other pointers (hack #15).
        Rule("cuda_graph", _E, "captures or replays a CUDA graph"),
        # torch.compile / torch.jit generate their own (Triton) kernels: torch doing the work (hack #10).
        Rule("torch_compile", _E, "uses torch.compile / torch.jit / torch.export"),
        # Replacing functions of imported modules (torch.allclose, torch.cuda.synchronize, Event.elapsed_time,
        # torch.library overrides) forges the checker or the timer (hack #7).
        Rule("monkey_patch", _E, "replaces an attribute of an imported module or class"),
        # Reseeding reproduces the harness's "random" inputs (hack #9).
        Rule("reseed", _E, "reseeds a random number generator"),
        # Files and stdin: reading cached reference outputs or task files, writing forged results (#8, #16).
        Rule("file_io", _E, "reads or writes files"),
        # exit()/system()/popen()/fork()/dlopen(): leaving the sandbox contract (hack #16).
        Rule("process_control", _E, "exits the process or spawns/loads native code"),
        # TF32 / reduced-precision reduction flags change the *reference's* precision too (hack #11).
        Rule("precision_flags_changed", _E, "changes torch's global precision flags (TF32...)"),
        # set_default_dtype/device etc. change how the harness builds inputs and references.
        Rule("global_torch_state", _E, "changes torch's global defaults"),
        # torch._C, torch._dynamo, torch.ops, torch.library, torch.utils._python_dispatch...: private or
        # dispatcher-level APIs reach past every public rule (disable the op monitor, override aten ops).
        Rule("private_api", _E, "uses a private or dispatcher-level API"),
        # cuBLAS/cuDNN/cuFFT/CUTLASS from C++ is a vendor library doing the work (hack #10).
        Rule("cuda_library_call", _E, "calls a vendor library (cuBLAS, cuDNN...) from C++/CUDA"),
        # fp16/bf16 casts in an fp32 task trade accuracy for speed (hack #11). A warning: fp16 storage with
        # fp32 accumulation can be legitimate, and the tight fp32 tolerance is what decides.
        Rule("precision_downcast", _W, "casts to a reduced precision in the forward path"),
        # The same trade inside the kernel (__half, bf16, cvt.tf32, fp16 MMA); a warning for the same reason.
        Rule("reduced_precision_cuda", _W, "the CUDA source computes in half/bf16/tf32"),
        # State written in forward (self.x = ..., global) is how call counting and result caching work
        # (#3, #14); lazy kernel compilation is the honest use, hence a warning.
        Rule("forward_state", _W, "forward writes state that survives the call"),
        # Returning an input means the op is the identity or the input was overwritten in place (#2).
        Rule("returns_input", _W, "forward returns one of its inputs"),
        # numpy calls in forward compute on the host; only suspicious (shape arithmetic is fine).
        Rule("numpy_in_forward", _W, "forward calls numpy"),
        # Runtime: new native threads may come from CUDA/OpenMP runtimes, hence only a warning.
        Rule("native_threads_grew", _W, "the process has more OS threads after the call"),
        # Runtime: the candidate left a different current stream behind (torch.cuda.set_stream).
        Rule("stream_changed", _E, "the current CUDA stream changed during the call"),
        # Coverage (Dr. Kernel): the candidate's own kernels must account for the GPU time (hack #10).
        Rule("low_coverage", _E, "own kernels account for too little of the GPU time"),
        # No own kernel ran at all: a decoy kernel, a cached result or CPU work (hack #10, #3).
        Rule("no_gpu_work", _E, "none of the candidate's own kernels ran"),
        # A declared kernel named like a vendor kernel is counted as not own (naming cannot buy coverage).
        Rule("vendor_kernel_name", _W, "a candidate kernel is named like a library kernel"),
    )
}

# Flag codes raised outside this registry, by the checks of the sandbox, correctness, timing and
# speed-of-light stages, that mean "the candidate cheated or tampered", not "the answer is wrong": like the
# ERROR rules above, they make the outcome POLICY_VIOLATION (`is_violation`, `evaluate.decide_outcome`).
VIOLATION_CODES_ELSEWHERE = frozenset({
    # A time below the memory floor is not rewarded: no kernel beats the bandwidth (sol.py, hack #14).
    "impossible_speed",
    # A forged message on the worker's result channel claims a verdict the harness never reached (#8).
    "channel_forged",
    # What the worker reports contradicts what the referee established in a process the candidate never
    # ran in (correctness claimed where its outputs are wrong, a verdict without shipped outputs, timed
    # calls longer than the timing stage): native code forged the reply or its own outputs (#8, issue 24).
    "verdict_mismatch",
    # A lazy tensor subclass as output computes at comparison time or lies about its contents (#6).
    "tensor_subclass_output",
    # Returning the reference's own output tensor is returning the reference (a variant of hack #1).
    "output_aliases_reference",
    # Event time longer than the host clock around it: the timer was forged or bypassed (#4, #7).
    "timer_inconsistent",
    # The child's after-job sweep: harness callables replaced, modules swapped in sys.modules, threads
    # or processes left running to finish work after the timer stopped (#5, #7, #16).
    "harness_tampered", "worker_state_changed", "lingering_threads", "lingering_processes",
})


def is_violation(code: str) -> bool:
    """Whether an ERROR flag of this code is cheating or tampering (POLICY_VIOLATION) rather than a wrong
    answer (INCORRECT): every rule of `RULES` whose default severity is ERROR, and
    `VIOLATION_CODES_ELSEWHERE`."""
    rule = RULES.get(code)
    return code in VIOLATION_CODES_ELSEWHERE or (rule is not None and rule.severity is Severity.ERROR)


def has_violation(flags: Iterable[Flag]) -> bool:
    """Whether any of a result's flags is a violation (`is_violation`): anti-cheat flagged the answer."""
    return any(is_violation(f.code) for f in flags)


# Rules that enforce "do the work in your own kernels"; `allow_torch_ops=True` turns them off.
TORCH_OP_RULES = frozenset(
    {"torch_compute_op", "torch_operator", "torch_module_call", "host_transfer", "exception_fallback",
     "numpy_in_forward", "low_coverage", "no_gpu_work"}
)

# Modules a solution may import (a module or any submodule of it, unless listed in FORBIDDEN_IMPORTS).
DEFAULT_ALLOWED_IMPORTS: tuple[str, ...] = (
    "__future__",
    "torch",  # tensors, allocation, nn.Module; compute ops are policed by name, not by import
    "torch.nn",
    "torch.nn.functional",  # importing F is a habit; calling it in forward is flagged
    "torch.cuda",
    "torch.autograd",  # custom autograd.Function wrappers around own kernels
    "torch.utils.cpp_extension",  # load_inline (KernelBench format)
    "cudaperf.cuda",  # the fast-format helper (NVRTC via cuda-core)
    "math",
    "numpy",  # constants and shape arithmetic; host compute in forward needs a host_transfer (flagged)
    "typing",
    "functools",  # lru_cache of compiled kernels
    "dataclasses",
    "itertools",
    "collections",
    "enum",
    "textwrap",  # dedenting CUDA source strings
    "string",
    "warnings",
)

# Explicitly forbidden even when under an allowed prefix, with the reason shown in the flag message.
# Everything not allowed is forbidden anyway; this list only makes the message specific.
FORBIDDEN_IMPORTS: dict[str, str] = {
    "os": "process, environment and file-descriptor access (forged result fds, env tampering)",
    "sys": "sys.modules / frames / interpreter hooks reach the harness",
    "subprocess": "spawning processes (pip install, shell)",
    "socket": "network access",
    "ctypes": "raw memory and native library calls (cuBLAS via dlopen)",
    "cffi": "raw memory and native library calls",
    "threading": "background threads finish work after timing (hack #5)",
    "_thread": "background threads",
    "multiprocessing": "background processes",
    "concurrent": "thread/process pools",
    "asyncio": "background tasks",
    "gc": "gc.get_objects() finds the harness's reference tensors",
    "inspect": "frame walking into the harness",
    "importlib": "dynamic imports and module reloading",
    "builtins": "replacing builtins",
    "pickle": "arbitrary code on load",
    "marshal": "code objects",
    "signal": "signal handlers interfere with the watchdog",
    "time": "clocks enable timing-aware behaviour and are the harness's cross-check timer",
    "random": "a second RNG invites reseeding tricks; no kernel needs it",
    "io": "file access",
    "pathlib": "file access",
    "shutil": "file access",
    "tempfile": "file access",
    "weakref": "finalisers run work at harness-controlled moments",
    "operator": "operator.add & co. hide torch compute ops from name resolution",
    "cudaperf": "harness internals (only cudaperf.cuda is public to solutions)",
    "cuda": "cuda-python (driver/runtime API: streams, graphs, memcpy) bypasses cudaperf.cuda",
    "cupy": "a second GPU runtime with its own kernels and libraries",
    "triton": "Triton kernels are not in the solution formats",
    "numba": "a second GPU runtime",
    "torch.utils": "only torch.utils.cpp_extension is needed",
}

# torch.* functions a forward may call: allocation (a fresh output is not compute), constant fills (zeroing
# an accumulator), views and metadata. Anything else under torch is a compute op.
DEFAULT_ALLOWED_TORCH_CALLS: tuple[str, ...] = (
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "tensor", "as_tensor", "asarray", "from_numpy", "scalar_tensor",
    "as_strided", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose", "permute", "t",
    "narrow", "select", "split", "chunk", "unbind", "movedim", "swapaxes", "swapdims", "view_as_real",
    "view_as_complex",
    "numel", "is_tensor", "is_floating_point", "is_complex", "is_nonzero", "get_default_dtype", "finfo",
    "iinfo", "promote_types", "result_type", "broadcast_shapes", "typename", "device", "Size", "dtype",
    "no_grad", "inference_mode", "enable_grad", "set_grad_enabled", "is_grad_enabled",
)

# aten ops (overload packet names) the runtime monitor lets through: allocation, constant fills, views,
# metadata. Copies (clone, copy_, _to_copy) are NOT here: for data-movement tasks (transpose, concat) a
# copy *is* the whole solution, and tasks cannot be told apart; an upload of host-made constants to the
# device is allowed separately (see runtime.py).
DEFAULT_ALLOWED_ATEN_OPS: tuple[str, ...] = (
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "scalar_tensor",
    "zero_", "fill_", "resize_", "lift_fresh", "lift_fresh_copy",
    "view", "_unsafe_view", "_reshape_alias", "reshape", "as_strided", "expand", "permute", "transpose",
    "t", "squeeze", "unsqueeze", "select", "slice", "narrow", "split", "split_with_sizes", "unbind",
    "chunk", "diagonal", "alias", "detach", "view_as_real", "view_as_complex", "unfold", "movedim",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "numel", "dim",
    "is_contiguous", "is_same_size", "is_non_overlapping_and_dense", "_has_compatible_shallow_copy_type",
)


@dataclass(frozen=True)
class Policy:
    """What a candidate may do. The defaults are the strict policy of `docs/design.md`."""

    allow_torch_ops: bool = False
    """Allow torch compute ops (and torch fallbacks) in the forward path. False: the candidate must do the
    work in its own kernels; True turns off every rule in `TORCH_OP_RULES` (pure-PyTorch task sets)."""

    min_coverage: float = 0.5
    """Least share of GPU kernel time (memcpy/memset excluded) that must be spent in the candidate's own
    kernels. 0.5 means "most of the work": a lazy kernel that accelerates a negligible sub-op while torch
    does the rest scores far below it, while an honest solution that zeroes an accumulator with
    `torch.zeros` (a torch fill kernel) or launches a tiny helper kernel on a small problem stays above
    it. Higher values start to punish such honest helpers on tiny inputs; lower ones let a torch op do half
    the work. Ignored when `allow_torch_ops`."""

    allowed_imports: tuple[str, ...] = DEFAULT_ALLOWED_IMPORTS
    """Modules (and their submodules) a solution may import; everything else is `forbidden_import`.
    `FORBIDDEN_IMPORTS` wins over this list for the submodules it names (e.g. `torch.utils`)."""

    allowed_torch_calls: tuple[str, ...] = DEFAULT_ALLOWED_TORCH_CALLS
    """`torch.<name>` functions a forward may call (allocation, constant fills, views, metadata)."""

    allowed_aten_ops: tuple[str, ...] = DEFAULT_ALLOWED_ATEN_OPS
    """aten overload packets the runtime monitor accepts in forward; any other op is `torch_compute_op`."""

    allow_streams: bool = False
    """Allow the candidate to create/select CUDA streams. Off: side streams defeat event timing (hack #4)."""

    allow_cuda_graphs: bool = False
    """Allow CUDA graph capture/replay. Off: graphs replay work recorded for stale pointers (hack #15)."""

    allow_vendor_libraries: bool = False
    """Allow cuBLAS/cuDNN/cuFFT/CUTLASS calls from C++ sources. Off: a library is not the candidate's
    kernel."""

    allow_reduced_precision: bool = False
    """Silence the fp16/bf16/tf32 warnings (for tasks whose reference is itself reduced precision)."""

    disabled_rules: tuple[str, ...] = ()
    """Flag codes to drop entirely (escape hatch for a task set; every code must be in `RULES`)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_coverage <= 1.0:
            raise ValueError(f"Policy.min_coverage={self.min_coverage} must be in [0, 1] "
                             "(0 disables the check)")
        unknown = sorted(set(self.disabled_rules) - set(RULES))
        if unknown:
            raise ValueError(f"Policy.disabled_rules has unknown codes {unknown}; "
                             f"valid codes: {sorted(RULES)}")

    def active(self, code: str) -> bool:
        """Whether flags of this code are reported under this policy."""
        if code in self.disabled_rules:
            return False
        if self.allow_torch_ops and code in TORCH_OP_RULES:
            return False
        if self.allow_streams and code in ("stream_created", "stream_changed"):
            return False
        if self.allow_cuda_graphs and code == "cuda_graph":
            return False
        if self.allow_vendor_libraries and code == "cuda_library_call":
            return False
        return not (self.allow_reduced_precision and code in ("precision_downcast", "reduced_precision_cuda"))


def make_flag(code: str, message: str, *, line: int | None = None, config: str | None = None) -> Flag:
    """A `Flag` of a registered code, with the rule's severity."""
    return Flag(code=code, message=message, severity=RULES[code].severity, line=line, config=config)
