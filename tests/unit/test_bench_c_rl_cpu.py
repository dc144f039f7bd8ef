"""benchmarks/c_rl_cpu.py: its candidates are what their names say, against the serial C reference on
each task's small configuration (the runs themselves: the benchmark)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from c_rl_cpu import c_tasks

from cudaperf.execute.c_session import compute_reference
from cudaperf.tasks.ctask import ParamKind, from_task


def _outputs(ctask, config, source: str, entry) -> dict:
    namespace: dict = {}
    exec(compile(source, "<candidate>", "exec"), namespace)  # noqa: S102 - the benchmark's own candidates
    args = {k: torch.from_numpy(v.copy()) if hasattr(v, "copy") else v for k, v in entry.values.items()}
    for p in ctask.params:
        if p.kind is ParamKind.OUT:
            args[p.name] = torch.zeros(len(entry.outputs[p.name]))
    namespace[ctask.entry](**args)
    return {p.name: args[p.name] for p in ctask.outputs}


@pytest.mark.parametrize("index", range(3))
def test_right_and_slower_candidates_match_the_reference_and_the_wrong_one_does_not(index, tmp_path):
    task, sources = c_tasks()[index]
    ctask = from_task(task)
    config = ctask.config("small")
    entry = compute_reference(ctask, config, 1, str(tmp_path))
    for kind, source in sources.items():
        got = _outputs(ctask, config, source, entry)
        same = all(torch.allclose(got[k], torch.from_numpy(entry.outputs[k].copy()), atol=1e-5)
                   for k in got)
        assert same == (kind != "wrong"), (task.task_id, kind)
