"""Write verl's train/val parquet files for cudaperf tasks (the dataset's family split).

    python examples/verl/prepare_data.py --out data/verl --limit 512
Rows: `cudaperf.train.verl_adapter.data.task_rows` (the environment's first prompt, the task as JSON).
"""

from __future__ import annotations

import argparse

from cudaperf.agent.taskset import resolve
from cudaperf.train.verl_adapter.data import task_rows, write_parquet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/verl")
    parser.add_argument("--train", default="split:train", help="agent.taskset spec of the training tasks")
    parser.add_argument("--val", default="split:val", help="agent.taskset spec of the validation tasks")
    parser.add_argument("--limit", type=int, default=0, help="at most this many tasks per split (0: all)")
    args = parser.parse_args()
    for split, spec in (("train", args.train), ("val", args.val)):
        found = resolve((spec,), limit=args.limit)
        path = write_parquet(task_rows(found.tasks, split=split), f"{args.out}/{split}.parquet")
        print(f"{split}: {len(found.tasks)} tasks -> {path}")


if __name__ == "__main__":
    main()
