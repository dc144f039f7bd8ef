"""Bounds of index expressions over the whole launch: the bytes each global array's accesses can span.

Covers: `Interval` arithmetic and `IntervalEvaluator`, which walks the syntax like `KernelScope.value` with
threadIdx in [0, blockDim-1], blockIdx in [0, gridDim-1], loop variables between their first value and
their bound, sizes from the caller, `/` `%` `&` `>>` with integer semantics (a remainder keeps the
dividend's sign: the periodic wrap `(i % n + n) % n` stays in [0, n)), `__device__` index helpers as the
union of what they return; then `footprints`, per global
array the span max(offset + width) - min(offset) over its accesses: the compulsory DRAM traffic that
intensity divides by. When the grid is unknown but a guard `i < N` bounds a dimension, the index of that
dimension is taken to cover [0, N).

Not covered: holes in the span (a strided access reads a span, not all of it), reuse between arrays,
accesses made inside helpers (`Access.via`: their array counts its bytes requested, no span).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tree_sitter import Node

from cudaperf.analysis import cst
from cudaperf.analysis.scope import (
    BUILTIN_VECTORS,
    MAX_INLINE_DEPTH,
    InlineScope,
    KernelScope,
    call_name,
    declared_vars,
    init_var,
)
from cudaperf.analysis.symbolic import Poly, Unknown


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    @staticmethod
    def point(v: float) -> Interval:
        return Interval(float(v), float(v))

    def __add__(self, other):
        o = _iv(other)
        return Interval(self.lo + o.lo, self.hi + o.hi)

    __radd__ = __add__

    def __sub__(self, other):
        o = _iv(other)
        return Interval(self.lo - o.hi, self.hi - o.lo)

    def __rsub__(self, other):
        return _iv(other) - self

    def __mul__(self, other):
        o = _iv(other)
        c = (self.lo * o.lo, self.lo * o.hi, self.hi * o.lo, self.hi * o.hi)
        return Interval(min(c), max(c))

    __rmul__ = __mul__

    def __neg__(self):
        return Interval(-self.hi, -self.lo)

    def union(self, other: Interval) -> Interval:
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))


def _iv(v) -> Interval:
    if isinstance(v, Interval):
        return v
    if isinstance(v, Poly) and v.is_const:
        return Interval.point(float(v.value))
    if isinstance(v, (int, float)):
        return Interval.point(float(v))
    raise TypeError(f"not an interval: {v!r}")


class IntervalEvaluator:
    """Value ranges over all threads and iterations. `dims`: blockDim/gridDim values (None: unknown)."""

    def __init__(self, scope: KernelScope, sizes: dict[str, float], dims: dict[str, float | None],
                 guards: dict[str, float] | None = None):
        self.scope, self.sizes = scope, sizes
        self.builtins: dict[str, Interval | None] = {}
        for d in "xyz":
            bd, gd = dims.get(f"blockDim.{d}"), dims.get(f"gridDim.{d}")
            n = (guards or {}).get(d)
            if gd is None and n is not None:  # a guarded global index covers [0, N): see the module docstring
                bd, gd = 1.0, n
            self.builtins[f"blockDim.{d}"] = Interval.point(bd) if bd is not None else None
            self.builtins[f"gridDim.{d}"] = Interval.point(gd) if gd is not None else None
            self.builtins[f"threadIdx.{d}"] = Interval(0, bd - 1) if bd is not None else None
            self.builtins[f"blockIdx.{d}"] = Interval(0, gd - 1) if gd is not None else None
        self._memo: dict[str, Interval | Unknown] = {}
        self._busy: set[str] = set()
        self.bound: dict[str, Interval] = {}  # a helper's parameters (see `_inline`)
        self.depth = 0

    def value(self, node: Node | None) -> Interval | Unknown:
        if node is None:
            return Unknown(False, "missing")
        try:
            return self._value(node)
        except (TypeError, ValueError, OverflowError, RecursionError, ZeroDivisionError) as exc:
            return Unknown(False, f"interval: {exc}")

    def _value(self, node: Node) -> Interval | Unknown:
        t = node.type
        if t in ("number_literal", "sizeof_expression"):
            v = self.scope.value(node)
            return (Interval.point(float(v.value)) if isinstance(v, Poly) and v.is_const
                    else Unknown(False, "literal"))
        if t in ("parenthesized_expression", "condition_clause"):
            inner = [c for c in node.named_children if c.type != "comment"]
            return self._value(inner[-1]) if inner else Unknown(False, "empty")
        if t == "identifier":
            return self._identifier(node)
        if t == "field_expression":
            base = cst.text(node.child_by_field_name("argument"))
            if base in BUILTIN_VECTORS:
                found = self.builtins.get(f"{base}.{cst.text(node.child_by_field_name('field'))}")
                return found if found is not None else Unknown(False, f"{base} unknown")
            return Unknown(False, "field")
        if t == "binary_expression":
            return self._binary(node)
        if t == "unary_expression" and cst.text(node.child_by_field_name("operator")) == "-":
            a = self._value(node.child_by_field_name("argument"))
            return -a if isinstance(a, Interval) else a
        if t == "cast_expression":
            return self._value(node.child_by_field_name("value"))
        if t == "conditional_expression":
            a = self._value(node.child_by_field_name("consequence"))
            b = self._value(node.child_by_field_name("alternative"))
            return a.union(b) if isinstance(a, Interval) and isinstance(b, Interval) else Unknown(False, "?:")
        if t == "call_expression":
            return self._call(node)
        return Unknown(False, t)

    def _call(self, node: Node) -> Interval | Unknown:
        name = call_name(node)
        args = node.child_by_field_name("arguments")
        argv = [self._value(a) for a in (args.named_children if args else [])]
        if any(isinstance(a, Unknown) for a in argv) or not argv:
            return Unknown(False, name)
        if name in ("static_cast", "int", "unsigned", "size_t", "long") and len(argv) == 1:
            return argv[0]
        if name in ("min", "umin", "fminf") and len(argv) == 2:
            return Interval(min(argv[0].lo, argv[1].lo), min(argv[0].hi, argv[1].hi))
        if name in ("max", "umax", "fmaxf") and len(argv) == 2:
            return Interval(max(argv[0].lo, argv[1].lo), max(argv[0].hi, argv[1].hi))
        if name in ("__mul24", "__umul24") and len(argv) == 2:
            return argv[0] * argv[1]
        helper = self.scope.file.device_functions.get(name)
        if helper is not None and self.depth < MAX_INLINE_DEPTH:
            return self._inline(helper, argv) or Unknown(False, name)
        return Unknown(False, name)

    def _inline(self, fn: Node, argv: list[Interval]) -> Interval | None:
        """The range a `__device__` helper returns (the union over its `return`s), its parameters bound to
        the arguments' ranges: index helpers such as a clamp."""
        params = [v for p in cst.function_params(fn) for v in declared_vars(p, frozenset(), is_param=True)]
        if len(params) != len(argv) or any(p.pointer_depth or p.is_array for p in params):
            return None
        callee = IntervalEvaluator(InlineScope(fn, self.scope.file, {}, self.scope), self.sizes, {}, None)
        callee.builtins, callee.depth = self.builtins, self.depth + 1
        callee.bound = dict(zip((p.name for p in params), argv))
        body = callee.scope.body
        returned = [r.named_children[0] for r in cst.walk(body) if r.type == "return_statement"
                    and r.named_children] if body is not None else []
        out: Interval | None = None
        for r in returned:
            v = callee.value(r)
            if not isinstance(v, Interval):
                return None
            out = v if out is None else out.union(v)
        return out

    def _binary(self, node: Node) -> Interval | Unknown:
        op = cst.text(node.child_by_field_name("operator"))
        a, b = self._value(node.child_by_field_name("left")), self._value(node.child_by_field_name("right"))
        if not (isinstance(a, Interval) and isinstance(b, Interval)):
            return Unknown(False, op)
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op in ("/", ">>") and b.lo == b.hi:
            c = b.lo if op == "/" else 2 ** int(b.lo)
            if c > 0:
                return Interval(math.floor(a.lo / c), math.floor(a.hi / c))
        if op == "<<" and b.lo == b.hi:
            return a * Interval.point(2 ** int(b.lo))
        if op == "%" and b.lo == b.hi and b.lo > 0 and a.lo >= 0:
            return Interval(0, min(a.hi, b.lo - 1))
        if op == "%" and b.lo == b.hi and b.lo > 0:  # C: the remainder keeps the dividend's sign
            return Interval(max(a.lo, -(b.lo - 1)), min(max(a.hi, 0), b.lo - 1))
        if op == "&" and b.lo == b.hi and b.lo >= 0 and a.lo >= 0:
            return Interval(0, min(a.hi, b.lo))
        return Unknown(False, op)

    def _identifier(self, node: Node) -> Interval | Unknown:
        scope, name = self.scope, cst.text(node)
        if name in self.bound:
            return self.bound[name]
        if name in scope.template_bindings:
            return _iv(scope.template_bindings[name])
        if name in self.sizes:
            return Interval.point(self.sizes[name])
        key = scope.resolve(name, node)
        if key is not None and key in scope.defs:
            return self._local(key)
        if key is not None:
            return Unknown(False, f"{name} unbound")
        v = scope.value(node)  # macros, file-scope constants
        if isinstance(v, Poly) and v.is_const:
            return Interval.point(float(v.value))
        return Unknown(False, f"{name} unbound")

    def _local(self, key: str) -> Interval | Unknown:
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return Unknown(False, "recursive")
        self._busy.add(key)
        self._memo[key] = self._local_uncached(key)
        self._busy.discard(key)
        return self._memo[key]

    def _local_uncached(self, key: str) -> Interval | Unknown:
        loop = self.scope.loops.get(key)
        if loop is not None:
            return self._loop_range(loop, key)
        defs = self.scope.defs.get(key, [])
        plain = [d for d in defs if d.op == "=" and d.rhs is not None]
        if not plain or len(plain) != len(defs):
            return Unknown(False, "updated")
        out: Interval | None = None
        for d in plain:
            v = self._value(d.rhs)
            if isinstance(v, Unknown):
                return v
            out = v if out is None else out.union(v)
        return out if out is not None else Unknown(False, "unset")

    def _loop_range(self, loop: Node, key: str) -> Interval | Unknown:
        init = loop.child_by_field_name("initializer")
        first_node = None
        if init is not None and init.type == "declaration":
            first_node = next((d.child_by_field_name("value") for d in init.children
                               if d.type == "init_declarator"), None)
        elif init is not None and init.type == "assignment_expression":
            first_node = init.child_by_field_name("right")
        first = self._value(first_node)
        cond = loop.child_by_field_name("condition")
        var = init_var(init)
        if isinstance(first, Unknown) or cond is None or cond.type != "binary_expression":
            return Unknown(False, "loop")
        op = cst.text(cond.child_by_field_name("operator"))
        left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
        if cst.text(left) != var:
            left, right = right, left
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
        end = self._value(right)
        if isinstance(end, Unknown):
            return end
        if op in ("<", "!="):
            return Interval(first.lo, max(first.lo, end.hi - 1))
        if op == "<=":
            return Interval(first.lo, max(first.lo, end.hi))
        if op == ">":
            return Interval(min(first.hi, end.lo + 1), first.hi)
        if op == ">=":
            return Interval(min(first.hi, end.lo), first.hi)
        return Unknown(False, "loop condition")


def footprints(scope: KernelScope, accesses, sizes: dict[str, float], dims: dict[str, float | None],
               guards: dict[str, float]) -> dict[str, float | None]:
    """Per global array, the bytes its accesses span over the launch (None: not bounded)."""
    from cudaperf.analysis.memory import PointerResolver

    resolver = PointerResolver(scope, IntervalEvaluator(scope, sizes, dims, guards))
    spans: dict[str, list[float] | None] = {}
    for a in accesses:
        if a.space != "global":
            continue
        if a.array in spans and spans[a.array] is None:
            continue
        if getattr(a, "via", ""):  # made inside a helper: its offset is not an expression of this scope
            spans[a.array] = None
            continue
        offset = _offset(resolver, a.node)
        if not isinstance(offset, Interval):
            spans[a.array] = None
            continue
        lo, hi = offset.lo, offset.hi + a.access_bytes
        cur = spans.get(a.array)
        spans[a.array] = [lo, hi] if cur is None else [min(cur[0], lo), max(cur[1], hi)]
    return {k: (v[1] - v[0] if v is not None else None) for k, v in spans.items()}


def _offset(resolver, node: Node):
    t = node.type
    if t == "subscript_expression":
        found = resolver.element(node)
        return found[1] if found is not None else None
    if t == "pointer_expression":
        ptr = resolver.resolve(node.child_by_field_name("argument"))
        return ptr.offset_bytes if ptr is not None else None
    if t == "call_expression":
        args = node.child_by_field_name("arguments")
        first = args.named_children[0] if args is not None and args.named_children else None
        ptr = resolver.resolve(first)
        return ptr.offset_bytes if ptr is not None else None
    ptr = resolver.resolve(node)
    return ptr.offset_bytes if ptr is not None else None

