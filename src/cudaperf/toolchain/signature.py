"""Kernel signatures read from CUDA source text: names, parameter C types, linkage, template parameters.

Covers: every `__global__` function declared or defined in a source (inside or outside `extern "C"`,
with `__launch_bounds__`/`__cluster_dims__`/`__maxnreg__`/`__attribute__` decorations, `__restrict__` and
cv-qualifiers, templates), simple `typedef`/`using`/`#define` aliases of built-in types, substitution of
template type arguments from a name expression (`scale<float, 256>`), and the canonical list of NVRTC
name expressions a request needs (shared by `cudaperf.cuda` and the build pool's extraction, so both
compute the same cache key).

Not covered: the preprocessor (macros that generate kernels or their parameter lists are not expanded;
such kernels are found at launch time through the driver's parameter sizes instead), structs passed by
value (reported as type `unknown`).

Why a small scanner instead of tree-sitter-cuda: this runs inside the GPU worker on every `compile`, where
tree-sitter is not installed, and a kernel's parameter list is a tiny regular part of C++.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# C type spelling (qualifiers removed, words joined by one space) -> numpy scalar type name.
SCALAR_TYPES: dict[str, str] = {
    "bool": "bool_",
    "char": "int8", "signed char": "int8", "int8_t": "int8",
    "unsigned char": "uint8", "uint8_t": "uint8",
    "short": "int16", "short int": "int16", "signed short": "int16", "int16_t": "int16",
    "unsigned short": "uint16", "unsigned short int": "uint16", "uint16_t": "uint16",
    "int": "int32", "signed": "int32", "signed int": "int32", "int32_t": "int32",
    "unsigned": "uint32", "unsigned int": "uint32", "uint32_t": "uint32", "uint": "uint32",
    # long is 64-bit on Linux (LP64), the only platform cudaperf targets.
    "long": "int64", "long int": "int64", "signed long": "int64", "long long": "int64",
    "long long int": "int64", "signed long long": "int64", "int64_t": "int64", "ssize_t": "int64",
    "ptrdiff_t": "int64", "intptr_t": "int64", "long64": "int64",
    "unsigned long": "uint64", "unsigned long int": "uint64", "unsigned long long": "uint64",
    "unsigned long long int": "uint64", "uint64_t": "uint64", "size_t": "uint64", "uintptr_t": "uint64",
    "float": "float32",
    "double": "float64",
    "half": "float16", "__half": "float16",
}

POINTER = "pointer"
UNKNOWN = "unknown"

_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "__grid_constant__",
               "register"}
_DECORATORS = {"__launch_bounds__", "__cluster_dims__", "__maxnreg__", "__attribute__", "__declspec",
               "__align__", "alignas"}
_NOT_NAMES = {"void", "static", "inline", "__inline__", "__forceinline__", "__noinline__", "extern",
              "__global__", "__device__", "__host__", "constexpr", "template", "typename", "class"}


@dataclass(frozen=True)
class Param:
    name: str
    c_type: str  # the declared type, qualifiers stripped ("float*", "unsigned int", "T")
    kind: str  # a SCALAR_TYPES value, POINTER or UNKNOWN


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[Param, ...]
    extern_c: bool
    # (kind "type"|"value", name, default or "") per template parameter
    template_params: tuple[tuple[str, str, str], ...] = ()

    @property
    def is_template(self) -> bool:
        return bool(self.template_params)


def strip_comments(source: str) -> str:
    """Remove // and /* */ comments, keeping string and char literals and line numbers intact."""
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c in "\"'":
            j = _end_of_literal(source, i)
            out.append(source[i:j])
            i = j
        elif source.startswith("//", i):
            j = source.find("\n", i)
            i = n if j < 0 else j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * source.count("\n", i, j))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _end_of_literal(s: str, i: int) -> int:
    quote, j = s[i], i + 1
    while j < len(s) and s[j] != quote and s[j] != "\n":
        j += 2 if s[j] == "\\" else 1
    return min(j + 1, len(s))


@functools.lru_cache(maxsize=256)
def parse_kernels(source: str) -> dict[str, KernelSignature]:
    """Every `__global__` function in `source`, by name (a definition wins over an earlier declaration).

    Memoised (a model constructs `ModelNew` many times with one source); callers must not mutate it.
    """
    text = strip_comments(source)
    aliases = _type_aliases(text)
    extern_spans = _extern_c_blocks(text)
    kernels: dict[str, KernelSignature] = {}
    for m in re.finditer(r"\b__global__\b", text):
        sig = _kernel_at(text, m.start(), m.end(), aliases, extern_spans)
        if sig is not None and (sig.name not in kernels or not kernels[sig.name].params):
            kernels[sig.name] = sig
    return kernels


def _kernel_at(text: str, start: int, end: int, aliases: dict[str, str],
               extern_spans: list[tuple[int, int]]) -> KernelSignature | None:
    found = _name_and_params(text, end)
    if found is None:
        return None
    name, params_text = found
    preamble = text[_statement_start(text, start):start]
    template_params = _template_params(preamble)
    extern_c = bool(re.search(r'extern\s+"C"', preamble)) or any(a < start < b for a, b in extern_spans)
    template_names = {p for _, p, _ in template_params}
    params = tuple(_param(p, aliases, template_names) for p in _split_top(params_text))
    params = tuple(p for p in params if p is not None)
    return KernelSignature(name=name, params=params, extern_c=extern_c, template_params=template_params)


def _name_and_params(text: str, i: int) -> tuple[str, str] | None:
    """After `__global__`: skip the return type and decorations, return (name, parameter text)."""
    token = re.compile(r"\s*(\[\[|[A-Za-z_]\w*|\(|[^\sA-Za-z_(])")
    last_ident: str | None = None
    while (m := token.match(text, i)) is not None:
        tok = m.group(1)
        if tok == "[[":
            close = text.find("]]", m.end())
            i = m.end() if close < 0 else close + 2
        elif tok == "<" and last_ident is not None:  # explicit instantiation: scale<float, 256>(...)
            close = _matching(text, m.end() - 1, "<", ">")
            i = m.end() if close < 0 else close + 1
        elif tok == "(":
            close = _matching(text, m.end() - 1, "(", ")")
            if close < 0:
                return None
            if last_ident in _DECORATORS:
                i, last_ident = close + 1, None
                continue
            if last_ident is None or last_ident in _NOT_NAMES:
                return None
            return last_ident, text[m.end():close]
        elif tok[0].isalpha() or tok[0] == "_":
            last_ident, i = tok, m.end()
        elif tok in ";{}":
            return None
        else:
            i = m.end()
    return None


def _matching(text: str, open_at: int, opening: str, closing: str) -> int:
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == opening:
            depth += 1
        elif text[j] == closing:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _statement_start(text: str, i: int) -> int:
    """Index just after the previous `;`, `{` or `}` (the start of the declaration holding position i)."""
    return max(text.rfind(ch, 0, i) for ch in ";{}") + 1


def _template_params(preamble: str) -> tuple[tuple[str, str, str], ...]:
    m = re.search(r"\btemplate\s*<", preamble)
    if not m:
        return ()
    close = _matching(preamble, m.end() - 1, "<", ">")
    inner = preamble[m.end():close if close >= 0 else len(preamble)]
    out = []
    for part in _split_top(inner):
        head, _, default = part.partition("=")
        words = re.findall(r"[A-Za-z_]\w*", head)
        if not words:
            continue
        kind = "type" if words[0] in ("typename", "class") else "value"
        out.append((kind, words[-1], default.strip()))
    return tuple(out)


def _split_top(text: str) -> list[str]:
    """Split on commas outside (), <>, [], {}."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _param(text: str, aliases: dict[str, str], template_names: set[str]) -> Param | None:
    text = re.sub(r"\b(__launch_bounds__|__attribute__|__align__|alignas)\s*\(.*?\)+", " ",
                  text.split("=")[0])
    if text.strip() == "void":
        return None
    is_pointer = "*" in text or "[" in text
    words = [w for w in re.findall(r"[A-Za-z_][\w:]*", text.split("[")[0]) if w not in _QUALIFIERS]
    if "<" in text and not is_pointer:
        return Param(name=words[-1] if words else "", c_type=text.strip(), kind=UNKNOWN)
    name = words[-1] if len(words) >= 2 else ""
    type_words = words[:-1] if len(words) >= 2 else words
    c_type = " ".join(type_words) + ("*" if is_pointer else "")
    if is_pointer:
        return Param(name=name, c_type=c_type, kind=POINTER)
    if "&" in text:
        return Param(name=name, c_type=c_type, kind=UNKNOWN)
    if len(type_words) == 1 and type_words[0] in template_names:
        return Param(name=name, c_type=type_words[0], kind=type_words[0])  # resolved per instantiation
    return Param(name=name, c_type=c_type, kind=scalar_kind(" ".join(type_words), aliases))


def scalar_kind(c_type: str, aliases: dict[str, str] | None = None) -> str:
    """The numpy scalar name for a C type spelling, following aliases; UNKNOWN if not a known scalar."""
    aliases = aliases or {}
    spelled = " ".join(c_type.replace("std::", "").split())
    for _ in range(8):  # alias chains are short; the bound stops cycles
        if spelled in SCALAR_TYPES:
            return SCALAR_TYPES[spelled]
        if spelled not in aliases:
            break
        spelled = aliases[spelled]
    return SCALAR_TYPES.get(spelled, UNKNOWN)


def _type_aliases(text: str) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for m in re.finditer(r"\btypedef\s+([\w\s]+?)\s+(\w+)\s*;", text):
        aliases[m.group(2)] = " ".join(w for w in m.group(1).split() if w not in _QUALIFIERS)
    for m in re.finditer(r"\busing\s+(\w+)\s*=\s*([\w\s:]+?)\s*;", text):
        aliases[m.group(1)] = " ".join(m.group(2).replace("std::", "").split())
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([A-Za-z_][\w \t]*?)[ \t]*$", text,
                         re.MULTILINE):
        aliases.setdefault(m.group(1), " ".join(m.group(2).split()))
    return aliases


def _extern_c_blocks(text: str) -> list[tuple[int, int]]:
    spans = []
    for m in re.finditer(r'extern\s+"C"\s*\{', text):
        close = _matching(text, m.end() - 1, "{", "}")
        spans.append((m.end(), close if close >= 0 else len(text)))
    return spans


# --------------------------------------------------------------------------------------------------
# Name expressions and instantiation


def base_name(expression: str) -> str:
    """`ns::scale<float, 256>` or `&scale<float,256>` -> `scale`."""
    head = expression.strip().lstrip("&").split("<", 1)[0].strip()
    return head.rsplit("::", 1)[-1]


def template_args(expression: str) -> list[str]:
    if "<" not in expression:
        return []
    inner = expression[expression.index("<") + 1:expression.rindex(">")]
    return _split_top(inner)


def instantiate(sig: KernelSignature, expression: str,
                aliases: dict[str, str] | None = None) -> KernelSignature:
    """`sig` with template type parameters replaced by the arguments written in `expression`."""
    if not sig.is_template:
        return sig
    args = template_args(expression)
    binding = {name: args[i] if i < len(args) else default
               for i, (kind, name, default) in enumerate(sig.template_params) if kind == "type"}
    binding = {name: arg for name, arg in binding.items() if arg}
    params = []
    for p in sig.params:
        if p.kind in binding:
            params.append(Param(p.name, binding[p.kind], scalar_kind(binding[p.kind], aliases)))
        elif p.kind not in SCALAR_TYPES.values() and p.kind not in (POINTER, UNKNOWN):
            params.append(Param(p.name, p.c_type, UNKNOWN))  # a template parameter left unbound
        else:
            params.append(p)
    return KernelSignature(sig.name, tuple(params), sig.extern_c, sig.template_params)


def needs_name_expression(name: str, kernels: dict[str, KernelSignature]) -> bool:
    """Whether `name` must be registered with NVRTC to be found by that name after compilation.

    `extern "C"` kernels keep their names; templates and C++-linkage kernels are mangled. A name the
    scanner did not find is assumed to be `extern "C"` (e.g. generated by a macro).
    """
    if "<" in name or "::" in name:
        return True
    sig = kernels.get(name)
    return sig is not None and not sig.extern_c


def canonical_name_expressions(source: str, names: list[str] | tuple[str, ...] | None,
                               name_expressions: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The name expressions a compile request registers: explicit ones plus every requested kernel name
    that would otherwise be mangled. `names=None` means every kernel of the source (`cuda.load`).
    Sorted and de-duplicated, because they are part of the cache key.
    """
    if isinstance(name_expressions, str):
        name_expressions = (name_expressions,)
    kernels = parse_kernels(source)
    wanted = list(kernels) if names is None else list(names)
    if names is None:
        wanted = [n for n in wanted if not kernels[n].is_template]
    implied = [n for n in wanted if needs_name_expression(n, kernels)]
    return tuple(sorted(set(name_expressions or ()) | set(implied)))
