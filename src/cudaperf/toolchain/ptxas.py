"""Per-kernel resource usage (registers, shared memory, stack, spills, barriers) from compiler output.

Covers three text formats, all read from real tool output (fixtures in tests/unit/test_toolchain_ptxas.py):
- `ptxas -v` as printed by `nvcc -Xptxas -v` (lines `ptxas info    : ...`, the stack/spill line indented);
- the same report inside an NVRTC program log (`--ptxas-options=-v`), where continuation lines carry the
  prefix `ptxas         .`;
- `cuobjdump -res-usage` of a cubin, object file or shared library (used for `load_inline` builds, whose
  compiler flags we must not change, so `-Xptxas -v` cannot be added there).
Kernel names stay mangled (they are what cuobjdump, the driver and SASS use); `cudaperf.kernel_names.demangle`
turns a batch of them into readable names when a person needs to read them.

Differences between the sources, kept visible rather than hidden:
- ptxas prints `cmem[0]` (the kernel-parameter/driver constant bank) up to sm_89 and not from sm_90 on,
  so `cmem_bytes` is 0 for sm_90+ from ptxas; cuobjdump always prints it.
- cuobjdump reports neither spills nor barriers: those fields are 0 when the source is cuobjdump.
- cuobjdump's SHARED on sm_90+ includes the 1 KB per block the driver reserves whenever a kernel uses any
  shared memory (static or dynamic). We subtract it so `smem_static_bytes` means what ptxas reports: the
  occupancy calculator adds the reserved 1 KB itself, and counting it twice would understate occupancy.

Not covered: running the compilers (see `nvrtc.py`, `inline.py`), occupancy (see `cudaperf.analysis`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

from cudaperf.types import ResourceUsage

# Bytes of shared memory per block that the driver reserves on sm_90+ and cuobjdump counts into SHARED.
RESERVED_SMEM_SM90_BYTES = 1024

_PREFIX = re.compile(r"^\s*ptxas(?:\s+info\s*:|\s+\.)?\s*")
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"^Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM0 = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas(log: str, arch: str) -> tuple[ResourceUsage, ...]:
    """Entry functions in the order ptxas compiled them. `arch` labels entries whose line names none.

    Accepts nvcc and NVRTC logs with anything else mixed in (warnings, compile times, errors).
    """
    entries: list[dict] = []
    stacks: dict[str, tuple[int, int, int]] = {}
    props_for: str | None = None  # the function whose "properties" line comes next
    for raw in log.splitlines():
        line = _PREFIX.sub("", raw).strip()
        if m := _ENTRY.search(line):
            entries.append({"kernel": m.group(1), "arch": m.group(2) or arch})
        elif m := _PROPS.search(line):
            props_for = m.group(1)
        elif (m := _STACK.search(line)) and props_for is not None:
            # Device functions that were not inlined get a properties block too: keyed by name, so only
            # the entry of the same name picks it up.
            stacks[props_for] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            props_for = None
        elif (m := _USED.search(line)) and entries:
            entries[-1].update(_used_fields(line, int(m.group(1))))
    return tuple(_usage(e, stacks.get(e["kernel"]), arch) for e in entries if "registers" in e)


def _used_fields(line: str, registers: int) -> dict[str, int]:
    fields = {"registers": registers}
    for key, pattern in (("barriers", _BARRIERS), ("smem_static_bytes", _SMEM), ("cmem_bytes", _CMEM0)):
        if m := pattern.search(line):
            fields[key] = int(m.group(1))
    return fields


def _usage(entry: dict, stack: tuple[int, int, int] | None, arch: str) -> ResourceUsage:
    frame, spill_st, spill_ld = stack or (0, 0, 0)
    return ResourceUsage(
        kernel=entry["kernel"],
        arch=entry.get("arch") or arch,
        registers=entry["registers"],
        smem_static_bytes=entry.get("smem_static_bytes", 0),
        stack_frame_bytes=frame,
        spill_store_bytes=spill_st,
        spill_load_bytes=spill_ld,
        barriers=entry.get("barriers", 0),
        cmem_bytes=entry.get("cmem_bytes", 0),
    )


# --------------------------------------------------------------------------------------------------
# cuobjdump -res-usage

_ARCH_LINE = re.compile(r"^\s*arch\s*=\s*(sm_\w+)")
_FUNCTION = re.compile(r"^\s*Function\s+(\S+?):\s*$")
_RES = re.compile(r"\b(REG|STACK|SHARED|LOCAL|CONSTANT\[0\]):(\d+)")


def parse_res_usage(text: str, arch: str | None = None) -> tuple[ResourceUsage, ...]:
    """Kernels listed by `cuobjdump -res-usage`, one record per (function, arch) section.

    A bare cubin's dump names no arch: those records get `arch` (or "unknown").
    """
    out: list[ResourceUsage] = []
    current_arch = arch or "unknown"
    function: str | None = None
    for line in text.splitlines():
        if m := _ARCH_LINE.match(line):
            current_arch = m.group(1)
        elif m := _FUNCTION.match(line):
            function = m.group(1)
        elif function is not None and (fields := dict(_RES.findall(line))):
            out.append(_res_record(function, current_arch, fields))
            function = None
    return tuple(out)


def _res_record(function: str, arch: str, fields: dict[str, str]) -> ResourceUsage:
    shared = int(fields.get("SHARED", 0))
    if _sm_major(arch) >= 9:
        shared = max(0, shared - RESERVED_SMEM_SM90_BYTES)  # see the module docstring: counted once
    return ResourceUsage(
        kernel=function,
        arch=arch,
        registers=int(fields.get("REG", 0)),
        smem_static_bytes=shared,
        stack_frame_bytes=int(fields.get("STACK", 0)),
        cmem_bytes=int(fields.get("CONSTANT[0]", 0)),
    )


def _sm_major(arch: str) -> int:
    m = re.match(r"(?:sm|compute)_(\d+)", arch)
    return int(m.group(1)) // 10 if m else 0


def find_cuobjdump() -> str | None:
    """cuobjdump on PATH, in the CUDA toolkit, or from the `nvidia-cuda-cuobjdump` wheel."""
    return find_cuda_tool("cuobjdump")


def find_cuda_tool(name: str) -> str | None:
    """A CUDA binary utility (cuobjdump, ptxas...): on PATH, from a wheel `cuda.pathfinder` knows, or in
    the toolkit ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda)."""
    found = shutil.which(name)
    if found:
        return found
    try:
        from cuda import pathfinder

        finder = getattr(pathfinder, "find_nvidia_binary_utility", None)  # absent in older pathfinders
        found = finder(name) if finder else None
    except Exception:  # noqa: BLE001 - a failed lookup falls through to the toolkit paths below
        found = None
    if found:
        return found
    for root in _cuda_roots():
        candidate = root / "bin" / name
        if candidate.is_file():
            return str(candidate)
    return None


def _cuda_roots() -> list[Path]:
    import os

    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    return [Path(r) for r in roots if r] + [Path("/usr/local/cuda")]


def res_usage(path: str | Path, arch: str | None = None, *,
              timeout_s: float = 60.0) -> tuple[ResourceUsage, ...]:
    """Run `cuobjdump -res-usage` on a cubin/.o/.so; () when cuobjdump is missing or fails."""
    tool = find_cuobjdump()
    if tool is None:
        return ()
    try:
        proc = subprocess.run([tool, "-res-usage", str(path)], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return parse_res_usage(proc.stdout, arch) if proc.returncode == 0 else ()


def only_arch(resources: tuple[ResourceUsage, ...], arch: str) -> tuple[ResourceUsage, ...]:
    """The records for `arch`; all of them when none match (e.g. a cubin dumped without an arch line)."""
    matching = tuple(r for r in resources if r.arch == arch)
    return matching or resources



def with_arch(resources: tuple[ResourceUsage, ...], arch: str) -> tuple[ResourceUsage, ...]:
    """The same records relabelled to `arch` (for a cubin whose dump carried no arch line)."""
    return tuple(replace(r, arch=arch) for r in resources)
