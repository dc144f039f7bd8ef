"""SFT examples built once and trained on elsewhere (`train.sft_examples_file`, `SftConfig.examples_file`,
`cudaperf train sft --build-examples`): the fingerprint follows what shapes the examples and nothing
else, a file built for other data or another tokenizer is refused with the fix, and a real run (the tiny
model, TRL's SFTTrainer) trains on a file's examples without building any."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest

pytest.importorskip("trl")

from cudaperf.cli import main as cli_main
from cudaperf.train import sft
from cudaperf.train.config import SftConfig
from cudaperf.train.models import load_policy
from cudaperf.train.sft_data import LengthStats, SftExample
from cudaperf.train.sft_examples_file import (
    ExamplesMismatch,
    examples_fingerprint,
    fingerprint_parts,
    read_examples,
    tokenizer_digest,
    write_examples,
)

SMALL = {"model": "tiny", "kinds": ("c",), "limit_tasks": 2, "val_limit_tasks": 1, "strategies": ("naive",),
         "device": "cpu"}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_policy(SftConfig(**SMALL, output_dir=str(tmp_path_factory.mktemp("tok"))))[1]


def config(tmp_path, **changes):
    return SftConfig(**{**SMALL, "output_dir": str(tmp_path / "run"), **changes})


def example(k: int) -> SftExample:
    return SftExample(f"t{k}/naive", f"t{k}", "fam", "c", (1, 2, 3), (-100, 2, 3), 1, 2)


LENGTHS = LengthStats(2, 3.0, 3, 3, 3, 3, 0, 2, 2)


PARTS = {"fields": "f", "measurement_files": "m", "tokenizer": "t", "source": "s"}


def test_a_written_file_reads_back_the_same_examples(tmp_path):
    write_examples(tmp_path / "ex.json.gz", [example(0), example(1)], [example(2)], LENGTHS, PARTS)
    assert read_examples(tmp_path / "ex.json.gz", PARTS) == ([example(0), example(1)], [example(2)], LENGTHS)


def test_a_file_built_for_another_fingerprint_is_refused_with_the_fix(tmp_path):
    write_examples(tmp_path / "ex.json.gz", [example(0)], [], LENGTHS, PARTS)
    with pytest.raises(ExamplesMismatch, match="--build-examples"):
        read_examples(tmp_path / "ex.json.gz", {**PARTS, "fields": "g"})


def test_the_refusal_names_the_parts_that_differ(tmp_path):
    write_examples(tmp_path / "ex.json.gz", [example(0)], [], LENGTHS, PARTS)
    with pytest.raises(ExamplesMismatch, match=r"built for another tokenizer, other code \("):
        read_examples(tmp_path / "ex.json.gz", {**PARTS, "tokenizer": "u", "source": "r"})


@pytest.mark.parametrize("change", [{"repair_per_task": 1}, {"limit_tasks": 3}, {"max_length": 2048},
                                    {"strategies": ("grid_stride",)}])
def test_the_fingerprint_changes_with_a_field_that_shapes_the_examples(tmp_path, tokenizer, change):
    assert examples_fingerprint(config(tmp_path, **change), tokenizer) != \
        examples_fingerprint(config(tmp_path), tokenizer)


@pytest.mark.parametrize("change", [{"learning_rate": 1e-3}, {"batch_size": 4}, {"seed": 5},
                                    {"output_dir": "elsewhere"}])
def test_the_fingerprint_ignores_how_the_examples_are_trained_on(tmp_path, tokenizer, change):
    assert examples_fingerprint(config(tmp_path, **change), tokenizer) == \
        examples_fingerprint(config(tmp_path), tokenizer)


def test_the_fingerprint_changes_with_the_tokenizer(tmp_path, tokenizer):
    before = examples_fingerprint(config(tmp_path), tokenizer)
    template = tokenizer.chat_template
    try:
        tokenizer.chat_template = (template or "") + "{# another template #}"
        assert examples_fingerprint(config(tmp_path), tokenizer) != before
    finally:
        tokenizer.chat_template = template


def _with_backend(tokenizer, change):
    """A copy of `tokenizer` whose `tokenizers` backend is its serialised form changed by `change`."""
    import copy
    import json

    from tokenizers import Tokenizer

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    change(spec)
    other = copy.deepcopy(tokenizer)
    other._tokenizer = Tokenizer.from_str(json.dumps(spec))
    return other


def _equivalent_form(spec):  # as transformers 5.17 converts SmolLM2's GGUF (its ids are the same)
    spec["normalizer"] = {"type": "Sequence", "normalizers": []}
    spec["pre_tokenizer"]["trim_offsets"] = False


def _lowercased(spec):
    spec["normalizer"] = {"type": "Lowercase"}


def test_the_tokenizers_digest_ignores_a_form_that_gives_the_same_ids(tokenizer):
    assert tokenizer_digest(_with_backend(tokenizer, _equivalent_form)) == tokenizer_digest(tokenizer)


def test_the_tokenizers_digest_changes_with_a_normaliser_that_changes_ids(tokenizer):
    assert tokenizer_digest(_with_backend(tokenizer, _lowercased)) != tokenizer_digest(tokenizer)


def test_the_parts_name_the_tokenizer_alone_when_only_it_changes(tmp_path, tokenizer):
    before, after = (fingerprint_parts(config(tmp_path), t)
                     for t in (tokenizer, _with_backend(tokenizer, _lowercased)))
    assert [name for name in before if before[name] != after[name]] == ["tokenizer"]


def test_the_fingerprint_changes_with_the_packages_source(tmp_path, tokenizer, monkeypatch):
    from cudaperf.train import sft_examples_file

    before = examples_fingerprint(config(tmp_path), tokenizer)
    monkeypatch.setattr(sft_examples_file, "source_digest", lambda: "other code")
    assert examples_fingerprint(config(tmp_path), tokenizer) != before


def test_a_run_trains_on_the_built_file_without_building_examples(tmp_path, monkeypatch):
    built = tmp_path / "examples.json.gz"
    assert cli_main(["train", "sft", "--model", "tiny", "--kinds", "c", "--limit-tasks", "2",
                     "--val-limit-tasks", "1", "--strategies", "naive", "--device", "cpu",
                     "--output-dir", str(tmp_path / "unused"), "--build-examples", str(built)]) == 0
    expected = read_examples(built)[0]

    def refuse(*_args, **_kwargs):
        raise AssertionError("the run built examples although a file was given")

    monkeypatch.setattr(sft, "build_all_examples", refuse)
    report = sft.run_sft(config(tmp_path, examples_file=str(built), max_steps=1, batch_size=1, eval_steps=0,
                                save_steps=1))
    assert report.steps == 1 and report.train_examples == len(expected)
    assert read_examples(tmp_path / "run" / sft.EXAMPLES_FILE)[0] == expected


def test_a_run_says_it_read_its_examples_from_the_file(tmp_path, capsys):
    built = tmp_path / "examples.json.gz"
    assert cli_main(["train", "sft", "--model", "tiny", "--kinds", "c", "--limit-tasks", "2",
                     "--val-limit-tasks", "1", "--strategies", "naive", "--device", "cpu",
                     "--output-dir", str(tmp_path / "unused"), "--build-examples", str(built)]) == 0
    capsys.readouterr()
    sft.run_sft(config(tmp_path, examples_file=str(built), max_steps=1, batch_size=1, eval_steps=0,
                       save_steps=1))
    assert f"read from {built} in" in capsys.readouterr().out
