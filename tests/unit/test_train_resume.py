"""A training run killed at any point resumes from its last checkpoint with the same data order: a real
`cudaperf train sft` child process is killed (SIGKILL) right after its first checkpoint, started again
with the same command, and its next batches are compared with those of an uninterrupted run."""

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

# Three examples, one per batch: step 3 ends the first epoch, steps 4-5 come from a reshuffled second one (a
# resume that restarted the data order would give another example at step 3).
ARGS = ["--model", "tiny", "--kinds", "c", "--limit-tasks", "3", "--val-limit-tasks", "0", "--strategies",
        "naive", "--batch-size", "1", "--max-steps", "5", "--save-steps", "2", "--eval-steps", "0",
        "--device", "cpu", "--learning-rate", "1e-3", "--seed", "3"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}


def start(out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cudaperf.cli", "train", "sft", "--output-dir", str(out),
                             *ARGS], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-3000:]


@pytest.mark.slow  # two child runs of ~20 s; the in-process resume check is in test_train_smoke.py
def test_killed_run_resumes_with_the_same_next_batches(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    finish(start(whole))

    proc = start(killed)
    saved = killed / "checkpoint-2" / "train_config.json"  # written last, after the trainer's own files
    deadline = time.monotonic() + 240
    while not saved.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "checkpoint-4").exists()
    seen_before_kill = len(read_batches(killed))

    finish(start(killed))
    resumed = read_batches(killed)[seen_before_kill:]
    expected = [b for b in read_batches(whole) if b["step"] > 2]
    assert [b["step"] for b in resumed] == [3, 4, 5]
    assert [b["hash"] for b in resumed] == [b["hash"] for b in expected]
    state = json.loads((killed / "checkpoint-5" / "trainer_state.json").read_text())
    assert state["global_step"] == 5
