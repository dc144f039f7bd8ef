"""The 32 lanes of one warp, evaluated concretely: exact addresses where the linear form is approximate.

Covers: `Lanes`, a vector of 32 per-lane integers with C semantics (`/` truncates, `%` keeps the
dividend's sign, shifts, masks, comparisons, `min`/`max`, `?:`), and `LaneEvaluator`, which walks the
same syntax as `KernelScope.value` (`__device__` index helpers inlined: `HelperLanes`) but computes numbers:
threadIdx.x = lane (threadIdx.y = lane /
blockDim.x when blockDim.x < 32), blockIdx = 1, launch dimensions from the caller or 256 threads, sizes
from the caller or 1024 (a typical power-of-two extent), loop variables at their first value. From the
lanes' byte addresses: 32-byte sectors per request (what ncu's sectors/request counts) and shared-memory
wavefronts per request (bank conflicts).

Why both this and the linear form: d(address)/d(threadIdx.x) names the stride ("strided by n"), which
feedback needs, but `i / 16` and `i % 16` (a warp covering two rows of a tile) have no linear form; the
concrete lanes get those right.

Not covered: values loaded from memory (indirect indices stay unknown), data-dependent control flow,
later loop iterations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from tree_sitter import Node

from cudaperf.analysis import cst
from cudaperf.analysis.scope import (
    BUILTIN_VECTORS,
    MAX_INLINE_DEPTH,
    InlineScope,
    KernelScope,
    call_name,
    declared_vars,
    type_info,
)
from cudaperf.analysis.symbolic import Poly, Unknown

WARP = 32
GENERIC_SIZE = 1024


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - b * _c_div(a, b)


@dataclass(frozen=True)
class Lanes:
    vals: tuple[int, ...]

    @staticmethod
    def const(v: int) -> Lanes:
        return Lanes((int(v),) * WARP)

    @property
    def uniform(self) -> bool:
        return len(set(self.vals)) == 1

    def _zip(self, other, fn) -> Lanes:
        o = _lanes(other)
        return Lanes(tuple(fn(a, b) for a, b in zip(self.vals, o.vals)))

    def __add__(self, other):
        return self._zip(other, lambda a, b: a + b)

    __radd__ = __add__

    def __sub__(self, other):
        return self._zip(other, lambda a, b: a - b)

    def __rsub__(self, other):
        return _lanes(other) - self

    def __mul__(self, other):
        return self._zip(other, lambda a, b: a * b)

    __rmul__ = __mul__

    def __neg__(self):
        return Lanes(tuple(-a for a in self.vals))


def _lanes(v) -> Lanes:
    if isinstance(v, Lanes):
        return v
    if isinstance(v, Poly) and v.is_const:
        return Lanes.const(int(v.value))
    if isinstance(v, (int, Fraction)):
        return Lanes.const(int(v))
    raise TypeError(f"not a lane value: {v!r}")


_BINARY = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: _c_div(a, b) if b else 0, "%": lambda a, b: _c_mod(a, b) if b else 0,
    "<<": lambda a, b: a << b if 0 <= b < 64 else 0, ">>": lambda a, b: a >> b if 0 <= b < 64 else 0,
    "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b,
    "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b), ">": lambda a, b: int(a > b),
    ">=": lambda a, b: int(a >= b), "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
    "&&": lambda a, b: int(bool(a) and bool(b)), "||": lambda a, b: int(bool(a) or bool(b)),
}
_ELEMENTWISE = {"min": min, "max": max, "umin": min, "umax": max, "__mul24": lambda a, b: a * b,
                "__umul24": lambda a, b: a * b, "abs": lambda a: abs(a), "llabs": lambda a: abs(a)}
_PASS_THROUGH = {"static_cast", "int", "unsigned", "size_t", "int64_t", "long", "__ldg"}


@dataclass(frozen=True)
class LaneEnv:
    """Numbers for the concrete warp: sizes (kernel parameters, macros) and the block shape."""

    sizes: dict[str, float]
    block: tuple[int, int, int] | None = None
    grid: tuple[int, int, int] | None = None


class LaneEvaluator:
    def __init__(self, scope: KernelScope, env: LaneEnv):
        self.scope, self.env = scope, env
        block = env.block or (256, 1, 1)
        self.block = block
        self.grid = env.grid or (64, 64, 1)
        bx = max(1, block[0])
        lanes = range(WARP)
        self.builtins = {
            "threadIdx.x": Lanes(tuple(i % bx for i in lanes)),
            "threadIdx.y": Lanes(tuple((i // bx) % max(1, block[1]) for i in lanes)),
            "threadIdx.z": Lanes.const(0),
            "blockIdx.x": Lanes.const(1), "blockIdx.y": Lanes.const(1), "blockIdx.z": Lanes.const(0),
            "blockDim.x": Lanes.const(block[0]), "blockDim.y": Lanes.const(block[1]),
            "blockDim.z": Lanes.const(block[2]),
            "gridDim.x": Lanes.const(self.grid[0]), "gridDim.y": Lanes.const(self.grid[1]),
            "gridDim.z": Lanes.const(self.grid[2]),
        }
        self._memo: dict[str, Lanes | Unknown] = {}
        self._busy: set[str] = set()
        self.bound: dict[str, Lanes] = {}  # a helper's parameters (see `_inline`)
        self.depth = 0

    def value(self, node: Node | None) -> Lanes | Unknown:
        if node is None:
            return Unknown(False, "missing")
        try:
            return self._value(node)
        except (RecursionError, TypeError, ValueError, OverflowError) as exc:
            return Unknown(True, f"lanes: {exc}")

    def _generic(self, node: Node) -> Lanes | Unknown:
        # an unknown value: uniform ones are taken as a typical size, per-thread ones stay unknown
        return Unknown(True, node.type) if self.scope.is_thread_dependent(node) else Lanes.const(GENERIC_SIZE)

    def _value(self, node: Node) -> Lanes | Unknown:
        t = node.type
        if t == "number_literal":
            v = self.scope.value(node)
            return Lanes.const(int(v.value)) if isinstance(v, Poly) else Unknown(False, "literal")
        if t in ("parenthesized_expression", "condition_clause"):
            inner = [c for c in node.named_children if c.type != "comment"]
            return self._value(inner[-1]) if inner else Unknown(False, "empty")
        if t == "identifier":
            return self._identifier(node)
        if t == "field_expression":
            base = cst.text(node.child_by_field_name("argument"))
            if base in BUILTIN_VECTORS:
                return self.builtins.get(f"{base}.{cst.text(node.child_by_field_name('field'))}",
                                         Lanes.const(0))
            return self._generic(node)
        if t == "binary_expression":
            op = cst.text(node.child_by_field_name("operator"))
            a, b = (self._value(node.child_by_field_name("left")),
                    self._value(node.child_by_field_name("right")))
            if isinstance(a, Unknown) or isinstance(b, Unknown) or op not in _BINARY:
                return _unknown(a, b) if op in _BINARY else self._generic(node)
            return a._zip(b, _BINARY[op])
        if t == "unary_expression":
            op = cst.text(node.child_by_field_name("operator"))
            a = self._value(node.child_by_field_name("argument"))
            if isinstance(a, Unknown):
                return a
            fn = {"-": lambda x: -x, "+": lambda x: x, "!": lambda x: int(not x), "~": lambda x: ~x}.get(op)
            return Lanes(tuple(fn(x) for x in a.vals)) if fn else self._generic(node)
        if t == "cast_expression":
            return self._value(node.child_by_field_name("value"))
        if t == "conditional_expression":
            c = self._value(node.child_by_field_name("condition"))
            a = self._value(node.child_by_field_name("consequence"))
            b = self._value(node.child_by_field_name("alternative"))
            if any(isinstance(x, Unknown) for x in (c, a, b)):
                return _unknown(c, a, b)
            return Lanes(tuple(x if k else y for k, x, y in zip(c.vals, a.vals, b.vals)))
        if t == "call_expression":
            return self._call(node)
        if t == "sizeof_expression":
            inner = node.child_by_field_name("type") or (
                node.named_children[0] if node.named_children else None)
            return Lanes.const(type_info(cst.text(inner)).bytes)
        return self._generic(node)

    def _call(self, node: Node) -> Lanes | Unknown:
        name = call_name(node)
        args = node.child_by_field_name("arguments")
        argv = [self._value(a) for a in (args.named_children if args else []) if a.type != "comment"]
        if name in _PASS_THROUGH and len(argv) == 1:
            return argv[0]
        fn = _ELEMENTWISE.get(name)
        if fn is not None and argv and not any(isinstance(a, Unknown) for a in argv):
            return Lanes(tuple(fn(*vals) for vals in zip(*(a.vals for a in argv))))
        helper = self.scope.file.device_functions.get(name)
        if helper is not None and self.depth < MAX_INLINE_DEPTH:
            inlined = self._inline(helper, argv)
            if inlined is not None:
                return inlined
        return self._generic(node)

    def _inline(self, fn: Node, argv: list) -> Lanes | Unknown | None:
        """A `__device__` helper's returned value, its parameters bound to the arguments' lanes; with
        several `return`s, the one the lanes agree on or the only one that varies (as `scope.interior`)."""
        params = [v for p in cst.function_params(fn) for v in declared_vars(p, frozenset(), is_param=True)]
        if len(params) != len(argv) or any(p.pointer_depth or p.is_array for p in params):
            return None
        if any(isinstance(a, Unknown) for a in argv):
            return _unknown(*argv)
        symbolic = {p.name: Poly.const(a.vals[0]) if a.uniform else Unknown(True, "lanes")
                    for p, a in zip(params, argv)}
        callee = HelperLanes(InlineScope(fn, self.scope.file, symbolic, self.scope), self.env,
                                  dict(zip((p.name for p in params), argv)), self.depth + 1)
        body = callee.scope.body
        returned = [r.named_children[0] for r in cst.walk(body) if r.type == "return_statement"
                    and r.named_children] if body is not None else []
        values = [callee.value(r) for r in returned]
        if not values or any(isinstance(v, Unknown) for v in values):
            return _unknown(*values) if values else None
        distinct = list(dict.fromkeys(values))
        varying = [v for v in distinct if not v.uniform]
        return distinct[0] if len(distinct) == 1 else (varying[0] if len(varying) == 1 else None)

    def _identifier(self, node: Node) -> Lanes | Unknown:
        scope, name = self.scope, cst.text(node)
        if name in self.bound:
            return self.bound[name]
        if name in scope.template_bindings:
            return _lanes(scope.template_bindings[name])
        if name in self.env.sizes:
            return Lanes.const(int(self.env.sizes[name]))
        key = scope.resolve(name, node)
        if key is not None and key in scope.defs:
            return self._local(key)
        if key is not None or name in scope.template_params:
            return Lanes.const(GENERIC_SIZE)
        v = scope.value(node)  # macros and file-scope constants
        if isinstance(v, Poly) and v.is_const:
            return Lanes.const(math.floor(v.value))
        return Lanes.const(32 if name == "warpSize" else GENERIC_SIZE)

    def _local(self, key: str) -> Lanes | Unknown:
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return Unknown(True, "recursive")
        self._busy.add(key)
        defs = [d for d in self.scope.defs.get(key, []) if d.op == "=" and d.rhs is not None]
        # the first write in source order: a loop variable at its first iteration
        value = (self._value(min(defs, key=lambda d: d.node.start_byte).rhs) if defs
                 else Unknown(True, "unset"))
        self._busy.discard(key)
        self._memo[key] = value
        return value


class HelperLanes(LaneEvaluator):
    """The lanes of a `__device__` helper's body, its parameters bound to the caller's lanes."""

    def __init__(self, scope: KernelScope, env: LaneEnv, bound: dict[str, Lanes], depth: int):
        super().__init__(scope, env)
        self.bound, self.depth = bound, depth


def _unknown(*values) -> Unknown:
    reasons = [v.reason for v in values if isinstance(v, Unknown)]
    return Unknown(any(isinstance(v, Unknown) and v.varying for v in values), reasons[0] if reasons else "")


# --------------------------------------------------------------------------------------------------
# What the hardware sees


def sectors_per_request(offsets: Lanes, access_bytes: int) -> int:
    """Distinct 32-byte sectors touched by the warp (ncu: l1tex__average_t_sectors_per_request)."""
    sectors = set()
    for a in offsets.vals:
        sectors.update(range(a // 32, (a + access_bytes - 1) // 32 + 1))
    return len(sectors)


def ideal_sectors(access_bytes: int) -> int:
    return max(1, math.ceil(WARP * access_bytes / 32))


def bank_wavefronts(offsets: Lanes, access_bytes: int) -> int:
    """Shared-memory conflict degree: the busiest bank's distinct words over the ideal wavefronts."""
    banks: dict[int, set[int]] = {}
    for a in offsets.vals:
        for word in range(a // 4, (a + access_bytes - 1) // 4 + 1):
            banks.setdefault(word % 32, set()).add(word)
    worst = max(len(w) for w in banks.values())
    return max(1, math.ceil(worst / max(1, math.ceil(WARP * access_bytes / 128))))


def dominant_stride(offsets: Lanes, access_bytes: int) -> int | None:
    """The most common lane-to-lane step in access units (None when lanes do not step evenly)."""
    steps = [b - a for a, b in zip(offsets.vals, offsets.vals[1:])]
    if not steps:
        return None
    common = max(set(steps), key=steps.count)
    if steps.count(common) < len(steps) // 2 or common % access_bytes:
        return None
    return abs(common) // access_bytes
