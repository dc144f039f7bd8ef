"""The before/after evaluation (`cudaperf train eval`, `cudaperf.train.compare`) on the CPU: the agent
loop, the sandboxed CPU evaluation worker (pure-PyTorch answers allowed) and a real tiny model from a
config; a scripted policy (wrong first, right after feedback) stands in for a model where the test needs
known outcomes. Also the held-out tasks of the training families (`cudaperf.train.heldout`)."""

from __future__ import annotations

import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP pool

import pytest

from cudaperf.agent.backends._common import rough_token_count
from cudaperf.agent.backends.base import Generation
from cudaperf.train.compare import (
    COMPARISON_JSON,
    COMPARISON_MD,
    FIGURES_FILE,
    RUN_FILE,
    CompareConfig,
    run_compare,
)
from cudaperf.train.compare_table import gains_markdown, paired_gains, spread, table_from_runs
from cudaperf.train.config import ConfigError

TASK_SOURCE = '''
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, a, b):
        return a * 2 + b


def get_input_configs():
    return [{"name": "small", "n": 64}]


def get_inputs(n=64):
    return [torch.randn(n), torch.randn(n)]
'''
ANSWER = ("```python\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
          "        return a * 2 {} b\n```")


class ScriptedPolicy:
    """Wrong on the first turn, right once it has seen feedback (a stand-in for a model only)."""

    name = "scripted"

    def __init__(self) -> None:
        self.replies = 0
        self.calls: list[int] = []

    def generate(self, conversations, config):
        self.replies += len(conversations)
        self.calls.append(len(conversations))
        out = []
        for conv in conversations:
            text = ANSWER.format("+" if any(m.role == "assistant" for m in conv) else "-")
            out.append(Generation(text, 100, 40, "stop", 0.0))
        return out

    def count_tokens(self, text: str) -> int:
        return rough_token_count(text)

    def close(self) -> None:
        pass



@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tasks") / "scale_add.py"
    path.write_text(TASK_SOURCE)
    return str(path)


def compare_config(out, task_file, **changes) -> CompareConfig:
    values = dict(models=("scripted=scripted",), sets=(f"toy={task_file}",), output_dir=str(out),
                  seeds=(0, 1), turns=2, max_new_tokens=8, eval_device="cpu", allow_torch_ops=True,
                  device="cpu", eval_seeds=1, timing_budget_ms=5)
    return CompareConfig(**{**values, **changes})


def scripted_factory(policies: list):
    def make(spec):
        policies.append(ScriptedPolicy())
        return policies[-1]
    return make


def test_refinement_shows_in_best_of_turns_and_not_in_first_turn(tmp_path, task_file, cpu_evaluator):
    config = compare_config(tmp_path, task_file)
    report = run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory([]))
    row = report.table["scripted"]["toy"]
    assert report.finished and row["seeds"] == [0, 1]
    assert row["first_turn_correct"]["mean"] == 0.0 and row["best_of_turns_correct"]["mean"] == 1.0
    assert row["best_of_turns_correct"]["std"] == 0.0 and row["first_turn_correct"]["n"] == 2
    assert row["speedup_geomean"]["mean"] > 0 and row["structural_mean"]["mean"] == 0.0  # torch ops only


def test_every_turn_is_written_and_the_table_lands_in_json_and_markdown(tmp_path, task_file, cpu_evaluator):
    config = compare_config(tmp_path, task_file, seeds=(0,))
    run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory([]))
    lines = (tmp_path / "scripted" / "toy" / "seed0" / RUN_FILE).read_text().splitlines()
    assert [json.loads(x)["turn"] for x in lines] == [0, 1]
    saved = json.loads((tmp_path / COMPARISON_JSON).read_text())
    assert saved["table"]["scripted"]["toy"]["best_of_turns_correct"]["mean"] == 1.0
    assert "| toy | scripted | 1 | 1 | 0.0% | 100.0% |" in (tmp_path / "comparison.md").read_text()


def test_the_comparison_keeps_what_refinement_adds_seed_by_seed(tmp_path, task_file, cpu_evaluator):
    config = compare_config(tmp_path, task_file, seeds=(0,))
    run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory([]))
    gain = json.loads((tmp_path / COMPARISON_JSON).read_text())["gains"][0]
    assert (gain["what"], gain["figure"], gain["change"]["mean"], gain["gain_every_seed"]) == (
        "scripted: best of turns vs first turn", "correct", 1.0, True)
    assert "| toy | scripted: best of turns vs first turn | correct | 1 | 100.0 pt | yes |" in \
        (tmp_path / "comparison.md").read_text()


def test_the_first_turns_speedup_counts_a_task_solved_only_later_as_its_baseline(tmp_path, task_file,
                                                                                   cpu_evaluator):
    config = compare_config(tmp_path, task_file, seeds=(0,))
    report = run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory([]))
    row = report.table["scripted"]["toy"]  # the scripted policy is wrong first, right second
    assert row["first_turn_speedup_geomean_all"]["mean"] == 1.0
    assert row["speedup_geomean_all"]["mean"] != 1.0


def test_a_second_call_skips_complete_runs_and_continues_a_partial_one(tmp_path, task_file, cpu_evaluator):
    config = compare_config(tmp_path, task_file)
    run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory([]))
    partial = tmp_path / "scripted" / "toy" / "seed1"
    (partial / FIGURES_FILE).unlink()
    first_turn = (partial / RUN_FILE).read_text().splitlines()[:1]
    (partial / RUN_FILE).write_text(first_turn[0] + "\n")
    policies: list = []
    report = run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory(policies))
    assert (report.runs_skipped, report.runs_done) == (1, 2)
    assert [p.replies for p in policies] == [1]  # only the missing second turn was generated
    assert report.table["scripted"]["toy"]["best_of_turns_correct"]["mean"] == 1.0


def test_batched_seeds_generate_each_round_in_one_call_and_give_per_seed_runs(tmp_path, task_file,
                                                                              cpu_evaluator):
    policies: list = []
    config = compare_config(tmp_path, task_file, batch_seeds=True)
    report = run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory(policies))
    row = report.table["scripted"]["toy"]
    assert report.finished and row["seeds"] == [0, 1] and row["best_of_turns_correct"]["mean"] == 1.0
    assert policies[0].calls == [2, 2]  # both seeds' trajectories in each round's one call
    for seed in (0, 1):
        lines = (tmp_path / "scripted" / "toy" / f"seed{seed}" / RUN_FILE).read_text().splitlines()
        assert [json.loads(x)["turn"] for x in lines] == [0, 1]


def test_continuing_with_other_settings_is_refused(tmp_path, task_file, cpu_evaluator):
    run_compare(compare_config(tmp_path, task_file, seeds=(0,)), evaluator=cpu_evaluator,
                backend_factory=scripted_factory([]))
    with pytest.raises(ConfigError, match="temperature"):
        run_compare(compare_config(tmp_path, task_file, seeds=(0,), temperature=0.2),
                    evaluator=cpu_evaluator, backend_factory=scripted_factory([]))


def test_spread_is_mean_sample_std_and_range_over_seeds():
    s = spread([0.25, 0.5, None, 0.75])
    assert (s.mean, s.std, s.min, s.max, s.n) == (0.5, 0.25, 0.25, 0.75, 3)
    assert s.cell(pct=True) == "50.0% ± 25.0% (25.0%–75.0%)"


def test_a_bad_set_name_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="NAME=SPEC"):
        CompareConfig(sets=("holdout",))


def test_tiny_model_from_a_config_runs_through_the_command(tmp_path, task_file, cpu_evaluator, monkeypatch,
                                                           capsys):
    """The CPU smoke path of the command: a real random Llama (a locally trained tokenizer), one seed."""
    pytest.importorskip("transformers")
    import torch

    from cudaperf.agent.backends.tiny import build_tiny_chat_model
    from cudaperf.commands import train_cmd

    torch.set_num_threads(1)
    model = build_tiny_chat_model(tmp_path / "tiny", hidden_size=32, layers=1, context_tokens=4096)
    monkeypatch.setattr("cudaperf.train.compare.make_evaluator", lambda config: _Unclosed(cpu_evaluator))
    parser = __import__("argparse").ArgumentParser()
    train_cmd.add_arguments(parser)
    args = parser.parse_args(["eval", "--models", f"base={model}", "--sets", f"toy={task_file}", "--seeds",
                              "0", "--turns", "1", "--max-new-tokens", "6", "--eval-device", "cpu",
                              "--allow-torch-ops", "--device", "cpu", "--output-dir", str(tmp_path / "out"),
                              "--profile-decoding"])
    assert train_cmd.run(args) == 0
    printed = capsys.readouterr().out
    assert "| toy | base | 1 | 1 |" in printed and "1 runs complete" in printed
    figures = json.loads((tmp_path / "out" / "base" / "toy" / "seed0" / FIGURES_FILE).read_text())
    assert figures["spec"] == f"hf:{model}" and figures["figures"]["turns"] == 1
    assert "rows: 1;" in (tmp_path / "out" / "base" / "decoding_probe.txt").read_text()


class _Unclosed:
    """The module's evaluator, left open for the other tests when the command closes its own."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def close(self):
        pass


# -- held-out tasks of the training families ------------------------------------------------------------


def test_heldout_tasks_cover_every_train_family_and_are_never_trained_on():
    from cudaperf.train.config import SftConfig
    from cudaperf.train.heldout import index_heldout
    from cudaperf.train.sft_data import split_tasks

    index, assigned, held = index_heldout(0.05)
    train_families = {(g.kind, g.family) for g in index if assigned[g.task_id] == "train"}
    assert {(g.kind, g.family) for g in index if g.task_id in held} == train_families
    assert all(assigned[i] == "train" for i in held)
    trained = split_tasks(SftConfig(model="tiny", holdout_fraction=0.05, val_limit_tasks=1))["train"]
    assert not held & {g.task_id for g in trained}
    assert len(trained) + len(held) == sum(1 for v in assigned.values() if v == "train")


def test_continuing_batched_seeds_with_other_settings_is_refused(tmp_path, task_file, cpu_evaluator):
    import shutil

    run_compare(compare_config(tmp_path, task_file, batch_seeds=True), evaluator=cpu_evaluator,
                backend_factory=scripted_factory([]))
    shutil.rmtree(tmp_path / "scripted" / "toy")  # as if stopped before the per-seed runs were written
    with pytest.raises(ConfigError, match="turns: 2 -> 1"):
        run_compare(compare_config(tmp_path, task_file, batch_seeds=True, turns=1), evaluator=cpu_evaluator,
                    backend_factory=scripted_factory([]))


def test_the_table_from_batched_trajectories_matches_the_comparisons_and_counts_unfinished(
        tmp_path, task_file, cpu_evaluator):
    """`scripts/compare_partial.py`: the table a model-day call can make from the trajectories that came
    back, complete or not."""
    from script_module import load_script

    config = compare_config(tmp_path, task_file, batch_seeds=True)
    report = run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory([]))
    batched = tmp_path / "scripted" / "batched_trajectories.jsonl"
    partial = load_script("compare_partial")
    argv = [f"scripted={batched}", "--seeds", "2", "--sets", f"toy={task_file}"]
    runs, notes, _, _ = partial.partial_runs(partial.parse_args(argv))
    table = table_from_runs(runs)
    for name in ("first_turn_correct", "best_of_turns_correct", "fast_1"):
        assert table["scripted"]["toy"][name] == report.table["scripted"]["toy"][name]
    assert notes == [f"scripted toy seed {k}: 1 of 1 trajectories done, 1 begun" for k in (0, 1)]
    lines = batched.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(x for x in lines if json.loads(x)["turn"] == 0) + "\n")  # second turns lost
    runs, notes, _, _ = partial.partial_runs(partial.parse_args([f"scripted={cut}", *argv[1:]]))
    assert table_from_runs(runs)["scripted"]["toy"]["best_of_turns_correct"]["mean"] == 0.0
    assert notes[0] == "scripted toy seed 0: 0 of 1 trajectories done, 1 begun"


def _figures(first: float, best: float, geomean: float = 1.0, first_geomean: float | None = None) -> dict:
    figures = {"first_turn_correct": first, "best_of_turns_correct": best, "speedup_geomean_all": geomean}
    return figures if first_geomean is None else {**figures, "first_turn_speedup_geomean_all": first_geomean}


PAIRED = {"sft": {"heldout": {0: _figures(0.25, 0.25, 1.0), 1: _figures(0.5, 0.5, 1.2),
                               2: _figures(0.5, 0.75)}},
          "rl": {"heldout": {0: _figures(0.5, 0.5, 1.5), 1: _figures(0.5, 0.75, 1.8)}}}


def _row(rows, what, figure):
    return next(r for r in rows if (r["what"], r["figure"]) == (what, figure))


def test_a_later_model_is_compared_with_an_earlier_one_on_the_seeds_both_ran():
    row = _row(paired_gains(PAIRED), "rl vs sft", "first_turn_correct")
    assert (row["seeds"], row["change"]["mean"], row["change"]["min"]) == ([0, 1], 0.125, 0.0)


def test_a_gain_on_every_seed_needs_each_seed_above_nothing():
    rows = paired_gains(PAIRED)
    assert not _row(rows, "rl vs sft", "first_turn_correct")["gain_every_seed"]  # seed 1: no change
    assert _row(rows, "rl vs sft", "best_of_turns_correct")["gain_every_seed"]


def test_the_geometric_mean_speedups_are_compared_as_a_ratio():
    row = _row(paired_gains(PAIRED), "rl vs sft", "speedup_geomean_all")
    assert row["neutral"] == 1.0 and abs(row["change"]["mean"] - 1.5) < 1e-12  # 1.5 / 1.0 and 1.8 / 1.2


def test_every_model_gets_what_its_later_turns_add():
    row = _row(paired_gains(PAIRED), "sft: best of turns vs first turn", "correct")
    assert (row["seeds"], row["change"]["max"], row["gain_every_seed"]) == ([0, 1, 2], 0.25, False)


def test_what_later_turns_add_to_the_speedup_is_a_ratio_per_seed():
    runs = {"rl": {"heldout": {0: _figures(0.5, 0.5, 1.5, 1.2), 1: _figures(0.5, 0.5, 1.0, 1.0)}}}
    row = _row(paired_gains(runs), "rl: best of turns vs first turn", "speedup_geomean_all")
    assert (row["neutral"], row["change"]["max"], row["gain_every_seed"]) == (1.0, 1.25, False)


def test_what_later_turns_add_to_the_sure_speedups_is_a_difference_per_seed():
    sure = {"fast_1_sure": 0.5, "first_turn_fast_1_sure": 0.25}
    runs = {"rl": {"heldout": {0: {**_figures(0.5, 0.5), **sure}}}}
    row = _row(paired_gains(runs), "rl: best of turns vs first turn", "fast_1_sure")
    assert (row["neutral"], row["change"]["mean"], row["gain_every_seed"]) == (0.0, 0.25, True)


def test_runs_without_the_first_turns_speedup_give_no_speedup_refinement_row():
    assert not [r for r in paired_gains(PAIRED) if r["figure"] == "speedup_geomean_all" and ":" in r["what"]]


def test_no_model_is_compared_with_a_later_one():
    assert not [r for r in paired_gains(PAIRED) if r["what"].startswith("sft vs")]


def test_the_gains_table_shows_points_and_ratios():
    text = gains_markdown(paired_gains(PAIRED))
    points = "12.5 pt ± 17.7 pt (0.0 pt–25.0 pt)"
    assert f"| heldout | rl vs sft | first_turn_correct | 2 | {points} | no |" in text
    assert "| heldout | rl vs sft | speedup_geomean_all | 2 | 1.500 ± 0.000 (1.500–1.500) | yes |" in text


def test_training_seeds_of_one_policy_are_reported_over_them(tmp_path, task_file, cpu_evaluator):
    """Models named GROUP@seedK (`train.training_seeds`) get a row over their training seeds in
    comparison.json and comparison.md, through a real comparison."""
    models = ("scripted@seed0=scripted", "scripted@seed1=scripted")
    config = compare_config(tmp_path, task_file, models=models)
    run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory([]))
    seeded = json.loads((tmp_path / COMPARISON_JSON).read_text())["training_seeds"]
    assert seeded["table"]["scripted"]["toy"]["training_seeds"] == [0, 1]
    assert "| toy | scripted | 2 |" in (tmp_path / "comparison.md").read_text()


def test_two_models_named_as_one_training_seed_are_refused_before_any_run(tmp_path, task_file):
    with pytest.raises(ConfigError, match="training seed"):
        compare_config(tmp_path, task_file, models=("rl@seed1=scripted", "rl@seed01=scripted"))


def test_a_model_with_non_finite_weights_is_refused_before_any_run(tmp_path, task_file, cpu_evaluator):
    import torch
    from safetensors.torch import save_file

    model = tmp_path / "diverged"
    model.mkdir()
    (model / "config.json").write_text("{}")
    save_file({"w": torch.tensor([1.0, float("nan")])}, str(model / "model.safetensors"))
    config = compare_config(tmp_path / "out", task_file, models=(f"rl={model}",))
    with pytest.raises(ConfigError, match="rl: .* non-finite weights"):
        run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory([]))
    assert not list((tmp_path / "out").glob("rl/*/seed*/trajectories.jsonl"))


def test_a_comparison_writes_the_paired_outcomes_of_its_models(tmp_path, task_file, cpu_evaluator):
    """Two models with the same scripted replies: every first reply the same, no task solved by one only."""
    config = compare_config(tmp_path, task_file, models=("a=scripted", "b=scripted"))
    run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory([]))
    (row,) = json.loads((tmp_path / COMPARISON_JSON).read_text())["outcomes"]
    assert (row["what"], row["pairs"], row["same_first_reply"], row["best_later_only"]) == ("b vs a", 2, 2, 0)


def test_a_comparison_writes_its_models_outcomes_by_task_family(tmp_path, task_file, cpu_evaluator):
    """Each run's figures.json names its tasks' families; comparison.json and .md count the outcomes by
    them (one task here, two seeds: two trajectories a model)."""
    config = compare_config(tmp_path, task_file, models=("a=scripted", "b=scripted"))
    run_compare(config, evaluator=cpu_evaluator, backend_factory=scripted_factory([]))
    rows = json.loads((tmp_path / COMPARISON_JSON).read_text())["by_family"]
    assert [(r["model"], r["trajectories"]) for r in rows] == [("a", 2), ("b", 2)]
    assert "By family" in (tmp_path / COMPARISON_MD).read_text()



def test_the_compare_script_narrows_every_set_to_the_kinds_and_families_asked(tmp_path):
    """`scripts/train_compare_h200.py --kinds --families` (model_day.sh's COMPARE_KINDS, COMPARE_FAMILIES)."""
    from script_module import load_script

    script = load_script("train_compare_h200")
    args = script.parse_args(["--work", str(tmp_path), "--kinds", "c", "--families", "gemv", "map"])
    config = script.compare_config(args, ["sft=x"])
    assert (config.kinds, config.families) == (("c",), ("gemv", "map"))


def test_the_compare_script_keeps_a_named_comparison_in_its_own_folder(tmp_path):
    """`scripts/train_compare_h200.py --name` (model_day.sh's COMPARE_NAME): another set's comparison of a
    model already compared is not refused by the first one's settings."""
    from script_module import load_script

    script = load_script("train_compare_h200")
    default = script.compare_config(script.parse_args(["--work", str(tmp_path)]), ["sft=x"])
    named = script.compare_config(script.parse_args(["--work", str(tmp_path), "--name", "compare-test"]),
                                  ["sft=x"])
    assert default.output_dir == str(tmp_path / "compare")
    assert named.output_dir == str(tmp_path / "compare-test")


class _Counting:
    """The real evaluator, with the pairs it was sent counted."""

    def __init__(self, inner):
        self.inner, self.pairs = inner, 0

    @property
    def arch(self):
        return self.inner.arch

    def evaluate_stream(self, pairs):
        self.pairs += len(pairs)
        return self.inner.evaluate_stream(pairs)

    def close(self):
        pass


@pytest.mark.parametrize("share, evaluated", [(True, 2), (False, 4)])
def test_an_answer_repeated_by_another_seed_is_evaluated_once(tmp_path, task_file, cpu_evaluator, share,
                                                              evaluated):
    counting = _Counting(cpu_evaluator)  # two seeds write the same two answers, one a turn
    config = compare_config(tmp_path, task_file, share_repeated_answers=share)
    report = run_compare(config, evaluator=counting, backend_factory=scripted_factory([]))
    assert counting.pairs == evaluated
    assert report.table["scripted"]["toy"]["best_of_turns_correct"]["mean"] == 1.0


def test_the_comparisons_evaluator_follows_anchor_copies(tmp_path, task_file):
    from cudaperf.train.compare import make_evaluator

    evaluator = make_evaluator(compare_config(tmp_path, task_file, anchor_copies=False))
    try:
        assert evaluator.config.rl.anchor_copies is False
    finally:
        evaluator.close()
