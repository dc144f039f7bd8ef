"""scripts/decoding_conditions_gpu.py (a rollout's decoding step with and without cuDNN's attention, on key
lengths new and seen, and beside the open evaluator). Slow: the `--cpu` form end to end through the real
script (a tiny model built from a config, the rollout's real sampler, the RL trainer's real sandboxed CPU
evaluator opened and warmed beside it). Unmarked: the prompt lengths, the forms' order, the short call's
lengths, the table and the refused options. The GPU form runs in `gpu_check.sh decoding-conditions`.
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


def test_the_forms_compare_the_attention_choices_on_one_set_of_lengths(script):
    found = script.forms(script.parse(["--out", "x.json"]))
    assert [f.name for f in found] == ["no_cudnn", "graph", "cudnn_new_shapes", "cudnn_seen_shapes",
                                       "no_cudnn_evaluator_open"]
    assert [f.attention for f in found] == ["no_cudnn", "no_cudnn", "any", "any", "no_cudnn"]
    assert [f.cache for f in found] == ["dynamic", "graph", "dynamic", "dynamic", "dynamic"]
    assert [f.evaluator for f in found] == [False, False, False, False, True]
    assert len({f.lengths for f in found}) == 1 and {f.new_tokens for f in found} == {1000}


def test_the_short_calls_key_lengths_start_past_the_long_calls_last(script):
    lengths = (1200, 2400)
    short = script.short_call_lengths(lengths, 1000)
    assert short == (2201, 3401)
    assert max(short) > max(lengths) + 1000  # a call's key lengths: its padded width + the steps so far


def test_the_table_gives_each_form_against_no_cudnn(script):
    rows = [script.Measured("no_cudnn", 16, 1800, 1800, 1000, False, "no_cudnn", 40.0, 1.0, 3.0),
            script.Measured("cudnn_new_shapes", 16, 1200, 2400, 1000, False, "any", 100.0, 1.0, 11.0)]
    text = script.table(rows)
    assert "| no_cudnn | no_cudnn | dynamic | 16 | 1800-1800 | 1000 | no | 40.00 | 1.00x |" in text
    assert "| cudnn_new_shapes | any | dynamic | 16 | 1200-2400 | 1000 | no | 100.00 | 2.50x |" in text


def test_a_spread_as_wide_as_the_prompts_is_refused(script):
    with pytest.raises(SystemExit):
        script.parse(["--out", "x.json", "--prompt-tokens", "100", "--spread", "100"])


@pytest.mark.slow
def test_the_cpu_form_measures_every_form_and_probes_each_long_call(tmp_path):
    out = tmp_path / "decoding" / "conditions.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SCRIPTS.parent / "src"),
                                                        os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(SCRIPT), "--cpu", "--out", str(out)], capture_output=True,
                          text=True, timeout=400, env=env, cwd=SCRIPTS.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    names = ["no_cudnn", "graph", "cudnn_new_shapes", "cudnn_seen_shapes", "no_cudnn_evaluator_open"]
    assert [f["form"] for f in record["forms"]] == names
    assert all(f["ms_per_step"] > 0 for f in record["forms"])
    assert record["warm_up"] and set(record["warm_up"].values()) == {"correct"}
    probes = {p.name for p in out.parent.glob("*-decoding_probe.txt")}
    assert probes == {f"{n}-decoding_probe.txt" for n in names}
    assert "| no_cudnn_evaluator_open | no_cudnn | dynamic |" in done.stdout
    assert "| graph | no_cudnn | graph |" in done.stdout
