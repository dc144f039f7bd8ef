"""Memory accesses of a kernel: where each load, store and atomic goes, and how a warp's lanes spread.

Covers: resolving a pointer expression to its array (parameter -> global, `__shared__` -> shared, local
arrays, `__device__`/`__constant__` globals, local pointers defined from those, `&a[i]`, `p + i`, casts
such as `reinterpret_cast<float4*>`), the byte offset of each access as a `Poly`, and per access:
- coalescing class from d(offset)/d(threadIdx.x) in units of the access width: 0 broadcast, <= 1
  coalesced, constant c > 1 strided by c, symbolic (e.g. `n`) uncoalesced, indirect/non-linear unknown;
- shared-memory bank-conflict degree by placing the 32 lanes' words on the 32 banks (for 4-byte words
  this is 32/gcd(stride, 32)), in wavefronts per request relative to the ideal;
- vector width (float4 = 4 lanes, 16 bytes) and padding of 2-D shared arrays (`[T][T+1]`);
- per-thread windows (`mark_windows`): strided requests that together read whole sectors (thread t
  reading base + t*W + k for k < W, unrolled or written out), a class of its own beside "strided";
- accesses a `__device__` helper makes through pointer arguments (`helper_accesses`), placed at the call.

Not covered: warps whose lanes differ in threadIdx.y (blockDim.x < 32), alignment of the first lane,
loops inside helpers, texture/surface memory, TMA and cp.async (counted by SASS).
"""

from __future__ import annotations

import collections
import math
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction

from tree_sitter import Node

from cudaperf.analysis import cst
from cudaperf.analysis.lanes import (
    HelperLanes,
    LaneEnv,
    LaneEvaluator,
    Lanes,
    bank_wavefronts,
    dominant_stride,
    ideal_sectors,
    sectors_per_request,
)
from cudaperf.analysis.scope import (
    MAX_INLINE_DEPTH,
    TX,
    InlineScope,
    KernelScope,
    TypeInfo,
    Var,
    call_name,
    declared_vars,
    type_info,
)
from cudaperf.analysis.symbolic import Poly, Unknown, Value
from cudaperf.types import CoalescingClass, MemoryAccess

ATOMIC = re.compile(r"^atomic(Add|Sub|Exch|Min|Max|Inc|Dec|CAS|And|Or|Xor)(_block|_system)?$")
LOAD_FNS = {"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"}
STORE_FNS = {"__stcg", "__stcs", "__stwb", "__stwt"}
_CASTS = {"reinterpret_cast", "static_cast", "const_cast"}


@dataclass(frozen=True)
class Pointer:
    base: str
    space: str  # "global" | "shared" | "local" | "constant"
    offset_bytes: Value
    elem: TypeInfo
    dims: tuple[Value, ...] = ()  # array dimensions, outermost first


@dataclass(frozen=True)
class Access:
    """One static memory access with everything the feedback needs."""

    node: Node
    line: int
    text: str
    array: str
    space: str
    kind: str  # "load" | "store" | "atomic"
    offset_bytes: Value
    access_bytes: int
    vector_width: int
    coalescing: CoalescingClass | None
    stride_elements: int | None
    stride_text: str | None  # the stride along threadIdx.x in access units, e.g. "n" or "32"
    bank_conflict_degree: int | None
    sectors: int | None = None  # 32-byte sectors per warp request, from the concrete lanes
    lane_offsets: tuple[int, ...] | None = field(default=None, compare=False, repr=False)  # bytes, lane 0..31
    window: int = 1  # requests of a per-thread window that share their sectors (see `mark_windows`)
    window_sectors: float | None = None  # distinct sectors per request over that window
    via: str = ""  # the `__device__` helper that makes this access (placed at its call site)
    thread_share: float | None = None  # atomics: share of a block's threads the `if`s let through

    @property
    def warp_passes(self) -> int | None:
        """L2 passes one warp's request of a global atomic takes: the 32-byte sectors its lanes touch, or
        the most lanes updating one word when more (those serialise); None when the lanes' addresses are
        unknown (data-dependent), for shared memory, and where the lanes were not evaluated."""
        if self.space != "global" or not self.lane_offsets:
            return None
        most = collections.Counter(self.lane_offsets).most_common(1)[0][1]
        return max(self.sectors or 1, most)

    @property
    def effective_sectors(self) -> float | None:
        """Sectors a request costs once a window's sectors are fetched (L1 serves the rest)."""
        return self.window_sectors if self.window > 1 else self.sectors

    def record(self) -> MemoryAccess:
        return MemoryAccess(
            line=self.line, text=self.text, space=self.space, kind=self.kind, coalescing=self.coalescing,
            stride_elements=self.stride_elements, bank_conflict_degree=self.bank_conflict_degree,
            vector_width=self.vector_width, window=self.window,
        )

    @property
    def vectorized(self) -> bool:
        return self.vector_width > 1 and self.access_bytes >= 8


@dataclass(frozen=True)
class SharedArray:
    name: str
    line: int
    dims: tuple[str, ...]
    elem_bytes: int
    padded: bool | None  # None: not a 2-D array
    dynamic: bool


# --------------------------------------------------------------------------------------------------
# Pointers


class PointerResolver:
    """Pointer expressions -> (array, byte offset). Offsets are `Poly`s, or with a concrete `evaluator`
    (`LaneEvaluator`, `IntervalEvaluator`) lanes or intervals: the arithmetic is the same."""

    def __init__(self, scope: KernelScope, evaluator=None):
        self.scope = scope
        self.evaluator = evaluator
        self.concrete = evaluator is not None
        self.value = evaluator.value if evaluator is not None else scope.value
        self._memo: dict[str, Pointer | None] = {}
        self._busy: set[str] = set()

    def resolve(self, node: Node | None) -> Pointer | None:
        if node is None:
            return None
        t = node.type
        if t == "parenthesized_expression":
            return self.resolve(node.named_children[-1]) if node.named_children else None
        if t == "identifier":
            return self._identifier(node)
        if t == "cast_expression":
            return self._retype(self.resolve(node.child_by_field_name("value")),
                                cst.text(node.child_by_field_name("type")))
        if t == "call_expression" and call_name(node) in _CASTS:
            fn = node.child_by_field_name("function")
            targs = fn.child_by_field_name("arguments") if fn is not None else None
            args = node.child_by_field_name("arguments")
            inner = args.named_children[0] if args is not None and args.named_children else None
            return self._retype(self.resolve(inner), cst.text(targs).strip("<>") if targs else "")
        if t == "binary_expression":
            return self._arith(node)
        if t == "pointer_expression" and cst.text(node.child_by_field_name("operator")) == "&":
            arg = node.child_by_field_name("argument")
            if arg is not None and arg.type == "subscript_expression":  # &a[i]: a pointer to the element
                found = self.element(arg)
                if found is not None:
                    ptr, offset, elem = found
                    return Pointer(ptr.base, ptr.space, offset, elem, ())
                found = self.element(arg, partial=True)  # &tile[r]: its row
                return None if found is None else found[0]
            return self.resolve(arg) if arg is not None and arg.type == "identifier" else None
        if t == "subscript_expression":  # a row of a 2-D array used as a pointer: &tile[r][0] == tile[r]
            found = self.element(node, partial=True)
            return None if found is None else found[0]
        return None

    def _retype(self, ptr: Pointer | None, type_text: str) -> Pointer | None:
        if ptr is None or "*" not in type_text:
            return ptr
        return Pointer(ptr.base, ptr.space, ptr.offset_bytes, type_info(type_text), ())

    def _arith(self, node: Node) -> Pointer | None:
        op = cst.text(node.child_by_field_name("operator"))
        if op not in ("+", "-"):
            return None
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        ptr, other = self.resolve(left), right
        if ptr is None and op == "+":
            ptr, other = self.resolve(right), left
        if ptr is None:
            return None
        delta = self.value(other)
        step = Poly.const(ptr.elem.bytes) * (_product(ptr.dims[1:]) if ptr.dims else Poly.const(1))
        return Pointer(ptr.base, ptr.space, _add(ptr.offset_bytes, _scale(delta, step), op), ptr.elem, ())

    def _identifier(self, node: Node) -> Pointer | None:
        scope, name = self.scope, cst.text(node)
        var = scope.lookup(name, node)
        if var is not None and not var.is_param:
            if var.is_array and not var.pointer_depth:
                space = "shared" if var.shared else "local"
                return Pointer(name, space, Poly(), var.type, self._dims(var))
            if var.shared and not var.pointer_depth:
                return Pointer(name, "shared", Poly(), var.type, ())
            if var.pointer_depth:
                return self._local_pointer(var.key)
            return None
        if var is not None and (var.pointer_depth or var.is_array):
            if var.key in scope.defs:  # a pointer parameter moved in the body (p += stride)
                return self._local_pointer(var.key)
            return Pointer(name, "global", Poly(), var.type, ())
        for table, space in ((scope.file.shared_globals, "shared"), (scope.file.device_arrays, "global"),
                             (scope.file.constant_arrays, "constant")):
            if name in table:
                return Pointer(name, space, Poly(), table[name].type, self._dims(table[name]))
        return None

    def _dims(self, var: Var) -> tuple[Value, ...]:
        return tuple(self.value(d) for d in var.dims)

    def _local_pointer(self, key: str) -> Pointer | None:
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return None
        self._busy.add(key)
        self._memo[key] = self._local_pointer_uncached(key)
        self._busy.discard(key)
        return self._memo[key]

    def _local_pointer_uncached(self, key: str) -> Pointer | None:
        name = self.scope.symbol(key)
        defs = self.scope.defs.get(key, [])
        if self.concrete:  # concrete values: the pointer as first assigned
            firsts = sorted((d for d in defs if d.op == "=" and d.rhs is not None),
                            key=lambda d: d.node.start_byte)
            if key.endswith("@param"):
                param = self.scope.params[key.split("@")[0]]
                return Pointer(param.name, "global", Poly(), param.type, ())
            return self.resolve(firsts[0].rhs) if firsts else None
        if key.endswith("@param"):
            param = self.scope.params[key.split("@")[0]]
            origin = Pointer(param.name, "global", Poly(), param.type, ())
            slope_ok = all(d.op in ("++", "--")
                           or (d.op in ("+=", "-=") and _uniform_lane(self.scope.value(d.rhs)))
                           for d in defs)
            offset = self.scope.fresh(name) if slope_ok else Unknown(True, f"{name} moves per lane")
            return Pointer(origin.base, origin.space, offset, origin.elem, ())
        plain = [self.resolve(d.rhs) for d in defs if d.op == "=" and d.rhs is not None]
        if not plain or any(p is None for p in plain) or len({(p.base, p.space) for p in plain}) != 1:
            return None
        first = plain[0]
        if len(defs) == 1:
            return first
        slopes = {_slope(p.offset_bytes) for p in plain}
        updates_uniform = all(
            d.op in ("++", "--", "=") or (d.op in ("+=", "-=") and _uniform_lane(self.scope.value(d.rhs)))
            for d in defs
        )
        if len(slopes) != 1 or None in slopes or not updates_uniform:
            return Pointer(first.base, first.space, Unknown(True, f"{name} moves per lane"), first.elem, ())
        slope = slopes.pop()
        return Pointer(first.base, first.space, slope * Poly.sym(TX) + self.scope.fresh(name), first.elem, ())

    def element(self, node: Node, partial: bool = False) -> tuple[Pointer, Value, TypeInfo] | None:
        """(array pointer, byte offset of the element, element type) of `a[i]`, `tile[r][c]`, `p[i]`."""
        indices: list[Node] = []
        base = node
        while base is not None and base.type == "subscript_expression":
            idx = base.child_by_field_name("indices") or base.child_by_field_name("index")
            inner = [c for c in (idx.named_children if idx is not None else []) if c.type != "comment"]
            indices.append(inner[0] if inner else idx)
            base = base.child_by_field_name("argument")
        indices.reverse()
        ptr = self.resolve(base)
        if ptr is None:
            return None
        dims = ptr.dims
        if dims and len(indices) > len(dims):
            return None
        if not dims and len(indices) > 1:
            return None
        offset: Value = ptr.offset_bytes
        for k, idx in enumerate(indices):
            stride = (Poly.const(ptr.elem.bytes) * _product(dims[k + 1:]) if dims
                      else Poly.const(ptr.elem.bytes))
            offset = _add(offset, _scale(self.value(idx), stride), "+")
        if dims and len(indices) < len(dims):
            if not partial:
                return None
            return Pointer(ptr.base, ptr.space, offset, ptr.elem, dims[len(indices):]), offset, ptr.elem
        return ptr, offset, ptr.elem


def _product(values) -> Value:
    out: Value = Poly.const(1)
    for v in values:
        out = (out * v if not isinstance(out, Unknown) and not isinstance(v, Unknown)
               else Unknown(False, "dimension"))
    return out


def _varies(x) -> bool:
    return (isinstance(x, Unknown) and x.varying) or (isinstance(x, Poly) and x.depends_on(TX)) or (
        isinstance(x, Lanes) and not x.uniform)


def _scale(v: Value, k: Value) -> Value:
    if not isinstance(v, Unknown) and not isinstance(k, Unknown):
        return v * k
    return Unknown(_varies(v), getattr(v, "reason", "") or "scale")


def _add(a: Value, b: Value, op: str) -> Value:
    if not isinstance(a, Unknown) and not isinstance(b, Unknown):
        return a + b if op == "+" else a - b
    return Unknown(any(_varies(x) for x in (a, b)), next(x.reason for x in (a, b) if isinstance(x, Unknown)))


def _slope(v: Value) -> Poly | None:
    return v.derivative(TX) if isinstance(v, Poly) else None


def _uniform_lane(v: Value) -> bool:
    return isinstance(v, Poly) and not v.depends_on(TX)


# --------------------------------------------------------------------------------------------------
# Classification


def classify(offset: Value, access_bytes: int) -> tuple[CoalescingClass, int | None, str | None]:
    """Coalescing class, constant stride in access units, and the stride as text."""
    if isinstance(offset, Unknown):
        return (CoalescingClass.UNKNOWN if offset.varying else CoalescingClass.BROADCAST), None, None
    slope = offset.derivative(TX)
    if slope.depends_on(TX):
        return CoalescingClass.UNKNOWN, None, None
    units = slope * Poly.const(Fraction(1, access_bytes))
    if units.is_const:
        s = abs(units.value)
        if s == 0:
            return CoalescingClass.BROADCAST, 0, "0"
        if s <= 1:
            return CoalescingClass.COALESCED, 1, _pretty(units)
        return CoalescingClass.STRIDED, math.ceil(s), _pretty(units)
    return CoalescingClass.UNCOALESCED, None, _pretty(units)


def bank_conflict_degree(offset: Value, access_bytes: int) -> int | None:
    """Wavefronts per request over the ideal, lanes placed on 32 four-byte banks; None when symbolic."""
    if isinstance(offset, Unknown):
        return None if offset.varying else 1
    slope = offset.derivative(TX)
    if not slope.is_const:
        return None
    per_lane = slope.value / access_bytes  # access units per lane (may be fractional: tid/2)
    banks: dict[int, set[int]] = {}
    for lane in range(32):
        start = math.floor(lane * per_lane) * access_bytes
        for word in range(start // 4, (start + access_bytes - 1) // 4 + 1):
            banks.setdefault(word % 32, set()).add(word)
    worst = max(len(words) for words in banks.values())
    ideal = max(1, math.ceil(32 * access_bytes / 128))
    return max(1, math.ceil(worst / ideal))


def _pretty(p: Poly) -> str:
    return re.sub(r"#\d+", "", str(p))


# --------------------------------------------------------------------------------------------------
# Collection


def collect_accesses(scope: KernelScope, env: LaneEnv | None = None) -> list[Access]:
    """Every load, store and atomic on global or shared memory in the kernel body, in source order,
    including those a called `__device__` helper makes through pointer arguments (`helper_accesses`)."""
    if scope.body is None:
        return []
    env = env or LaneEnv({})
    resolver = PointerResolver(scope)
    concrete = PointerResolver(scope, LaneEvaluator(scope, env))
    narrow = env.block is not None and env.block[0] < 32  # a warp spans rows: trust the lanes
    out = _scan(scope, resolver, concrete, narrow)
    return mark_windows(scope, [a for a in out if a.space in ("global", "shared")])


def _scan(scope: KernelScope, resolver: PointerResolver, concrete: PointerResolver, narrow: bool,
          depth: int = 0) -> list[Access]:
    out: list[Access] = []
    for node in cst.walk(scope.body):
        t = node.type
        found = None
        if t == "subscript_expression" and not _is_inner_subscript(node):
            found = _element(resolver, concrete, node)
        elif t == "pointer_expression" and cst.text(node.child_by_field_name("operator")) == "*":
            found = _pointee(resolver, concrete, node.child_by_field_name("argument"))
        elif t == "identifier" and _is_shared_scalar(scope, node):
            found = _pointee(resolver, concrete, node)
        elif t == "call_expression":
            out.extend(_call_access(node, resolver, concrete, narrow))
            out.extend(helper_accesses(scope, node, resolver, concrete, narrow, depth))
            continue
        if found is not None:
            ptr, offset, elem, lanes = found
            out.extend(_accesses_at(node, ptr, offset, elem, lanes=lanes, narrow=narrow))
    return out


class _BoundPointers(PointerResolver):
    """A helper's pointer parameters resolved to the caller's pointers (symbolic or concrete)."""

    def __init__(self, scope: KernelScope, bound: dict[str, Pointer], evaluator=None):
        super().__init__(scope, evaluator)
        self.bound = bound

    def _identifier(self, node: Node) -> Pointer | None:
        name = cst.text(node)
        var = self.scope.lookup(name, node)
        if var is not None and var.is_param and name in self.bound:
            return self.bound[name] if var.key not in self.scope.defs else None
        return super()._identifier(node)


def helper_accesses(scope: KernelScope, call: Node, resolver: PointerResolver, concrete: PointerResolver,
                    narrow: bool, depth: int = 0) -> list[Access]:
    """Accesses a `__device__` helper makes through the pointers it is passed (`load(src, i)` reading
    `p[i]`), read in the helper's body with its parameters bound to the call's arguments, and placed at
    the call: its line, loops and guards are the caller's. Marked `via` the helper (footprints skip them:
    their offsets live in the helper's body). Not covered: loops inside the helper (counted once),
    pointers the caller cannot resolve, helpers deeper than `MAX_INLINE_DEPTH`."""
    fn = scope.file.device_functions.get(call_name(call))
    args = call.child_by_field_name("arguments")
    argv = [a for a in (args.named_children if args is not None else []) if a.type != "comment"]
    if fn is None or depth >= MAX_INLINE_DEPTH:
        return []
    params = [v for p in cst.function_params(fn) for v in declared_vars(p, frozenset(), is_param=True)]
    if len(params) != len(argv) or not any(p.pointer_depth or p.is_array for p in params):
        return []
    ptrs: dict[str, Pointer] = {}
    lane_ptrs: dict[str, Pointer] = {}
    ints: dict[str, Value] = {}
    lanes: dict[str, Lanes] = {}
    for p, a in zip(params, argv):
        if p.pointer_depth or p.is_array:
            ptr, lane_ptr = resolver.resolve(a), concrete.resolve(a)
            if ptr is not None:
                ptrs[p.name] = ptr
            if lane_ptr is not None:
                lane_ptrs[p.name] = lane_ptr
        else:
            ints[p.name] = scope.value(a)
            lane_value = concrete.value(a)
            if isinstance(lane_value, Lanes):
                lanes[p.name] = lane_value
    if not ptrs:
        return []
    callee = InlineScope(fn, scope.file, ints, scope)
    env = concrete.evaluator.env if isinstance(concrete.evaluator, LaneEvaluator) else LaneEnv({})
    inner = _scan(callee, _BoundPointers(callee, ptrs),
                  _BoundPointers(callee, lane_ptrs, HelperLanes(callee, env, lanes, depth + 1)), narrow,
                  depth + 1)
    name = call_name(call)
    return [replace(a, node=call, line=cst.line(call), via=name) for a in inner if a.array in
            {p.base for p in ptrs.values()} and a.space in ("global", "shared")]


def _element(resolver: PointerResolver, concrete: PointerResolver, node: Node):
    found = resolver.element(node)
    if found is None:
        return None
    lanes = concrete.element(node)
    return found[0], found[1], found[2], (lanes[1] if lanes is not None else None)


def _pointee(resolver: PointerResolver, concrete: PointerResolver, node: Node | None):
    ptr = resolver.resolve(node)
    if ptr is None:
        return None
    lanes = concrete.resolve(node)
    return ptr, ptr.offset_bytes, ptr.elem, (lanes.offset_bytes if lanes is not None else None)


def _is_inner_subscript(node: Node) -> bool:
    parent = node.parent
    return parent is not None and parent.type == "subscript_expression" and (
        parent.child_by_field_name("argument") is not None
        and parent.child_by_field_name("argument").id == node.id)


def _is_shared_scalar(scope: KernelScope, node: Node) -> bool:
    var = scope.lookup(cst.text(node), node) or scope.file.shared_globals.get(cst.text(node))
    if var is None or not var.shared or var.is_array or var.pointer_depth:
        return False
    parent = node.parent
    return parent is not None and parent.type not in ("init_declarator", "declaration", "array_declarator",
                                                      "field_expression", "pointer_expression")


def _kinds(node: Node) -> list[str]:
    child, parent = node, node.parent
    while parent is not None and parent.type == "parenthesized_expression":
        child, parent = parent, parent.parent
    if parent is None:
        return ["load"]
    if parent.type == "field_expression":  # v4[i].x = ...: the element is written
        child, parent = parent, parent.parent
        if parent is None:
            return ["load"]
    if parent.type == "assignment_expression":
        left = parent.child_by_field_name("left")
        if left is not None and left.id == child.id:
            return ["store"] if cst.text(parent.child_by_field_name("operator")) == "=" else ["load", "store"]
    if parent.type == "update_expression":
        return ["load", "store"]
    if parent.type == "pointer_expression" and cst.text(parent.child_by_field_name("operator")) == "&":
        return []  # an address, not an access (atomics and __ldg read it through the call)
    if parent.type in ("init_declarator",) and _declares_reference(parent):
        return []
    return ["load"]


def _declares_reference(init: Node) -> bool:
    decl = init.child_by_field_name("declarator")
    return decl is not None and decl.type == "reference_declarator"


def _accesses_at(node: Node, ptr: Pointer, offset: Value, elem: TypeInfo, kinds: list[str] | None = None,
                 lanes: Value | None = None, narrow: bool = False):
    kinds = _kinds(node) if kinds is None else kinds
    coal, stride, stride_text = classify(offset, elem.bytes)
    bank = bank_conflict_degree(offset, elem.bytes) if ptr.space == "shared" else None
    sectors = None
    if isinstance(lanes, Lanes):
        sectors = sectors_per_request(lanes, elem.bytes)
        if narrow or _approximate(offset, elem.bytes):
            coal, stride, stride_text = classify_lanes(lanes, elem.bytes)
        if ptr.space == "shared":
            bank = bank_wavefronts(lanes, elem.bytes)
    for kind in kinds:
        yield Access(
            node=node, line=cst.line(node), text=" ".join(cst.text(node).split())[:80], array=ptr.base,
            space=ptr.space, kind=kind, offset_bytes=offset, access_bytes=elem.bytes, vector_width=elem.lanes,
            coalescing=coal if ptr.space == "global" else None, stride_elements=stride,
            stride_text=stride_text, bank_conflict_degree=bank, sectors=sectors,
            lane_offsets=lanes.vals if isinstance(lanes, Lanes) else None,
        )


def _approximate(offset: Value, access_bytes: int) -> bool:
    """The linear form is only approximate when a division inside the warp left a fractional slope."""
    if isinstance(offset, Unknown):
        return not offset.varying
    units = offset.derivative(TX) * Poly.const(Fraction(1, access_bytes))
    return any(c.denominator != 1 for _, c in units.terms)


def classify_lanes(lanes: Lanes, access_bytes: int) -> tuple[CoalescingClass, int | None, str | None]:
    """Coalescing class from the concrete addresses of the 32 lanes."""
    if lanes.uniform:
        return CoalescingClass.BROADCAST, 0, "0"
    sectors = sectors_per_request(lanes, access_bytes)
    if sectors <= ideal_sectors(access_bytes) + 1:
        return CoalescingClass.COALESCED, 1, "1"
    stride = dominant_stride(lanes, access_bytes)
    if stride is not None and stride > 1:
        return CoalescingClass.STRIDED, stride, str(stride)
    return CoalescingClass.UNCOALESCED, None, f"an irregular pattern ({sectors} sectors per request)"


def _call_access(node: Node, resolver: PointerResolver, concrete: PointerResolver, narrow: bool):
    name = call_name(node)
    args = node.child_by_field_name("arguments")
    first = args.named_children[0] if args is not None and args.named_children else None
    if first is None:
        return []
    if ATOMIC.match(name):
        kinds = ["atomic"]
    elif name in LOAD_FNS:
        kinds = ["load"]
    elif name in STORE_FNS:
        kinds = ["store"]
    else:
        return []
    found = _pointee(resolver, concrete, first)
    if found is None:
        return []
    ptr, offset, elem, lanes = found
    return list(_accesses_at(node, ptr, offset, elem, kinds, lanes=lanes, narrow=narrow))


# --------------------------------------------------------------------------------------------------
# Per-thread windows

MAX_WINDOW_REQUESTS = 256


def mark_windows(scope: KernelScope, accesses: list[Access]) -> list[Access]:
    """Strided global accesses that together cover a contiguous run: thread t reading base + t*W + k for
    k < W (an unrolled loop over k, or W statements). Each request touches W times the sectors of a
    coalesced one (ncu's sectors/request says strided), but the W requests touch the same sectors, so once
    the first brings them into L1 the others hit: DRAM sees coalesced traffic. Grouped by array, kind and
    offset up to a constant; a constant-trip loop whose variable moves the offset by a constant adds its
    iterations as shifts of the lanes. A group is a window when its distinct sectors per request are within
    one of a coalesced request's; its accesses get `window` (requests) and `window_sectors`."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, a in enumerate(accesses):
        if (a.space == "global" and a.coalescing is CoalescingClass.STRIDED and a.lane_offsets
                and isinstance(a.offset_bytes, Poly)):
            groups.setdefault((a.array, a.kind, str(_without_constant(a.offset_bytes))), []).append(i)
    out = list(accesses)
    for members in groups.values():
        sectors: set[int] = set()
        requests = 0
        for i in members:
            shifts = _loop_shifts(scope, accesses[i])
            requests += len(shifts)
            width = accesses[i].access_bytes
            for shift in shifts:
                for lane in accesses[i].lane_offsets:
                    a0 = lane + shift
                    sectors.update(range(a0 // 32, (a0 + width - 1) // 32 + 1))
        per_request = len(sectors) / max(1, requests)
        if requests > 1 and per_request <= ideal_sectors(accesses[members[0]].access_bytes) + 1:
            for i in members:
                out[i] = replace(out[i], window=requests, window_sectors=per_request)
    return out


def _without_constant(p: Poly) -> Poly:
    return Poly(tuple((m, c) for m, c in p.terms if m))


def _loop_shifts(scope: KernelScope, a: Access) -> list[int]:
    """Byte shifts of the access over the iterations of enclosing constant-trip loops that move it by a
    constant (the lanes are at the first iteration); [0] outside such loops."""
    shifts = [0]
    parent = a.node.parent
    while parent is not None and parent.id != scope.fn.id:
        if parent.type == "for_statement":
            loop = _constant_loop(scope, parent)
            if loop is not None:
                sym, trip, step = loop
                delta = a.offset_bytes.derivative(sym)
                if delta.is_const and delta.value and not delta.depends_on(TX) and \
                        len(shifts) * trip <= MAX_WINDOW_REQUESTS:
                    d = int(delta.value * step)
                    shifts = [s + k * d for s in shifts for k in range(trip)]
        parent = parent.parent
    return shifts


def _constant_loop(scope: KernelScope, loop: Node) -> tuple[str, int, int] | None:
    """(symbol, trip count, step) of `for (v = a; v < b; v += c)` with constant a, b, c; else None."""
    key = scope.loop_key(loop)
    cond, update = loop.child_by_field_name("condition"), loop.child_by_field_name("update")
    if key is None or cond is None or update is None or cond.type != "binary_expression":
        return None
    name = key.split("@")[0]
    op = cst.text(cond.child_by_field_name("operator"))
    if op not in ("<", "<=") or cst.text(cond.child_by_field_name("left")) != name:
        return None
    init = loop.child_by_field_name("initializer")
    start_node = next((d.child_by_field_name("value") for d in (init.children if init is not None else [])
                       if d.type == "init_declarator"), None)
    start, end = scope.value(start_node), scope.value(cond.child_by_field_name("right"))
    step = _constant_step(scope, update, name)
    constant = all(isinstance(v, Poly) and v.is_const for v in (start, end))
    if not constant or not step:
        return None
    trip = math.ceil((end.value + (op == "<=") - start.value) / step)
    return (scope.symbol(key), int(trip), step) if 1 < trip <= MAX_WINDOW_REQUESTS else None


def _constant_step(scope: KernelScope, update: Node, name: str) -> int | None:
    text = cst.text(update).replace(" ", "")
    if text in (f"++{name}", f"{name}++"):
        return 1
    if update.type == "assignment_expression" and cst.text(update.child_by_field_name("operator")) == "+=":
        v = scope.value(update.child_by_field_name("right"))
        return int(v.value) if isinstance(v, Poly) and v.is_const and v.value >= 1 else None
    return None


def shared_arrays(scope: KernelScope) -> list[SharedArray]:
    out = []
    for var in list(scope.locals.values()) + list(scope.file.shared_globals.values()):
        if not var.shared:
            continue
        dims = tuple(scope.value(d) for d in var.dims)
        out.append(SharedArray(var.name, var.line,
                               tuple(_pretty(d) if isinstance(d, Poly) else "?" for d in dims),
                               var.type.bytes, _padded(dims, var.type.bytes), var.unsized))
    return out


def _padded(dims: tuple[Value, ...], elem_bytes: int) -> bool | None:
    """A 2-D tile whose rows are padded off the bank period: `[T][T+1]`, `[32][33]`, `[32][36]` (a row of
    words that is neither a multiple of 32 nor a power of two)."""
    if len(dims) < 2 or not all(isinstance(d, Poly) for d in dims):
        return None
    inner = dims[-1]
    if inner.is_const:
        words = inner.value * elem_bytes / 4
        power_of_two = words.denominator == 1 and words > 0 and (int(words) & (int(words) - 1)) == 0
        return words % 32 != 0 and not power_of_two
    offset = inner.value  # the constant term of T + 1
    return offset != 0
