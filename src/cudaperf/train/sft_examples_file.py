"""A file of SFT examples built once, anywhere, and trained on elsewhere: `cudaperf train sft
--build-examples FILE` writes it on a machine without a GPU, `SftConfig.examples_file` names it to a run.
Building them loads thousands of tasks and judges the repair examples' broken copies: 234 s of session
34's 375-s SFT call on the H100, where the training itself took 117 s.

The file carries a fingerprint of what shapes the examples, in four parts: the configuration's
`DATA_FIELDS`, the measurement files' names and sizes, the tokenizer (by what it does: vocabulary,
merges, special tokens, chat template, and the ids it gives a fixed set of probe texts and a rendered
conversation), and the package's source, which renders the prompts and the feedback. A run refuses a
file built for other data, another tokenizer or other code, and the refusal names the parts that differ.

The tokenizer is fingerprinted by its behaviour, not by its serialised form: two `transformers` versions
convert the same GGUF into tokenizers that give the same ids but serialise differently (an empty
normaliser sequence against none, another `trim_offsets`, which moves offsets, not ids).

Covers: the fingerprint, writing and reading (the run directory's own copy, which a resumed run reads
back, has the same format). Not covered: building the examples (`train.sft`, `train.sft_data`); a
normaliser or pre-tokeniser change that alters none of the probe texts' ids goes unseen.
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
               "refine_from", "repair_per_task", "max_length", "format")


def _measurement_files(directory: str) -> list[tuple[str, int]]:
    if not directory or not Path(directory).is_dir():
        return []
    return sorted((p.name, p.stat().st_size) for p in Path(directory).glob("measurements*.jsonl*"))


# Texts whose ids show a normaliser's or pre-tokeniser's change: code with tabs, runs of spaces and of
# digits, Windows and bare newlines, accents, other scripts, an emoji, and special-looking text.
PROBE_TEXTS = (
    "__global__ void add(const float* __restrict__ a, float* b, int n) {\n\tint i = blockIdx.x * "
    "blockDim.x + threadIdx.x;\n    if (i < n) b[i] += a[i] * 2.0f;  // x2\r\n}\n",
    "  leading  and   trailing spaces   \n\n\n12345678901234567890 0.000001f 1e-5 0x7fffffff",
    "Caf\u00e9 na\u00efve \u00c5ngstr\u00f6m \u4e2d\u6587 \u0440\u0443\u0441\u0441\u043a\u0438\u0439 "
    "\U0001f680 \u2014 \u00bd \ufb01 \u212b",
    "<|im_start|>user\nnot a real turn<|im_end|> <|endoftext|> ```cuda\n```",
)
PROBE_CONVERSATION = ({"role": "system", "content": "You write CUDA."},
                      {"role": "user", "content": "Write a kernel."},
                      {"role": "assistant", "content": "```cuda\n__global__ void k() {}\n```"})


def _probe_ids(tokenizer: Any) -> dict[str, Any]:
    ids = [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in PROBE_TEXTS]
    rendered = None
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(list(PROBE_CONVERSATION), tokenize=True)
        rendered = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)  # ids or encoding
    return {"texts": ids, "conversation": rendered}


def tokenizer_digest(tokenizer: Any) -> str:
    """What of a tokenizer decides the examples' token ids, by what it does: vocabulary and merges
    (written one way: `tokenizers` has stored them as "a b" strings and as pairs), special tokens, chat
    template, and the ids of `PROBE_TEXTS` and of `PROBE_CONVERSATION` rendered."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = json.loads(backend.to_str()) if backend is not None else {}
    merges = [m if isinstance(m, str) else " ".join(m) for m in (spec.get("model") or {}).get("merges", [])]
    text = json.dumps({"vocab": sorted(tokenizer.get_vocab().items()), "merges": merges,
                       "special": sorted(map(str, tokenizer.all_special_tokens)),
                       "template": getattr(tokenizer, "chat_template", None),
                       "probe": _probe_ids(tokenizer)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def source_digest() -> str:
    """The cudaperf package's Python source, all of it: the prompts, the feedback and the dataset's tasks
    come from many modules, and a file built by other code would hold other examples."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=list).encode()).hexdigest()[:16]


def fingerprint_parts(config: SftConfig, tokenizer: Any) -> dict[str, str]:
    """One digest per thing that shapes the examples: the data fields, the measurement files, the tokenizer
    and the package's source."""
    return {"fields": _digest({name: getattr(config, name) for name in DATA_FIELDS}),
            "measurement_files": _digest(_measurement_files(config.measurements)),
            "tokenizer": tokenizer_digest(tokenizer)[:16], "source": source_digest()[:16]}


def fingerprint_of(parts: dict[str, str]) -> str:
    return _digest(parts)


def examples_fingerprint(config: SftConfig, tokenizer: Any) -> str:
    return fingerprint_of(fingerprint_parts(config, tokenizer))


def write_examples(path: Path, train: list[SftExample], val: list[SftExample], lengths: LengthStats,
                   parts: dict[str, str] | None) -> None:
    """Write atomically (a killed writer leaves the old file or none), with the fingerprint's `parts`."""
    data = {"fingerprint": fingerprint_of(parts) if parts is not None else None, "fingerprint_parts": parts,
            "train": [astuple(e) for e in train], "val": [astuple(e) for e in val], "lengths": vars(lengths)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(data).encode()))
    tmp.replace(path)


class ExamplesMismatch(ConfigError):
    """An examples file built for other data, another tokenizer or other code than the run's."""


def read_examples(path: Path, parts: dict[str, str] | None = None
                  ) -> tuple[list[SftExample], list[SftExample], LengthStats]:
    """The examples of `path`; with the run's fingerprint `parts`, refused unless the file was built for
    them, naming the parts that differ."""
    data = json.loads(gzip.decompress(Path(path).read_bytes()))
    if parts is not None and data.get("fingerprint") != fingerprint_of(parts):
        differences = _differences(data.get("fingerprint_parts"), parts)
        raise ExamplesMismatch(f"examples_file={path}: built for {differences} (fingerprint "
                               f"{data.get('fingerprint')}, this run's {fingerprint_of(parts)}); build it "
                               "again with the run's settings (`cudaperf train sft --build-examples FILE` "
                               "and the same options)")
    train, val = [_example(e) for e in data["train"]], [_example(e) for e in data["val"]]
    return train, val, LengthStats(**data["lengths"])


PART_NAMES = {"fields": "other data settings", "measurement_files": "other measurement files",
              "tokenizer": "another tokenizer", "source": "other code"}


def _differences(stored: dict[str, str] | None, parts: dict[str, str]) -> str:
    if not stored:
        return "other data, another tokenizer or other code (a file without its fingerprint's parts)"
    names = [*PART_NAMES, *sorted((set(stored) | set(parts)) - set(PART_NAMES))]
    return ", ".join(PART_NAMES.get(name, name) for name in names
                     if stored.get(name) != parts.get(name)) or "another fingerprint"


def _example(row: list[Any]) -> SftExample:
    example_id, task_id, family, kind, input_ids, labels, prompt_tokens, answer_tokens = row
    return SftExample(example_id, task_id, family, kind, tuple(input_ids), tuple(labels), prompt_tokens,
                      answer_tokens)


__all__ = ["DATA_FIELDS", "ExamplesMismatch", "PROBE_CONVERSATION", "PROBE_TEXTS", "examples_fingerprint",
           "fingerprint_of", "fingerprint_parts", "read_examples", "source_digest", "tokenizer_digest",
           "write_examples"]
