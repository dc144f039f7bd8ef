"""Static work estimate: floating-point operations, global-memory bytes, arithmetic intensity, roofline
regime.

Covers:
- FLOPs per thread: float `+ - * /` and compound assignments count 1, `fma`/`fmaf` 2, math functions 1,
  half2 intrinsics per lane, `wmma::mma_sync` and `mma.sync.mMnNkK` PTX by their shape — weighted by the
  trip counts of enclosing `for` loops (`k < K` -> K; `i += blockDim.x*gridDim.x` -> n/(blockDim.x*
  gridDim.x); `s >>= 1` -> log2; a segment of an offsets array, `p = off[i]; p < off[i + 1]`, -> the
  mean segment, the elements of the array `p` indexes over the segments, once the arrays' lengths are
  bound as `numel(name)`, else once) and multiplied by the number of threads: the launch's, or the bound of a
  guard `if (i < n)` / `if (i >= n) return;` on a global thread index. Symbols are bound from `sizes`
  (kernel parameters, macros) and the launch at the end, so a grid-stride loop's thread count cancels.
- bytes requested: every global access x its trip counts x threads (what the LSU asks for, no cache);
  per access its requests per thread (`access_requests`), barrier executions per thread, and integer
  divisions by a runtime divisor per thread (index arithmetic such as `e / OW`, `(i % n + n) % n`);
  the compulsory footprint that intensity prefers comes from `intervals.footprints`.
- regime: intensity against the H200 ridge point, FP32 CUDA cores or tensor cores (from SASS).

- branches decided by the sizes: an `if` whose condition reads only bound sizes (kernel parameters in
  `env.sizes`, macros, constants), not the thread, counts its taken side only (`D % 4 == 0` with D bound);
  every other `if` counts both sides.

Not covered: data-dependent trip counts (`while`, early exits: counted once, with a diagnostic), branch
probabilities (both sides of an `if` undecided by the sizes count), caches between footprint and request,
integer work.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction

from tree_sitter import Node

from cudaperf.analysis import cst
from cudaperf.analysis.lanes import LaneEnv, LaneEvaluator, Lanes
from cudaperf.analysis.memory import Access
from cudaperf.analysis.scope import FLOAT_TYPES, TX, KernelScope, call_name, init_var, type_info
from cudaperf.analysis.symbolic import Poly
from cudaperf.analysis.sync import is_barrier_call

_FMA = {"fmaf", "fma", "__fmaf_rn", "__fmaf_rz", "__fmaf_ru", "__fmaf_rd", "__fma_rn", "__hfma"}
_ONE = re.compile(r"^(__f(add|sub|mul|div)_r[nzud]|__fdividef|__dadd_rn|__dmul_rn|__hadd|__hsub|__hmul|"
                  r"__hdiv|expf?|exp2f?|__expf|logf?|log2f?|__logf|sinf?|cosf?|__sinf|__cosf|tanhf?|tanf?|"
                  r"sqrtf?|rsqrtf?|powf?|erff?|__powf|fmaxf|fminf|fmax|fmin|fabsf?|floorf|ceilf|roundf|"
                  r"__frcp_rn|__fsqrt_rn|__frsqrt_rn|sigmoidf?)$")
_PAIR = {"__hadd2": 2, "__hsub2": 2, "__hmul2": 2, "__hfma2": 4, "__hmax2": 2, "__hmin2": 2}
_MATH_RETURNS_FLOAT = re.compile(r"^(\w+f|__\w+f|__f\w+|exp|log|sqrt|sin|cos|tanh|pow|fma|fmax|fmin|fabs|"
                                 r"__half2float|__bfloat162float|__int_as_float|__ldg|__shfl\w*)$")
# a condition holding one of these reads more than the sizes (a builtin, a call, memory)
_UNDECIDABLE = ("field_expression", "call_expression", "subscript_expression", "pointer_expression")
_MMA_PTX = re.compile(r"mma\.sync\.aligned\.m(\d+)n(\d+)k(\d+)")


@dataclass(frozen=True)
class WorkEstimate:
    flops_per_thread: Poly
    threads: Poly
    flops: Poly  # total, symbolic
    bytes_requested: Poly
    requested_by_array: dict[str, Poly]
    access_requests: tuple[Poly, ...] = ()  # per access of `accesses`: requests per thread (trip counts)
    barriers_per_thread: Poly = field(default_factory=Poly)  # barrier executions per thread
    divisions_per_thread: Poly = field(default_factory=Poly)  # integer `/` `%` by a runtime divisor
    # "log2(..)" -> (ratio, halves to 0)
    log_terms: dict[str, tuple[Poly, bool]] = field(default_factory=dict)
    # "segment(off,vals)" -> (offsets array, the array the loop variable indexes): `evaluate_segment_terms`
    segment_terms: dict[str, tuple[str, str]] = field(default_factory=dict)
    diagnostics: tuple[str, ...] = ()


def estimate(scope: KernelScope, accesses: list[Access], uses_dims: set[str],
             env: LaneEnv | None = None) -> WorkEstimate:
    counter = _Counter(scope, env)
    flops = Poly()
    for node in cst.walk(scope.body) if scope.body is not None else []:
        cost = counter.flop_cost(node)
        if cost:
            flops = flops + Poly.const(cost) * counter.multiplier(node)
    threads, guard_diag = _threads(scope, uses_dims, accesses)
    requested: dict[str, Poly] = {}
    for a in accesses:
        if a.space != "global":
            continue
        requested[a.array] = (requested.get(a.array, Poly())
                              + Poly.const(a.access_bytes) * counter.multiplier(a.node))
    requested = {k: v * threads for k, v in requested.items()}
    barriers = divisions = Poly()
    for node in cst.walk(scope.body) if scope.body is not None else []:
        if is_barrier_call(node):
            barriers = barriers + counter.multiplier(node)
        elif counter.is_runtime_division(node):
            divisions = divisions + counter.multiplier(node)
    total_req = Poly()
    for v in requested.values():
        total_req = total_req + v
    return WorkEstimate(
        flops_per_thread=flops, threads=threads, flops=flops * threads, bytes_requested=total_req,
        requested_by_array=requested, log_terms=counter.log_terms, segment_terms=counter.segment_terms,
        access_requests=tuple(counter.multiplier(a.node) for a in accesses), barriers_per_thread=barriers,
        divisions_per_thread=divisions,
        diagnostics=tuple(counter.diagnostics) + guard_diag,
    )


class _Counter:
    def __init__(self, scope: KernelScope, env: LaneEnv | None = None):
        self.scope = scope
        self.env = env or LaneEnv({})
        self.taken: dict[int, bool | None] = {}  # if statement -> its condition, where the sizes decide it
        self.trips: dict[int, Poly] = {}
        self.log_terms: dict[str, tuple[Poly, bool]] = {}
        self.segment_terms: dict[str, tuple[str, str]] = {}
        self.diagnostics: list[str] = []

    # loops ---------------------------------------------------------------------------------------------
    def multiplier(self, node: Node) -> Poly:
        out = Poly.const(1)
        parent = node.parent
        while parent is not None and parent.id != self.scope.fn.id:
            if parent.type in ("for_statement", "while_statement", "do_statement"):
                body = parent.child_by_field_name("body")
                if body is not None and body.start_byte <= node.start_byte < body.end_byte:
                    out = out * self.trip(parent)
            elif parent.type == "if_statement" and self._untaken_side(parent, node):
                return Poly()
            parent = parent.parent
        return out

    # branches the sizes decide ---------------------------------------------------------------------------
    def _untaken_side(self, stmt: Node, node: Node) -> bool:
        """Whether `node` lies in the side of `stmt` its condition, decided by the bound sizes, skips."""
        taken = self.decided(stmt)
        if taken is None:
            return False
        side = stmt.child_by_field_name("alternative" if taken else "consequence")
        return side is not None and side.start_byte <= node.start_byte < side.end_byte

    def decided(self, stmt: Node) -> bool | None:
        """The value of an `if`'s condition when it reads only bound sizes, macros and constants (never
        the thread, a local or memory); None otherwise."""
        if stmt.id not in self.taken:
            self.taken[stmt.id] = self._decide(stmt.child_by_field_name("condition"))
        return self.taken[stmt.id]

    def _decide(self, cond: Node | None) -> bool | None:
        if cond is None or self.scope.is_thread_dependent(cond):
            return None
        for n in cst.walk(cond):
            if n.type in _UNDECIDABLE:
                return None
            if n.type == "identifier" and not self._bound(n):
                return None
        value = LaneEvaluator(self.scope, self.env).value(cond)
        return bool(value.vals[0]) if isinstance(value, Lanes) and value.uniform else None

    def _bound(self, node: Node) -> bool:
        name = cst.text(node)
        if name in self.env.sizes or name in self.scope.template_bindings:
            return True
        if self.scope.resolve(name, node) is not None or name in self.scope.params:
            return False  # a local or an unbound parameter
        v = self.scope.value(node)  # macros and file-scope constants
        return isinstance(v, Poly) and v.is_const

    def trip(self, loop: Node) -> Poly:
        if loop.id not in self.trips:
            trip = self._trip(loop) if loop.type == "for_statement" else None
            if trip is None:
                self.diagnostics.append(f"line {cst.line(loop)}: loop trip count not static; counted once")
                trip = Poly.const(1)
            self.trips[loop.id] = trip
        return self.trips[loop.id]

    def _trip(self, loop: Node) -> Poly | None:
        var = init_var(loop.child_by_field_name("initializer"))
        cond, update = loop.child_by_field_name("condition"), loop.child_by_field_name("update")
        if not var or cond is None or cond.type != "binary_expression" or update is None:
            return None
        segment = self._segment(loop, var, cond, update)
        if segment is not None:
            return segment
        start = self._start(loop.child_by_field_name("initializer"))
        bound = _bound(self.scope, cond, var)
        if start is None or bound is None:
            return None
        end, direction = bound
        step_kind, step = _step(self.scope, update, var)
        if step_kind is None:
            return None
        if step_kind == "add":
            span = (end - start) if direction > 0 else (start - end)
            if step.is_const and step.value < 0:
                step = -step
            trip = span.divide(step)
            return None if trip is None else self._average_outer(trip, loop)
        # geometric: s >>= 1 from start down to end (or to zero), or s <<= 1 from start up to end
        to_zero = direction < 0 and end.is_const and end.value <= 0
        ratio = start if to_zero else (start.divide(end) if direction < 0 else end.divide(start))
        if ratio is None or not step.is_const or step.value <= 1:
            return None
        name = f"log{int(step.value)}({_plain(ratio)})" + ("+1" if to_zero else "")
        self.log_terms[name] = (ratio, to_zero)
        return Poly.sym(name)

    def _average_outer(self, trip: Poly, loop: Node) -> Poly:
        """A triangular nest (`j = k; j < n`) runs its enclosing loop's mean trip: substitute the mean."""
        means: dict[str, Poly] = {}
        parent = loop.parent
        while parent is not None and parent.id != self.scope.fn.id:
            if parent.type == "for_statement":
                key = self.scope.loop_key(parent)
                sym = self.scope.symbol(key) if key is not None else None
                if sym is not None and trip.depends_on(sym):
                    start = self._start(parent.child_by_field_name("initializer"))
                    cond = parent.child_by_field_name("condition")
                    bound = _bound(self.scope, cond, init_var(parent.child_by_field_name("initializer"))) \
                        if cond is not None and cond.type == "binary_expression" else None
                    if start is not None and bound is not None:
                        means[sym] = (start + bound[0] - Poly.const(1)) * Poly.const(Fraction(1, 2))
            parent = parent.parent
        return trip.substitute(means) if means else trip

    def _segment(self, loop: Node, var: str, cond: Node, update: Node) -> Poly | None:
        """`for (p = off[e]; p < off[e + 1]; ++p)` with `p` indexing an array in the body: the symbol of
        its mean trip count (`segment_terms`), a CSR row or a bag of offsets; None for other loops."""
        start = _init_value(loop.child_by_field_name("initializer"))
        op = cst.text(cond.child_by_field_name("operator"))
        end = cond.child_by_field_name("right")
        if (start is None or end is None or start.type != "subscript_expression" or op not in ("<", "!=")
                or end.type != "subscript_expression" or cst.text(cond.child_by_field_name("left")) != var
                or _step(self.scope, update, var) != ("add", Poly.const(1))):
            return None
        offsets = cst.text(start.child_by_field_name("argument"))
        first = _compact(cst.text(start.child_by_field_name("indices")))[1:-1]
        last = _compact(cst.text(end.child_by_field_name("indices")))[1:-1]
        same_array = cst.text(end.child_by_field_name("argument")) == offsets
        if not same_array or last not in (f"{first}+1", f"1+{first}"):
            return None
        body = loop.child_by_field_name("body")
        indexed = next((cst.text(n.child_by_field_name("argument")) for n in cst.walk(body)
                        if n.type == "subscript_expression"
                        and _compact(cst.text(n.child_by_field_name("indices"))) == f"[{var}]"), None) \
            if body is not None else None
        if indexed is None:
            return None
        name = f"segment({offsets},{indexed})"
        self.segment_terms[name] = (offsets, indexed)
        return Poly.sym(name)

    def _start(self, init: Node | None) -> Poly | None:
        v = self.scope.value(_init_value(init))
        if not isinstance(v, Poly):
            return None
        # thread, lane and block indices only shift a grid-, block- or warp-stride loop by less than a step
        return Poly(tuple((m, c) for m, c in v.terms
                          if not any(s.startswith(("threadIdx", "blockIdx")) or "#" in s for s, _ in m)))

    # flops ---------------------------------------------------------------------------------------------
    def flop_cost(self, node: Node) -> int:
        t = node.type
        if t == "binary_expression":
            op = cst.text(node.child_by_field_name("operator"))
            return 1 if op in ("+", "-", "*", "/") and self.is_float(node) else 0
        if t == "assignment_expression":
            op = cst.text(node.child_by_field_name("operator"))
            return (1 if op in ("+=", "-=", "*=", "/=") and self.is_float(node.child_by_field_name("left"))
                    else 0)
        if t == "call_expression":
            name = call_name(node)
            if name in _FMA:
                return 2
            if name in _PAIR:
                return _PAIR[name]
            if name == "mma_sync":
                return 2 * 16 * 16 * 16 // 32  # wmma 16x16x16 per warp, per lane
            return 1 if _ONE.match(name) else 0
        if t == "gnu_asm_expression":
            m = _MMA_PTX.search(cst.text(node))
            return 2 * int(m.group(1)) * int(m.group(2)) * int(m.group(3)) // 32 if m else 0
        return 0

    def is_runtime_division(self, node: Node) -> bool:
        """An integer `/` or `%` (or `/=`, `%=`) whose divisor is not a compile-time constant: the GPU has
        no integer divide, so each is a sequence of some 20 (32-bit) to 70 (64-bit) instructions, where a
        constant divisor compiles to a multiply and shift."""
        if node.type == "binary_expression":
            op, left = cst.text(node.child_by_field_name("operator")), node.child_by_field_name("left")
            divisor = node.child_by_field_name("right")
        elif node.type == "assignment_expression":
            op, left = cst.text(node.child_by_field_name("operator"))[:-1], node.child_by_field_name("left")
            divisor = node.child_by_field_name("right")
        else:
            return False
        if op not in ("/", "%") or self.is_float(left) or self.is_float(divisor):
            return False
        v = self.scope.value(divisor)
        return not (isinstance(v, Poly) and v.is_const)

    def is_float(self, node: Node | None) -> bool:
        if node is None:
            return False
        t = node.type
        if t == "number_literal":
            s = cst.text(node).lower()
            return not s.startswith("0x") and ("." in s or "e" in s or s.endswith("f"))
        if t == "identifier":
            var = self.scope.lookup(cst.text(node), node)
            return var is not None and not var.pointer_depth and _floatish(var.type.name, var.type.assumed)
        if t == "subscript_expression" or (t == "pointer_expression"
                                           and cst.text(node.child_by_field_name("operator")) == "*"):
            return self._element_float(node)
        if t == "field_expression":
            arg = node.child_by_field_name("argument")
            return (cst.text(arg) not in ("threadIdx", "blockIdx", "blockDim", "gridDim")
                    and self.is_float(arg))
        if t in ("parenthesized_expression",):
            return any(self.is_float(c) for c in node.named_children)
        if t == "unary_expression":
            return self.is_float(node.child_by_field_name("argument"))
        if t == "binary_expression":
            op = cst.text(node.child_by_field_name("operator"))
            if op not in ("+", "-", "*", "/"):
                return False
            return (self.is_float(node.child_by_field_name("left"))
                    or self.is_float(node.child_by_field_name("right")))
        if t == "conditional_expression":
            return self.is_float(node.child_by_field_name("consequence")) or self.is_float(
                node.child_by_field_name("alternative"))
        if t == "cast_expression":
            return _floatish(type_info(cst.text(node.child_by_field_name("type"))).name, False)
        if t == "call_expression":
            return bool(_MATH_RETURNS_FLOAT.match(call_name(node)))
        return False

    def _element_float(self, node: Node) -> bool:
        base = node
        while base is not None and base.type in ("subscript_expression", "pointer_expression",
                                                 "parenthesized_expression"):
            base = base.child_by_field_name("argument") if base.type != "parenthesized_expression" else (
                base.named_children[0] if base.named_children else None)
        if base is None:
            return False
        if base.type == "identifier":
            name = cst.text(base)
            var = self.scope.lookup(name, base) or self.scope.file.shared_globals.get(name) or \
                self.scope.file.device_arrays.get(name)
            return var is not None and _floatish(var.type.name, var.type.assumed)
        if base.type in ("call_expression", "cast_expression"):
            return any(t in cst.text(base) for t in ("float", "half", "double", "bfloat"))
        if base.type == "binary_expression":
            return self._element_float(base.child_by_field_name("left"))
        return False


def _floatish(name: str, assumed: bool) -> bool:
    return name in FLOAT_TYPES or assumed


def _plain(p: Poly) -> str:
    return re.sub(r"#\d+", "", str(p))


def _bound(scope: KernelScope, cond: Node, var: str) -> tuple[Poly, int] | None:
    """(exclusive end, direction +1 for up / -1 for down) from `var < end`, `var <= end`, `var > end`..."""
    op = cst.text(cond.child_by_field_name("operator"))
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "!=": "!="}
    if cst.text(right) == var and cst.text(left) != var:
        left, right, op = right, left, flip.get(op, op)
    if cst.text(left) != var:
        return None
    end = scope.value(right)
    if not isinstance(end, Poly):
        return None
    if op in ("<", "!="):
        return end, 1
    if op == "<=":
        return end + Poly.const(1), 1
    if op == ">":
        return end, -1
    if op == ">=":
        return end - Poly.const(1), -1
    return None


def _step(scope: KernelScope, update: Node, var: str) -> tuple[str | None, Poly]:
    if update.type == "update_expression":
        return "add", Poly.const(1 if "++" in cst.text(update) else -1)
    if update.type == "assignment_expression":
        op = cst.text(update.child_by_field_name("operator"))
        v = scope.value(update.child_by_field_name("right"))
        if not isinstance(v, Poly) or v.depends_on(TX):
            return None, Poly()
        if op in ("+=", "-="):
            return "add", v if op == "+=" else -v
        if op in (">>=", "<<=") and v.is_const:
            return "geo", Poly.const(2 ** int(v.value))
        if op in ("*=", "/="):
            return "geo", v
        if op == "=":  # i = i + step
            right = update.child_by_field_name("right")
            if right.type == "binary_expression" and cst.text(right.child_by_field_name("left")) == var:
                inner = scope.value(right.child_by_field_name("right"))
                rop = cst.text(right.child_by_field_name("operator"))
                if isinstance(inner, Poly) and rop in ("+", "-"):
                    return "add", inner if rop == "+" else -inner
    return None, Poly()


# --------------------------------------------------------------------------------------------------
# Threads and guards

DIMS = ("x", "y", "z")


def _threads(scope: KernelScope, uses_dims: set[str], accesses=None) -> tuple[Poly, tuple[str, ...]]:
    bounds = guard_bounds(scope, accesses)
    total = Poly.const(1)
    for d in DIMS:
        if d in bounds:
            total = total * bounds[d]
        elif d in uses_dims or d == "x":
            total = total * Poly.sym(f"gridDim.{d}") * Poly.sym(f"blockDim.{d}")
    return total, ()


def guard_bounds(scope: KernelScope, accesses=None) -> dict[str, Poly]:
    """Per dimension, N from a top-level guard `i < N` (or `if (i >= N) return;`) on a global index.

    An early exit bounds every thread that goes on. A guard that does not exit bounds only the threads
    working inside it, so it stands for the kernel only when it holds all the kernel's global accesses
    (given `accesses`): the tail `if (i < n)` after a grid-stride loop does not bound the loop's threads."""
    out: dict[str, Poly] = {}
    if scope.body is None:
        return out
    glob = [a.node for a in accesses or () if a.space == "global"]
    for stmt in scope.body.named_children:
        if stmt.type != "if_statement":
            continue
        cond = stmt.child_by_field_name("condition")
        body = stmt.child_by_field_name("consequence")
        exits = body is not None and (body.type == "return_statement" or (
            body.type == "compound_statement" and len(body.named_children) == 1
            and body.named_children[0].type == "return_statement"))
        if not exits and not all(stmt.start_byte <= n.start_byte < stmt.end_byte for n in glob):
            continue
        for term in _conjuncts(cond, "||" if exits else "&&"):
            found = _index_bound(scope, term, negated=exits)
            if found is not None:
                out.setdefault(found[0], found[1])
    return out


def _conjuncts(node: Node | None, joiner: str) -> list[Node]:
    if node is None:
        return []
    if node.type in ("parenthesized_expression", "condition_clause"):
        inner = [c for c in node.named_children if c.type != "comment"]
        return _conjuncts(inner[-1], joiner) if inner else []
    if node.type == "binary_expression" and cst.text(node.child_by_field_name("operator")) == joiner:
        return (_conjuncts(node.child_by_field_name("left"), joiner)
                + _conjuncts(node.child_by_field_name("right"), joiner))
    return [node]


def _index_bound(scope: KernelScope, term: Node, negated: bool) -> tuple[str, Poly] | None:
    if term.type != "binary_expression":
        return None
    op = cst.text(term.child_by_field_name("operator"))
    left, right = term.child_by_field_name("left"), term.child_by_field_name("right")
    if negated:  # `i >= n` in an early return means the live threads satisfy i < n
        op = {">=": "<", ">": "<="}.get(op, "")
    if op not in ("<", "<="):
        return None
    idx, end = scope.value(left), scope.value(right)
    if not (isinstance(idx, Poly) and isinstance(end, Poly)) or end.depends_on(TX):
        return None
    for d in DIMS:
        if idx.depends_on(f"threadIdx.{d}") and idx.depends_on(f"blockIdx.{d}"):
            return d, end + Poly.const(1) if op == "<=" else end
    return None


def _init_value(init: Node | None) -> Node | None:
    """The value a `for` initializer gives its variable (the last declarator's), or None."""
    if init is not None and init.type == "declaration":
        found = [d.child_by_field_name("value") for d in init.children if d.type == "init_declarator"]
        return found[-1] if found else None
    if init is not None and init.type == "assignment_expression":
        return init.child_by_field_name("right")
    return None


def _compact(text: str) -> str:
    return re.sub(r"\s+", "", text)


def evaluate_segment_terms(segment_terms: dict[str, tuple[str, str]],
                           bindings: dict[str, float]) -> dict[str, float]:
    """Mean trip counts of segment loops: the indexed array's elements over the offsets' segments
    (`numel(offsets) - 1`); 1 (the loop counted once) where the lengths are not bound."""
    out = {}
    for name, (offsets, indexed) in segment_terms.items():
        n_off, n_idx = bindings.get(f"numel({offsets})"), bindings.get(f"numel({indexed})")
        out[name] = n_idx / (n_off - 1) if n_off and n_idx and n_off > 1 else 1.0
    return out


def evaluate_log_terms(log_terms: dict[str, tuple[Poly, bool]],
                       bindings: dict[str, float]) -> dict[str, float]:
    """Trip counts of geometric loops: ceil(log_b(ratio)), or floor(log_b(start)) + 1 when halving to zero."""
    out = {}
    for name, (arg, to_zero) in log_terms.items():
        v = arg.evaluate(bindings)
        base = int(re.match(r"log(\d+)", name).group(1))
        if v is None or v < 1:
            continue
        exact = math.log(v, base)
        out[name] = math.floor(exact + 1e-9) + 1 if to_zero else math.ceil(exact - 1e-9)
    return out
