"""Training seeds of one policy compared as one (`cudaperf.train.training_seeds`): names to groups, the
spread over training seeds, each training seed's change paired on the same sampling seeds, and whether the
mean change is beyond both the training seeds' spread and the spread over every seed pair."""

from __future__ import annotations

import math

import pytest

from cudaperf.train.compare_table import paired_gains
from cudaperf.train.training_seeds import (
    policy_name,
    seed_groups,
    training_group,
    training_seed_gains,
    training_seed_table,
    training_seeds_markdown,
)


def _figures(first: float, best: float, geomean: float = 1.0) -> dict:
    return {"first_turn_correct": first, "best_of_turns_correct": best, "speedup_geomean_all": geomean}


# SFT once; RL trained with three seeds; each model run on sampling seeds 0 and 1
RUNS = {
    "sft": {"heldout": {0: _figures(0.25, 0.5, 1.0), 1: _figures(0.25, 0.5, 1.0)}},
    "rl@seed0": {"heldout": {0: _figures(0.5, 0.5, 2.0), 1: _figures(0.5, 0.75, 2.0)}},
    "rl@seed1": {"heldout": {0: _figures(0.5, 0.75, 1.0), 1: _figures(0.75, 0.75, 4.0)}},
    "rl@seed2": {"heldout": {0: _figures(0.25, 0.5, 1.0), 1: _figures(0.5, 0.5, 1.0)}},
}


def _row(rows, what, figure):
    return next(r for r in rows if (r["what"], r["figure"]) == (what, figure))


def test_a_name_with_a_seed_mark_is_that_training_seed_of_its_policy():
    assert training_group("rl@seed12") == ("rl", 12)


def test_a_name_without_a_seed_mark_is_a_policy_of_its_own():
    assert [training_group(n) for n in ("sft", "rl@seedx", "rl@seed")] == [
        ("sft", None), ("rl@seedx", None), ("rl@seed", None)]


def test_groups_keep_the_comparisons_order_and_gather_a_policys_seeds():
    groups = seed_groups(["base", "rl@seed1", "sft", "rl@seed0"])
    assert list(groups) == ["base", "rl", "sft"] and groups["rl"] == {1: "rl@seed1", 0: "rl@seed0"}


def test_two_models_named_as_the_same_training_seed_are_refused():
    with pytest.raises(ValueError, match="same training seed"):
        seed_groups(["rl@seed1", "rl@seed01"])


def test_the_table_spreads_each_training_seeds_mean_over_its_sampling_seeds():
    row = training_seed_table(RUNS)["rl"]["heldout"]
    assert row["training_seeds"] == [0, 1, 2]
    assert row["first_turn_correct"]["mean"] == pytest.approx((0.5 + 0.625 + 0.375) / 3)
    assert (row["first_turn_correct"]["min"], row["first_turn_correct"]["max"]) == (0.375, 0.625)


def test_a_policy_with_one_model_has_no_row_over_training_seeds():
    assert set(training_seed_table(RUNS)) == {"rl"}


def test_each_training_seed_is_paired_with_the_single_earlier_model():
    row = _row(training_seed_gains(RUNS), "rl vs sft", "first_turn_correct")
    assert row["training_seeds"] == [0, 1, 2]
    assert row["change"]["min"] == pytest.approx(0.125) and row["change"]["max"] == pytest.approx(0.375)


def test_a_ratio_figure_is_averaged_geometrically_over_sampling_seeds():
    row = _row(training_seed_gains(RUNS), "rl vs sft", "speedup_geomean_all")
    assert row["change"]["max"] == pytest.approx(2.0)  # seed 1: ratios 1 and 4, geometric mean 2
    assert row["neutral"] == 1.0


def test_a_gain_on_every_seed_larger_than_their_spread_is_beyond_it():
    row = _row(training_seed_gains(RUNS), "rl vs sft", "first_turn_correct")
    assert row["gain_every_training_seed"] and row["beyond_spread"]  # 0.25 ± 0.125


def test_a_mean_gain_within_the_seeds_spread_is_not_beyond_it():
    row = _row(training_seed_gains(RUNS), "rl vs sft", "best_of_turns_correct")  # +0.125, +0.25, 0
    assert not row["gain_every_training_seed"] and row["beyond_spread"] is False


def test_the_spread_over_seed_pairs_counts_every_training_and_sampling_seed():
    row = _row(training_seed_gains(RUNS), "rl vs sft", "first_turn_correct")
    assert row["pairs"]["n"] == 6 and row["pairs"]["mean"] == pytest.approx(0.25)


def test_training_seeds_that_gained_alike_are_not_beyond_a_wider_sampling_spread():
    sft = {"heldout": {k: _figures(0.5, 0.5) for k in range(3)}}
    one_lucky_sample = {"heldout": {0: _figures(0.5, 0.5), 1: _figures(0.5, 0.5), 2: _figures(0.75, 0.75)}}
    runs = {"sft": sft, "rl@seed0": one_lucky_sample, "rl@seed1": one_lucky_sample}
    row = _row(training_seed_gains(runs), "rl vs sft", "first_turn_correct")
    assert row["change"]["std"] == 0.0 and row["beyond_spread"] is False


def test_a_change_over_one_training_seed_has_no_spread_to_exceed():
    runs = {"sft": RUNS["sft"], "rl@seed0": RUNS["rl@seed0"], "rl@seed1": {}}
    row = _row(training_seed_gains(runs), "rl vs sft", "first_turn_correct")
    assert row["training_seeds"] == [0] and row["beyond_spread"] is None


def test_two_seeded_policies_pair_seed_with_seed():
    runs = {"sft@seed0": RUNS["sft"], "sft@seed1": RUNS["sft"], **{k: RUNS[k] for k in ("rl@seed1",
                                                                                          "rl@seed2")}}
    assert _row(training_seed_gains(runs), "rl vs sft", "first_turn_correct")["training_seeds"] == [1]


def test_refinement_is_reported_over_training_seeds():
    row = _row(training_seed_gains(RUNS), "rl: best of turns vs first turn", "correct")
    assert row["change"]["mean"] == pytest.approx((0.125 + 0.125 + 0.125) / 3)


def test_refinements_speedup_is_a_geometric_mean_ratio_per_training_seed():
    runs = {"rl@seed0": {"heldout": {0: {**_figures(0.5, 0.5, 2.0), "first_turn_speedup_geomean_all": 1.0},
                                     1: {**_figures(0.5, 0.5, 1.0), "first_turn_speedup_geomean_all": 2.0}}},
            "rl@seed1": {"heldout": {0: {**_figures(0.5, 0.5, 1.5), "first_turn_speedup_geomean_all": 1.0}}}}
    row = _row(training_seed_gains(runs), "rl: best of turns vs first turn", "speedup_geomean_all")
    assert row["change"]["min"] == pytest.approx(1.0) and row["change"]["max"] == pytest.approx(1.5)


def test_sampling_seed_pairs_skip_two_seeds_of_one_policy():
    rows = paired_gains(RUNS, policy_of=policy_name)
    assert not [r for r in rows if r["what"].startswith("rl@seed1 vs rl@")]
    assert [r for r in rows if r["what"] == "rl@seed1 vs sft"]


def test_the_markdown_names_the_policy_and_whether_its_gain_is_beyond_the_spread():
    text = training_seeds_markdown(training_seed_table(RUNS), training_seed_gains(RUNS))
    line = next(x for x in text.splitlines() if "| rl vs sft | first_turn_correct |" in x)
    assert "| yes | yes |" in line and "| heldout | rl | 3 |" in text
    assert "over every seed pair" in text


def test_no_seeded_policy_writes_no_training_seed_section():
    assert training_seeds_markdown(training_seed_table({"sft": RUNS["sft"]}), []) == ""


def test_a_nonpositive_ratio_leaves_that_training_seed_out():
    runs = {**RUNS, "rl@seed2": {"heldout": {0: _figures(0.25, 0.5, 0.0), 1: _figures(0.5, 0.5, 0.0)}}}
    row = _row(training_seed_gains(runs), "rl vs sft", "speedup_geomean_all")
    assert row["training_seeds"] == [0, 1] and not any(math.isnan(v) for v in row["change"].values()
                                                        if isinstance(v, float))


def test_a_rates_room_is_what_the_earlier_model_left_unsolved():
    row = _row(training_seed_gains(RUNS), "rl vs sft", "first_turn_correct")
    assert row["room"] == pytest.approx(0.75)  # sft's first turn: 25% on every sampling seed


def test_a_ratio_has_no_room():
    assert _row(training_seed_gains(RUNS), "rl vs sft", "speedup_geomean_all")["room"] is None


def test_refinements_room_is_what_the_first_turn_left_unsolved():
    row = _row(training_seed_gains(RUNS), "rl: best of turns vs first turn", "correct")
    assert row["room"] == pytest.approx(1 - (0.5 + 0.5 + 0.5 + 0.75 + 0.25 + 0.5) / 6)


def _with_tasks(runs, tasks):
    return {m: {s: {k: {**f, "tasks": tasks} for k, f in by_seed.items()} for s, by_seed in by_set.items()}
            for m, by_set in runs.items()}


def test_the_tasks_needed_scale_the_run_by_the_squared_ratio_of_spread_to_gain():
    sft = {"heldout": {k: _figures(0.5, 0.5) for k in range(2)}}
    noisy = {"heldout": {0: _figures(0.5, 0.5), 1: _figures(0.75, 0.75)}}  # +0.125 ± 0.144 over the 4 pairs
    row = _row(training_seed_gains(_with_tasks({"sft": sft, "rl@seed0": noisy, "rl@seed1": noisy}, 16)),
               "rl vs sft", "first_turn_correct")
    assert row["beyond_spread"] is False and row["tasks"] == 16
    assert row["tasks_needed"] == math.ceil(16 * (row["pairs"]["std"] / 0.125) ** 2) == 22


def test_no_tasks_are_needed_for_a_change_that_is_no_gain():
    rl = {"heldout": {k: _figures(0.25, 0.25) for k in range(2)}}
    runs = _with_tasks({"sft": RUNS["sft"], "rl@seed0": rl, "rl@seed1": rl}, 16)
    assert _row(training_seed_gains(runs), "rl vs sft", "first_turn_correct")["tasks_needed"] is None


def test_the_markdown_shows_the_room_and_the_tasks_needed():
    text = training_seeds_markdown(training_seed_table(RUNS), training_seed_gains(_with_tasks(RUNS, 8)))
    line = next(x for x in text.splitlines() if "| rl vs sft | first_turn_correct |" in x)
    assert "| 75.0 pt |" in line and "(ran 8)" in line
