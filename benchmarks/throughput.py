"""Evaluations per minute on one GPU: cudaperf (fast format, build pool, sandboxed worker) against a
KernelBench-style harness (in-process, sequential, `load_inline`), same kernels, one invocation.

The KernelBench-style baseline is implemented here, after KernelBench's documented method: the solution
module is exec'd in the evaluating process (its `load_inline` builds the extension), 5 correctness trials
on fresh inputs with allclose(1e-4), then 3 warm-up and 100 timed calls with CUDA events and an L2 flush.
It does less work per candidate than cudaperf (one input configuration, no live baselines, no
anti-cheat), which favours the baseline.

Because each `load_inline` build takes about a minute, the baseline runs on the first `--kb-subset`
candidates; its rate (evaluations per minute) is computed over those and compared with cudaperf's rate
over all candidates. Every build is cold: each candidate's CUDA text is distinct (see common.variant).

cudaperf's main passes time the eager baseline live with every candidate (work the baseline harness does
not do); a last pass adds the torch.compile baseline, whose first compile per task and configuration is
the costliest step of a cold evaluation. Rows are written after each phase.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import example_pairs, write_result


def run_cudaperf(pairs, label: str, baselines: tuple[str, ...], warm_pairs=()) -> list[dict]:
    """Rows for the cold pass (a fresh Evaluator: worker start, first torch.compile of every task and
    configuration, references) and, when `warm_pairs` is given, a second pass of as many new candidates
    on the same Evaluator (the steady state of an RL run, where every task is seen many times)."""
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig

    rows = []
    started = time.perf_counter()  # the cold pass includes starting the worker and the build pool
    with Evaluator(EvalConfig(device="cuda", timing=TimingConfig(baselines=baselines))) as ev:
        for phase, batch in (("cold", pairs), ("warm", warm_pairs)):
            if batch:
                rows.append(_timed_pass(ev, batch, f"{label}, {phase}", started))
                started = None
    return rows


def _timed_pass(ev, pairs, label: str, started: float | None) -> dict:
    t0 = started if started is not None else time.perf_counter()
    results = []
    for r in ev.evaluate_many(pairs):  # one line per result, so a killed run still shows its progress
        results.append(r)
        stages = " ".join(f"{k}={v:.2f}" for k, v in sorted(r.stage_durations_s.items()))
        print(f"  [{time.perf_counter() - t0:6.1f} s] {r.solution_id}: {r.outcome.value} {stages}",
              flush=True)
    wall = time.perf_counter() - t0
    outcomes = {}
    for r in results:
        outcomes[r.outcome.value] = outcomes.get(r.outcome.value, 0) + 1
    return {"label": label, "n": len(results), "wall_s": wall, "evals_per_min": 60 * len(results) / wall,
            "outcomes": outcomes,
            "failed": [(r.solution_id, r.outcome.value, r.message[:300]) for r in results if not r.correct]}


def _load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def kb_style_eval(task, solution, workdir: Path) -> dict:
    """One KernelBench-style evaluation, in this process."""
    import torch

    t0 = time.perf_counter()
    problem = _load_module(task.path, f"kbtask_{solution.solution_id.replace('-', '_')}")
    sol_path = workdir / f"{solution.solution_id.replace('-', '_')}.py"
    sol_path.write_text(solution.source)
    cand = _load_module(str(sol_path), sol_path.stem)  # load_inline builds here
    build_s = time.perf_counter() - t0
    init = problem.get_init_inputs()
    torch.manual_seed(42)
    ref = problem.Model(*init).cuda()
    torch.manual_seed(42)
    new = cand.ModelNew(*init).cuda()
    correct = True
    for trial in range(5):
        torch.manual_seed(trial)
        inputs = [x.cuda() if hasattr(x, "cuda") else x for x in problem.get_inputs()]
        with torch.no_grad():
            correct &= bool(torch.allclose(ref(*inputs), new(*inputs), atol=1e-4, rtol=1e-4))
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
    times = []
    with torch.no_grad():
        for i in range(103):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            new(*inputs)
            e.record()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(s.elapsed_time(e))
    return {"solution": solution.solution_id, "correct": correct, "build_s": build_s,
            "mean_ms": statistics.mean(times[1:]), "total_s": time.perf_counter() - t0}


def run_kb_style(pairs) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(tmp) / "ext")  # cold: nothing cached
        t0 = time.perf_counter()
        rows = []
        for task, sol in pairs:
            try:
                rows.append(kb_style_eval(task, sol, Path(tmp)))
            except Exception as exc:  # the baseline's own failure is recorded, not hidden
                rows.append({"solution": sol.solution_id, "error": f"{type(exc).__name__}: {exc}"[:300]})
            print(f"  kb-style {sol.solution_id}: {rows[-1]}", flush=True)
        wall = time.perf_counter() - t0
    return {"label": "KernelBench-style (in-process, sequential, load_inline)", "n": len(pairs),
            "wall_s": wall, "evals_per_min": 60 * len(pairs) / wall, "rows": rows}


def _ratio_table(rows: list[dict], kb: dict | None) -> str:
    lines = ["| harness | candidates | wall s | evals/min | vs KernelBench-style |", "|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['evals_per_min'] / kb['evals_per_min']:.1f}x" if kb else "n/a"
        lines.append(f"| {r['label']} | {r['n']} | {r['wall_s']:.1f} | {r['evals_per_min']:.2f} | {ratio} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=24, help="candidates for cudaperf (fast format)")
    ap.add_argument("--kb-subset", type=int, default=2, help="candidates for the KernelBench-style run")
    ap.add_argument("--inline-n", type=int, default=6, help="candidates for cudaperf's load_inline path")
    ap.add_argument("--baselines", default="eager",
                    help="baselines cudaperf times live per candidate in the main passes (comma-separated)")
    ap.add_argument("--compile-n", type=int, default=3,
                    help="candidates for a last cold pass with eager and torch.compile baselines (0: none)")
    ap.add_argument("--no-warm", dest="warm", action="store_false",
                    help="skip the second (warm) pass of the fast format")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    baselines = tuple(b for b in args.baselines.split(",") if b)
    rows: list[dict] = []
    kb: dict | None = None

    def save() -> None:  # after every phase, so a run cut short still leaves what it measured
        fast_cold = rows[0]["evals_per_min"] if rows else None
        write_result(args.out, {"rows": rows, "kb_style": kb, "ratio_fast_cold_vs_kb":
                                fast_cold / kb["evals_per_min"] if kb and fast_cold else None})
        print(_ratio_table(rows + ([kb] if kb else []), kb), flush=True)

    both = example_pairs("fast", 2 * args.n)  # distinct variants: the warm pass builds new candidates too
    rows += run_cudaperf(both[: args.n], f"cudaperf fast format (baselines {'+'.join(baselines)})", baselines,
                         warm_pairs=both[args.n:] if args.warm else ())
    save()
    inline_pairs = example_pairs("inline", max(args.inline_n, args.kb_subset))
    kb = run_kb_style(inline_pairs[: args.kb_subset])
    save()
    rows += run_cudaperf(inline_pairs[: args.inline_n], "cudaperf load_inline (build pool)", baselines)
    save()
    if args.compile_n:
        extra = example_pairs("fast", 2 * args.n + args.compile_n)[2 * args.n:]
        rows += run_cudaperf(extra, "cudaperf fast format (baselines eager+compile)", ("eager", "compile"))
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
