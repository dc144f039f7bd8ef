"""verl's dataset rows for cudaperf tasks, and the task back from a row.

verl's `RLHFDataset` reads parquet rows with `prompt` (chat messages), `data_source`, `agent_name` (the
agent loop that runs the row), `reward_model.ground_truth` and `extra_info`. A cudaperf row carries its
whole `Task` record as JSON in `extra_info["task"]`, so the agent loop and the reward function on any
node rebuild the task without a task index there; the prompt is exactly the environment's first prompt
(`RefineEnv.reset`, as the TRL path and SFT render it).

Covers: `task_rows`, `task_from_row`, `write_parquet` (pandas + pyarrow, which verl installs).
Not covered: choosing tasks (`cudaperf.agent.taskset`), splits and curricula (`cudaperf.datasets.splits`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cudaperf.agent.environment import EnvConfig, RefineEnv
from cudaperf.types import Task, from_dict, to_dict

DATA_SOURCE = "cudaperf"
AGENT_NAME = "cudaperf_refine"


def task_rows(tasks: Sequence[Task], env: EnvConfig | None = None, agent_name: str = AGENT_NAME,
              split: str = "train") -> list[dict[str, Any]]:
    """One verl row per task (verl repeats each row `rollout.n` times: the GRPO group)."""
    rows = []
    for i, task in enumerate(tasks):
        prompt = RefineEnv(env or EnvConfig()).reset(task)
        rows.append({"data_source": DATA_SOURCE, "prompt": prompt, "agent_name": agent_name,
                     "ability": "cuda", "reward_model": {"style": "rule", "ground_truth": task.task_id},
                     "extra_info": {"split": split, "index": i, "task_id": task.task_id,
                                    "task": json.dumps(to_dict(task))}})
    return rows


def task_from_row(extra_info: Mapping[str, Any] | None) -> Task | None:
    """The task of a row (None when the row has none or it does not parse)."""
    raw = (extra_info or {}).get("task")
    try:
        data = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
        return from_dict(Task, dict(data)) if isinstance(data, Mapping) else None
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


def write_parquet(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write rows as verl reads them (`data.train_files`)."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(list(rows)).to_parquet(path)
    return path


__all__ = ["AGENT_NAME", "DATA_SOURCE", "task_from_row", "task_rows", "write_parquet"]
