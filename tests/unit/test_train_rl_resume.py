"""An RL run killed at any point resumes from its last checkpoint with the same data order: a real
`cudaperf train rl` child (tiny model, the bundled example tasks, the sandboxed CPU evaluation worker) is
killed with SIGKILL right after its first checkpoint, started again with the same command, and the tasks
of its next batches and of its next rollouts are compared with those of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

from cudaperf.train.monitor import read_batches

# Six tasks, one per step, drawn in a seeded shuffled order; steps 3-6 come after the checkpoint at step 2
# (a resume that restarted the data order would draw other tasks there).
ARGS = ["--model", "tiny", "--tasks", "examples", "--limit-tasks", "0", "--trajectories", "2", "--max-turns",
        "1", "--tasks-per-step", "1", "--max-new-tokens", "4", "--max-steps", "6", "--save-steps", "2",
        "--eval-device", "cpu", "--allow-torch-ops", "--device", "cpu", "--learning-rate", "1e-3",
        "--seed", "5", "--timing-budget-ms", "2", "--build-workers", "1"]


def start(out: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE",
           "TOKENIZERS_PARALLELISM": "false", "CUDAPERF_CACHE_DIR": str(cache)}
    return subprocess.Popen([sys.executable, "-m", "cudaperf.cli", "train", "rl", "--output-dir", str(out),
                             *ARGS], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err.decode()[-3000:]


def rollout_tasks(out: Path) -> dict[int, list[str]]:
    """step -> the task of each rollout turn of that step (the last writing of a step wins)."""
    steps: dict[int, list[str]] = {}
    seen: dict[int, int] = {}
    for line in (out / "rollouts.jsonl").read_text().splitlines():
        row = json.loads(line)
        if seen.get(row["step"], -1) > row["sample"]:  # the step was rolled out again after the resume
            steps[row["step"]] = []
        seen[row["step"]] = row["sample"]
        steps.setdefault(row["step"], []).append(row["task_id"])
    return steps


@pytest.mark.slow  # two child runs of ~30 s each on 2 shared cores
def test_killed_rl_run_resumes_with_the_same_next_batches_and_rollouts(tmp_path):
    whole, killed, cache = tmp_path / "whole", tmp_path / "killed", tmp_path / "cache"
    finish(start(whole, cache))

    proc = start(killed, cache)
    saved = killed / "checkpoint-2" / "train_config.json"  # written last, after the trainer's own files
    deadline = time.monotonic() + 300
    while not saved.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "checkpoint-4").exists()
    seen_before_kill = len(read_batches(killed))

    finish(start(killed, cache))
    resumed = read_batches(killed)[seen_before_kill:]
    expected = [b for b in read_batches(whole) if b["step"] > 2]
    assert [b["step"] for b in resumed] == [3, 4, 5, 6]
    assert [b["ids"] for b in resumed] == [b["ids"] for b in expected]
    assert len({b["ids"][0] for b in read_batches(whole)}) > 1  # the order is not trivially one task
    later = {s: t for s, t in rollout_tasks(whole).items() if s > 2}
    assert {s: t for s, t in rollout_tasks(killed).items() if s > 2} == later
    state = json.loads((killed / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6
