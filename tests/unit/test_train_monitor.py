"""The training callback's time limit (`cudaperf.train.monitor.make_callback`): a run stops, with a
checkpoint, at the end of the last step that fits `max_minutes`, judging the next step by the last one.
Drives the real `TrainerCallback` with transformers' own `TrainerControl`; needs the `train` extra."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("transformers")

from transformers import TrainerControl

from cudaperf.train.config import SftConfig
from cudaperf.train.monitor import MetricsWriter, make_callback


def _step(callback, seconds: float) -> TrainerControl:
    control = TrainerControl()
    callback.on_step_begin(None, None, control)
    time.sleep(seconds)
    callback.on_step_end(None, None, control)
    return control


def test_a_step_that_would_end_past_the_limit_is_not_started(tmp_path):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    callback = make_callback(SftConfig(output_dir=str(tmp_path), max_minutes=0.3 / 60), writer)
    first = _step(callback, 0.01)  # 0.01 s done, the next would end at ~0.02 s: within 0.3 s
    second = _step(callback, 0.2)  # ~0.21 s done, the next would end at ~0.41 s: past 0.3 s
    assert not first.should_training_stop
    assert second.should_training_stop and second.should_save
    writer.close()


def test_the_limit_counts_from_the_runs_start_not_the_callbacks(tmp_path):
    """Time spent before the trainer (loading, building examples) is part of the run's minutes: session
    33's SFT built its examples for minutes outside its clock and was killed by its call's limit."""
    writer = MetricsWriter(tmp_path, tensorboard=False)
    config = SftConfig(output_dir=str(tmp_path), max_minutes=0.3 / 60)
    callback = make_callback(config, writer, started_s=time.perf_counter() - 0.25)
    assert _step(callback, 0.03).should_training_stop  # 0.28 s since the start, the next ends past 0.3 s
    writer.close()
