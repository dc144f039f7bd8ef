"""Writing the dataset: task files and implementation files (each written to a temporary name and
renamed, so an interrupted build leaves only whole files and a rerun skips what exists), the
manifest, JSONL prompts for the agent and RL, and Parquet tables (pyarrow, optional).

Layout under the output directory:
  manifest.json                        seed, counts, splits, format version
  tasks/<kind>/<family>/<task file>    KernelBench modules (.py) or C tasks (.ctask.json)
  tasks/c/<family>/naive/<task_id>.py  each C task's naive CUDA port (its baseline implementation): the
                                       GPU baseline `cudaperf eval` reads through `ctask.load_task_file`
  impls/<task_id>/<strategy>.py        fast-format implementations
  prompts.jsonl                        one row per task: id, kind, family, split, prompt, task source,
                                       variant, strategies
  tasks.parquet, impls.parquet         the same rows as tables (when pyarrow is installed)

Not covered: measurement results (a GPU session appends them to measurements.jsonl).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cudaperf.datasets.records import GeneratedTask, Implementation
from cudaperf.tasks.ctask import from_json, naive_port_path
from cudaperf.tasks.ctask import prompt_text as c_prompt
from cudaperf.types import TaskKind

FORMAT_VERSION = 1


def write_atomic(path: Path, text: str) -> bool:
    """Write `text` to `path` via a temporary file and a rename; False when it already holds `text`."""
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return True


def task_path(root: Path, task: GeneratedTask) -> Path:
    return root / "tasks" / task.kind.value / task.family / task.filename


def write_task(root: Path, task: GeneratedTask, impls: Iterable[Implementation]) -> None:
    """The task file and, for a C task, its baseline implementation as its naive port
    (`ctask.naive_port_path`)."""
    path = task_path(root, task)
    write_atomic(path, task.text)
    baseline = next((i for i in impls if i.baseline), None)
    if task.kind is TaskKind.C and baseline is not None:
        write_atomic(naive_port_path(path), baseline.source)


def impl_path(root: Path, impl: Implementation) -> Path:
    return root / "impls" / impl.task_id / f"{impl.strategy}.py"


def prompt_text(task: GeneratedTask) -> str:
    if task.kind is TaskKind.C:
        return c_prompt(from_json(task.text))
    return ("Write a faster version of this PyTorch model for an NVIDIA H200 (sm_90) as `class "
            "ModelNew`, with the "
            "same constructor, doing its work in your own CUDA kernels (compiled with "
            "`from cudaperf import cuda; cuda.load(SOURCE)`).\n\n```python\n" + task.text.strip() + "\n```\n")


def prompt_row(task: GeneratedTask, split: str, strategies: list[str]) -> dict[str, Any]:
    return {"task_id": task.task_id, "kind": task.kind.value, "family": task.family, "split": split,
            "prompt": prompt_text(task), "task_source": task.text, "variant": json.dumps(task.variant),
            "strategies": strategies}


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    lines = [json.dumps(r, sort_keys=True) for r in rows]
    write_atomic(path, "\n".join(lines) + ("\n" if lines else ""))
    return len(lines)


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> str | None:
    """Rows as a Parquet table (readable by `datasets.load_dataset("parquet", ...)`); None when written,
    else why not (pyarrow missing: `pip install pyarrow`)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return "pyarrow is not installed (pip install pyarrow): Parquet export skipped"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, path)
    return None


def read_manifest(root: Path) -> dict[str, Any] | None:
    path = root / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else None


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    write_atomic(root / "manifest.json", json.dumps({"format_version": FORMAT_VERSION, **manifest}, indent=1,
                                                    sort_keys=True))


def load_tasks(root: Path) -> list[GeneratedTask]:
    """The tasks listed in a built dataset's manifest, read back from their files."""
    manifest = read_manifest(root) or {}
    out = []
    for entry in manifest.get("tasks", []):
        task = GeneratedTask(entry["task_id"], TaskKind(entry["kind"]), entry["family"], entry["variant"],
                             "", "")
        text = task_path(root, task).read_text()
        out.append(GeneratedTask(task.task_id, task.kind, task.family, task.variant, text, ""))
    return out
