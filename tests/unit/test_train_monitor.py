"""The training callback's limits (`cudaperf.train.monitor.make_callback`): a run stops, with a
checkpoint, at the end of the last step that fits `max_minutes`, judging the next step by the last one,
or at SFT's `stop_at_step`.
Drives the real `TrainerCallback` with transformers' own `TrainerControl`; needs the `train` extra."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("transformers")

from transformers import TrainerControl, TrainerState

from cudaperf.train.config import SftConfig
from cudaperf.train.monitor import MetricsWriter, make_callback


def _step(callback, seconds: float, state: TrainerState | None = None) -> TrainerControl:
    control = TrainerControl()
    callback.on_step_begin(None, state, control)
    time.sleep(seconds)
    callback.on_step_end(None, state, control)
    return control


def test_a_step_that_would_end_past_the_limit_is_not_started(tmp_path):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    callback = make_callback(SftConfig(output_dir=str(tmp_path), max_minutes=0.3 / 60), writer)
    first = _step(callback, 0.01)  # 0.01 s done, the next would end at ~0.02 s: within 0.3 s
    second = _step(callback, 0.2)  # ~0.21 s done, the next would end at ~0.41 s: past 0.3 s
    assert not first.should_training_stop
    assert second.should_training_stop and second.should_save
    writer.close()


def test_a_run_stops_with_a_checkpoint_at_its_step_stop(tmp_path):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    callback = make_callback(SftConfig(output_dir=str(tmp_path), stop_at_step=3), writer)
    before, at = (_step(callback, 0.0, TrainerState(global_step=k)) for k in (2, 3))
    assert not before.should_training_stop
    assert at.should_training_stop and at.should_save
    writer.close()


def test_the_limit_counts_from_the_runs_start_not_the_callbacks(tmp_path):
    """Time spent before the trainer (loading, building examples) is part of the run's minutes: session
    33's SFT built its examples for minutes outside its clock and was killed by its call's limit."""
    writer = MetricsWriter(tmp_path, tensorboard=False)
    config = SftConfig(output_dir=str(tmp_path), max_minutes=0.3 / 60)
    callback = make_callback(config, writer, started_s=time.perf_counter() - 0.25)
    assert _step(callback, 0.03).should_training_stop  # 0.28 s since the start, the next ends past 0.3 s
    writer.close()


def _rl_callback(tmp_path, limit_s: float):
    from cudaperf.train.config import RlConfig

    config = RlConfig(output_dir=str(tmp_path), max_minutes=limit_s / 60, num_iterations=2, max_steps=4,
                      save_steps=2)
    return make_callback(config, MetricsWriter(tmp_path, tensorboard=False))


def test_a_run_whose_batches_serve_two_steps_never_stops_between_them(tmp_path):
    callback = _rl_callback(tmp_path, 0.1)
    assert not _step(callback, 0.15).should_training_stop  # past the limit, but mid-batch
    assert _step(callback, 0.01).should_training_stop


def test_the_next_batch_is_judged_by_the_whole_last_one(tmp_path):
    callback = _rl_callback(tmp_path, 0.3)
    _step(callback, 0.15)  # the rollout's step
    assert _step(callback, 0.01).should_training_stop  # ~0.16 s done; a batch of ~0.16 s ends past 0.3 s


def test_a_checkpoints_step_is_its_trainer_states(tmp_path):
    from cudaperf.train.monitor import checkpoint_step

    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text('{"global_step": 3}')
    assert checkpoint_step(tmp_path / "checkpoint-3") == 3 and checkpoint_step(None) == 0


def test_a_finished_rl_run_started_again_trains_nothing(tmp_path):
    """The trainer, resumed at its last step, would take one step past max_steps (a model day's second C
    call on a run the first finished): `run_rl` returns the finished run as it is, without a model."""
    from cudaperf.train.config import RlConfig, save_config
    from cudaperf.train.rl import run_rl

    config = RlConfig(model="tiny", output_dir=str(tmp_path), tasks=("examples",), max_steps=2,
                      device="cpu", eval_device="cpu", allow_torch_ops=True)
    save_config(config, tmp_path)
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2}')
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "config.json").write_text("{}")  # not a model: loading it would fail
    report = run_rl(config)
    assert report.finished and report.steps == 2 and report.resumed_from.endswith("checkpoint-2")
