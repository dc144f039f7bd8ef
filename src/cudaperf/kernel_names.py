"""Kernel names in the forms the toolchain, the profiler and the source use, made comparable.

Covers:
- `kernel_identifier(name)`: the bare identifier of a kernel from any of its forms, so that they compare
  equal: the source name (`relu`), an Itanium-mangled symbol as NVRTC, ptxas, cuobjdump and SASS print it
  (`_Z3addPfi`, `_ZN2ns6kernelILi4EEvPf`), and a demangled profiler name
  (`void ns::tile_gemm<float, 64>(float const*, int)`, `(anonymous namespace)::helper<(int)4>(float*)`).
- `demangle(names)`: readable names for people, through one `c++filt` process (names it cannot handle, or
  every name when c++filt is absent, map to themselves).

Why a hand-written reader of mangled names: only the kernel's own identifier is needed (the last
length-prefixed component of the symbol), and a full demangler would be a binary dependency (c++filt) on
the hot path of the evaluator and the reward. Not covered: demangling parameter types or template
arguments; overloads of one identifier compare equal on purpose.
"""

from __future__ import annotations

import re
import shutil
import subprocess

_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
_CV_QUALIFIERS = ("K", "V", "r")


def kernel_identifier(name: str) -> str:
    """`_Z3addPfi` -> `add`; `void ns::relu_kernel<256>(float const*, float*, int)` -> `relu_kernel`."""
    name = name.strip()
    if name.startswith("_Z"):
        return _mangled_identifier(name)
    text = name.replace("(anonymous namespace)", "anon")
    text = re.sub(r"^(?:void|static|__global__)\s+", "", text)
    text = _before_parameters(text)
    while _TEMPLATE_ARGS.search(text):
        text = _TEMPLATE_ARGS.sub("", text)
    text = text.split()[-1] if text.split() else text  # a return type other than void
    return text.rsplit("::", 1)[-1].strip()


def _mangled_identifier(symbol: str) -> str:
    """The unqualified function name inside an Itanium-mangled symbol: the first source name of a plain
    symbol, the last component of a nested (`N...E`) one."""
    i = 2
    nested = symbol[i:i + 1] == "N"
    if nested:
        i += 1
        while symbol[i:i + 1] in _CV_QUALIFIERS:
            i += 1
    last = symbol
    while i < len(symbol) and symbol[i].isdigit():
        j = i
        while j < len(symbol) and symbol[j].isdigit():
            j += 1
        length = int(symbol[i:j])
        last = symbol[j:j + length]
        i = j + length
        if not nested or symbol[i:i + 1] == "I":  # template arguments follow: the name is complete
            break
    return last


def _before_parameters(text: str) -> str:
    """Text before the parameter list: the first '(' outside template arguments (which may hold casts)."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            return text[:i]
    return text


def demangle(names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """mangled -> readable, through one `c++filt` process; names it cannot handle map to themselves."""
    names = list(dict.fromkeys(names))
    tool = shutil.which("c++filt")
    if not names or tool is None:
        return {n: n for n in names}
    try:
        proc = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=10,
                              check=False)
        lines = proc.stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        lines = []
    if len(lines) != len(names):
        return {n: n for n in names}
    return dict(zip(names, lines, strict=True))
