"""Structural analysis of CUDA kernels: what makes a kernel fast, read from its source and binary.

Covers: `analyze_source(text) -> AnalysisReport` (one `KernelFeatures` per kernel plus feedback text that
points at source lines) and `render_feedback(report)`, built from: theoretical occupancy (`occupancy`),
compiler facts from ptxas and SASS (`compiler`), static source analysis with tree-sitter
(`static`, `symbolic`, `sync`, `intensity`) and Nsight Compute profiles (`ncu`, GPU machines only).

Not covered: running kernels (the evaluator does that), the structural reward (`cudaperf.reward` turns
these features into a score). Everything here runs on a CPU; heavy imports (tree-sitter, cuda-core) happen
on first use so `cudaperf.analysis.occupancy` and `.ncu` load anywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cudaperf.analysis.analyze import AnalysisReport, analyze_source, render_feedback

__all__ = ["AnalysisReport", "analyze_source", "render_feedback"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from cudaperf.analysis import analyze as report

        return getattr(report, name)
    raise AttributeError(name)
