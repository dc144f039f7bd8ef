"""The evaluator's optional dynamic stage: Nsight Compute counters for a candidate that passed.

Covers: running `profile_target` under ncu for one configuration (the largest by default), grouping the
per-launch metrics by kernel and merging them into the static `KernelFeatures` (`ncu.with_dynamic`).
Where ncu is missing or cannot read counters, the static features stand and the reason is returned as a
diagnostic.

Not covered: the metric list and CSV parsing (`analysis.ncu`), static analysis (`analysis.analyze`).
Candidate code runs in a separate process under the sandbox's guards (see `profile_target`), never here;
ncu and that process run together in a private network namespace (`execute.netns_exec`).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cudaperf.types import KernelFeatures, Solution, Task, to_dict


def largest_config(task: Task) -> str:
    """The configuration with the most input parameters' product (a cheap proxy for the largest data)."""
    def size(c) -> float:
        prod = 1.0
        for v in c.params.values():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                prod *= max(1.0, float(v))
        return prod
    return max(task.configs, key=size).name


def profile_features(task: Task, solution: Solution, features: Sequence[KernelFeatures], *,
                     config: str | None = None, calls: int = 1,
                     timeout_s: float = 120.0) -> tuple[tuple[KernelFeatures, ...], tuple[str, ...]]:
    """`features` with `dynamic` filled from ncu, and diagnostics. Never raises."""
    from cudaperf.analysis import ncu

    try:
        with tempfile.TemporaryDirectory(prefix="cudaperf-profile-") as tmp:
            job = {"task": to_dict(task), "solution": to_dict(solution), "calls": calls, "temp_dir": tmp,
                   "config": config or largest_config(task)}
            job_path = Path(tmp) / "job.json"
            job_path.write_text(json.dumps(job))
            # ncu and its target share one private network namespace (see execute.netns_exec): the target
            # cannot take one of its own without losing its connection to ncu.
            result = ncu.profile([sys.executable, "-m", "cudaperf.execute.profile_target", str(job_path)],
                                 timeout_s=timeout_s,
                                 launcher=(sys.executable, "-m", "cudaperf.execute.netns_exec"))
    except Exception as exc:  # noqa: BLE001 - the dynamic stage is optional: a failure is a diagnostic
        return tuple(features), (f"dynamic stage failed: {type(exc).__name__}: {exc}",)
    if not result.ok:
        return tuple(features), tuple(result.diagnostics) or ("ncu produced no kernel metrics",)
    by_kernel: dict[str, list[dict[str, float]]] = {}
    for k in result.kernels:
        by_kernel.setdefault(_base(k.kernel), []).append(k.metrics)
    merged = tuple(ncu.with_dynamic(f, by_kernel[_base(f.kernel)]) if _base(f.kernel) in by_kernel else f
                   for f in features)
    missing = sorted(set(by_kernel) - {_base(f.kernel) for f in features})
    notes = tuple(result.diagnostics) + ((f"kernels profiled without static features: {missing}",)
                                         if missing else ())
    return merged, notes


def _base(name: str) -> str:
    """`void ns::k<float, 256>(float*, int)` and `k<float,256>` -> `k` (ncu and NVRTC spell names apart)."""
    head = name.split("(")[0].split("<")[0].strip()
    return head.split(" ")[-1].split("::")[-1]
