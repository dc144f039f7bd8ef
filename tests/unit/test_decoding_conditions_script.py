"""scripts/decoding_conditions_gpu.py (which condition of the real runs slows the rollouts' decoding step).
Slow: the `--cpu` form end to end through the real script (a tiny model built from a config, the rollout's
real sampler, the RL trainer's real sandboxed CPU evaluator opened and warmed beside it; about 35 s on the
2-core machine). Unmarked: the prompt lengths, the forms' order, the table and the refused options. The
GPU form is the lead's to run (`gpu_check.sh decoding-conditions`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from script_module import SCRIPTS

SCRIPT = SCRIPTS / "decoding_conditions_gpu.py"


@pytest.fixture(scope="module")
def script():
    """The script as a module, registered while loaded (its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location("decoding_conditions_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "decoding_conditions_gpu", module)
        spec.loader.exec_module(module)
        yield module


def test_uneven_lengths_keep_the_mean_and_stay_within_the_spread(script):
    lengths = script.uneven_lengths(16, 1800, 600)
    assert len(lengths) == 16
    assert sum(lengths) / 16 == 1800
    assert all(1200 <= n <= 2400 for n in lengths)
    assert len(set(lengths)) > 1


def test_forms_add_one_condition_at_a_time(script):
    args = script.parse(["--out", "x.json"])
    found = script.forms(args)
    assert [f.name for f in found] == ["equal", "padded", "padded_long", "evaluator_idle",
                                       "evaluator_idle_long", "after_close"]
    assert found[0].lengths == (1800,) * 16
    assert found[1].lengths == found[2].lengths == found[3].lengths
    assert [f.new_tokens for f in found] == [128, 128, 1000, 128, 1000, 128]
    assert [f.evaluator for f in found] == [False, False, False, True, True, False]


def test_the_table_gives_each_form_against_equal(script):
    rows = [script.Measured("equal", 16, 1800, 1800, 128, False, 20.0, 1.0, 3.0),
            script.Measured("evaluator_idle", 16, 1200, 2400, 128, True, 80.0, 1.0, 11.0)]
    text = script.table(rows)
    assert "| equal | 16 | 1800-1800 | 128 | no | 20.00 | 1.00x |" in text
    assert "| evaluator_idle | 16 | 1200-2400 | 128 | yes | 80.00 | 4.00x |" in text


def test_a_spread_as_wide_as_the_prompts_is_refused(script):
    with pytest.raises(SystemExit):
        script.parse(["--out", "x.json", "--prompt-tokens", "100", "--spread", "100"])


@pytest.mark.slow
def test_the_cpu_form_measures_every_form_beside_a_warmed_evaluator(tmp_path):
    out = tmp_path / "decoding" / "conditions.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SCRIPTS.parent / "src"),
                                                        os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(SCRIPT), "--cpu", "--out", str(out)], capture_output=True,
                          text=True, timeout=400, env=env, cwd=SCRIPTS.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert [f["form"] for f in record["forms"]] == ["equal", "padded", "padded_long", "evaluator_idle",
                                                    "evaluator_idle_long", "after_close"]
    assert all(f["ms_per_step"] > 0 for f in record["forms"])
    assert record["warm_up"] and set(record["warm_up"].values()) == {"correct"}
    assert {p.name for p in out.parent.glob("*-decoding_probe.txt")} == {
        "padded_long-decoding_probe.txt", "evaluator_idle_long-decoding_probe.txt"}
    assert "| after_close |" in done.stdout
