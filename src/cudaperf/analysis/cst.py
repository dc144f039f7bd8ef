"""Parsing CUDA C++ with tree-sitter-cuda: the concrete syntax tree and the few queries the analysis needs.

Covers: one cached parser, kernel discovery (`function_definition` nodes carrying `__global__`, found with
a `QueryCursor` query), macro expansion when macros hide kernels (the C preprocessor over the source with
its `#include` lines blanked, line numbers mapped back through the line markers), the device-only text
of a translation unit (what NVRTC can compile without host headers), node helpers.

Not covered: semantics (`static.py` reads the tree), C++ name lookup, template instantiation.

Why the plain C preprocessor first and `nvcc -E` only as a fallback: `nvcc -E` force-includes
cuda_runtime.h (a megabyte of output, ~1 s) while expanding the source's own macros is all that is needed.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from tree_sitter import Language, Node, Parser, Query, QueryCursor, Tree


@functools.lru_cache(maxsize=1)
def language() -> Language:
    import tree_sitter_cuda

    return Language(tree_sitter_cuda.language())


@functools.lru_cache(maxsize=1)
def _parser() -> Parser:
    return Parser(language())


@functools.lru_cache(maxsize=1)
def _kernel_query() -> Query:
    return Query(language(), '(function_definition "__global__") @kernel')


@functools.lru_cache(maxsize=1)
def _device_query() -> Query:
    return Query(language(), '(function_definition "__device__") @fn')


# Constructs tree-sitter-cuda 0.21 mis-parses; blanked with spaces so byte offsets and lines stay put.
# `#pragma unroll` between a `for` header and its body detaches the body; `__align__(16)` on a
# declaration turns it into an error node. Neither changes what the analysis reads.
_BLANK = re.compile(r"^[ \t]*#[ \t]*pragma\b[^\n]*|\b__align__\s*\(\s*\w+\s*\)|\balignas\s*\(\s*\w+\s*\)",
                    re.MULTILINE)


def sanitize(text: str) -> str:
    return _BLANK.sub(lambda m: " " * len(m.group(0)), text)


def parse(text: str) -> Tree:
    return _parser().parse(sanitize(text).encode())


def text(node: Node | None) -> str:
    return node.text.decode(errors="replace") if node is not None and node.text is not None else ""


def line(node: Node) -> int:
    """1-based source line of a node."""
    return node.start_point[0] + 1


def kernel_nodes(root: Node) -> list[Node]:
    """`__global__` function definitions, in source order."""
    found = [n for _, caps in QueryCursor(_kernel_query()).matches(root) for n in caps.get("kernel", [])]
    return sorted(found, key=lambda n: n.start_byte)


def device_function_nodes(root: Node) -> list[Node]:
    found = [n for _, caps in QueryCursor(_device_query()).matches(root) for n in caps.get("fn", [])]
    return sorted(found, key=lambda n: n.start_byte)


def function_name(fn: Node) -> str:
    """The unqualified name of a function definition."""
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type not in ("function_declarator",):
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return ""
    name = decl.child_by_field_name("declarator")
    return text(name).split("::")[-1].strip()


def function_params(fn: Node) -> list[Node]:
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    return [c for c in plist.named_children if c.type == "parameter_declaration"] if plist else []


def walk(node: Node) -> Iterator[Node]:
    """Pre-order traversal (iterative: kernels can nest deeply)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def error_lines(root: Node) -> list[int]:
    return sorted({line(n) for n in walk(root) if n.type == "ERROR" or n.is_missing})


# --------------------------------------------------------------------------------------------------
# Macro expansion


@dataclass(frozen=True)
class Preprocessed:
    text: str
    line_map: tuple[int, ...]  # output line (0-based index) -> original 1-based line (0: not from the source)
    tool: str


_MARKER = re.compile(r'^#\s*(?:line\s+)?(\d+)\s+"([^"]*)"')


_FUNCTION_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(", re.MULTILINE)


def needs_preprocessing(source: str, found_kernels: int) -> bool:
    """Macros may hide kernels (`__global__` appears in a #define, or appears but no kernel was found), or
    hide memory accesses: a function-like macro invoked in the code (`#define IN(i) src[clamp(i)]`) parses
    as a call, so the load inside it would not be seen, and a macro redefined after `#undef` has two
    meanings that only the preprocessor tells apart."""
    in_define = re.search(r"#\s*define[^\n]*(?:\\\n[^\n]*)*__global__", source) is not None
    return in_define or (found_kernels == 0 and "__global__" in source) or _invokes_function_macro(source)


def _invokes_function_macro(source: str) -> bool:
    names = set(_FUNCTION_MACRO.findall(source))
    if not names:
        return False
    code = "\n".join(ln for ln in source.split("\n") if not re.match(r"\s*#", ln))
    return re.search(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\s*\(", code) is not None


def preprocess(source: str, timeout_s: float = 20.0) -> Preprocessed | None:
    """Expand the source's own macros; None when no preprocessor is available or it fails."""
    blanked = "\n".join("" if re.match(r"\s*#\s*include\b", ln) else ln for ln in source.split("\n"))
    for tool, cmd in (("cpp", ["g++", "-E", "-x", "c++", "-"]), ("nvcc", ["nvcc", "-E", "-x", "cu", "-"])):
        if shutil.which(cmd[0]) is None:
            continue
        try:
            out = subprocess.run(cmd, input=blanked, capture_output=True, text=True, timeout=timeout_s,
                                 check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0:
            return _strip_markers(out.stdout, tool)
    return None


def _strip_markers(output: str, tool: str) -> Preprocessed:
    lines, mapping = [], []
    current_file, current_line = "", 0
    for raw in output.split("\n"):
        m = _MARKER.match(raw)
        if m:
            current_line, current_file = int(m.group(1)), m.group(2)
            continue
        if current_file in ("<stdin>", "-"):
            lines.append(raw)
            mapping.append(current_line)
        current_line += 1
    return Preprocessed("\n".join(lines), tuple(mapping), tool)


# --------------------------------------------------------------------------------------------------
# Device-only text (for NVRTC)

# Headers NVRTC can resolve from the CUDA include directory; anything else (torch, std, pybind) is host code.
_DEVICE_HEADERS = re.compile(
    r"[<\"](cuda_fp16|cuda_bf16|cuda_fp8|mma|cuda_pipeline|cuda_awbarrier|cooperative_groups|cuda/|"
    r"cuda_runtime|device_launch_parameters|vector_types|sm_\d+_intrinsics|crt/)"
)
_HOST_TOP_LEVEL = {"function_definition", "declaration", "expression_statement"}


def device_only_text(source: str) -> str:
    """The source with host code blanked out (same line numbers): host functions, host-only includes,
    PYBIND11/TORCH macros. Kept: kernels, device functions, templates of those, types, constants, defines."""
    tree = parse(source)
    raw = source.encode()
    keep = bytearray(raw)
    for node in tree.root_node.children:
        if _is_host_item(node, raw):
            _blank(keep, node.start_byte, node.end_byte)
    return keep.decode(errors="replace")


def _blank(buf: bytearray, start: int, end: int) -> None:
    for i in range(start, end):
        if buf[i] not in (0x0A,):
            buf[i] = 0x20


def _is_host_item(node: Node, raw: bytes) -> bool:
    src = raw[node.start_byte:node.end_byte].decode(errors="replace")
    if node.type == "preproc_include":
        return _DEVICE_HEADERS.search(src) is None
    if node.type in ("template_declaration", "linkage_specification"):
        return not re.search(r"__global__|__device__", src)
    if node.type == "namespace_definition":
        return not re.search(r"__global__|__device__|__constant__", src)
    if node.type == "function_definition":
        return not re.search(r"\b__global__\b|\b__device__\b", src.split("{", 1)[0])
    if node.type == "declaration":
        return bool(re.search(r"\b(torch|at|c10|std|py)::", src))
    return node.type in ("expression_statement", "ERROR")  # PYBIND11_MODULE(...) and other host macros
