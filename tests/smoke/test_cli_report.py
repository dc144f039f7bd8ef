"""`cudaperf report` on a small JSONL file, including a torn last line, and `--html` over results and
trajectories together."""

from __future__ import annotations

import json

import pytest

from cudaperf.cli import main
from cudaperf.results import ResultStore
from cudaperf.types import EvalResult, Outcome, to_dict


def _store(tmp_path) -> ResultStore:
    store = ResultStore(tmp_path / "results.jsonl")
    store.append(EvalResult("vector_add", "fast/vector_add", Outcome.CORRECT, speedup_vs_eager=1.3,
                            speedup_vs_compile=1.1))
    store.append(EvalResult("matmul", "fast/matmul", Outcome.INCORRECT, speedup_vs_eager=0.4))
    return store


def test_report_markdown_has_fast_p_and_the_tasks(tmp_path, capsys):
    store = _store(tmp_path)
    assert main(["report", str(store.path), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "fast_1" in out and "| vector_add |" in out and "| matmul |" in out


def test_report_rich_prints_tables(tmp_path, capsys):
    store = _store(tmp_path)
    assert main(["report", str(store.path)]) == 0
    assert "Best solution per task" in capsys.readouterr().out


def test_report_skips_a_torn_line_with_a_note(tmp_path, capsys):
    store = _store(tmp_path)
    with open(store.path, "a") as f:
        f.write('{"task_id": "relu", "solu')
    assert main(["report", str(store.path), "--markdown"]) == 0
    captured = capsys.readouterr()
    assert "torn last line" in captured.err and "relu" not in captured.out


def test_report_on_a_missing_file_is_a_usage_error(tmp_path):
    assert main(["report", str(tmp_path / "none.jsonl")]) == 2


def _trajectory_file(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    turns = []
    for turn, (outcome, eager) in enumerate([(Outcome.INCORRECT, None), (Outcome.CORRECT, 1.6)]):
        result = EvalResult("relu", f"agent/relu/{turn}", outcome, speedup_vs_eager=eager)
        turns.append({"task_id": "relu", "sample": 0, "turn": turn, "prompt": [], "response": "reply",
                      "code": f"// kernel v{turn}", "result": to_dict(result), "reward": float(turn),
                      "feedback": f"feedback {turn}"})
    path.write_text("".join(json.dumps(t) + "\n" for t in turns))
    return path


def test_report_html_writes_one_page_for_results_and_trajectories(tmp_path, capsys):
    store = _store(tmp_path)
    out = tmp_path / "page" / "report.html"
    assert main(["report", str(store.path), str(_trajectory_file(tmp_path)), "--html", str(out)]) == 0
    page = out.read_text()
    assert "wrote" in capsys.readouterr().out
    assert "Evaluation results (2)" in page and "Trajectories (1)" in page and "feedback 1" in page


def test_report_html_and_markdown_together_is_a_usage_error(tmp_path):
    store = _store(tmp_path)
    with pytest.raises(SystemExit):
        main(["report", str(store.path), "--markdown", "--html", str(tmp_path / "r.html")])
