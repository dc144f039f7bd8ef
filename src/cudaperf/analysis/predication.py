"""The share of a block's threads that reach a statement through the `if` conditions around it.

`thread_share(scope, node, env)` evaluates the conditions of every `if` that encloses `node` (its
consequence, or the negation for its alternative) concretely for every thread of one block
(`lanes.LaneEvaluator`, warp by warp), and returns the share of the block's threads for which all of them
hold: `if (threadIdx.x == 0)` gives 1/blockDim.x, `if ((threadIdx.x & 31) == 0)` or `if (lane == 0)` 1/32.
The per-access request counts (`intensity`) weigh loops, not such guards, so an atomic that one thread of
a block (or of a warp) makes after a reduction would otherwise count once per thread.

A condition whose value the lanes cannot give (it reads memory, or a value the evaluator does not know)
counts as taken, as the work estimate counts both sides of a branch. The block is evaluated twice, as
blocks 0 and 1 of the grid: a share that differs between them depends on the block (`if (blockIdx.x ==
0)`, a bounds guard on a grid of one or two blocks), and is not a per-block pattern: None.

Not covered: early exits (`if (tid >= 32) return;` before the statement), conditions of enclosing loops
(their trip counts are `intensity`'s), `switch`, the ternary operator, data-dependent shares.
"""

from __future__ import annotations

import math

from tree_sitter import Node

from cudaperf.analysis.lanes import WARP, LaneEnv, LaneEvaluator, Lanes
from cudaperf.analysis.scope import KernelScope
from cudaperf.analysis.symbolic import Unknown

MAX_BLOCK_THREADS = 1024


def enclosing_conditions(scope: KernelScope, node: Node) -> list[tuple[Node, bool]]:
    """(condition, the value the path to `node` needs) of every `if` around `node`, innermost first."""
    out = []
    child, parent = node, node.parent
    while parent is not None and parent.id != scope.fn.id:
        if parent.type == "if_statement":
            cond = parent.child_by_field_name("condition")
            body = parent.child_by_field_name("consequence")
            other = parent.child_by_field_name("alternative")
            if cond is not None and body is not None and _inside(child, body):
                out.append((cond, True))
            elif cond is not None and other is not None and _inside(child, other):
                out.append((cond, False))
        child, parent = parent, parent.parent
    return out


def thread_share(scope: KernelScope, node: Node, env: LaneEnv) -> float | None:
    """Share of a block's threads for which every enclosing `if` leads to `node` (module docstring)."""
    return thread_shares(scope, [node], env)[0]


def thread_shares(scope: KernelScope, nodes: list[Node], env: LaneEnv) -> list[float | None]:
    """`thread_share` of each node; the block's warps are evaluated once for all of them (a condition
    that several nodes share is evaluated once per warp)."""
    conditions = [enclosing_conditions(scope, n) for n in nodes]
    if not any(conditions):
        return [1.0] * len(nodes)
    per_block = [_block_shares(scope, conditions, env, block_index) for block_index in (0, 1)]
    return [a if a == b else None for a, b in zip(*per_block)]


def _block_shares(scope: KernelScope, conditions: list[list[tuple[Node, bool]]], env: LaneEnv,
                  block_index: int) -> list[float]:
    bx, by, bz = (max(1, d) for d in (env.block or (256, 1, 1)))
    threads = min(bx * by * bz, MAX_BLOCK_THREADS)
    passed = [0] * len(conditions)
    for warp in range(math.ceil(threads / WARP)):
        tids = [warp * WARP + lane for lane in range(WARP)]
        evaluator = LaneEvaluator(scope, env)
        evaluator.builtins.update({
            "threadIdx.x": Lanes(tuple(t % bx for t in tids)),
            "threadIdx.y": Lanes(tuple((t // bx) % by for t in tids)),
            "threadIdx.z": Lanes(tuple(t // (bx * by) for t in tids)),
            "blockIdx.x": Lanes.const(block_index),
        })
        values: dict[int, Lanes | Unknown] = {}
        for i, conds in enumerate(conditions):
            taken = [t < threads for t in tids]
            for cond, wanted in conds:
                if cond.id not in values:
                    values[cond.id] = evaluator.value(cond)
                value = values[cond.id]
                if not isinstance(value, Unknown):
                    taken = [k and (bool(v) == wanted) for k, v in zip(taken, value.vals)]
            passed[i] += sum(taken)
    return [n / threads for n in passed]


def _inside(node: Node, container: Node) -> bool:
    return container.start_byte <= node.start_byte and node.end_byte <= container.end_byte
