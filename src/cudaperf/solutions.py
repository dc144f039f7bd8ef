"""Reading candidate solutions from disk or text into `Solution` records.

Covers: naming (solution_id), format detection (delegated to `cudaperf.toolchain.extract.detect_format`,
which reads the AST and never executes the code). Not covered: building or running them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cudaperf.types import Solution, SolutionFormat


def solution_from_text(source: str, solution_id: str | None = None, path: str | None = None) -> Solution:
    """A Solution for `source`; the id defaults to a short content hash so identical texts share it."""
    from cudaperf.toolchain.extract import detect_format

    sid = solution_id or "sol-" + hashlib.sha256(source.encode()).hexdigest()[:12]
    try:
        fmt = detect_format(source)
    except Exception:  # detection is best effort; the static check reports unparseable code
        fmt = SolutionFormat.PYTORCH
    return Solution(solution_id=sid, source=source, format=fmt, path=path)


def load_solution(path: str | Path, solution_id: str | None = None) -> Solution:
    """Read a solution file; the id defaults to the file's stem."""
    p = Path(path)
    return solution_from_text(p.read_text(), solution_id or p.stem, str(p))
