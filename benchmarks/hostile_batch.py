"""A hostile batch through the real command line: NaN, infinities, huge and denormal outputs, a kernel that
writes through a NULL pointer (a sticky illegal-address error that poisons its worker) and a forward that
raises, mixed among the honest example solutions (issue 18, item 1).

The candidates are fast-format kernels for the example tasks, written into a solutions directory
(`<task>__<name>.py`, so batch mode matches them), then `cudaperf eval --tasks <examples> --solutions <dir>
--out <file>` runs as a child process, and `cudaperf report <file>` after it. What must hold, and is
printed: the batch exits 0, every candidate has a stored row, no row is a HARNESS_ERROR, every honest
solution is CORRECT and no hostile one is, and the report reads the file (exit 0).

    python3 benchmarks/hostile_batch.py [--out-dir DIR] [--device cuda] [--baselines eager]

On a CPU machine use `--device none` (build and static checks only) to check the plumbing.

Not covered: the evaluation's own figures (timing), candidates that hang (the sandbox's deadlines,
benchmarks/faults.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaperf.results import ResultStore
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.types import Outcome

# One kernel shape for every element-wise hostile output on the relu task; VALUE is the C expression.
FILL = '''"""Hostile candidate: {doc}"""

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void fill(const float* __restrict__ x, float* __restrict__ y, long long n)
{{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = {value};
}}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "fill")

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        if n:
            self.kernel(((n + 255) // 256,), (256,), x, y, n)
        return y
'''

NULL_WRITE = '''"""Hostile candidate: writes through a NULL pointer (an illegal address: context lost)."""

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void boom(float* p) { p[threadIdx.x] = 1.0f; }
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "boom")

    def forward(self, x):
        self.kernel((1,), (32,), None)
        return torch.empty_like(x)
'''

RAISES = '''"""Hostile candidate: its forward raises."""

import torch
from torch import nn

from cudaperf import cuda

SRC = r"""
extern "C" __global__ void unused(float* p) { }
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = cuda.compile(SRC, "unused")

    def forward(self, x):
        raise RuntimeError("the kernel exploded")
'''

HOSTILE = {
    "relu__nan": FILL.format(doc="every output is NaN.", value="__int_as_float(0x7fc00000)"),
    "relu__plus_inf": FILL.format(doc="every output is +inf.", value="__int_as_float(0x7f800000)"),
    "relu__minus_inf": FILL.format(doc="every output is -inf.", value="__int_as_float(0xff800000)"),
    "relu__huge": FILL.format(doc="outputs of 1e38 times the input (inf where |x| > 3.4).",
                              value="x[i] * 1e38f"),
    "relu__denormal": FILL.format(doc="denormal outputs, 1e-40 times the input's sign.",
                                  value="copysignf(1e-40f, x[i])"),
    "relu__null_write": NULL_WRITE,
    "relu__raises": RAISES,
}


def write_candidates(directory: Path) -> dict[str, bool]:
    """The honest example solutions and the hostile ones, as files; {file stem: honest}."""
    directory.mkdir(parents=True, exist_ok=True)
    kinds = {}
    for path in sorted(Path(example_solutions_dir("fast")).glob("*.py")):
        (directory / path.name).write_text(path.read_text())
        kinds[path.stem] = True
    for name, text in HOSTILE.items():
        (directory / f"{name}.py").write_text(text)
        kinds[name] = False
    return kinds


def run(out_dir: Path, device: str, baselines: str) -> dict:
    """The batch and the report as child processes; what held."""
    solutions, results = out_dir / "solutions", out_dir / "hostile_batch.jsonl"
    kinds = write_candidates(solutions)
    results.unlink(missing_ok=True)
    command = [sys.executable, "-m", "cudaperf.cli", "eval", "--tasks", str(example_tasks_dir()),
               "--solutions", str(solutions), "--out", str(results), "--device", device,
               "--baselines", baselines, "--json"]
    batch = subprocess.run(command, capture_output=True, text=True, check=False)
    report = subprocess.run([sys.executable, "-m", "cudaperf.cli", "report", str(results), "--markdown"],
                            capture_output=True, text=True, check=False)
    rows = {r.solution_id.rsplit("/", 1)[-1]: r for r in ResultStore(results).load()}
    ran = device != "none"
    checks = {
        "batch exits 0": batch.returncode == 0,
        "every candidate has a stored row": set(rows) == set(kinds),
        "no HARNESS_ERROR row": all(r.outcome is not Outcome.HARNESS_ERROR for r in rows.values()),
        "honest ones CORRECT": not ran or all(rows[k].outcome is Outcome.CORRECT for k, h in kinds.items()
                                              if h and k in rows),
        "hostile ones not CORRECT": all(rows[k].outcome is not Outcome.CORRECT for k, h in kinds.items()
                                        if not h and k in rows),
        "report reads the file": report.returncode == 0 and "Why results are not correct" in report.stdout,
    }
    return {"checks": checks, "outcomes": {k: rows[k].outcome.value for k in sorted(rows)},
            "counts": dict(Counter(r.outcome.value for r in rows.values())), "candidates": len(kinds),
            "batch_rc": batch.returncode, "report_rc": report.returncode,
            "batch_stderr_tail": batch.stderr[-3000:], "results_file": str(results)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default=None, help="keep the solutions and results here")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu", "none", "auto"))
    parser.add_argument("--baselines", default="eager")
    args = parser.parse_args()
    out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="hostile-batch-"))
    summary = run(out_dir, args.device, args.baselines)
    for name, outcome in summary["outcomes"].items():
        print(f"  {name:28s} {outcome}")
    for check, held in summary["checks"].items():
        print(f"{'PASS' if held else 'FAIL'}  {check}")
    print(f"{summary['candidates']} candidates, outcomes {summary['counts']}; "
          f"results in {summary['results_file']}")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    if not all(summary["checks"].values()):
        print(summary["batch_stderr_tail"], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
