"""The training configurations: documented fields, refused combinations, saving and the resume check."""

from __future__ import annotations

import dataclasses
import json

import pytest

from cudaperf.train.config import (
    ConfigError,
    RlConfig,
    SftConfig,
    check_resume,
    field_docs,
    load_config,
    save_config,
)


@pytest.mark.parametrize("cls", [SftConfig, RlConfig])
def test_every_field_is_documented(cls):
    docs = field_docs(cls)
    assert [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)] == []


def test_turn_credit_with_early_stop_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="target_speedup=0 or credit='trajectory'"):
        RlConfig(credit="turn", target_speedup=1.5)


def test_trajectory_credit_may_stop_early():
    assert RlConfig(credit="trajectory", target_speedup=1.5).num_generations == 4


def test_cpu_evaluation_without_torch_ops_is_refused():
    with pytest.raises(ConfigError, match="allow_torch_ops=True"):
        RlConfig(eval_device="cpu")


def test_an_unknown_generation_weights_form_is_refused():
    with pytest.raises(ConfigError, match="'autocast' or 'bfloat16'"):
        RlConfig(generation_weights="float16")


def test_an_unknown_turn_score_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="own, best_so_far"):
        RlConfig(turn_score="best")


def test_group_of_one_sample_is_refused():
    with pytest.raises(ConfigError, match="no baseline"):
        RlConfig(credit="trajectory", trajectories=1)


def test_turn_credit_group_is_every_turn_of_every_trajectory():
    assert RlConfig(trajectories=3, max_turns=4, credit="turn").num_generations == 12


def test_clip_high_below_clip_low_is_refused():
    with pytest.raises(ConfigError, match="epsilon_high"):
        RlConfig(epsilon=0.3, epsilon_high=0.2)


@pytest.mark.parametrize("changes", [{"num_iterations": 0}, {"num_iterations": 2, "max_steps": 5},
                                     {"num_iterations": 2, "max_steps": 4, "save_steps": 3}],
                         ids=["none", "steps not a multiple", "checkpoints between a batch's steps"])
def test_iterations_per_batch_divide_the_steps_and_the_checkpoints(changes):
    with pytest.raises(ConfigError, match="num_iterations"):
        RlConfig(**changes)


def test_lora_settings_without_lora_are_refused():
    with pytest.raises(ConfigError, match="lora=True"):
        SftConfig(lora_rank=8)


def test_inline_prompts_for_fast_implementations_are_refused():
    with pytest.raises(ConfigError, match="format='fast'"):
        SftConfig(format="inline")


def test_unknown_reward_preset_is_refused():
    with pytest.raises(ConfigError, match="reward="):
        RlConfig(reward="no-such-preset")


@pytest.mark.parametrize("config", [SftConfig(kinds=("c",), families=("a", "b"), epochs=2.0),
                                    RlConfig(tasks=("examples",), lora=True, lora_rank=4)])
def test_saved_config_loads_back_equal(tmp_path, config):
    save_config(config, tmp_path)
    assert load_config(tmp_path) == config


def test_resume_with_a_different_batch_size_is_refused():
    with pytest.raises(ConfigError, match="batch_size: 8 -> 4"):
        check_resume(SftConfig(), SftConfig(batch_size=4))


def test_resume_may_switch_the_decoding_probe():
    check_resume(RlConfig(), RlConfig(profile_decoding=True))  # a measurement, not what the run learns


def test_resume_may_run_longer():
    check_resume(SftConfig(max_steps=10), SftConfig(max_steps=20))


def test_resume_may_move_the_step_stop():
    check_resume(SftConfig(stop_at_step=782), SftConfig(stop_at_step=900))  # how long, not what


def test_a_negative_step_stop_is_refused():
    with pytest.raises(ConfigError, match="stop_at_step=-1"):
        SftConfig(stop_at_step=-1)


def test_a_step_stop_the_schedule_ends_before_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="not before max_steps=5.*use 0"):
        SftConfig(max_steps=5, stop_at_step=5)


def test_the_static_cache_with_bfloat16_weights_is_refused_with_the_alternatives():
    with pytest.raises(ConfigError, match="dynamic cache with bfloat16 weights"):
        RlConfig(generation_cache="static", generation_weights="bfloat16")


def test_no_evaluation_worker_per_gpu_is_refused():
    with pytest.raises(ConfigError, match="eval_workers_per_gpu=0"):
        RlConfig(eval_workers_per_gpu=0)


def test_a_resumed_rl_run_may_change_its_workers_per_gpu():
    check_resume(RlConfig(), RlConfig(eval_workers_per_gpu=2))  # where it runs, not what it learns


def test_the_rl_evaluator_has_the_configured_workers_per_gpu(tmp_path):
    from cudaperf.train.rl import make_evaluator

    config = RlConfig(model="tiny", output_dir=str(tmp_path), eval_device="cpu", device="cpu",
                      allow_torch_ops=True, eval_workers_per_gpu=6)
    evaluator = make_evaluator(config)
    try:
        assert evaluator.config.rl.workers_per_gpu == 6
    finally:
        evaluator.close()


def test_the_rl_evaluator_follows_the_configured_anchor_copies(tmp_path):
    from cudaperf.train.rl import make_evaluator

    config = RlConfig(model="tiny", output_dir=str(tmp_path), eval_device="cpu", device="cpu",
                      allow_torch_ops=True, anchor_copies=False)
    evaluator = make_evaluator(config)
    try:
        assert evaluator.config.rl.anchor_copies is False
    finally:
        evaluator.close()


def test_an_unknown_choice_of_timing_baselines_is_refused():
    with pytest.raises(ConfigError, match="timing_baselines='serial_c'"):
        RlConfig(timing_baselines="serial_c")


def test_a_resumed_rl_run_may_not_change_its_timing_baselines():
    with pytest.raises(ConfigError, match="timing_baselines"):  # the reward's speedups would change
        check_resume(RlConfig(), RlConfig(timing_baselines="all"))


@pytest.mark.parametrize(("field", "as_it_ran"), [("timing_baselines", "all"),  # timed every baseline
                                                  ("share_repeated_answers", False),  # evaluated every answer
                                                  ("anchor_copies", False)])  # timed every copy of a port
def test_a_run_saved_before_a_field_existed_is_read_as_it_ran(tmp_path, field, as_it_ran):
    path = save_config(RlConfig(output_dir=str(tmp_path)), tmp_path)
    saved = json.loads(path.read_text())
    del saved[field]
    path.write_text(json.dumps(saved))
    assert getattr(load_config(tmp_path), field) == as_it_ran


@pytest.mark.parametrize("field", ["share_repeated_answers", "anchor_copies"])  # the rewards would change
def test_a_resumed_rl_run_may_not_switch_how_equal_programs_are_judged(field):
    with pytest.raises(ConfigError, match=field):
        check_resume(RlConfig(), RlConfig(**{field: False}))
