"""One-off (session 7): mark the rows timed after the persistent lead (cudaperf.lead) with `lead_kind`.

Rows gained the `lead_kind` field after they were measured. The one shard measured with the persistent
lead (write, then a clean read of 2x L2) is measurements-20261203T173432Z (commit 'Side-stream DMA
copies...', the H200 call at 17:32 UTC); every earlier row with a `lead_us` was timed after torch's fill,
which `cudaperf dataset stats` reads as "memset" when the field is absent. Only timed rows with a lead
and no `lead_kind` are touched; the file is rewritten in place, row order kept.

    python3 dev/backfill_lead_kind.py benchmarks/dataset_measure/measurements-20261203T173432Z.jsonl.gz
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path


def backfill(path: Path, kind: str = "persistent") -> int:
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    changed, out = 0, []
    for line in lines:
        row = json.loads(line)
        if row.get("lead_us") and "lead_kind" not in row and row.get("record") != "run":
            row["lead_kind"] = kind
            changed += 1
            line = json.dumps(row, sort_keys=True)
        out.append(line)
    path.write_bytes(gzip.compress(("\n".join(out) + "\n").encode(), mtime=0))
    return changed


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(arg, backfill(Path(arg)), "rows marked")
