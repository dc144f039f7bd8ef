"""One RL-mode batch through a real evaluator, with what the chaos tests check of it, shared by
tests/unit/test_eval_modes_chaos.py (CPU workers) and tests/gpu/test_eval_modes_chaos_gpu.py. No tests
here."""

from __future__ import annotations

import os
import time
from pathlib import Path

from cudaperf.evaluate import EvalConfig, Evaluator
from cudaperf.results import ResultStore


def children() -> set[int]:
    """Pids of this process's living children (zombies are dead: left out), but Python's own resource
    tracker (started by the first process pool, and kept for the life of the process by design)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"resource_tracker" not in command:
            found.add(int(entry.name))
    return found


def run_batch(config: EvalConfig, pairs: list, store_path: Path, log_prefix: str = "") -> dict:
    """Every pair through one evaluator, each result stored as it comes: the rows, the gate's holders
    once the batch is done (readers, writing, writers waiting), the child processes left after close,
    the wall time and the store read back."""
    before = children()
    store = ResultStore(store_path)
    started = time.perf_counter()
    rows = []
    with Evaluator(config) as ev:
        for result in ev.evaluate_many(pairs):
            rows.append(result)
            store.append(result)
            if log_prefix:
                print(f"[{log_prefix}] {time.perf_counter() - started:6.1f} s {result.solution_id}: "
                      f"{result.outcome.value} {result.message[:120]!r}", flush=True)
        gate = ev._rl.gate
        held = (gate._readers, gate._writing, gate._writers_waiting)
    return {"rows": rows, "held": held, "left": children() - before, "wall_s": time.perf_counter() - started,
            "stored": ResultStore(store_path).read()}


def outcomes_read_back(batch: dict) -> bool:
    """The store holds every row, whole, with the outcome the batch returned."""
    stored = batch["stored"]
    outcomes = {r.solution_id: r.outcome for r in batch["rows"]}
    return (not stored.bad_lines and not stored.torn_tail
            and {r.solution_id: r.outcome for r in stored.results} == outcomes)
