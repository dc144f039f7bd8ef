"""Compiler facts for the analysis: ptxas resource usage through NVRTC, and SASS instruction features.

Covers: compiling one CUDA unit with `cudaperf.toolchain.nvrtc.compile_cuda` (ptxas `-v` report parsed by
`cudaperf.toolchain.ptxas.parse_ptxas`), disassembling its cubin with `cuobjdump -sass` (PyPI wheel
`nvidia-cuda-cuobjdump` on machines without a toolkit) and counting, per kernel, the instructions that
decide performance (table below), and mapping mangled names to the kernel names of the source.

| feature key | SASS |
|---|---|
| ldg128 / ldg64 / stg128 / stg64 | vector global access: `LDG.E.128*`, `LDG.E.64*`, `STG.E.128`, `STG.E.64` |
| lds128 / sts128 | `LDS.128`, `STS.128` |
| ldg / stg / lds / sts | all global / shared loads and stores |
| local | `LDL` + `STL` (local memory: spills or dynamically indexed arrays) |
| hmma | tensor cores, mma.sync and WMMA: `HMMA.*` (never `HFMA2.MMA`, which is a register move) |
| hgmma / imma | tensor cores: `HGMMA.*` and `QGMMA.*` (wgmma), `IMMA.*` |
| ldgsts / tma | async copies: `LDGSTS*`; TMA `UTMALDG`, `UBLKCP` |
| bar | `BAR.SYNC*`, `BAR.RED*` (block barriers) |
| atom | `ATOM*`, `ATOMG*`, `ATOMS*`, `RED*` |
| instructions | every instruction |

Not covered: instruction scheduling, stall reasons or anything dynamic (`ncu.py`); nvcc builds of
`load_inline` extensions (the analysis compiles their device code with NVRTC instead: `sources.py`).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from cudaperf.kernel_names import kernel_identifier
from cudaperf.types import ResourceUsage

_SASS_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (k, re.compile(p)) for k, p in (
        ("ldg128", r"^LDG\.[\w.]*128"), ("ldg64", r"^LDG\.[\w.]*64"), ("stg128", r"^STG\.[\w.]*128"),
        ("stg64", r"^STG\.[\w.]*64"), ("lds128", r"^LDS\.[\w.]*128"), ("sts128", r"^STS\.[\w.]*128"),
        ("ldg", r"^LDG\b"), ("stg", r"^STG\b"), ("lds", r"^LDS\b"), ("sts", r"^STS\b"),
        ("local", r"^(LDL|STL)\b"), ("hmma", r"^HMMA\."), ("hgmma", r"^(HGMMA|QGMMA)\."),
        ("imma", r"^IMMA\."),
        ("ldgsts", r"^LDGSTS\b"), ("tma", r"^(UTMALDG|UBLKCP|UTMASTG)\b"), ("bar", r"^BAR\.(SYNC|RED)"),
        ("atom", r"^(ATOM|RED)[A-Z]*\b"),
    )
)
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")


@dataclass(frozen=True)
class CompiledUnit:
    ok: bool
    resources: tuple[ResourceUsage, ...] = ()  # kernel names are the source's (demangled) names
    sass: dict[str, dict[str, int]] = field(default_factory=dict)  # kernel -> feature -> count
    log: str = ""
    diagnostics: tuple[str, ...] = ()
    compile_s: float = 0.0
    sass_s: float = 0.0



def compile_unit(source: str, *, arch: str = "sm_90", options: tuple[str, ...] = (),
                 name_expressions: tuple[str, ...] = (), sass: bool = True,
                 use_cache: bool = True) -> CompiledUnit:
    """ptxas resources (and SASS features) of every kernel in `source`; failures become diagnostics."""
    from cudaperf.toolchain.nvrtc import CompileError, compile_cuda

    t0 = time.perf_counter()
    try:
        out = compile_cuda(source, arch=arch, options=tuple(options),
                           name_expressions=tuple(name_expressions), use_cache=use_cache)
    except CompileError as exc:
        return CompiledUnit(False, log=exc.log,
                            diagnostics=(f"NVRTC compile failed: {_first_error(exc.log)}",),
                            compile_s=time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - NVRTC missing or broken: the static analysis still stands
        return CompiledUnit(False, diagnostics=(f"NVRTC unavailable: {exc}",),
                            compile_s=time.perf_counter() - t0)
    compile_s = time.perf_counter() - t0
    resources = tuple(_renamed(r) for r in out.resources)
    counts: dict[str, dict[str, int]] = {}
    diagnostics: list[str] = []
    sass_s = 0.0
    if sass:
        t1 = time.perf_counter()
        counts, message = disassemble(out.cubin)
        sass_s = time.perf_counter() - t1
        if message:
            diagnostics.append(message)
    return CompiledUnit(True, resources, counts, out.log, tuple(diagnostics), compile_s, sass_s)


def _renamed(r: ResourceUsage) -> ResourceUsage:
    from dataclasses import replace

    return replace(r, kernel=kernel_identifier(r.kernel))


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if "error" in line:
            return line.strip()[:200]
    return (log.strip().splitlines() or ["(no log)"])[0][:200]


def find_disassembler() -> str | None:
    from cudaperf.toolchain.ptxas import find_cuobjdump

    return find_cuobjdump()


def disassemble(cubin: bytes, timeout_s: float = 60.0) -> tuple[dict[str, dict[str, int]], str]:
    """(kernel -> SASS feature counts, diagnostic or "")."""
    tool = find_disassembler()
    if tool is None:
        return {}, "cuobjdump not found (pip install nvidia-cuda-cuobjdump): no SASS features"
    with tempfile.TemporaryDirectory(prefix="cudaperf-sass-") as d:
        path = Path(d) / "unit.cubin"
        path.write_bytes(cubin)
        try:
            proc = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return {}, f"cuobjdump failed: {exc}"
    if proc.returncode != 0:
        return {}, f"cuobjdump failed: {proc.stderr.strip()[:200]}"
    return parse_sass(proc.stdout), ""


def parse_sass(text: str) -> dict[str, dict[str, int]]:
    """Feature counts per function of a `cuobjdump -sass` / `nvdisasm` listing."""
    out: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = out.setdefault(kernel_identifier(m.group(1)), {"instructions": 0})
            continue
        if current is None:
            continue
        m = _INSTRUCTION.search(line)
        if not m:
            continue
        opcode = m.group(1)
        current["instructions"] += 1
        for key, pattern in _SASS_PATTERNS:
            if pattern.match(opcode):
                current[key] = current.get(key, 0) + 1
    return out
