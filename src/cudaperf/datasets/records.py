"""Records of the dataset generators: a generated task, a generated implementation, a family, and the
normalised-source hash used for task ids and dedupe.

Not covered: what the families generate (generate/), files on disk (export.py).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cudaperf.types import TaskKind

STRATEGIES = (
    "naive",  # the one-thread-per-iteration port (the C→CUDA baseline)
    "grid_stride",  # fixed grid, each thread strides over the iteration space
    "coarsened",  # each thread computes several outputs (ILP)
    "uncoalesced",  # thread index mapped to the slow dimension (a deliberately bad layout)
    "vectorized",  # float4 / double2 loads and stores with a scalar tail
    "smem_tiled",  # shared-memory tile (with halo for stencils)
    "smem_tiled_padded",  # shared-memory tile padded against bank conflicts
    "warp_shuffle",  # warp-level reductions / scans with __shfl_*_sync
    "block_tree",  # shared-memory tree reduction per block
    "atomic",  # global atomics
    "privatized",  # per-block private copies (shared memory) merged at the end
    "register_tiled",  # several outputs per thread held in registers
    "fused",  # one kernel for the whole chain
    "unfused",  # one kernel per op
    "two_pass",  # a second kernel combines per-block partial results
    "separable",  # a 2-D filter done as two 1-D passes
    "subwarp",  # a few lanes per row (irregular rows), shuffle reduction within the group
    "serial_thread",  # one thread (or one per row) runs the serial loop: a naive port of a dependent loop
    "tensor_core",  # WMMA tiles on the tensor cores (3xTF32 split for fp32 tasks)
)


@dataclass(frozen=True)
class Implementation:
    """One CUDA implementation of a task, as solution text in the fast format."""

    impl_id: str  # "<task_id>/<strategy>"
    task_id: str
    strategy: str  # one of STRATEGIES
    source: str
    tags: tuple[str, ...] = ()
    baseline: bool = False  # the naive port used as the C→CUDA baseline


@dataclass(frozen=True)
class GeneratedTask:
    """One task of the index: its text (a KernelBench module, or a CTask JSON document) and origin."""

    task_id: str
    kind: TaskKind
    family: str
    variant: dict[str, Any]
    text: str
    dedupe_key: str

    @property
    def filename(self) -> str:
        return f"{self.task_id}.py" if self.kind is TaskKind.PYTORCH else f"{self.task_id}.ctask.json"


@dataclass(frozen=True)
class Family:
    """A task family: `variants(rng)` enumerates parameter sets (deterministic given the numpy
    generator), `make(variant)` builds the task (a `CTask` with an empty id for C families, the module
    text for PyTorch ones), `implementations(variant, task_id)` its CUDA implementations. `group` is the
    unit held out by splits (defaults to the family name)."""

    name: str
    kind: TaskKind
    variants: Callable[[Any], list[dict[str, Any]]]
    make: Callable[[dict[str, Any]], Any]
    implementations: Callable[[dict[str, Any], str], list[Implementation]]
    description: str = ""
    group: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


_CODE_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/|#[^\n]*(?=\n)", re.DOTALL)  # C and Python comments
_COMMENT = re.compile(_CODE_COMMENT.pattern + r"|\"\"\".*?\"\"\"", re.DOTALL)  # ... and docstrings
_SPACE = re.compile(r"\s+")


def normalise(source: str) -> str:
    """Source without comments, docstrings and whitespace differences (the dedupe form).

    `#include`/`#define` lines are C preprocessor lines, not comments: they are kept.
    """
    return _normalised(source, _COMMENT)


def source_hash(source: str, n: int = 10) -> str:
    return hashlib.sha256(normalise(source).encode()).hexdigest()[:n]



def normalise_code(source: str) -> str:
    """Like `normalise`, but triple-quoted strings are kept: a solution module's CUDA lives in one
    (`SOURCE = r\"\"\"...\"\"\"`), so a kernel change must change this form (`normalise` drops them as
    docstrings, which is right for task identity and wrong for implementation identity)."""
    return _normalised(source, _CODE_COMMENT)


def _normalised(source: str, comments: re.Pattern[str]) -> str:
    kept = re.sub(r"#(include|define|pragma)", r"@\1", source)  # preprocessor lines are not comments
    return _SPACE.sub(" ", comments.sub(" ", kept)).strip()
