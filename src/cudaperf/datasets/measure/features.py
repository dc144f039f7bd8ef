"""Static features of the measured implementations: a dozen numbers per implementation from the CPU
analysis (`cudaperf.analysis`: registers, shared memory, spills, occupancy, barriers, atomics, coalescing,
bank conflicts), one `features.jsonl` line each, keyed by the source hash they were computed from.

Not covered: the analysis itself (`cudaperf.analysis.analyze`), joining features to timed rows (stats.py).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cudaperf.datasets import registry
from cudaperf.datasets.jsonl import ResultsWriter, read_records
from cudaperf.datasets.measure.results import FEATURES_FILE, ROW_VERSION, impl_hash
from cudaperf.datasets.records import GeneratedTask, Implementation


def feature_ids(directories: Iterable[Path]) -> dict[str, str | None]:
    """impl id -> the source hash its features were computed from (the last row wins)."""
    rows, _ = read_records(directories, "features")
    return {r["impl_id"]: r.get("source_hash") for r in rows if "impl_id" in r}


def has_current_features(done: dict[str, str | None], impl: Implementation) -> bool:
    """Whether `done` (from `feature_ids`) holds features of this implementation's current source."""
    return done.get(impl.impl_id) == impl_hash(impl.source)


def load_features(*directories: Path) -> dict[str, dict[str, Any]]:
    """Static features per implementation from every `features*.jsonl[.gz]` of the directories."""
    rows, _ = read_records(directories, "features")
    return {r["impl_id"]: r.get("features", {}) for r in rows if "impl_id" in r}


def compact_features(kernels: tuple[Any, ...]) -> dict[str, Any]:
    """A dozen numbers per implementation (summed or worst over its kernels) from `KernelFeatures`."""
    accesses = [a for k in kernels for a in k.accesses]
    glob = [a for a in accesses if a.space == "global"]
    shared = [a for a in accesses if a.space == "shared"]
    res = [k.resources for k in kernels if k.resources is not None]
    occ = [k.occupancy.occupancy for k in kernels if k.occupancy is not None]
    coalescing = Counter(getattr(a.coalescing, "value", a.coalescing) for a in glob)
    conflicts = [a.bank_conflict_degree for a in shared if a.bank_conflict_degree]
    return {
        "n_kernels": len(kernels),
        "registers_max": max((r.registers for r in res if r.registers is not None), default=None),
        "smem_static_bytes_max": max((r.smem_static_bytes or 0 for r in res), default=None),
        "spill_bytes": (sum((r.spill_store_bytes or 0) + (r.spill_load_bytes or 0) for r in res)
                        if res else None),
        "occupancy_min": min(occ) if occ else None,
        "barriers": sum(k.barriers for k in kernels),
        "divergent_barriers": sum(len(k.divergent_barriers) for k in kernels),
        "atomics": sum(k.atomics for k in kernels),
        "vectorized_accesses": sum(k.vectorized_accesses for k in kernels),
        "global_accesses": len(glob),
        **{f"global_{c}": coalescing.get(c, 0) for c in ("coalesced", "strided", "uncoalesced", "broadcast")},
        "shared_accesses": len(shared),
        "bank_conflict_max": max(conflicts) if conflicts else None,
    }


def static_feature_row(impl: Implementation) -> dict[str, Any] | None:
    """One features.jsonl line for an implementation, or None when the analysis could not run here
    (tree-sitter missing, an internal failure): it is then left for another machine."""
    from cudaperf.analysis.analyze import analyze_source

    report = analyze_source(impl.source, sass=False)
    if not report.kernels or any(d.startswith("analysis failed") for d in report.diagnostics):
        return None
    return {"v": ROW_VERSION, "impl_id": impl.impl_id, "source_hash": impl_hash(impl.source),
            "task_id": impl.task_id, "strategy": impl.strategy,
            "features": compact_features(report.kernels), "diagnostics": len(report.diagnostics),
            "t": time.time()}


def add_missing(impls: Iterable[Implementation], done: dict[str, str | None], writer: ResultsWriter) -> int:
    """Append a features row for each implementation whose current source has none in `done` (updated);
    how many were written. An implementation the analysis cannot handle here is left for another machine."""
    written = 0
    for impl in impls:
        if has_current_features(done, impl):
            continue
        row = static_feature_row(impl)
        if row is not None:
            writer.append(row)
            done[impl.impl_id] = row["source_hash"]
            written += 1
    return written


class FeatureThread:
    """Static features of each measured task's implementations, computed on the parent's idle CPU while
    the children use the GPU, appended to `features.jsonl` of the first directory (skipping implementations
    any of the directories already has)."""

    def __init__(self, directories: list[Path]):
        self.done = feature_ids(directories)
        self.writer = ResultsWriter(directories[0] / FEATURES_FILE)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cudaperf-features")

    def submit(self, task: GeneratedTask) -> None:
        self.pool.submit(lambda: add_missing(registry.implementations(task), self.done, self.writer))

    def close(self, wait_s: float) -> None:
        self.pool.shutdown(wait=wait_s > 0, cancel_futures=True)
        self.writer.close()
