"""CUDA C++ source -> cubin with NVRTC, behind a content-addressed disk cache shared by all processes.

Covers: one compile request (source, arch, options, name expressions) -> `NvrtcOutput` (cubin, log,
ptxas resource usage, the mangled symbol of each name expression), the cache under
`<cache_dir>/nvrtc/<key>.cubin` + `<key>.json`, and where the CUDA headers are (so `#include
<cuda_fp16.h>` works under NVRTC, which has no default include path).

The compile goes through `cuda.bindings.nvrtc` (the layer cuda-core's `Program` wraps) rather than
`cuda.core.Program`, because solutions pass raw NVRTC option strings (`-use_fast_math`, `--std=c++17`,
`-DTILE=16`) and `ProgramOptions` only takes typed fields: mapping every spelling would be a translation
table to maintain and a source of cache-key drift. Loading and launching use cuda-core (`cudaperf.cuda`).

The cache key is sha256(source, sorted name expressions, options, arch, NVRTC major.minor, cache format):
everything that changes the cubin, nothing that is local to a machine (include paths), so a pool on one
host fills the cache a GPU worker reads. Entries are written atomically (cubin first, then the json that
names the cubin's sha256), so concurrent compiles of the same key are safe and a torn entry reads as a
miss. Failed compiles are not cached: a failure caused by the environment (a missing header directory)
must not outlive its fix.

Not covered: launching (`cudaperf.cuda`), nvcc builds, `load_inline` (`inline.py`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from cudaperf.toolchain.cache import atomic_write, content_key, resolve_cache_dir
from cudaperf.toolchain.ptxas import parse_ptxas, res_usage
from cudaperf.types import ResourceUsage, from_dict, to_dict

PROGRAM_NAME = "kernel.cu"  # appears in error messages: "kernel.cu(12): error: ..."


class CompileError(Exception):
    """NVRTC rejected the source. `log` is the full compiler log (errors with line numbers)."""

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log

    def __str__(self) -> str:
        return "NVRTC compilation failed:\n" + self.log


@dataclass(frozen=True)
class NvrtcOutput:
    cubin: bytes
    log: str  # NVRTC log, including the ptxas -v report
    resources: tuple[ResourceUsage, ...]
    key: str
    cache_hit: bool
    arch: str = "sm_90"
    lowered_names: dict[str, str] = field(default_factory=dict)  # name expression -> mangled symbol
    duration_s: float = 0.0  # compile time, or cache read time on a hit


def compile_cuda(source: str, *, arch: str = "sm_90", options: tuple[str, ...] | list[str] = (),
                 name_expressions: tuple[str, ...] | list[str] = (),
                 cache_dir: str | os.PathLike[str] | None = None, use_cache: bool = True,
                 report_resources: bool = True) -> NvrtcOutput:
    """Compile `source` for `arch` (e.g. "sm_90"); raises `CompileError(log)` when NVRTC fails.

    `name_expressions` must already be canonical (see `signature.canonical_name_expressions`) for the
    key to match other callers'. `cache_dir=None` uses `$CUDAPERF_CACHE_DIR` or `~/.cache/cudaperf`.
    `report_resources=False` skips the ptxas fallback (`ptxas_report`) when NVRTC's log has no ptxas
    report: for callers that only launch, such as candidate code in a sandbox, where the fallback's
    temporary files and child process are refused.
    """
    t0 = time.perf_counter()
    options, name_expressions = normalize_options(options), tuple(sorted(set(name_expressions or ())))
    key = cache_key(source, arch=arch, options=options, name_expressions=name_expressions)
    directory = resolve_cache_dir(cache_dir) / "nvrtc"
    hit = _read_entry(directory, key) if use_cache else None
    if hit is not None and not (report_resources and _lacks_report(hit)):
        return _with(hit, duration_s=time.perf_counter() - t0)
    if hit is not None:  # cached by a caller that skipped the fallback: complete the entry now
        cubin, log, lowered = hit.cubin, hit.log, hit.lowered_names
    else:
        cubin, log, lowered = _nvrtc_compile(source, arch, options, name_expressions)
    if report_resources and "ptxas info" not in log:
        log = "\n".join(filter(None, (log, ptxas_report(source, arch, options, name_expressions))))
    resources = parse_ptxas(log, arch)
    if report_resources and not resources:
        resources, note = cubin_resources(cubin, arch)
        log = "\n".join(filter(None, (log, note)))
    out = NvrtcOutput(cubin=cubin, log=log, resources=resources, key=key, cache_hit=hit is not None,
                      arch=arch, lowered_names=lowered, duration_s=time.perf_counter() - t0)
    if use_cache:
        try:
            _write_entry(directory, out)
        except OSError:  # a read-only or full cache (e.g. inside a sandbox) must not fail the compile
            pass
    return out


def cubin_resources(cubin: bytes, arch: str) -> tuple[tuple[ResourceUsage, ...], str]:
    """The last resort when neither NVRTC's log nor ptxas gave a report (ptxas older than NVRTC refuses
    its PTX: "Unsupported .version"): `cuobjdump -res-usage` of the cubin itself (no spill or barrier
    counts, see build.ptxas), and a note line saying so."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cudaperf-cubin-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        try:
            path.write_bytes(cubin)
        except OSError as exc:  # a sandbox that refuses temporary files
            return (), f"note: no cuobjdump report ({type(exc).__name__})"
        resources = res_usage(path, arch)
    if not resources:
        return (), "note: no cuobjdump report either"
    return resources, "note: resources from cuobjdump -res-usage (spills and barriers not reported)"


def _lacks_report(out: NvrtcOutput) -> bool:
    """No ptxas report and no note saying why (an entry written with `report_resources=False`)."""
    return not out.resources and "ptxas info" not in out.log and "no ptxas report" not in out.log


def normalize_options(options) -> tuple[str, ...]:
    """Options as given by a caller -> the tuple used in the key: a lone string is one option, not a
    sequence of characters."""
    if options is None:
        return ()
    if isinstance(options, str):
        return (options,)
    return tuple(str(o) for o in options)


def cache_key(source: str, *, arch: str, options: tuple[str, ...], name_expressions: tuple[str, ...]) -> str:
    major, minor = nvrtc_version()
    return content_key("nvrtc", source, "\0".join(sorted(set(name_expressions))), "\0".join(options), arch,
                       f"{major}.{minor}")


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "nvrtcVersion")
    return int(major), int(minor)


@functools.cache
def cuda_include_dirs() -> tuple[str, ...]:
    """Directories holding the CUDA headers (cuda_fp16.h, cuda_bf16.h...) and CCCL, first found first."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    candidates = [Path(r) / "include" for r in roots if r]
    try:
        from cuda import pathfinder

        found = pathfinder.find_nvidia_header_directory("cudart")
        if found:
            candidates.append(Path(found))
    except Exception:  # noqa: BLE001 - any pathfinder failure leaves the toolkit paths above, which suffice
        found = None
    for inc in candidates:
        if (inc / "cuda_fp16.h").is_file():
            cccl = inc / "cccl"
            return (str(inc), str(cccl)) if cccl.is_dir() else (str(inc),)
    return ()


def nvrtc_options(arch: str, options: tuple[str, ...]) -> list[str]:
    """The full option list: arch, include paths and `-v` for ptxas first, the caller's options last (a
    caller's own `-arch` therefore wins; NVRTC only warns about the repetition)."""
    includes = [f"--include-path={d}" for d in cuda_include_dirs()]
    return [f"--gpu-architecture={arch}", *includes, "--ptxas-options=-v", *options]


def _nvrtc_compile(source: str, arch: str, options: tuple[str, ...],
                   name_expressions: tuple[str, ...]) -> tuple[bytes, str, dict[str, str]]:
    with _compiled_program(source, nvrtc_options(arch, options), name_expressions) as (nvrtc, prog, log):
        return _cubin(nvrtc, prog), log, _lowered_names(nvrtc, prog, name_expressions, log)


@contextlib.contextmanager
def _compiled_program(source: str, options: list[str], name_expressions: tuple[str, ...]):
    """(the nvrtc module, a program compiled with `options`, its log), destroyed on exit; raises
    `CompileError(log)` when NVRTC rejects the source."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), PROGRAM_NAME.encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            _check(nvrtc.nvrtcAddNameExpression(prog, expr.encode())[0], "nvrtcAddNameExpression")
        opts = [o.encode() for o in options]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _program_log(nvrtc, prog)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(log or _error_string(nvrtc, result))
        yield nvrtc, prog, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _program_log(nvrtc, prog) -> str:
    return _read_buffer(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, prog, "ProgramLog") \
        .rstrip(b"\0").decode(errors="replace").strip()


def _cubin(nvrtc, prog) -> bytes:
    return _read_buffer(nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, prog, "CUBIN")


def _read_buffer(get_size, get, prog, what: str) -> bytes:
    """NVRTC writes into the buffer it is given, so it must be a fresh mutable one. (`b" " * size` is not:
    for size 1, an empty log, it is CPython's shared one-byte `b" "`, and NVRTC's NUL would turn every
    space the interpreter prints afterwards into NUL: dev/LOG.md, toolchain.)"""
    err, size = get_size(prog)
    _check(err, f"nvrtcGet{what}Size")
    buf = bytearray(size)
    _check(get(prog, buf)[0], f"nvrtcGet{what}")
    return bytes(buf)


# --------------------------------------------------------------------------------------------------
# The ptxas report when NVRTC's log has none (some NVRTC builds, e.g. the H200 machine's 13.0, return an
# empty log despite `--ptxas-options=-v`): the same source compiled by NVRTC to PTX for the virtual arch,
# then the toolkit's `ptxas -v` on it, which prints the report NVRTC would have.


def ptxas_report(source: str, arch: str, options: tuple[str, ...], name_expressions: tuple[str, ...]) -> str:
    """ptxas's `-v` report for `source` on `arch`, or a one-line note saying why there is none."""
    tool = find_ptxas()
    if tool is None:
        return "note: no ptxas report (NVRTC's log had none and no ptxas was found)"
    try:
        ptx = _nvrtc_ptx(source, arch.replace("sm_", "compute_"), options, name_expressions)
    except (CompileError, RuntimeError) as exc:
        return f"note: no ptxas report (PTX compile failed: {str(exc)[:200]})"
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cudaperf-ptxas-") as tmp:
        path = Path(tmp) / "kernel.ptx"
        path.write_bytes(ptx)
        cmd = [tool, f"-arch={arch}", "-v", *_ptxas_flags(options), "-o", str(Path(tmp) / "kernel.cubin"),
               str(path)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:  # PermissionError (a sandbox) is an OSError
            return f"note: no ptxas report ({type(exc).__name__})"
    report = (proc.stderr + proc.stdout).strip()
    return report if proc.returncode == 0 else f"note: no ptxas report (ptxas failed: {report[-300:]})"


def _ptxas_flags(options: tuple[str, ...]) -> list[str]:
    """The caller's NVRTC options that ptxas itself takes: a register cap and explicit ptxas options."""
    flags: list[str] = []
    for opt in options:
        name, _, value = opt.partition("=")
        if name.lstrip("-") in ("maxrregcount", "maxregcount") and value:
            flags.append(f"--maxrregcount={value}")
        elif name.lstrip("-") in ("ptxas-options", "Xptxas") and value and value not in ("-v", "--verbose"):
            flags.extend(value.split(","))
    return flags


def _nvrtc_ptx(source: str, virtual_arch: str, options: tuple[str, ...],
               name_expressions: tuple[str, ...]) -> bytes:
    opts = [o for o in nvrtc_options(virtual_arch, options) if o != "--ptxas-options=-v"]
    with _compiled_program(source, opts, name_expressions) as (nvrtc, prog, _log):
        return _read_buffer(nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, prog, "PTX").rstrip(b"\0")


def find_ptxas() -> str | None:
    """ptxas on PATH, from a wheel, or in the CUDA toolkit."""
    from cudaperf.toolchain.ptxas import find_cuda_tool

    return find_cuda_tool("ptxas")


def _lowered_names(nvrtc, prog, name_expressions: tuple[str, ...], log: str) -> dict[str, str]:
    lowered = {}
    for expr in name_expressions:
        err, name = nvrtc.nvrtcGetLoweredName(prog, expr.encode())
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{log}\nname expression {expr!r} does not name a __global__ function "
                               f"instantiated by this source ({_error_string(nvrtc, err)})".strip())
        lowered[expr] = name.decode()
    return lowered


def _error_string(nvrtc, result) -> str:
    try:
        return nvrtc.nvrtcGetErrorString(result)[1].decode()
    except Exception:  # noqa: BLE001 - only for a message; the enum's repr is a fine fallback
        return str(result)


def _check(err, what: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")


# --------------------------------------------------------------------------------------------------
# Cache entries


def _write_entry(directory: Path, out: NvrtcOutput) -> None:
    meta = {
        "key": out.key,
        "arch": out.arch,
        "log": out.log,
        "resources": to_dict(out.resources),
        "lowered_names": out.lowered_names,
        "cubin_sha256": hashlib.sha256(out.cubin).hexdigest(),
        "nvrtc_version": list(nvrtc_version()),
    }
    atomic_write(directory / f"{out.key}.cubin", out.cubin)
    atomic_write(directory / f"{out.key}.json", json.dumps(meta).encode())


def _read_entry(directory: Path, key: str) -> NvrtcOutput | None:
    try:
        meta = json.loads((directory / f"{key}.json").read_bytes())
        cubin = (directory / f"{key}.cubin").read_bytes()
    except (OSError, ValueError):
        return None
    if hashlib.sha256(cubin).hexdigest() != meta.get("cubin_sha256"):
        return None  # a writer replaced the cubin between our two reads: treat as a miss
    resources = tuple(from_dict(ResourceUsage, r) for r in meta.get("resources", []))
    return NvrtcOutput(cubin=cubin, log=meta.get("log", ""), resources=resources, key=key, cache_hit=True,
                       arch=meta.get("arch", ""), lowered_names=dict(meta.get("lowered_names", {})))


def _with(out: NvrtcOutput, **changes) -> NvrtcOutput:
    from dataclasses import replace

    return replace(out, **changes)
