"""`cudaperf optimize` end to end on the CPU machine: recorded replies (`replay:`) and `--device none` (CUDA
answers are built and checked, not run): outputs, resume, usage errors."""

from __future__ import annotations

import json

import pytest

from cudaperf.cli import main
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir

RELU = str(example_tasks_dir() / "relu.py")
GOOD = (example_solutions_dir("fast") / "relu.py").read_text()
BROKEN = GOOD.replace("relu1(v.x)", "relu1(v.q)")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path / "cache"))


def _replay(tmp_path, *codes: str) -> str:
    path = tmp_path / "replies.jsonl"
    path.write_text("".join(json.dumps({"text": f"```python\n{c}```"}) + "\n" for c in codes))
    return f"replay:{path}"


def _optimize(tmp_path, model: str, *extra: str) -> int:
    return main(["optimize", RELU, "--model", model, "--turns", "2", "--device", "none",
                 "--out", str(tmp_path / "run"), *extra])


def test_optimize_writes_trajectories_best_kernel_and_summary(tmp_path, capsys):
    assert _optimize(tmp_path, _replay(tmp_path, BROKEN, GOOD)) == 0
    run = tmp_path / "run"
    lines = (run / "trajectories.jsonl").read_text().splitlines()
    assert [json.loads(x)["result"]["outcome"] for x in lines] == ["compile_error", "skipped"]
    assert (run / "best" / "relu.py").read_text().endswith(GOOD)
    summary = json.loads((run / "summary.json").read_text())
    assert [t["turn"] for t in summary["turns"]] == [0, 1] and "fast_1.2" in (run / "summary.md").read_text()
    assert "| turn |" in capsys.readouterr().out


def test_optimize_refuses_an_existing_run_without_resume(tmp_path):
    assert _optimize(tmp_path, _replay(tmp_path, BROKEN, GOOD)) == 0
    assert _optimize(tmp_path, _replay(tmp_path, GOOD)) == 2


def test_optimize_resume_of_a_finished_run_runs_nothing(tmp_path, capsys):
    model = _replay(tmp_path, BROKEN, GOOD)
    assert _optimize(tmp_path, model) == 0
    before = (tmp_path / "run" / "trajectories.jsonl").read_text()
    assert _optimize(tmp_path, model, "--resume") == 0
    assert (tmp_path / "run" / "trajectories.jsonl").read_text() == before
    assert "2 turns resumed" in capsys.readouterr().out


def test_a_fresh_run_does_not_take_the_replies_a_stopped_run_left(tmp_path):
    from cudaperf.agent.backends.base import Generation
    from cudaperf.agent.pending_replies import PendingReplies

    model = _replay(tmp_path, BROKEN, GOOD)
    stale = PendingReplies.beside(tmp_path / "run" / "trajectories.jsonl")
    stale.save(model, [("relu", 0, 0)], [Generation(f"```python\n{GOOD}```", 10, 10, "stop", 1.0)])
    assert _optimize(tmp_path, model) == 0
    first = json.loads((tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()[0])
    assert first["result"]["outcome"] == "compile_error"  # the replay's own first reply, not the stale one


def test_optimize_resume_with_another_model_is_a_usage_error(tmp_path, capsys):
    assert _optimize(tmp_path, _replay(tmp_path, BROKEN, GOOD)) == 0
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"text": "x"}) + "\n")
    assert _optimize(tmp_path, f"replay:{other}", "--resume") == 2
    assert "model" in capsys.readouterr().err


def test_optimize_unknown_model_is_a_usage_error(tmp_path, capsys):
    assert _optimize(tmp_path, "nosuchbackend") == 2
    assert "unknown backend" in capsys.readouterr().err


def test_optimize_unknown_task_spec_is_a_usage_error(tmp_path):
    assert main(["optimize", "split:holdout", "--out", str(tmp_path / "run")]) == 2


def test_optimize_help_lists_its_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["optimize", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "--target-speedup" in out and "--resume" in out
