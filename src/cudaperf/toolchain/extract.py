"""Which CUDA a solution compiles, read from its Python AST without executing any of it.

Covers: `detect_format(source)` (fast / inline / pytorch / plain CUDA C) and `extract_units(source)`,
which finds every `cudaperf.cuda.compile/load(...)` call (under any import alias, including `from
cudaperf.cuda import compile as X`) and every `load_inline(...)` call, and resolves their arguments when
they are constants: string literals (implicit concatenation included), names bound to constants at module
level or earlier in the same function, `+` of constants, f-strings over constants, `str.join`/`strip`/
`replace`/`format` and `textwrap.dedent` on constants, lists/tuples/dicts of those. The same compile
request as the running solution will make is computed (canonical options and NVRTC name expressions), so
the pool's build fills the cache entry the GPU worker will look up.

Resolution is conservative: a name assigned in a loop, a branch or a `try`, a function parameter, an
import from elsewhere, `*args`/`**kwargs`, or any call outside the small list above makes the unit
unresolved. Unresolved units are returned with the reason (not an error): the worker compiles them
itself when the solution runs.

Not covered: security policy on the source (that is `cudaperf.anticheat.static`); compiling.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from cudaperf.types import SolutionFormat

NVRTC = "nvrtc"
INLINE = "inline"

_CUDA_MODULE = "cudaperf.cuda"
_INLINE_MODULE = "torch.utils.cpp_extension"


@dataclass(frozen=True)
class CudaUnit:
    """One CUDA compile request found in a solution.

    For `kind == "nvrtc"`: `source`, `names` (None = every kernel, i.e. `cuda.load`), `options`, `arch`
    (None = the build's target) and canonical `name_expressions`. For `kind == "inline"`: the resolved
    positional `args` and keyword `kwargs` of the `load_inline` call, exactly as written.
    """

    kind: str
    line: int
    resolved: bool
    message: str = ""  # why the unit could not be resolved
    source: str | None = None
    names: tuple[str, ...] | None = None
    options: tuple[str, ...] = ()
    arch: str | None = None
    name_expressions: tuple[str, ...] = ()
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def cuda_source(self) -> str | None:
        """The CUDA text of the unit (for inline: the `cuda_sources` argument, joined)."""
        if self.kind == NVRTC:
            return self.source
        value = self.kwargs.get("cuda_sources", self.args[2] if len(self.args) > 2 else None)
        if isinstance(value, (list, tuple)):
            return "\n".join(str(v) for v in value)
        return value


class _Unresolvable(Exception):
    pass


# --------------------------------------------------------------------------------------------------
# Format detection


def detect_format(source: str) -> SolutionFormat:
    """INLINE if the solution calls `load_inline`, FAST if it uses `cudaperf.cuda`, CUDA_C for a plain
    CUDA file (not Python, has `__global__`), else PYTORCH."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return SolutionFormat.CUDA_C if "__global__" in source else SolutionFormat.PYTORCH
    aliases = _Aliases(tree)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    if aliases.inline_imported or any(aliases.call_kind(c) == INLINE for c in calls):
        return SolutionFormat.INLINE
    if aliases.cuda_imported or any(aliases.call_kind(c) == NVRTC for c in calls):
        return SolutionFormat.FAST
    return SolutionFormat.PYTORCH


# --------------------------------------------------------------------------------------------------
# Import aliases


class _Aliases:
    """Names under which a solution reaches `cudaperf.cuda` and `load_inline`."""

    def __init__(self, tree: ast.AST):
        self.cuda_modules: set[str] = set()  # names bound to the cudaperf.cuda module
        self.cudaperf_roots: set[str] = set()  # names bound to the cudaperf package
        self.functions: dict[str, str] = {}  # local name -> "compile" | "load" | "load_inline"
        self.inline_modules: set[str] = set()  # names bound to torch.utils.cpp_extension
        self.cuda_imported = False
        self.inline_imported = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                self._import(node)
            elif isinstance(node, ast.ImportFrom) and node.module:
                self._import_from(node)

    def _import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name == _CUDA_MODULE or a.name.startswith(_CUDA_MODULE + "."):
                self.cuda_imported = True
                if a.asname:
                    self.cuda_modules.add(a.asname)
                else:
                    self.cudaperf_roots.add("cudaperf")
            elif a.name == _INLINE_MODULE:
                self.inline_imported = True
                if a.asname:
                    self.inline_modules.add(a.asname)

    def _import_from(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            local = a.asname or a.name
            if node.module == "cudaperf" and a.name == "cuda":
                self.cuda_imported = True
                self.cuda_modules.add(local)
            elif node.module == _CUDA_MODULE and a.name in ("compile", "load"):
                self.cuda_imported = True
                self.functions[local] = a.name
            elif node.module == _CUDA_MODULE:
                self.cuda_imported = True
            elif node.module == "torch.utils" and a.name == "cpp_extension":
                self.inline_imported = True
                self.inline_modules.add(local)
            elif node.module == _INLINE_MODULE and a.name in ("load_inline", "*"):
                self.inline_imported = True
                if a.name == "load_inline":
                    self.functions[local] = "load_inline"

    def call_kind(self, call: ast.Call) -> str | None:
        return {"compile": NVRTC, "load": NVRTC, "load_inline": INLINE}.get(self.call_function(call) or "")

    def call_function(self, call: ast.Call) -> str | None:
        """'compile' | 'load' | 'load_inline' | None for a call node."""
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in self.functions:
                return self.functions[func.id]
            return "load_inline" if func.id == "load_inline" else None
        if not isinstance(func, ast.Attribute):
            return None
        if func.attr == "load_inline":  # torch.utils.cpp_extension.load_inline, ce.load_inline, ...
            return "load_inline"
        if func.attr in ("compile", "load") and self._is_cuda_module(func.value):
            return func.attr
        return None

    def _is_cuda_module(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.cuda_modules
        return (isinstance(node, ast.Attribute) and node.attr == "cuda" and isinstance(node.value, ast.Name)
                and node.value.id in self.cudaperf_roots)


# --------------------------------------------------------------------------------------------------
# Constant resolution


_STR_METHODS = {"join", "strip", "lstrip", "rstrip", "replace", "format", "upper", "lower"}
# Resolution evaluates candidate-controlled expressions, so it is bounded: repeated `x = x + x` or a
# chain of `.replace` could otherwise build gigabytes in the build process.
MAX_RESOLVED_CHARS = 4_000_000
_HUGE_WIDTH = re.compile(r"\{[^{}]*\d{5,}[^{}]*\}")  # "{:>99999999}" in a format string


class _Resolver:
    """Evaluates the constant subset of Python expressions over an environment of known names."""

    def __init__(self, env: dict[str, Any], unknown: dict[str, str]):
        self.env = env
        self.unknown = unknown  # name -> why it is not a constant

    def value(self, node: ast.AST) -> Any:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise _Unresolvable(f"{type(node).__name__} expression at line {getattr(node, 'lineno', '?')}")
        result = method(node)
        if isinstance(result, (str, list, tuple, dict)) and len(result) > MAX_RESOLVED_CHARS:
            raise _Unresolvable(f"value longer than {MAX_RESOLVED_CHARS} "
                                f"at line {getattr(node, 'lineno', '?')}")
        return result

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _Name(self, node: ast.Name) -> Any:
        if node.id in self.env:
            return self.env[node.id]
        raise _Unresolvable(self.unknown.get(node.id, f"name {node.id!r} is not bound to a constant"))

    def _JoinedStr(self, node: ast.JoinedStr) -> str:
        return "".join(self.value(v) for v in node.values)

    def _FormattedValue(self, node: ast.FormattedValue) -> str:
        value = self.value(node.value)
        value = {-1: value, 115: str(value), 114: repr(value), 97: ascii(value)}[node.conversion]
        spec = self.value(node.format_spec) if node.format_spec is not None else ""
        if re.search(r"\d{5,}", spec):
            raise _Unresolvable(f"format width {spec!r} at line {node.lineno}")
        return format(value, spec)

    def _BinOp(self, node: ast.BinOp) -> Any:
        if not isinstance(node.op, ast.Add):
            raise _Unresolvable(f"operator {type(node.op).__name__} at line {node.lineno}")
        left, right = self.value(node.left), self.value(node.right)
        if type(left) is not type(right) or not isinstance(left, (str, list, tuple, int, float)):
            raise _Unresolvable(f"'+' of {type(left).__name__} and {type(right).__name__} "
                                f"at line {node.lineno}")
        return left + right

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.value(node.operand)
        if isinstance(node.op, ast.USub) and isinstance(value, (int, float)):
            return -value
        raise _Unresolvable(f"unary {type(node.op).__name__} at line {node.lineno}")

    def _List(self, node: ast.List) -> list:
        return [self.value(e) for e in node.elts]

    def _Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.value(e) for e in node.elts)

    def _Dict(self, node: ast.Dict) -> dict:
        if any(k is None for k in node.keys):
            raise _Unresolvable(f"dict unpacking at line {node.lineno}")
        return {self.value(k): self.value(v) for k, v in zip(node.keys, node.values)}

    def _Call(self, node: ast.Call) -> Any:
        func = node.func
        args = [self.value(a) for a in node.args]
        kwargs = {k.arg: self.value(k.value) for k in node.keywords if k.arg is not None}
        if len(kwargs) != len(node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            raise _Unresolvable(f"*args/**kwargs in a call at line {node.lineno}")
        if _is_dedent(func) and len(args) == 1 and isinstance(args[0], str) and not kwargs:
            return textwrap.dedent(args[0])
        if isinstance(func, ast.Attribute) and func.attr in _STR_METHODS:
            target = self.value(func.value)
            if isinstance(target, str):
                _check_growth(target, func.attr, args, node.lineno)
                try:
                    return getattr(target, func.attr)(*args, **kwargs)
                except (TypeError, ValueError, IndexError, KeyError, AttributeError) as exc:
                    raise _Unresolvable(f"{func.attr}() at line {node.lineno}: {exc}") from None
        raise _Unresolvable(f"call to {ast.unparse(func)} at line {node.lineno}")


def _check_growth(target: str, method: str, args: list, line: int) -> None:
    """Refuse str methods whose result would exceed the bound, before running them."""
    if method == "replace" and len(args) >= 2 and all(isinstance(a, str) for a in args[:2]):
        old, new = args[0], args[1]
        count = target.count(old) if old else len(target) + 1
        if len(target) + count * max(0, len(new) - len(old)) > MAX_RESOLVED_CHARS:
            raise _Unresolvable(f"replace() result too long at line {line}")
    if method == "format" and _HUGE_WIDTH.search(target):
        raise _Unresolvable(f"format width too large at line {line}")


def _is_dedent(func: ast.AST) -> bool:
    return (isinstance(func, ast.Name) and func.id == "dedent") or (
        isinstance(func, ast.Attribute) and func.attr == "dedent"
        and isinstance(func.value, ast.Name) and func.value.id == "textwrap")


# --------------------------------------------------------------------------------------------------
# Walking the module in execution order


def extract_units(source: str) -> list[CudaUnit]:
    """Every CUDA compile call in `source`, in source order; [] if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: NUL bytes in the source
        return []
    walker = _Walker(_Aliases(tree))
    walker.module(tree)
    return sorted(walker.units, key=lambda u: u.line)


class _Walker:
    """Visits statements in order, keeping which names hold constants at each point.

    Module-level code runs first; function bodies (methods of ModelNew included) are visited afterwards
    with the module's final constants, which is when they run. A function's own locals (parameters and
    every name it assigns) start unknown, as in Python. Names assigned under a loop, branch, `with` or
    `try` lose their value: which assignment holds is not known statically.
    """

    def __init__(self, aliases: _Aliases):
        self.aliases = aliases
        self.units: list[CudaUnit] = []
        self._deferred: list[tuple[ast.AST, frozenset[str]]] = []  # (function node, enclosing locals)

    def module(self, tree: ast.Module) -> None:
        env: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        self.block(tree.body, env, unknown, frozenset())
        while self._deferred:
            node, enclosing = self._deferred.pop(0)
            self.function(node, env, unknown, enclosing)

    def function(self, node: ast.AST, module_env: dict, module_unknown: dict,
                 enclosing: frozenset[str]) -> None:
        env, unknown = dict(module_env), dict(module_unknown)
        params = set(_parameters(node.args))
        body = node.body if isinstance(node.body, list) else [ast.Expr(node.body)]
        own = set().union(*(_stored_names(stmt) for stmt in body)) if body else set()
        for name in enclosing:
            _forget(env, unknown, name, "a local of an enclosing function")
        for name in own:
            _forget(env, unknown, name, "a local not (yet) bound to a constant")
        for name in params:
            _forget(env, unknown, name, "a function parameter")
        self.block(body, env, unknown, enclosing | own | params)

    def block(self, body: list[ast.stmt], env: dict, unknown: dict, local: frozenset[str]) -> None:
        for stmt in body:
            self.statement(stmt, env, unknown, local)

    def statement(self, stmt: ast.stmt, env: dict, unknown: dict, local: frozenset[str]) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._calls_in(stmt.decorator_list + _defaults(stmt.args), env, unknown, local)
            self._deferred.append((stmt, local))
            _forget(env, unknown, stmt.name, "a function")
            return
        if isinstance(stmt, ast.ClassDef):
            self.block(stmt.body, dict(env), dict(unknown), local)  # class bodies run at definition time
            _forget(env, unknown, stmt.name, "a class")
            return
        if _is_compound(stmt):
            for name in _stored_names(stmt):
                _forget(env, unknown, name, f"assigned under a {type(stmt).__name__.lower()} statement")
            self._calls_in(_header_exprs(stmt), env, unknown, local)
            for sub in _sub_blocks(stmt):
                self.block(sub, dict(env), dict(unknown), local)
            return
        self._calls_in([stmt], env, unknown, local)
        _bind(stmt, env, unknown)

    def _calls_in(self, nodes: list[ast.AST], env: dict, unknown: dict, local: frozenset[str]) -> None:
        # Iterative: candidate code can nest expressions thousands deep ("a" + "a" + ...).
        stack = [(node, env, unknown) for node in reversed(nodes)]
        while stack:
            node, env, unknown = stack.pop()
            if isinstance(node, ast.Lambda):
                self._deferred.append((node, local))
                continue
            if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                env, unknown = dict(env), dict(unknown)
                for gen in node.generators:
                    for name in _names_in(gen.target):
                        _forget(env, unknown, name, "a comprehension variable")
            if isinstance(node, ast.Call) and (function := self.aliases.call_function(node)) is not None:
                self.units.append(_unit(function, node, _Resolver(env, unknown)))
            stack.extend((child, env, unknown) for child in reversed(list(ast.iter_child_nodes(node))))


def _defaults(args: ast.arguments) -> list[ast.AST]:
    return [*args.defaults, *(d for d in args.kw_defaults if d is not None)]


def _bind(stmt: ast.stmt, env: dict, unknown: dict) -> None:
    """Apply a simple statement's effect on which names hold constants."""
    resolver = _Resolver(env, unknown)
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        try:
            value, why = resolver.value(stmt.value), ""
        except _Unresolvable as exc:
            value, why = None, str(exc)
        except RecursionError:
            value, why = None, "expression nested too deeply"
        for target in targets:
            if isinstance(target, ast.Name) and not why:
                env[target.id] = value
                unknown.pop(target.id, None)
            else:
                for name in _names_in(target):
                    _forget(env, unknown, name, f"not a constant ({why or 'unpacking'})")
        return
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        name = stmt.target.id
        try:
            env[name] = resolver.value(ast.BinOp(left=ast.Name(name, ast.Load()), op=stmt.op,
                                                 right=stmt.value, lineno=stmt.lineno))
        except _Unresolvable as exc:
            _forget(env, unknown, name, str(exc))
        except RecursionError:
            _forget(env, unknown, name, "nested too deeply")
        return
    for name in _stored_names(stmt):
        _forget(env, unknown, name, f"bound by a {type(stmt).__name__} statement")


def _forget(env: dict, unknown: dict, name: str, why: str) -> None:
    env.pop(name, None)
    unknown[name] = f"name {name!r} is {why}" if not why.startswith("name") else why


_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)


def _is_compound(stmt: ast.stmt) -> bool:
    return isinstance(stmt, _COMPOUND) or type(stmt).__name__ == "TryStar"


def _header_exprs(stmt: ast.stmt) -> list[ast.AST]:
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.Match):
        return [stmt.subject]
    return []


def _sub_blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    blocks = [getattr(stmt, name) for name in ("body", "orelse", "finalbody") if getattr(stmt, name, None)]
    blocks += [h.body for h in getattr(stmt, "handlers", [])]
    blocks += [c.body for c in getattr(stmt, "cases", [])]
    return blocks


def _stored_names(node: ast.AST) -> set[str]:
    """Names a statement (and everything nested in it, nested function bodies excluded) may bind."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    names: set[str] = set()
    for sub in _walk_scope(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and sub is not node:
            names.add(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in sub.names)
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            names.add(sub.name)
    return names


def _walk_scope(node: ast.AST):
    """ast.walk that does not enter nested function or class bodies (their names are not ours)."""
    stack = [node]
    while stack:
        sub = stack.pop()
        yield sub
        if sub is not node and isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                                ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(sub))


def _names_in(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _parameters(args: ast.arguments) -> list[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    every += [a for a in (args.vararg, args.kwarg) if a is not None]
    return [a.arg for a in every]


# --------------------------------------------------------------------------------------------------
# Units


def _unit(function: str, call: ast.Call, resolver: _Resolver) -> CudaUnit:
    kind = INLINE if function == "load_inline" else NVRTC
    try:
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            raise _Unresolvable("*args/**kwargs in the call")
        args = tuple(resolver.value(a) for a in call.args)
        kwargs = {k.arg: resolver.value(k.value) for k in call.keywords}
        if kind == INLINE:
            return CudaUnit(kind=INLINE, line=call.lineno, resolved=True, args=args, kwargs=kwargs)
        return _nvrtc_unit(function, call.lineno, args, kwargs)
    except _Unresolvable as exc:
        return CudaUnit(kind=kind, line=call.lineno, resolved=False, message=str(exc))
    except RecursionError:
        return CudaUnit(kind=kind, line=call.lineno, resolved=False,
                        message="an argument is nested too deeply")


def _nvrtc_unit(function: str, line: int, args: tuple, kwargs: dict) -> CudaUnit:
    from cudaperf.toolchain.nvrtc import normalize_options
    from cudaperf.toolchain.signature import canonical_name_expressions

    positional = ("source", "name") if function == "compile" else ("source",)
    if len(args) > len(positional):
        raise _Unresolvable(f"cuda.{function} takes {len(positional)} positional arguments, "
                            f"{len(args)} given")
    bound = dict(zip(positional, args)) | kwargs
    unexpected = set(bound) - {*positional, "options", "arch", "name_expressions"}
    if unexpected or "source" not in bound or (function == "compile" and "name" not in bound):
        raise _Unresolvable(f"cuda.{function} call with arguments {sorted(bound)}")
    source = bound["source"]
    if not isinstance(source, str):
        raise _Unresolvable(f"source is a {type(source).__name__}, not a string")
    names = (bound["name"],) if function == "compile" else None
    exprs = canonical_name_expressions(source, names, bound.get("name_expressions"))
    return CudaUnit(kind=NVRTC, line=line, resolved=True, source=source, names=names,
                    options=normalize_options(bound.get("options")), arch=bound.get("arch"),
                    name_expressions=exprs)
