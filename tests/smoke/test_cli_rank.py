"""`cudaperf rank score | train` through the real entry point: the shipped model, real task files and
solutions, NVRTC builds on the CPU."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from cudaperf.cli import main
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_rank_score_orders_solution_files_of_a_task_file(capsys):
    files = [
        str(example_solutions_dir("fast") / "softmax.py"),
        str(example_solutions_dir("fast") / "relu.py"),
    ]
    code = main(["rank", "score", "--task", str(example_tasks_dir() / "softmax.py"), *files, "--json"])
    rows = _json_lines(capsys.readouterr().out)
    assert code == 0 and [r["rank"] for r in rows] == [1, 2]
    assert rows[0]["score"] >= rows[1]["score"]


def test_rank_score_explains_with_feature_names(capsys, tmp_path):
    from cudaperf.datasets import registry

    task = registry.build_index(0, families=["map"])[0]
    paths = []
    for impl in registry.implementations(task)[:2]:
        paths.append(tmp_path / f"{impl.strategy}.py")
        paths[-1].write_text(impl.source)
    code = main(
        ["rank", "score", "--task", task.task_id, *map(str, paths), "--config", "large", "--explain", "3"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "1. " in out and ("l_" in out or "a_" in out or "p_" in out or "s_" in out)


def test_rank_score_refuses_a_model_of_another_schema(capsys, tmp_path):
    from cudaperf.ranker.store import default_model_path

    with gzip.open(default_model_path(), "rt") as f:
        doc = json.load(f)
    doc["schema_version"] = -1
    bad = tmp_path / "old.json.gz"
    with gzip.open(bad, "wt") as f:
        json.dump(doc, f)
    code = main(
        [
            "rank",
            "score",
            "--model",
            str(bad),
            "--task",
            str(example_tasks_dir() / "relu.py"),
            str(example_solutions_dir("fast") / "relu.py"),
        ]
    )
    assert code == 2 and "schema" in capsys.readouterr().err


def test_rank_score_names_an_unknown_task(capsys):
    code = main(["rank", "score", "--task", "no_such_task", str(example_solutions_dir("fast") / "relu.py")])
    assert code == 2 and "no_such_task" in capsys.readouterr().err


@pytest.mark.slow
def test_rank_train_writes_a_model_that_loads(tmp_path, capsys):
    """Train on the committed shards restricted to one small family (scan), then load the model back."""
    from cudaperf.datasets.jsonl import read_records
    from cudaperf.ranker.store import load_model

    src = Path("benchmarks/dataset_measure")
    if not src.is_dir():
        pytest.skip("run from the repository root (benchmarks/dataset_measure)")
    records, _ = read_records([src])
    keep = [r for r in records if r.get("record") != "row" or r.get("family") == "scan"]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "measurements-scan.jsonl").write_text("\n".join(json.dumps(r) for r in keep) + "\n")
    for f in src.glob("features-*.jsonl.gz"):
        shutil.copy(f, tmp_path / "m" / f.name)
    out = tmp_path / "model.json.gz"
    code = main(
        [
            "rank",
            "train",
            "--measure",
            str(tmp_path / "m"),
            "--cache",
            str(tmp_path / "cache"),
            "--out",
            str(out),
            "--workers",
            "1",
        ]
    )
    assert code == 0 and load_model(out).backend is not None


def test_rank_score_in_the_sandbox_gives_the_same_order(capsys):
    task = str(example_tasks_dir() / "softmax.py")
    files = [str(example_solutions_dir("fast") / n) for n in ("softmax.py", "relu.py")]
    main(["rank", "score", "--task", task, *files, "--json"])
    plain = _json_lines(capsys.readouterr().out)
    assert main(["rank", "score", "--task", task, *files, "--json", "--sandbox"]) == 0
    boxed = _json_lines(capsys.readouterr().out)
    assert [(r["file"], round(r["score"], 6)) for r in boxed] == [
        (r["file"], round(r["score"], 6)) for r in plain
    ]
