"""`cudaperf tasks` on the bundled examples and on a directory with a broken file."""

from __future__ import annotations

import json
import subprocess
import sys

from cudaperf.cli import main
from cudaperf.tasks.examples import EXAMPLE_TASK_IDS, example_tasks_dir


def test_tasks_lists_every_example_task(capsys):
    assert main(["tasks", str(example_tasks_dir())]) == 0
    out = capsys.readouterr().out
    assert all(t in out for t in EXAMPLE_TASK_IDS)


def test_tasks_check_passes_on_the_examples(capsys):
    assert main(["tasks", str(example_tasks_dir()), "--check"]) == 0


def test_tasks_json_gives_sizes_per_config(capsys):
    assert main(["tasks", str(example_tasks_dir() / "vector_add.py"), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["task_id"] == "vector_add" and row["configs"][-1]["input_bytes"] == 2 * 4 * 8_388_617


def test_tasks_check_fails_and_names_a_broken_file(tmp_path, capsys):
    (tmp_path / "ok.py").write_text((example_tasks_dir() / "relu.py").read_text())
    (tmp_path / "bad.py").write_text("import torch\ndef get_inputs():\n    return []\n")
    assert main(["tasks", str(tmp_path), "--check"]) == 1
    assert "bad.py" in capsys.readouterr().err


def test_tasks_on_a_missing_path_is_a_usage_error(tmp_path):
    assert main(["tasks", str(tmp_path / "nope")]) == 2


def test_tasks_runs_as_a_console_command():
    proc = subprocess.run([sys.executable, "-m", "cudaperf.cli", "tasks", str(example_tasks_dir())],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "softmax" in proc.stdout
