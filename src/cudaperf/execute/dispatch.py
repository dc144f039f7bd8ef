"""The worker's default job handler: a wire job to the recipe of its task kind, and the payload back.

`run_eval_job(message, report)` is what the child calls for each evaluation job (`sandbox.DEFAULT_HANDLER`);
tests and scripts call it in-process the same way. It picks `c_session.run_c_job` for C->CUDA tasks and
`torch_session.run_torch_job` for everything else, and returns the recipe's `jobs.EvalPayload` in its wire
form (`types.to_dict`), since the child sends it on as JSON.

Not covered: parsing the job and popping its secret (the session does both in its setup stage, so a
malformed job is a HARNESS_ERROR payload at `setup` and the secret never sits in this frame), the recipes
themselves, and the child's loop around the handler (`child.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cudaperf.execute import c_session, torch_session
from cudaperf.types import TaskKind, to_dict


def run_eval_job(message: dict, report: Callable[[str], None]) -> dict[str, Any]:
    """Evaluate one job (`jobs.job_message`) and return its payload as JSON-ready data. Never raises.

    `report(stage)` is the heartbeat, called as each stage starts. The secret is popped from `message`
    before any candidate code runs."""
    task = message.get("task")
    is_c = isinstance(task, dict) and task.get("kind") == TaskKind.C.value
    # Looked up on the modules at call time, so a test can stand in for either recipe.
    recipe = c_session.run_c_job if is_c else torch_session.run_torch_job
    return to_dict(recipe(message, report))
