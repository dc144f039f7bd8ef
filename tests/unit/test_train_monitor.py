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
