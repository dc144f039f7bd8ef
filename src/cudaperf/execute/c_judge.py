"""Judging a C->CUDA task's candidate outputs: the serial C reference per (configuration, seed) and the
comparisons, in the referee (or in a worker that runs without one).

A reference: the inputs `ctask.make_inputs` draws from the seed (the worker draws the candidate's the same
way) and the serial C outputs on them (`cref`, built with the host compiler, run on the CPU; read-only
numpy arrays, kept in host memory by the store). Judging one output (the `out` and `inout` arrays after a
call, in `CTask.outputs` order): `correctness.compare` under the task's tolerance, integers exactly, with
`unsigned int` arrays compared as int32 (`c_session.comparable`); elements still holding the fill pattern
of that call (run 1: 0xFF bytes, run 2: 0x5A) are named in the message; `in` arrays the worker saw change
fail the call (ERROR `input_mutated`). Degenerate outputs are flagged once a configuration is complete.

Not covered: the bookkeeping both kinds share (`judge.py`), PyTorch tasks (`torch_judge.py`), the
speed-of-light check of C tasks (it stays in the worker: see guards.py, "Not covered").
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from cudaperf.correctness import Comparison, compare, degenerate_flags
from cudaperf.execute.judge import Judge, ReferenceFailed, ReferenceStore
from cudaperf.jobs import EvalJob
from cudaperf.tasks.ctask import ParamKind
from cudaperf.types import Flag, Severity, to_dict


class CJudge(Judge):
    """Judging for one C job; references through `store` (host memory, kept across jobs by the caller),
    and on a miss there through `shared` when given (`shared_references.Client`: the store the pool's
    referees share, which computes each reference once for all of them). Counted in `spent`:
    `reference` (milliseconds computing here), `reference_shared` (fetching from the shared store, the
    wait for another referee included), `reference_store` (asking the shared store and publishing to it
    around a computation here), and how many references were computed here (`reference_computed`) and
    how many the shared store served (`reference_shared`)."""

    def __init__(self, job: EvalJob, seeds: tuple[int, ...], device: torch.device, store: ReferenceStore,
                 ctask: Any, shared: Any = None):
        super().__init__(seeds, job.seeds)
        self.job, self.ctask, self.device, self.store, self.shared = job, ctask, device, store, shared
        digest = hashlib.sha256(json.dumps(to_dict(ctask), sort_keys=True).encode()).hexdigest()
        self.task_key = (ctask.task_id, digest)
        self.names = tuple(c.name for c in ctask.configs)
        self.expected: dict[tuple[str, int], tuple[torch.Tensor, ...]] = {}  # device copies, this job

    def config_names(self) -> tuple[str, ...]:
        return self.names

    def is_derived(self, config: str) -> bool:
        return False  # C tasks declare their configurations

    def reference_for(self, config: str, seed: int) -> Any:
        from cudaperf.execute.shared_references import shared_key

        key = (*self.task_key, config, seed)
        entry = self.store.get(key)
        if entry is not None:
            return entry
        if self.shared is None:
            entry = self._computed(config, seed)
        else:
            began, computing_ms = time.perf_counter(), self.spent.ms.get("reference", 0.0)
            entry, how = self.shared.fetch(shared_key(*key), lambda: self._computed(config, seed))
            elapsed_s = time.perf_counter() - began
            if how == "shared":
                self.spent.add("reference_shared", elapsed_s)
                self.spent.count("reference_shared")
            else:  # the store's own cost beside the computation: asking, publishing, mapping back
                computed_s = (self.spent.ms["reference"] - computing_ms) / 1e3
                self.spent.add("reference_store", elapsed_s - computed_s)
        self.store.put(key, entry)
        return entry

    def _computed(self, config: str, seed: int) -> Any:
        """The reference of (config, seed) computed here; ReferenceFailed when it cannot be."""
        from cudaperf.execute.c_session import compute_reference

        try:
            with self.spent("reference"):
                entry = compute_reference(self.ctask, self.ctask.config(config), seed, self.job.cache_dir)
        except Exception as exc:
            raise ReferenceFailed(config, f"{type(exc).__name__}: {exc}"[:2000]) from exc
        self.spent.count("reference_computed")
        return entry

    def output_limit(self, key: Any) -> int:
        entry = self.reference(key.config, key.seed_index)
        return sum(a.nbytes for a in entry.outputs.values())

    def expected_on_device(self, config: str, seed_index: int) -> tuple[torch.Tensor, ...]:
        from cudaperf.execute.c_session import to_device

        key = (config, seed_index)
        if key not in self.expected:
            entry = self.reference(config, seed_index)
            outputs = entry.outputs
            self.expected[key] = tuple(to_device(outputs[p.name], self.device) for p in self.ctask.outputs)
        return self.expected[key]

    def compare_item(self, config: str, seed_index: int, run: int, item: dict) -> Comparison:
        from cudaperf.execute.c_session import FILL_BYTES, comparable, still_filled

        expected = self.expected_on_device(config, seed_index)
        outs = item.get("output")
        if type(outs) is not tuple or len(outs) != len(expected):
            return Comparison(ok=False, message=f"expected {len(expected)} output array(s), got "
                              f"{type(outs).__name__}")
        tol = self.ctask.tolerance_for(self.ctask.config(config))
        parts = []
        for param, out, ref in zip(self.ctask.outputs, outs, expected, strict=True):
            result = compare(comparable(out) if type(out) is torch.Tensor else out, comparable(ref), tol,
                             path=f"`{param.name}`")
            self.flags += [replace(f, config=config) for f in result.flags]
            fill = FILL_BYTES[run - 1]
            unwritten = (still_filled(out, fill) if not result.ok and param.kind is ParamKind.OUT
                         and type(out) is torch.Tensor and out.shape == ref.shape else 0)
            if unwritten:
                result = replace(result, message=f"{result.message}; {unwritten} element(s) still hold the "
                                 f"harness's fill pattern 0x{fill:02X} bytes (never written)")
            parts.append(result)
        mutated = str(item.get("mutated") or "")
        if mutated:
            self.flags.append(Flag("input_mutated", mutated, Severity.ERROR, config))
            parts.append(Comparison(ok=False, message=mutated))
        return _combine(parts)

    def degenerate(self, config: str, outputs: list[Any]) -> list[Flag]:
        from cudaperf.execute.c_session import comparable

        references = [self.expected_on_device(config, i) for i in range(len(self.seeds))]
        values = [self.reference(config, i).values for i in range(len(self.seeds))]
        names = [p.name for p in self.ctask.params if p.kind in (ParamKind.IN, ParamKind.INOUT)]
        differ = any(not np.array_equal(values[0][n], other[n]) for other in values[1:] for n in names)
        outs = [tuple(comparable(t) for t in o) if type(o) is tuple else o for o in outputs]
        refs = [tuple(comparable(t) for t in r) for r in references]
        return list(degenerate_flags(outs, refs, differ, config=config))

    def finish_config(self, config: str) -> None:
        super().finish_config(config)
        self.expected = {k: v for k, v in self.expected.items() if k[0] != config}


def _combine(parts: list[Comparison]) -> Comparison:
    """One comparison of a call from its arrays' (the first failure's message, the largest errors)."""
    failed = [p for p in parts if not p.ok]

    def largest(attr: str) -> float | None:
        return max((getattr(p, attr) for p in parts if getattr(p, attr) is not None), default=None)

    return Comparison(ok=not failed, max_abs_error=largest("max_abs_error"),
                      max_rel_error=largest("max_rel_error"), mismatch_fraction=largest("mismatch_fraction"),
                      message=failed[0].message if failed else "")
