"""`cudaperf report` on a small JSONL file, including a torn last line."""

from __future__ import annotations

from cudaperf.cli import main
from cudaperf.results import ResultStore
from cudaperf.types import EvalResult, Outcome


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
