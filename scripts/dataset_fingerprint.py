"""Print the fingerprint of the generated dataset as sorted JSONL: one line per task of the index (the tasks
`cudaperf dataset build` writes before its degenerate filter), with its id, kind, family, the hash of its
task file text, and its implementations (id, strategy, baseline flag, tags, `impl_hash` of the source:
comments and whitespace do not change it, a kernel change does).

    python scripts/dataset_fingerprint.py [--seed 0] > fingerprint.jsonl
    python scripts/dataset_fingerprint.py --compare before.jsonl after.jsonl

Two fingerprints that are equal line for line mean the generators still make the same dataset. This is a
script, never imported by the package; it does not build files or run any reference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from cudaperf.datasets import registry
from cudaperf.datasets.records import normalise_code


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint_lines(seed: int) -> list[str]:
    lines = []
    for task in registry.build_index(seed):
        impls = sorted(registry.implementations(task), key=lambda i: i.impl_id)
        row = {"task_id": task.task_id, "kind": task.kind.value, "family": task.family,
               "task_text": _hash(task.text),
               "impls": [[i.impl_id, i.strategy, i.baseline, list(i.tags), _hash(normalise_code(i.source))]
                         for i in impls]}
        lines.append(json.dumps(row, sort_keys=True))
    return sorted(lines)


def compare(before: Path, after: Path) -> int:
    """Print a summary of two fingerprint files; 0 when they are identical."""
    old, new = before.read_text().splitlines(), after.read_text().splitlines()
    old_ids = {json.loads(line)["task_id"]: line for line in old}
    new_ids = {json.loads(line)["task_id"]: line for line in new}
    changed = sorted(t for t in old_ids.keys() & new_ids.keys() if old_ids[t] != new_ids[t])
    for label, path, lines in (("before", before, old), ("after", after, new)):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        print(f"{label}: {len(lines)} tasks, {sum(len(json.loads(x)['impls']) for x in lines)} "
              f"implementations, sha256 {digest}")
    print(f"tasks only before: {len(old_ids.keys() - new_ids.keys())}; only after: "
          f"{len(new_ids.keys() - old_ids.keys())}; changed: {len(changed)}")
    for task_id in changed[:20]:
        print(f"  changed: {task_id}")
    same = old == new
    print("identical" if same else "DIFFERENT")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0, as `dataset build`)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                        help="compare two fingerprint files instead of printing one")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    sys.stdout.write("".join(line + "\n" for line in fingerprint_lines(args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
