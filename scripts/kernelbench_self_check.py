"""The harness's self-check over upstream KernelBench levels 1-3 at full size (issue 18, item 2), on the GPU.

Every problem is evaluated with its own reference as the candidate (`cudaperf eval --self-check`:
`evaluate.self_check_solution` / `self_check_config`): derived correctness-only configurations, the
memory plan, correctness and timing as in a real evaluation, the source policy, the torch-op monitor and
coverage off, and timing against eager only (no torch.compile baseline: it costs seconds to minutes per
problem and the self-check is about the harness, not the baseline). A working harness gets CORRECT for
every problem; anything else is classified by its outcome and reason.

Steps: the KernelBench folder is taken from `--kernelbench DIR` (or extracted there from the bare mirror
`--mirror GITDIR`: `git archive HEAD KernelBench`; never commit those files); every problem file of the
levels is loaded in parallel first (one process per core: the loader derives configurations on the meta
device, tens of seconds for a recurrent model, cached under $CUDAPERF_CACHE_DIR/derived_configs); then one
Evaluator (every visible GPU, one worker each) runs the levels in turn, each for at most `--budget-s`
seconds (no evaluation starts after that), storing results in `OUT/level<N>.jsonl` as they finish. Running
again with the same `--out` resumes: stored problems are not run again (HARNESS_ERROR and SKIPPED ones
are). Finally the per-level table is printed and written to `OUT/table.md`: problems, evaluated,
evaluable (CORRECT), failures by outcome, not reached in the budget, the median and p90 seconds per
problem (an evaluation's wall time in the evaluator, build wait included), and below it every problem
that is not CORRECT with its reason and the task property that explains it, if any (`task_property`: a
reference that disagrees with its own re-run fails its own self-check, and no candidate can do better).

    python3 scripts/kernelbench_self_check.py --kernelbench DIR [--mirror GITDIR] --out OUT
        [--levels 1 2 3] [--budget-s 160] [--seeds 1] [--timing-budget-ms 5]
    python3 scripts/kernelbench_self_check.py --out OUT --table-only   # the table of what is stored

Not covered: level 4 (Hugging Face models, downloads), C tasks, the torch.compile baseline.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaperf.results import ResultStore
from cudaperf.types import EvalResult, Outcome

REASON_CHARS = 140


def problem_files(kernelbench: Path, level: int) -> list[Path]:
    """The problem files of a level, in their numeric order (1_, 2_, ... 100_)."""
    files = [p for p in (kernelbench / f"level{level}").glob("*.py") if not p.name.startswith("_")]
    return sorted(files, key=lambda p: (int(m.group(1)) if (m := re.match(r"(\d+)_", p.name)) else 1 << 30,
                                        p.name))


def extract(mirror: Path, kernelbench: Path) -> None:
    """`git archive HEAD KernelBench` of the bare mirror into kernelbench's parent folder."""
    kernelbench.parent.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", f"--git-dir={mirror}", "archive", "HEAD", "KernelBench"],
                             capture_output=True, check=True)
    subprocess.run(["tar", "x", "-C", str(kernelbench.parent)], input=archive.stdout, check=True)
    if kernelbench.name != "KernelBench":
        (kernelbench.parent / "KernelBench").rename(kernelbench)


def _load(path: str):
    """A task, or the reason it does not load (runs in a pool process)."""
    from cudaperf.tasks import TaskError, load_task

    try:
        return load_task(path)
    except TaskError as exc:
        return exc.reason


def load_levels(kernelbench: Path, levels: list[int]) -> dict[int, list]:
    """{level: [(file, Task or reason)]}, loaded by one process per core."""
    files = {level: problem_files(kernelbench, level) for level in levels}
    flat = [str(f) for level in levels for f in files[level]]
    workers = max(1, min(len(flat), os.cpu_count() or 1))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        loaded = dict(zip(flat, pool.map(_load, flat, chunksize=1), strict=True))
    return {level: [(f, loaded[str(f)]) for f in files[level]] for level in levels}


def _load_failure(path: Path, reason: str) -> EvalResult:
    from cudaperf.evaluate import SELF_CHECK_ID

    return EvalResult(task_id=path.stem, solution_id=f"{SELF_CHECK_ID}/{path.stem}",
                      outcome=Outcome.HARNESS_ERROR, stage="load",
                      message=f"the task does not load: {reason}")


def run_levels(loaded: dict[int, list], out: Path, args: argparse.Namespace) -> None:
    from cudaperf.evaluate import Evaluator, TimingConfig, self_check_config, self_check_solution

    timing = TimingConfig(budget_ms=args.timing_budget_ms, warmup_ms=args.timing_budget_ms / 4,
                          baselines=("eager",), input_sets=args.input_sets)
    config = self_check_config(device=args.device, seeds=args.seeds, timing=timing)
    with Evaluator(config) as ev:
        for level, items in loaded.items():
            store = ResultStore(out / f"level{level}.jsonl")
            done = store.done()
            for path, task in items:
                if isinstance(task, str) and (path.stem, f"self-check/{path.stem}") not in done:
                    store.append(_load_failure(path, task))
            pairs = [(t, self_check_solution(t)) for _, t in items if not isinstance(t, str)]
            started = time.monotonic()
            count = 0
            for result in ev.evaluate_many(pairs, store=store, deadline_s=args.budget_s):
                count += 1
                print(f"level {level} {result.task_id}: {result.outcome.value} "
                      f"({result.stage_durations_s.get('total', 0.0):.1f} s)", flush=True)
            print(f"level {level}: {count} evaluated in {time.monotonic() - started:.0f} s", flush=True)


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def task_property(result: EvalResult) -> str:
    """What the task itself does that no candidate can change, when that explains a failed self-check:
    "reference nondeterministic" (the reference disagrees with its own re-run on a configuration the
    self-check failed: flag `task_nondeterministic`), else ""."""
    failed = {c.config for c in result.correctness if not c.correct}
    if any(f.code == "task_nondeterministic" and f.config in failed for f in result.flags):
        return "reference nondeterministic"
    return ""


def level_row(level: int, problems: int, results: list[EvalResult]) -> list[str]:
    seconds = [r.stage_durations_s["total"] for r in results if "total" in r.stage_durations_s]
    failures = Counter(r.outcome.value for r in results if r.outcome is not Outcome.CORRECT)
    failed = ", ".join(f"{k} {v}" for k, v in failures.most_common()) or "-"
    explained = Counter(task_property(r) for r in results if r.outcome is not Outcome.CORRECT)
    explained.pop("", None)
    if explained:
        failed += " (" + ", ".join(f"{v} {k}" for k, v in explained.most_common()) + ")"
    median = statistics.median(seconds) if seconds else None
    p90 = _quantile(seconds, 0.9)
    return [str(level), str(problems), str(len(results)), str(sum(r.correct for r in results)), failed,
            str(max(0, problems - len(results))), f"{median:.1f}" if median is not None else "-",
            f"{p90:.1f}" if p90 is not None else "-"]


def table(kernelbench: Path | None, out: Path, levels: list[int], args: argparse.Namespace) -> str:
    header = ["level", "problems", "evaluated", "evaluable (correct)", "failures by outcome",
              "not reached", "median s/problem", "p90 s/problem"]
    rows, failures = [], []
    for level in levels:
        results = ResultStore(out / f"level{level}.jsonl").load()
        problems = len(problem_files(kernelbench, level)) if kernelbench else len(results)
        rows.append(level_row(level, problems, results))
        failures += [(level, r) for r in results if not r.correct]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", (f"Self-check: each problem's reference as its candidate; timing against eager only "
              f"(`--baselines eager`, no torch.compile), {args.seeds} seed(s), timing budget "
              f"{args.timing_budget_ms:g} ms per function, {args.input_sets} input set(s); derived "
              "configurations included; seconds are each evaluation's wall time in the evaluator.")]
    if failures:
        lines += ["", "| level | problem | outcome | task property | stage | reason |", "|---" * 6 + "|"]
        for level, r in failures:
            reason = " ".join((r.message or "").split())[:REASON_CHARS].replace("|", "\\|")
            explained = task_property(r) or "-"
            cells = [str(level), r.task_id, r.outcome.value, explained, r.stage, reason]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench", type=Path, default=None, help="the KernelBench folder (level1...)")
    parser.add_argument("--mirror", type=Path, default=None, help="bare git mirror to extract it from")
    parser.add_argument("--out", type=Path, required=True, help="results folder (resumable)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--budget-s", type=float, default=160.0, help="per level: no evaluation starts after")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--timing-budget-ms", type=float, default=5.0)
    parser.add_argument("--input-sets", type=int, default=2)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a plumbing check")
    parser.add_argument("--table-only", action="store_true", help="print the table of what is stored")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.kernelbench and not args.kernelbench.is_dir() and args.mirror:
        extract(args.mirror, args.kernelbench)
    if not args.table_only:
        if not (args.kernelbench and args.kernelbench.is_dir()):
            parser.error("--kernelbench DIR (or --mirror GITDIR to extract it) is needed to run")
        os.environ.setdefault("CUDAPERF_CACHE_DIR", str(args.out / "cache"))
        started = time.monotonic()
        loaded = load_levels(args.kernelbench, args.levels)
        print(f"loaded {sum(len(v) for v in loaded.values())} problems in {time.monotonic() - started:.0f} s",
              flush=True)
        run_levels(loaded, args.out, args)
    text = table(args.kernelbench if args.kernelbench and args.kernelbench.is_dir() else None, args.out,
                 args.levels, args)
    (args.out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
