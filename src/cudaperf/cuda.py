"""The fast solution format's helper: compile CUDA C++ with NVRTC and launch it on torch tensors.

```python
from cudaperf import cuda

add = cuda.compile(SOURCE, "add", options=("-use_fast_math",))
add(grid, block, a, b, out, n)                 # on torch.cuda.current_stream(), torch's primary context
mod = cuda.load(SOURCE); mod.add(grid, block, a, b, out, n)
scale = cuda.compile(SOURCE, "scale<float, 256>")   # templates: the name is the name expression
```

Covers: compiling (through `cudaperf.toolchain.nvrtc.compile_cuda`, so the build pool's cache is hit), an
in-process cache of compiled programs, loading the cubin with cuda-core, converting arguments (tensors to
device pointers, Python scalars to the C type of the parameter as parsed from the kernel's declaration),
and launching with `cuda.core.launch` on torch's current stream in torch's primary context.

Arguments: a CUDA `torch.Tensor` becomes its data pointer (no contiguity check: the kernel gets the raw
pointer); a CPU tensor is rejected; an `int` or `None` passed for a pointer parameter is a raw address or
NULL. Scalars follow C: `int`->int32, `unsigned`->uint32, `long long`/`int64_t`->int64,
`size_t`/`unsigned long long`->uint64 (same width as int64, but negative values are refused), `float`->
float32, `double`->float64, `bool`, `char`/`short` widths, `__half`->float16. A value that does not fit
raises `TypeError` naming the parameter. Parameters whose type the scanner cannot read (macros, structs by
value, unbound templates) are converted by the sizes the driver reports for the loaded kernel.

The per-call path is kept short because launches are timed: converters, the loaded kernel and launch
configurations are prepared once, and the cuda-core stream wrapping torch's current stream is cached per
(device, stream handle).

Importing this module imports neither torch nor cuda-core (they load on first use), and `compile` works
without a GPU (default arch: the current GPU's, else sm_90); only launching needs one.

Dynamic shared memory above 48 KB is opted into automatically (the kernel attribute a CUDA C host program
sets with cudaFuncSetAttribute).

Not covered: graph capture helpers, cooperative or cluster launches, PTX/JIT linking.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

from cudaperf.toolchain import signature as _sig
from cudaperf.toolchain.nvrtc import CompileError, NvrtcOutput, compile_cuda, normalize_options

__all__ = ["CompileError", "Kernel", "Module", "compile", "default_arch", "kernel_symbols", "load"]

_MAX_PROGRAMS = 512  # in-process program cache bound (a long-lived worker compiles many candidates)
_MAX_CONFIGS = 256  # launch configurations cached per kernel


def compile(source: str, name: str, *, options: tuple[str, ...] | list[str] = (), arch: str | None = None,
            name_expressions: tuple[str, ...] | list[str] | None = None) -> Kernel:
    """Compile `source` (cached) and return its kernel `name`: an `extern "C"` name, or a name expression
    such as `scale<float, 256>` for a template (registered with NVRTC automatically)."""
    program = _program(source, (name,), normalize_options(options), arch, name_expressions)
    return program.kernel(name)


def load(source: str, *, options: tuple[str, ...] | list[str] = (), arch: str | None = None,
         name_expressions: tuple[str, ...] | list[str] | None = None) -> Module:
    """Compile `source` once; every kernel is an attribute (`mod.add`), name expressions are items
    (`mod["scale<float, 256>"]`)."""
    return Module(_program(source, None, normalize_options(options), arch, name_expressions))


# --------------------------------------------------------------------------------------------------
# Programs (one compiled source) and the in-process cache


class _Program:
    """One compiled source: the NVRTC output, the parsed signatures, the lazily loaded ObjectCode."""

    def __init__(self, output: NvrtcOutput, kernels: dict[str, _sig.KernelSignature]):
        self.output = output
        self.signatures = kernels
        self._object_code = None
        self._kernels: dict[str, Kernel] = {}
        self._lock = threading.Lock()

    def kernel(self, name: str) -> Kernel:
        k = self._kernels.get(name)
        if k is None:
            with self._lock:
                k = self._kernels.setdefault(name, Kernel(self, name, self._signature(name)))
        return k

    def _signature(self, name: str) -> _sig.KernelSignature | None:
        sig = self.signatures.get(_sig.base_name(name))
        return _sig.instantiate(sig, name) if sig is not None else None

    def object_code(self):
        if self._object_code is None:
            from cuda.core import ObjectCode

            # No symbol_mapping: its value type differs across cuda-core releases (bytes in 1.2.0, str
            # later); the lowered (mangled) names are resolved here instead, see Kernel._bind.
            self._object_code = ObjectCode.from_cubin(self.output.cubin, name="cudaperf")
        return self._object_code


_PROGRAMS: collections.OrderedDict[tuple, _Program] = collections.OrderedDict()
_PROGRAMS_LOCK = threading.Lock()


def harness_kernel(source: str, name: str, *, options: tuple[str, ...] | list[str] = ()) -> Kernel:
    """`compile` for the harness's own kernels (the timing lead): compiled for the current GPU and NOT
    registered in the program cache, so `kernel_symbols` (the candidate's kernels) never lists it."""
    options = normalize_options(options)
    exprs = _sig.canonical_name_expressions(source, (name,), None)
    output = compile_cuda(source, arch=default_arch(), options=options, name_expressions=exprs,
                          report_resources=False)
    return _Program(output, _sig.parse_kernels(source)).kernel(name)


def _program(source: str, names: tuple[str, ...] | None, options: tuple[str, ...], arch: str | None,
             name_expressions) -> _Program:
    exprs = _sig.canonical_name_expressions(source, names, name_expressions)
    arch = arch or default_arch()
    request = (source, exprs, options, arch)
    with _PROGRAMS_LOCK:
        program = _PROGRAMS.get(request)
        if program is not None:
            _PROGRAMS.move_to_end(request)
            return program
    # launching needs no ptxas report; its fallback's files and child process are refused in a sandbox
    output = compile_cuda(source, arch=arch, options=options, name_expressions=exprs, report_resources=False)
    program = _Program(output, _sig.parse_kernels(source))
    with _PROGRAMS_LOCK:
        _PROGRAMS[request] = program
        while len(_PROGRAMS) > _MAX_PROGRAMS:
            _PROGRAMS.popitem(last=False)
    return program


def kernel_symbols() -> set[str]:
    """Symbol names (extern "C" names, mangled names otherwise) of every entry function compiled through
    this helper in this process: the candidate's own kernels, for GPU-time coverage."""
    with _PROGRAMS_LOCK:
        programs = list(_PROGRAMS.values())
    return {r.kernel for p in programs for r in p.output.resources} | {
        name for p in programs for name in p.output.lowered_names.values()}


_ARCH_BY_DEVICE: dict[int, str] = {}


def default_arch() -> str:
    """`sm_XY` of torch's current CUDA device (or device 0 when torch is not in use), else "sm_90"."""
    device = _current_device_index_if_torch()
    if device not in _ARCH_BY_DEVICE:
        _ARCH_BY_DEVICE[device] = _query_arch(device) or "sm_90"
    return _ARCH_BY_DEVICE[device]


def _current_device_index_if_torch() -> int:
    import sys

    torch = sys.modules.get("torch")  # only if the caller already uses torch: never import it here
    try:
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - a half-initialised torch: device 0 is the sensible default
        return 0
    return 0


def _query_arch(device: int) -> str | None:
    """Compute capability from the driver: no context is created (a build process must not hold one)."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        err, dev = driver.cuDeviceGet(device)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        attr = driver.CUdevice_attribute
        _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        return f"sm_{major}{minor}"
    except Exception:  # noqa: BLE001 - no driver library (CPU machine) or no device: use the default
        return None


# --------------------------------------------------------------------------------------------------
# Module and Kernel


class Module:
    """All kernels of one source. Attribute access for identifiers, item access for name expressions."""

    def __init__(self, program: _Program):
        self._program = program

    @property
    def names(self) -> tuple[str, ...]:
        sigs = self._program.signatures
        plain = [n for n, s in sigs.items() if not s.is_template]
        return tuple(plain) + tuple(sorted(self._program.output.lowered_names.keys() - set(plain)))

    def __getitem__(self, name: str) -> Kernel:
        if name not in self.names:
            raise KeyError(f"no kernel {name!r} in this module; it has: {', '.join(self.names) or 'none'}")
        return self._program.kernel(name)

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(exc.args[0]) from None

    def __dir__(self):
        return [*super().__dir__(), *(n for n in self.names if n.isidentifier())]

    @property
    def output(self) -> NvrtcOutput:
        return self._program.output


class Kernel:
    """A compiled kernel; call it as `kernel(grid, block, *args, smem_bytes=0, stream=None)`.

    `grid`/`block` are ints or 1-3 tuples; `stream` defaults to torch's current stream and may be a
    torch.cuda.Stream, a cuda.core Stream, any `__cuda_stream__` object or a raw handle.
    """

    __slots__ = ("_configs", "_converters", "_fn", "_launch", "_nargs", "_program", "name", "signature")

    def __init__(self, program: _Program, name: str, signature: _sig.KernelSignature | None):
        self.name = name
        self.signature = signature
        self._program = program
        self._fn = None
        self._launch = None  # cuda.core.launch, bound on first use (keeps the import lazy)
        self._converters: tuple = ()
        known = signature is not None and all(p.kind != _sig.UNKNOWN for p in signature.params)
        self._nargs: int | None = len(signature.params) if known else None
        self._configs: dict = {}

    @property
    def output(self) -> NvrtcOutput:
        return self._program.output

    @property
    def cubin(self) -> bytes:
        return self._program.output.cubin

    def __call__(self, grid, block, *args, smem_bytes: int = 0, stream=None) -> None:
        fn = self._fn
        if fn is None:
            if self._nargs is not None and len(args) != self._nargs:
                raise TypeError(self._count_message(len(args)))  # before touching the GPU
            fn = self._bind()
        if len(args) != self._nargs:
            raise TypeError(self._count_message(len(args)))
        kernel_args = [convert(a) for convert, a in zip(self._converters, args)]
        config = self._configs.get((grid, block, smem_bytes))
        if config is None:
            config = self._config(grid, block, smem_bytes)
        self._launch(_current_stream() if stream is None else _as_stream(stream), config, fn, *kernel_args)

    def max_active_blocks_per_sm(self, block_threads: int, smem_bytes: int = 0) -> int:
        """Blocks of `block_threads` that fit on one SM at once (the driver's occupancy calculator)."""
        fn = self._fn if self._fn is not None else self._bind()
        return int(fn.occupancy.max_active_blocks_per_multiprocessor(block_threads, smem_bytes))

    def _count_message(self, given: int) -> str:
        params = ", ".join(f"{p.c_type} {p.name}".strip() for p in self.signature.params) if self.signature \
            else f"{self._nargs} parameters"
        return f"kernel {self.name!r} takes {self._nargs} arguments ({params}); {given} given"

    def _bind(self):
        """First launch: make torch's context current, load the kernel, build the argument converters."""
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(f"cannot launch {self.name!r}: no CUDA GPU (torch.cuda.is_available() is "
                               "False); compiling works without one, launching does not")
        _ensure_context()
        lowered = self._program.output.lowered_names
        lookup = lowered[self.name] if self.name in lowered else _sig.base_name(self.name)
        try:
            fn = self._program.object_code().get_kernel(lookup)
        except Exception as exc:
            raise RuntimeError(f"kernel {self.name!r} is not in the compiled module ({exc}); an extern \"C\" "
                               "name or a name expression is needed") from exc
        from cuda.core import launch

        self._converters = _make_converters(self.signature, _param_sizes(fn), self.name)
        self._nargs = len(self._converters)
        self._launch = launch
        self._fn = fn
        return fn

    def _config(self, grid, block, smem_bytes: int):
        from cuda.core import LaunchConfig

        if smem_bytes > _DEFAULT_DYNAMIC_SMEM_BYTES:
            _allow_dynamic_smem(self._fn, smem_bytes)
        config = LaunchConfig(grid=grid, block=block, shmem_size=smem_bytes)
        if len(self._configs) >= _MAX_CONFIGS:
            self._configs.clear()
        self._configs[(grid, block, smem_bytes)] = config
        return config

    def __repr__(self) -> str:
        return f"<cudaperf.cuda.Kernel {self.name!r} arch={self._program.output.arch}>"


# Above 48 KB of dynamic shared memory a kernel must opt in (cudaFuncSetAttribute in CUDA C); the launcher
# does it, as a CUDA C host program would, so solutions can use the H200's 227 KB per block.
_DEFAULT_DYNAMIC_SMEM_BYTES = 48 * 1024


def _allow_dynamic_smem(fn, smem_bytes: int) -> None:
    from cuda.bindings import driver

    device = _torch_hooks()[0]()
    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    (err,) = driver.cuKernelSetAttribute(attribute, smem_bytes, driver.CUkernel(int(fn.handle)),
                                         driver.CUdevice(device))
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cannot allow {smem_bytes} bytes of dynamic shared memory for this kernel "
                           f"({err.name}); the device's per-block limit minus the kernel's static shared "
                           "memory is the maximum")


# --------------------------------------------------------------------------------------------------
# Argument conversion


def _param_sizes(fn) -> tuple[int, ...] | None:
    """Byte size of each parameter as the driver sees it (cuFuncGetParamInfo); None if unavailable."""
    try:
        return tuple(int(info.size) for info in fn.arguments_info)
    except Exception:  # noqa: BLE001 - older driver/cuda-core: fall back to the parsed signature alone
        return None


def _make_converters(signature: _sig.KernelSignature | None, sizes: tuple[int, ...] | None,
                     kernel: str) -> tuple:
    params = list(signature.params) if signature is not None else []
    if sizes is not None and len(sizes) != len(params):
        # The scanner missed parameters (macro-built list): the driver's sizes are the ground truth.
        params = [_sig.Param(f"arg{i}", "?", _sig.UNKNOWN) for i in range(len(sizes))]
    if sizes is None and any(p.kind == _sig.UNKNOWN for p in params):
        raise TypeError(f"kernel {kernel!r}: cannot read the types of its parameters "
                        f"({', '.join(p.c_type for p in params)}) and the driver gives no sizes")
    return tuple(_converter(p, i, sizes[i] if sizes else None, kernel) for i, p in enumerate(params))


def _converter(param: _sig.Param, index: int, size: int | None, kernel: str):
    label = f"kernel {kernel!r} argument {index} ({param.c_type} {param.name})".replace(" )", ")")
    if param.kind == _sig.POINTER:
        return _pointer_converter(label)
    if param.kind == _sig.UNKNOWN:
        return _sized_converter(label, size)
    return _scalar_converter(label, param.kind)


def _pointer_converter(label: str):
    from cuda.core import Buffer
    from torch import Tensor

    def convert(a):
        if isinstance(a, Tensor):
            if a.is_cuda:
                return a.data_ptr()
            raise TypeError(f"{label}: tensor is on {a.device}; pass a CUDA tensor")
        if a is None:
            return 0
        if isinstance(a, int) and not isinstance(a, bool):
            return a
        if isinstance(a, Buffer):
            return a
        raise TypeError(f"{label}: expected a CUDA tensor, an int address or None, got {type(a).__name__}")

    return convert


def _scalar_converter(label: str, kind: str):
    import numpy as np

    np_type = getattr(np, kind)
    integral = kind.startswith(("int", "uint"))

    def convert(a):
        if integral and isinstance(a, float):
            raise TypeError(f"{label}: got float {a!r} for an integer parameter")
        try:
            return np_type(a)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"{label}: cannot convert {a!r} to {kind} ({exc})") from None

    return convert


def _sized_converter(label: str, size: int | None):
    """For parameters of unreadable type: numpy/ctypes values pass as they are, Python scalars take the
    width the driver reports (4 or 8 bytes), tensors become pointers."""
    import numpy as np

    pointer = _pointer_converter(label)
    ints = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
    floats = {2: np.float16, 4: np.float32, 8: np.float64}

    def convert(a):
        if isinstance(a, (np.generic,)) or type(a).__module__ == "ctypes":
            return a
        if isinstance(a, bool):
            return np.bool_(a)
        if isinstance(a, float) and size in floats:
            return floats[size](a)
        if isinstance(a, int) and size in ints:
            return ints[size](a)
        if size == 8:
            return pointer(a)
        raise TypeError(f"{label}: the parameter's type is unknown ({size} bytes); pass a numpy or ctypes "
                        f"scalar of that size, got {type(a).__name__}")

    return convert


# --------------------------------------------------------------------------------------------------
# Streams and context (torch's)

# Lazily filled state lives in containers, never in rebound module attributes: the sandbox compares the
# identities of cudaperf.* module callables before and after a job, and a rebinding would read as tampering.
_STREAMS: dict[tuple[int, int], Any] = {}
_TLS = threading.local()
_torch_state: dict[str, Any] = {}


class _TorchStream:
    """A raw `cudaStream_t` exposed through the `__cuda_stream__` protocol (version 0)."""

    __slots__ = ("handle",)

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def _torch_hooks():
    """(current_device, current_raw_stream) functions, resolved once. The raw-stream call is the one
    Triton's launcher uses; `current_stream().cuda_stream` is the public fallback."""
    hooks = _torch_state.get("hooks")
    if hooks is None:
        import torch

        current_device = torch.cuda.current_device
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is None:
            def raw(device: int) -> int:
                return torch.cuda.current_stream(device).cuda_stream

        hooks = _torch_state["hooks"] = (current_device, raw)
    return hooks


def _current_stream():
    current_device, raw = _torch_hooks()
    device = current_device()
    handle = raw(device)
    stream = _STREAMS.get((device, handle))
    if stream is None:
        stream = _wrap_stream(device, handle)
    if getattr(_TLS, "device", None) != device:
        _ensure_context()
    return stream


def _wrap_stream(device: int, handle: int):
    from cuda.core import Device

    _ensure_context()
    if handle == 0:  # torch's default stream is the legacy NULL stream
        try:
            from cuda.core import LEGACY_DEFAULT_STREAM as stream
        except ImportError:  # a cuda-core without the export
            from cuda.core import Stream

            stream = Stream.from_handle(0)
    else:
        stream = Device(device).create_stream(_TorchStream(handle))
    _STREAMS[(device, handle)] = stream
    return stream


def _as_stream(stream):
    """A cuda-core Stream for an explicit `stream=` argument."""
    from cuda.core import Stream

    if isinstance(stream, Stream):
        return stream
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream / ExternalStream
    if handle is None and isinstance(stream, int):
        handle = stream
    if handle is None and hasattr(stream, "__cuda_stream__"):
        handle = int(stream.__cuda_stream__()[1])
    if handle is None:
        raise TypeError("stream must be a torch.cuda.Stream, a cuda.core Stream, a __cuda_stream__ object "
                        f"or a handle, got {type(stream).__name__}")
    device = _torch_hooks()[0]()
    return _STREAMS.get((device, int(handle))) or _wrap_stream(device, int(handle))


def _ensure_context() -> None:
    """Make torch's current device's primary context current on this thread (once per thread/device)."""
    current_device, _ = _torch_hooks()
    device = current_device()
    if getattr(_TLS, "device", None) == device:
        return
    import torch
    from cuda.core import Device

    torch.cuda.init()  # torch creates/retains the primary context; cuda-core then uses the same one
    Device(device).set_current()
    _TLS.device = device
