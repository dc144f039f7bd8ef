"""A labelled suite of small kernels: what the static analysis must say about each, and how to run it.

Covers: the `Case` record (one `extern "C"` kernel, its launch, its arguments, the sizes the analysis
binds, and the expected static verdict per feature), the registry `all_cases()` (the `CASES` of the
themed modules in this package), `verdicts(features, detail)` which reads the same verdicts off an
`AnalysisReport` (used by the CPU test that pins the labels and by `scripts/validate_static_vs_ncu.py`,
which compares them with Nsight Compute on an H200), and `argument_specs` helpers for launching.

Feature keys and values:
- `load` / `store`: worst coalescing class of the kernel's global loads / stores (broadcast < coalesced <
  strided < uncoalesced < unknown), None when there are none;
- `bank_conflict`: worst shared-memory conflict degree (1 = none), None without shared accesses;
- `padded`: every 2-D shared array padded off the bank period, None without 2-D shared arrays;
- `barriers` (count), `divergent_barrier`, `redundant_barrier`, `atomics`, `vectorized`, `local_memory`
  (booleans); `occupancy`: "high" (theoretical >= 50 %) or "low"; `regime`: "memory" or "compute";
- `divergent_branches`: some branch or loop condition depends on the thread (a guard `i < n` counts);
  a kernel without any cannot diverge, which is what makes its barriers checkable on the hardware;
- `window`: some global access belongs to a per-thread window (strided requests that together cover
  whole sectors, `memory.mark_windows`); its requests stay "strided" per instruction, as ncu counts them.

Not covered: correctness of the kernels' results (they are measured, not checked), timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cudaperf.types import CoalescingClass, KernelFeatures

DEFAULT_LABELS: dict[str, Any] = {
    "bank_conflict": None, "padded": None, "barriers": 0, "divergent_barrier": False,
    "redundant_barrier": False, "atomics": False, "vectorized": False, "local_memory": False,
    "occupancy": "high", "divergent_branches": True, "window": False,
}
FEATURES = ("load", "store", "bank_conflict", "padded", "barriers", "divergent_barrier", "redundant_barrier",
            "atomics", "vectorized", "local_memory", "occupancy", "regime", "divergent_branches", "window")
_ORDER = {c: i for i, c in enumerate(("broadcast", "coalesced", "strided", "uncoalesced", "unknown"))}


@dataclass(frozen=True)
class Case:
    """One labelled kernel.

    `args`: one spec per kernel parameter — "in:COUNT" (random float32 input), "out:COUNT" (float32
    output), "idx:COUNT:RANGE" (random int32 in [0, RANGE)), "i32:VALUE", "f32:VALUE"; COUNT, RANGE and
    VALUE are Python expressions over `sizes`. `run`: False for kernels that are undefined behaviour on
    a GPU (a barrier some threads never reach can hang), labelled for the static analysis only.
    """

    name: str
    source: str
    labels: dict[str, Any]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[str, ...]
    sizes: dict[str, int] = field(default_factory=dict)
    smem_bytes: int = 0
    run: bool = True
    note: str = ""
    access_bytes: int = 4  # width of the kernel's global loads/stores (sectors per request scale with it)

    @property
    def expected(self) -> dict[str, Any]:
        return {**DEFAULT_LABELS, **self.labels}

    @property
    def launch(self) -> dict[str, Any]:
        return {"grid": self.grid, "block": self.block, "smem_bytes": self.smem_bytes}


def case(name: str, body: str, labels: dict[str, Any], *, grid, block, args, sizes=None, smem_bytes=0,
         run=True, note="", prelude: str = "", access_bytes: int = 4) -> Case:
    """A Case whose source is `prelude` + `extern "C" __global__ void NAME` + `body` (parameters and
    braces)."""
    source = f'{prelude}extern "C" __global__ void {name}{body}\n'
    g = tuple(grid) + (1,) * (3 - len(grid))
    b = tuple(block) + (1,) * (3 - len(block))
    return Case(name, source, labels, g, b, tuple(args), dict(sizes or {}), smem_bytes, run, note,
                access_bytes)


def worst(classes: list[CoalescingClass | None]) -> str | None:
    values = [c.value for c in classes if c is not None]
    return max(values, key=_ORDER.__getitem__) if values else None


def verdicts(f: KernelFeatures, detail: Any | None = None) -> dict[str, Any]:
    """The suite's feature verdicts read off one kernel's analysis (`detail`: its `KernelDetail`)."""
    globals_ = [a for a in f.accesses if a.space == "global"]
    shared = [a for a in f.accesses if a.space == "shared"]
    degrees = [a.bank_conflict_degree for a in shared if a.bank_conflict_degree is not None]
    arrays_2d = [s for s in (detail.shared_arrays if detail is not None else ()) if len(s["dims"]) >= 2]
    r = f.resources
    local = None
    if r is not None:
        local = r.stack_frame_bytes > 0 or r.spill_store_bytes > 0 or f.sass.get("local", 0) > 0
    return {
        "load": worst([a.coalescing for a in globals_ if a.kind == "load"]),
        "store": worst([a.coalescing for a in globals_ if a.kind == "store"]),
        "bank_conflict": max(degrees) if degrees else None,
        "padded": all(bool(s["padded"]) for s in arrays_2d) if arrays_2d else None,
        "barriers": f.barriers,
        "divergent_barrier": bool(f.divergent_barriers),
        "redundant_barrier": bool(f.redundant_barriers),
        "atomics": f.atomics > 0,
        "vectorized": f.vectorized_accesses > 0,
        "local_memory": local,
        "occupancy": None if f.occupancy is None else ("high" if f.occupancy.occupancy >= 0.5 else "low"),
        "regime": f.roofline_regime,
        "divergent_branches": bool(detail.thread_dependent_conditions) if detail is not None else None,
        "window": (any(g["window"] > 1 for g in detail.global_accesses) if detail is not None else None),
    }


def all_cases() -> tuple[Case, ...]:
    from cudaperf.analysis.validation import memory_cases, resource_cases, shared_cases, sync_cases

    out = memory_cases.CASES + shared_cases.CASES + sync_cases.CASES + resource_cases.CASES
    names = [c.name for c in out]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate validation kernels: {sorted(duplicates)}")
    return out


def evaluate_spec(expr: str, sizes: dict[str, int]) -> int | float:
    """A COUNT/RANGE/VALUE expression of an argument spec over the case's sizes (arithmetic only)."""
    import ast

    tree = ast.parse(expr, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.operator,
                                 ast.unaryop, ast.Load)):
            raise TypeError(f"argument spec {expr!r}: only arithmetic over sizes is allowed")
    # only arithmetic: vetted above
    return eval(compile(tree, "<spec>", "eval"), {"__builtins__": {}}, dict(sizes))
