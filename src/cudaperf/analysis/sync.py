"""Block barriers of a kernel: where they are, which are divergent, which are likely redundant.

Covers:
- barrier sites: `__syncthreads()` and its `_count/_and/_or` forms, `__barrier_sync`, cooperative-groups
  `block.sync()` / `cg::sync(block)`, inline PTX `bar.sync` / `barrier.sync`;
- divergence: a barrier is divergent when a condition deciding whether it executes is thread-dependent
  (the taint of `scope.KernelScope`, not a pattern), or when a thread-dependent `return` before it (or a
  `break` / `continue` in its loop) lets some threads skip it. compute-sanitizer's synccheck does not flag
  barriers skipped by exited warps (docs/structure.md), so this must be static;
- redundancy: a barrier reached, on every path, from another barrier (or the kernel entry) without any
  memory access, atomic, fence or opaque call in between; loops are followed around their back edge to a
  fixpoint.

Not covered: warp-level `__syncwarp` (not a block barrier), grid barriers, named barriers with thread
counts (`bar.sync 1, 64`), barriers inside called device functions, mbarrier/async-copy protocols.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from tree_sitter import Node

from cudaperf.analysis import cst
from cudaperf.analysis.scope import KernelScope, call_name

_BARRIER_FNS = {"__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or",
                "__barrier_sync"}
_VALUE_BARRIERS = {"__syncthreads_count", "__syncthreads_and", "__syncthreads_or"}
_PURE_CALLS = re.compile(
    r"^(__syncwarp|__shfl\w*|__ballot_sync|__any_sync|__all_sync|__activemask|min|max|fminf|fmaxf|fmin|fmax|"
    r"abs|fabsf|fabs|sqrtf|sqrt|rsqrtf|expf|exp|__expf|exp2f|logf|log|__logf|log2f|sinf|cosf|__sinf|__cosf|"
    r"tanhf|tanh|powf|pow|erff|erf|fmaf|fma|__fmaf_rn|__fmul_rn|__fadd_rn|__fdividef|floorf|ceilf|roundf|"
    r"__float2half|__half2float|__float2bfloat16|__bfloat162float|__h\w+|static_cast|reinterpret_cast|"
    r"__popc|__clz|__ffs|__brev|__mul24|__umul24|__saturatef|make_\w+|__int_as_float|__float_as_int|"
    r"__ldg|__ldcg|__ldca|__ldcs|__ldlu|__ldcv|int|float|unsigned|size_t)$"
)


@dataclass(frozen=True)
class Barrier:
    line: int
    text: str
    divergent_reason: str | None  # why some threads may not reach it
    redundant: bool


def is_barrier_call(node: Node) -> bool:
    if node.type == "gnu_asm_expression":
        return re.search(r"\b(bar\.sync|barrier\.sync|barrier\.cta\.sync|bar\.cta\.sync)\b",
                         cst.text(node)) is not None
    if node.type != "call_expression":
        return False
    name = call_name(node)
    if name in _BARRIER_FNS:
        return True
    fn = node.child_by_field_name("function")
    if name == "sync" and fn is not None:
        target = cst.text(fn.child_by_field_name("argument")) if fn.type == "field_expression" else ""
        args = cst.text(node.child_by_field_name("arguments"))
        subject = (target or args).lower()
        return not re.search(r"grid|warp|tile|coalesced", subject)
    return False


def analyze_barriers(scope: KernelScope, effect_nodes: list[Node]) -> list[Barrier]:
    """Barrier sites of the kernel, including calls to device functions that synchronise the block."""
    if scope.body is None:
        return []
    syncing = barrier_functions(scope.file)
    direct = [n for n in cst.walk(scope.body) if is_barrier_call(n)]
    via_calls = [n for n in cst.walk(scope.body) if n.type == "call_expression" and call_name(n) in syncing]
    sites = sorted(direct + via_calls, key=lambda n: n.start_byte)
    if not sites:
        return []
    exits = _thread_dependent_exits(scope)
    effects = sorted({n.start_byte for n in effect_nodes} | _opaque_effects(scope))
    redundant = _Redundancy(scope, effects, {s.id for s in direct}).run()
    out = []
    for node in sites:
        text = " ".join(cst.text(node).split())[:60]
        if node.type == "call_expression" and call_name(node) in syncing:
            text = f"{call_name(node)}() (synchronises the block)"
        out.append(Barrier(cst.line(node), text, _divergence(scope, node, exits), node.id in redundant))
    return out


def barrier_functions(file) -> set[str]:
    """Device functions that contain a block barrier, directly or through the device functions they call."""
    cached = getattr(file, "_barrier_functions", None)
    if cached is not None:
        return cached
    calls = {name: {call_name(n) for n in cst.walk(fn) if n.type == "call_expression"}
             for name, fn in file.device_functions.items()}
    found = {name for name, fn in file.device_functions.items()
             if any(is_barrier_call(n) for n in cst.walk(fn))}
    changed = True
    while changed:  # propagate up the call graph to a fixpoint
        changed = False
        for name, callees in calls.items():
            if name not in found and callees & found:
                found.add(name)
                changed = True
    file._barrier_functions = found
    return found


def _divergence(scope: KernelScope, node: Node, exits: list[tuple[Node, Node | None, Node]]) -> str | None:
    for cond in scope.conditions(node):
        if scope.is_thread_dependent(cond):
            return f"under the thread-dependent condition `{_short(cond)}` (line {cst.line(cond)})"
    for stmt, loop, cond in exits:
        kind = stmt.type.split("_")[0]
        if loop is None and stmt.end_byte <= node.start_byte:
            return (f"after a `{kind}` under the thread-dependent condition `{_short(cond)}` "
                    f"(line {cst.line(stmt)})")
        skipped = kind == "break" or stmt.end_byte <= node.start_byte
        if loop is not None and loop.start_byte <= node.start_byte < loop.end_byte and skipped:
            return (f"in a loop left by a `{kind}` under the thread-dependent condition `{_short(cond)}` "
                        f"(line {cst.line(stmt)})")
    return None


def _short(node: Node) -> str:
    s = " ".join(cst.text(node).split())
    if s.startswith("(") and s.endswith(")"):
        s = s[1:-1]
    return s[:60]


def _thread_dependent_exits(scope: KernelScope) -> list[tuple[Node, Node | None, Node]]:
    """(statement, enclosing loop for break/continue or None for return, the tainted condition)."""
    out = []
    for n in cst.walk(scope.body):
        if n.type not in ("return_statement", "break_statement", "continue_statement"):
            continue
        loop = _enclosing_loop(n, scope) if n.type != "return_statement" else None
        if n.type != "return_statement" and loop is None:
            continue  # break out of a switch
        for cond in scope.conditions(n):
            inside = loop is None or (loop.start_byte < cond.start_byte and _within_body(cond, loop))
            if inside and scope.is_thread_dependent(cond):
                out.append((n, loop, cond))
                break
    return out


def _within_body(cond: Node, loop: Node) -> bool:
    body = loop.child_by_field_name("body")
    return body is not None and body.start_byte <= cond.start_byte < body.end_byte


def _enclosing_loop(node: Node, scope: KernelScope) -> Node | None:
    parent = node.parent
    while parent is not None and parent.id != scope.fn.id:
        if parent.type in ("for_statement", "while_statement", "do_statement", "for_range_loop"):
            return parent
        if parent.type == "switch_statement" and node.type == "break_statement":
            return None
        parent = parent.parent
    return None


def _opaque_effects(scope: KernelScope) -> set[int]:
    """Calls that may touch memory or order it (fences, device functions, value barriers, asm)."""
    out = set()
    for n in cst.walk(scope.body):
        if n.type == "call_expression":
            name = call_name(n)
            if name in _VALUE_BARRIERS or (not _PURE_CALLS.match(name) and not is_barrier_call(n)):
                out.add(n.start_byte)
        elif n.type == "gnu_asm_expression" and not is_barrier_call(n):
            out.add(n.start_byte)
    return out


class _Redundancy:
    """Forward walk over structured statements; state `clean` = no effect since the last barrier."""

    def __init__(self, scope: KernelScope, effects: list[int], barrier_ids: set[int]):
        self.scope, self.effects, self.barrier_ids = scope, effects, barrier_ids
        self.redundant: set[int] = set()

    def run(self) -> set[int]:
        self.walk(self.scope.body, True, True)  # kernel entry: nothing to order yet
        return self.redundant

    def has_effect(self, node: Node | None) -> bool:
        if node is None:
            return False
        i = bisect.bisect_left(self.effects, node.start_byte)
        return i < len(self.effects) and self.effects[i] < node.end_byte

    def has_barrier(self, node: Node) -> bool:
        return any(n.id in self.barrier_ids for n in cst.walk(node))

    def plain_barrier(self, stmt: Node) -> Node | None:
        if stmt.type != "expression_statement" or not stmt.named_children:
            return None
        expr = stmt.named_children[0]
        if expr.id in self.barrier_ids and not (expr.type == "call_expression"
                                                and call_name(expr) in _VALUE_BARRIERS):
            return expr
        return None

    def walk(self, stmt: Node | None, clean: bool, mark: bool) -> bool:
        if stmt is None:
            return clean
        t = stmt.type
        if t in ("compound_statement", "else_clause", "labeled_statement"):
            for child in stmt.named_children:
                clean = self.walk(child, clean, mark)
            return clean
        barrier = self.plain_barrier(stmt)
        if barrier is not None:
            if clean and mark:
                self.redundant.add(barrier.id)
            return True
        if t == "if_statement":
            c0 = clean and not self.has_effect(stmt.child_by_field_name("condition"))
            then = self.walk(stmt.child_by_field_name("consequence"), c0, mark)
            alt = stmt.child_by_field_name("alternative")
            return then and (self.walk(alt, c0, mark) if alt is not None else c0)
        if t in ("for_statement", "while_statement", "for_range_loop"):
            header = [stmt.child_by_field_name(f) for f in ("initializer", "condition", "update")]
            c0 = clean and not any(self.has_effect(h) for h in header)
            return c0 and self._loop(stmt.child_by_field_name("body"), c0, mark)
        if t == "do_statement":
            end = self._loop(stmt.child_by_field_name("body"), clean, mark)
            return end and not self.has_effect(stmt.child_by_field_name("condition"))
        if self.has_barrier(stmt):
            return False  # a barrier in an unusual construct (switch, value barrier): stay conservative
        return clean and not self.has_effect(stmt)

    def _loop(self, body: Node | None, entry_clean: bool, mark: bool) -> bool:
        entry = entry_clean
        for _ in range(4):  # the state is one bit: a couple of rounds reach the fixpoint
            end = self.walk(body, entry, False)
            new_entry = entry_clean and end
            if new_entry == entry:
                break
            entry = new_entry
        return self.walk(body, entry, mark)
