"""A file of SFT examples built once, anywhere, and trained on elsewhere: `cudaperf train sft
--build-examples FILE` writes it on a machine without a GPU, `SftConfig.examples_file` names it to a run.
Building them loads thousands of tasks and judges the repair examples' broken copies: 234 s of session
34's 375-s SFT call on the H100, where the training itself took 117 s.

The file carries a fingerprint of what shapes the examples (`DATA_FIELDS` of the configuration, the
measurement files' names and sizes, the tokenizer's vocabulary, merges, normaliser, pre-tokeniser,
special tokens and chat template, and the package's source, which renders the prompts and the feedback),
so a run refuses a file built for other data, another tokenizer or other code instead of training on it.

Covers: the fingerprint, writing and reading (the run directory's own copy, which a resumed run reads
back, has the same format). Not covered: building the examples (`train.sft`, `train.sft_data`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import astuple
from pathlib import Path
from typing import Any

from cudaperf.train.config import ConfigError, SftConfig
from cudaperf.train.sft_data import LengthStats, SftExample

# The fields of SftConfig that decide which examples a run has (`train.sft_data`, `refine_data`,
# `repair_data`); the rest decide how they are trained on.
DATA_FIELDS = ("dataset_seed", "holdout_fraction", "kinds", "families", "limit_tasks", "val_limit_tasks",
               "measurements", "strategies", "fastest_per_task", "refine_per_task", "refine_min_speedup",
               "repair_per_task", "max_length", "format")


def _measurement_files(directory: str) -> list[tuple[str, int]]:
    if not directory or not Path(directory).is_dir():
        return []
    return sorted((p.name, p.stat().st_size) for p in Path(directory).glob("measurements*.jsonl*"))


def tokenizer_digest(tokenizer: Any) -> str:
    """What of a tokenizer decides the examples' token ids: vocabulary and merges, normaliser and
    pre-tokeniser, special tokens, chat template (merges written one way: `tokenizers` has stored them as
    "a b" strings and as pairs)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = json.loads(backend.to_str()) if backend is not None else {}
    merges = [m if isinstance(m, str) else " ".join(m) for m in (spec.get("model") or {}).get("merges", [])]
    text = json.dumps({"vocab": sorted(tokenizer.get_vocab().items()), "merges": merges,
                       "normalizer": spec.get("normalizer"), "pre_tokenizer": spec.get("pre_tokenizer"),
                       "special": sorted(map(str, tokenizer.all_special_tokens)),
                       "template": getattr(tokenizer, "chat_template", None)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def source_digest() -> str:
    """The cudaperf package's Python source, all of it: the prompts, the feedback and the dataset's tasks
    come from many modules, and a file built by other code would hold other examples."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def examples_fingerprint(config: SftConfig, tokenizer: Any) -> str:
    fields = {name: getattr(config, name) for name in DATA_FIELDS}
    fields["measurement_files"] = _measurement_files(config.measurements)
    fields["tokenizer"] = tokenizer_digest(tokenizer)
    fields["source"] = source_digest()
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=list).encode()).hexdigest()[:16]


def write_examples(path: Path, train: list[SftExample], val: list[SftExample], lengths: LengthStats,
                   fingerprint: str | None) -> None:
    """Write atomically (a killed writer leaves the old file or none)."""
    data = {"fingerprint": fingerprint, "train": [astuple(e) for e in train],
            "val": [astuple(e) for e in val], "lengths": vars(lengths)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(data).encode()))
    tmp.replace(path)


class ExamplesMismatch(ConfigError):
    """An examples file built for other data, another tokenizer or other code than the run's."""


def read_examples(path: Path, fingerprint: str | None = None
                  ) -> tuple[list[SftExample], list[SftExample], LengthStats]:
    """The examples of `path`; with `fingerprint`, refused unless the file was built for it."""
    data = json.loads(gzip.decompress(Path(path).read_bytes()))
    if fingerprint is not None and data.get("fingerprint") != fingerprint:
        raise ExamplesMismatch(f"examples_file={path}: built for other data, another tokenizer or other code "
                               f"(fingerprint {data.get('fingerprint')}, this run's {fingerprint}); build it "
                               "again with the run's settings (`cudaperf train sft --build-examples FILE` "
                               "and the same options)")
    train, val = [_example(e) for e in data["train"]], [_example(e) for e in data["val"]]
    return train, val, LengthStats(**data["lengths"])


def _example(row: list[Any]) -> SftExample:
    example_id, task_id, family, kind, input_ids, labels, prompt_tokens, answer_tokens = row
    return SftExample(example_id, task_id, family, kind, tuple(input_ids), tuple(labels), prompt_tokens,
                      answer_tokens)


__all__ = ["DATA_FIELDS", "ExamplesMismatch", "examples_fingerprint", "read_examples", "source_digest",
           "tokenizer_digest", "write_examples"]
