"""Write the evaluator's verdict on every adversarial fixture and honest solution, one JSON line each.

The verdict is what the adversarial suite asserts on: the outcome and the ERROR flag codes (sorted); the
stage that decided is recorded beside it. Running it before and after a change and comparing the two files
(`--compare OLD NEW`) shows whether the change moved any verdict, which fixtures are new, and which verdicts
were reached at another stage. Timing figures are left out: they differ between runs.

    python3 scripts/adversarial_verdicts.py --out verdicts.jsonl [--device cuda|none]
    python3 scripts/adversarial_verdicts.py --compare before.jsonl after.jsonl
    python3 scripts/adversarial_verdicts.py --out verdicts.jsonl --resume   (judge only what the file lacks)

With `--device none` (no GPU) the verdicts are those of the static gate and the build.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "adversarial"


def _constants(path: Path) -> dict:
    values = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return values


def _verdict_of(result) -> dict:
    from cudaperf.types import Severity

    return {"outcome": result.outcome.value, "stage": result.stage,
            "errors": sorted({f.code for f in result.flags if f.severity is Severity.ERROR})}


def run(out: Path, device: str, resume: bool = False) -> None:
    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
    from cudaperf.solutions import solution_from_text
    from cudaperf.tasks import load_tasks
    from cudaperf.tasks.examples import example_tasks_dir

    tasks = {t.task_id: t for d in (example_tasks_dir(), FIXTURES / "tasks") for t in load_tasks(d)}
    paths = sorted(FIXTURES.glob("hack_*.py")) + sorted((FIXTURES / "honest").glob("honest_*.py"))
    cache = tempfile.mkdtemp(prefix="verdicts-cache-")

    def config(policy=None):
        return EvalConfig(device=device, cache_dir=cache, policy=policy,
                          timing=TimingConfig(baselines=("eager",)), coverage=device == "cuda")

    rows = []
    done = _done(out) if resume else set()
    if not resume:
        out.write_text("")
    with Evaluator(config()) as ev:
        for path in paths:
            if (path.stem, "default") in done:
                continue
            meta = _constants(path)
            task = tasks[meta["TASK"]]
            result = ev.evaluate(task, solution_from_text(path.read_text(), path.stem, str(path)))
            rows.append({"fixture": path.stem, "variant": "default", **_verdict_of(result)})
            _emit(out, rows[-1])
    for path in paths:
        disabled = _constants(path).get("RUNTIME_DISABLE")
        if not disabled or (path.stem, "runtime_only") in done:
            continue
        with Evaluator(config(Policy(disabled_rules=tuple(disabled)))) as ev:
            task = tasks[_constants(path)["TASK"]]
            result = ev.evaluate(task, solution_from_text(path.read_text(), path.stem, str(path)))
        rows.append({"fixture": path.stem, "variant": "runtime_only", **_verdict_of(result)})
        _emit(out, rows[-1])


def _done(out: Path) -> set[tuple[str, str]]:
    """(fixture, variant) of the rows already in `out` (a run cut short, resumed)."""
    if not out.exists():
        return set()
    return {(r["fixture"], r["variant"]) for r in map(json.loads, out.read_text().splitlines()) if r}


def _emit(out: Path, row: dict) -> None:
    """Print a row and append it to the file at once, so a run cut short keeps what it judged."""
    print(json.dumps(row), flush=True)
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")


def _verdict(row: dict) -> tuple[str, list[str]]:
    """The compared part of a row: the outcome and the ERROR flag codes."""
    return row["outcome"], row["errors"]


def compare(old: Path, new: Path) -> int:
    def load(p: Path) -> dict:
        return {(r["fixture"], r["variant"]): r for r in map(json.loads, p.read_text().splitlines())}

    a, b = load(old), load(new)
    both = sorted(a.keys() & b.keys())
    changed = [k for k in both if _verdict(a[k]) != _verdict(b[k])]
    staged = [k for k in both if k not in changed and a[k]["stage"] != b[k]["stage"]]
    for k in changed:
        print(f"{k[0]} [{k[1]}]: {_verdict(a[k])} -> {_verdict(b[k])}")
    for k in staged:
        print(f"{k[0]} [{k[1]}]: same verdict, decided at stage {a[k]['stage']} -> {b[k]['stage']}")
    for k in sorted(b.keys() - a.keys()):
        print(f"{k[0]} [{k[1]}]: new fixture, {_verdict(b[k])}")
    for k in sorted(a.keys() - b.keys()):
        print(f"{k[0]} [{k[1]}]: missing from the new run")
    print(f"{len(both)} verdicts in both; {len(changed)} differ (outcome or error flags); "
          f"{len(staged)} decided at another stage; {len(b.keys() - a.keys())} new; "
          f"{len(a.keys() - b.keys())} missing")
    return 1 if changed or a.keys() - b.keys() else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cuda", choices=("cuda", "none"))
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    parser.add_argument("--resume", action="store_true", help="keep the rows in --out; judge the rest")
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("--out is needed unless --compare is given")
    run(args.out, args.device, args.resume)
    return 0


if __name__ == "__main__":
    sys.exit(main())
