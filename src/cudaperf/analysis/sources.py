"""The CUDA a solution contains, where it sits in the file, and the launch shapes written next to it.

Covers: the three solution formats — fast (`cuda.compile` / `cuda.load`, units resolved by
`cudaperf.toolchain.extract.extract_units` from the Python AST without running it), KernelBench
(`load_inline(cuda_sources=...)`; host code and torch headers are blanked before NVRTC sees it), and a
plain `.cu` file — plus the file line of each unit's first line (when the CUDA text appears verbatim, as
a raw triple-quoted string does) and block sizes / dynamic shared memory given as literals at Python
launch sites (`self.k((blocks,), (256,), ..., smem_bytes=4096)`).

Not covered: executing the solution, grid sizes computed from tensors at run time (give `sizes` and
`launch` to `analyze_source` instead).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from cudaperf.analysis.cst import device_only_text


@dataclass(frozen=True)
class CudaSource:
    text: str  # CUDA C++ as the analyser reads it
    kind: str  # "nvrtc" | "inline" | "cuda_c"
    line_map: tuple[int, ...] | None  # unit line (index + 1) -> file line; 0 or None: not locatable
    options: tuple[str, ...] = ()
    name_expressions: tuple[str, ...] = ()
    python_line: int | None = None  # the `cuda.compile` / `load_inline` call

    @property
    def compile_text(self) -> str:
        """What NVRTC compiles: the unit itself, or its device code for load_inline and .cu files (with the
        few host-header macros device code leans on, and `#line 1` so NVRTC's line numbers stay the
        file's)."""
        return self.text if self.kind == "nvrtc" else _HOST_MACROS + device_only_text(self.text)


@dataclass(frozen=True)
class PythonLaunch:
    kernel: str
    line: int
    block: tuple[int, int, int] | None
    smem_bytes: int | None


@dataclass(frozen=True)
class SolutionSources:
    format: str  # "fast" | "inline" | "cuda_c" | "pytorch"
    units: tuple[CudaSource, ...]
    launches: tuple[PythonLaunch, ...] = ()
    diagnostics: tuple[str, ...] = ()


KINDS = ("auto", "fast", "inline", "cuda")

# <math.h>, <cfloat> and c10 macros that kernels written for nvcc + torch use without NVRTC having them.
_HOST_MACROS = "".join(f"#ifndef {name}\n#define {name} {value}\n#endif\n" for name, value in (
    ("INFINITY", "__int_as_float(0x7f800000)"), ("NAN", "__int_as_float(0x7fffffff)"),
    ("FLT_MAX", "3.402823466e+38F"), ("FLT_MIN", "1.175494351e-38F"), ("M_PI", "3.14159265358979323846"),
    ("C10_WARP_SIZE", "32"),
)) + "#line 1\n"


def solution_sources(text: str, kind: str = "auto") -> SolutionSources:
    """Find the CUDA of a solution; `kind` forces a format ("cuda" = the text is CUDA C++ itself)."""
    if kind not in KINDS:
        return SolutionSources("unknown", (), (), (f"unknown kind {kind!r}; expected one of {KINDS}",))
    if kind == "cuda":
        return SolutionSources("cuda_c", (CudaSource(text, "cuda_c", None),))
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        if kind == "auto" and _looks_like_cuda(text):
            return SolutionSources("cuda_c", (CudaSource(text, "cuda_c", None),))
        why = f"not valid Python ({exc.msg}, line {exc.lineno}), and not CUDA C++ either: no CUDA to analyse"
        return SolutionSources(kind, (), (), (why,))
    return _python_solution(text, tree)


def _looks_like_cuda(text: str) -> bool:
    """CUDA C++ text rather than broken Python: a kernel or device function, and no Python import or def
    at the start of a line (a Python solution with a syntax error is reported as such, not parsed as C++)."""
    has_kernel = re.search(r"__global__|__device__", text) is not None
    python_lines = re.search(r"^(?:import |from \S+ import |def |class \w+.*:\s*$)", text,
                             re.MULTILINE) is not None
    return has_kernel and not python_lines


def _python_solution(text: str, tree: ast.AST) -> SolutionSources:
    from cudaperf.toolchain.extract import INLINE, detect_format, extract_units

    fmt = detect_format(text).value
    units, diagnostics = [], []
    for unit in extract_units(text):
        if not unit.resolved:
            diagnostics.append(f"line {unit.line}: CUDA source not resolvable statically ({unit.message})")
            continue
        cuda = unit.cuda_source
        if not isinstance(cuda, str) or not cuda.strip():
            diagnostics.append(f"line {unit.line}: no CUDA source in this call")
            continue
        kind = "inline" if unit.kind == INLINE else "nvrtc"
        units.append(CudaSource(cuda, kind, file_line_map(text, cuda), tuple(unit.options),
                                tuple(unit.name_expressions), unit.line))
    if not units and not diagnostics:
        diagnostics.append("no CUDA source found (no cuda.compile/cuda.load/load_inline call)")
    return SolutionSources(fmt, tuple(_dedupe(units)), tuple(_python_launches(tree)), tuple(diagnostics))


def _dedupe(units: list[CudaSource]) -> list[CudaSource]:
    seen, out = set(), []
    for u in units:
        key = (u.text, u.options, u.name_expressions)
        if key not in seen:
            seen.add(key)
            out.append(u)
    return out


MIN_CHUNK = 24  # shorter matches (a lone "}") could sit anywhere in the file: not trusted


def file_line_map(text: str, cuda: str) -> tuple[int, ...] | None:
    """Where each line of a CUDA unit sits in the Python file: the unit is cut into the longest pieces that
    appear verbatim in the file (`HEADER + KERNELS + WRAPPER` gives three), each piece mapped to its place."""
    mapping = [0] * (cuda.count("\n") + 1)
    pos = 0
    while pos < len(cuda):
        length, at = _longest_match(text, cuda, pos)
        if length < MIN_CHUNK:
            pos += max(1, length)
            continue
        unit_line = cuda.count("\n", 0, pos)
        file_line = text.count("\n", 0, at) + 1
        for k in range(cuda.count("\n", pos, pos + length) + 1):
            if mapping[unit_line + k] == 0:
                mapping[unit_line + k] = file_line + k
        pos += length
    return tuple(mapping) if any(mapping) else None


def _longest_match(text: str, cuda: str, pos: int) -> tuple[int, int]:
    """(length, file offset) of the longest prefix of cuda[pos:] found in `text` (binary search: a prefix of
    a found string is found too)."""
    lo, hi, best, at = 1, len(cuda) - pos, 0, -1
    while lo <= hi:
        mid = (lo + hi) // 2
        found = text.find(cuda[pos:pos + mid])
        if found >= 0:
            best, at, lo = mid, found, mid + 1
        else:
            hi = mid - 1
    return best, at


# --------------------------------------------------------------------------------------------------
# Python launch sites


def _python_launches(tree: ast.AST) -> list[PythonLaunch]:
    constants = _module_constants(tree)
    handles = _kernel_handles(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        kernel = _launched_kernel(node.func, handles)
        if kernel is None or len(node.args) < 2:
            continue
        block = _dims(node.args[1], constants)
        smem = next((_int(k.value, constants) for k in node.keywords if k.arg == "smem_bytes"), None)
        out.append(PythonLaunch(kernel, node.lineno, block, smem))
    return out


def _kernel_handles(tree: ast.AST) -> dict[str, str | None]:
    """Target text -> kernel name for `x = cuda.compile(SRC, "name")`; None for `m = cuda.load(SRC)`."""
    out: dict[str, str | None] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        func = ast.unparse(node.value.func)
        if (func.endswith("compile") and len(node.value.args) >= 2
                and isinstance(node.value.args[1], ast.Constant)):
            name = str(node.value.args[1].value).split("<")[0]
            for t in node.targets:
                out[ast.unparse(t)] = name
        elif func.endswith(".load") or func == "load":
            for t in node.targets:
                out[ast.unparse(t)] = None
    return out


def _launched_kernel(func: ast.AST, handles: dict[str, str | None]) -> str | None:
    text = ast.unparse(func)
    if text in handles and handles[text] is not None:
        return handles[text]
    if (isinstance(func, ast.Attribute) and ast.unparse(func.value) in handles
            and handles[ast.unparse(func.value)] is None):
        return func.attr
    return None


def _module_constants(tree: ast.AST) -> dict[str, int]:
    out = {}
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = _int(node.value, out)
            if v is not None:
                out[node.targets[0].id] = v
    return out


def _int(node: ast.AST, constants: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.FloorDiv)):
        a, b = _int(node.left, constants), _int(node.right, constants)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        return a // b if b else None
    return None


def _dims(node: ast.AST, constants: dict[str, int]) -> tuple[int, int, int] | None:
    values = ([_int(e, constants) for e in node.elts] if isinstance(node, (ast.Tuple, ast.List))
              else [_int(node, constants)])
    if not values or any(v is None for v in values) or len(values) > 3:
        return None
    values += [1] * (3 - len(values))
    return values[0], values[1], values[2]
