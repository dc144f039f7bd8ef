"""The RL evaluation mode on C->CUDA tasks, on a machine without a GPU: where a refereed C job's time goes,
and evaluations per minute.

Why a benchmark of its own: `eval_modes.py --cpu` has no C tasks (the dataset's C candidates are CUDA
kernels, which a CPU machine cannot run), and on the GPU the C candidates held the RL mode's exclusive turn
longest (H100, session 26: a C timing stage 2.7-3.8 s against 0.24-0.43 s for a PyTorch one). Here three
C tasks declared in this file (elementwise square, saxpy with an inout array, a three-point stencil), each
with a 16.8M-element configuration beside two small ones, are judged by CPU-mode workers with the referee;
the candidates are pure PyTorch (torch ops allowed): per task a correct one, a correct slower one, and a
wrong one. The serial C references (inputs drawn, the C reference run) are the host work a refereed C job
does for timing, as on a GPU machine.

A run: an Evaluator in the RL mode (`--workers` CPU workers), a warm pass (one correct candidate per task:
the workers' start, the carriers; with `--cold-tasks` only the workers' start, so the timed pass meets
every task fresh and its first candidates carry, as a comparison round or an RL step does), then the
timed pass over every candidate, `--copies` times each. Printed per run: evaluations per minute, the
medians per timed candidate of the stages that hold the turn or wait for it (`timing_prep` where the code
has it, `timing`, `gate_wait`), the candidates' summed wait for their task's baseline carrier
(`plan_wait`) against their summed evaluation time, and the referees' C references over the timed pass:
milliseconds computing them and fetching them from the referees' shared store, and how many were computed
and how many that store served. Alternate two trees (the one before a change through PYTHONPATH) to
compare them.

    python benchmarks/c_rl_cpu.py --out FILE.json [--workers 2 --copies 2 --cold-tasks]

`--weak K` makes the batch a weak policy's: per task and copy K wrong candidates, then its right one (the
baselines' plan before the job against at the go-ahead on it: `--plan-before-job`, `--plan-at-go-ahead`).

`--gemv` replaces the three tasks with one shaped like the dataset's gemv family (an 8192 x 8192 double
matrix on its largest configuration): the host work a refereed C job does before and inside its turn
when a configuration's sets pass the host budget.

Not covered: CUDA (no kernel runs; the naive CUDA port is unavailable in CPU mode), the default mode.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import referee_spent, write_result

LARGE_N = 1 << 24  # 16.8M elements, the size of the dataset C tasks' large configurations
STAGES = ("correctness", "timing_prep", "timing", "gate_wait", "plan_wait", "total")


def c_tasks() -> list:
    """(task record, {kind: candidate source}) for the three C tasks of this benchmark."""
    from cudaperf.tasks.ctask import ArrayGen, CConfig, CParam, CTask, ParamKind, to_task
    from cudaperf.types import Tolerance

    def configs(**scalars) -> tuple:
        return (CConfig("small", {"n": 1000, **scalars}), CConfig("odd", {"n": 4099, **scalars}),
                CConfig("large", {"n": LARGE_N, **scalars}))

    arr = lambda name, kind: CParam(name, "float", kind, "n")  # noqa: E731 - a one-line helper
    n = CParam("n", "int", ParamKind.SCALAR)
    square = CTask(
        task_id="c_bench_square", family="bench", entry="square",
        source="void square(const float* x, float* out, int n) {\n"
               "    for (int i = 0; i < n; ++i) out[i] = x[i] * x[i];\n}\n",
        params=(arr("x", ParamKind.IN), arr("out", ParamKind.OUT), n),
        inputs={"x": ArrayGen("normal", 0, 1)}, configs=configs(), tolerance=Tolerance(1e-5, 1e-5))
    saxpy = CTask(
        task_id="c_bench_saxpy", family="bench", entry="saxpy",
        source="void saxpy(const float* x, float* y, float a, int n) {\n"
               "    for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i];\n}\n",
        params=(arr("x", ParamKind.IN), arr("y", ParamKind.INOUT), CParam("a", "float", ParamKind.SCALAR), n),
        inputs={"x": ArrayGen("normal", 0, 1), "y": ArrayGen("uniform", -1, 1)}, configs=configs(a=2.0),
        tolerance=Tolerance(1e-5, 1e-5))
    stencil = CTask(
        task_id="c_bench_stencil3", family="bench", entry="stencil3",
        source="void stencil3(const float* x, float* out, int n) {\n"
               "    for (int i = 0; i < n; ++i) {\n"
               "        float l = i > 0 ? x[i - 1] : 0.0f, r = i + 1 < n ? x[i + 1] : 0.0f;\n"
               "        out[i] = l + x[i] + r;\n    }\n}\n",
        params=(arr("x", ParamKind.IN), arr("out", ParamKind.OUT), n),
        inputs={"x": ArrayGen("uniform", -1, 1)}, configs=configs(), tolerance=Tolerance(1e-5, 1e-5))
    sources = {
        "square": {"right": "def square(x, out, n):\n    out.copy_(x * x)\n",
                   "slower": "def square(x, out, n):\n    out.copy_((x * x + x * x) * 0.5)\n",
                   "wrong": "def square(x, out, n):\n    out.copy_(x * x + 1.0)\n"},
        "saxpy": {"right": "def saxpy(x, y, a, n):\n    y.copy_(a * x + y)\n",
                  "slower": "def saxpy(x, y, a, n):\n    y.copy_((a * x + y + a * x + y) * 0.5)\n",
                  "wrong": "def saxpy(x, y, a, n):\n    y.copy_(a * x - y)\n"},
        "stencil3": {"right": STENCIL_RIGHT,
                     "slower": STENCIL_RIGHT.replace("out.copy_(s)", "out.copy_(s + s - s)"),
                     "wrong": STENCIL_RIGHT.replace("out.copy_(s)", "out.copy_(s * 2)")},
    }
    return [(to_task(t), sources[t.entry]) for t in (square, saxpy, stencil)]


STENCIL_RIGHT = ("import torch.nn.functional as F\n\n"
                 "def stencil3(x, out, n):\n"
                 "    p = F.pad(x, (1, 1))\n"
                 "    s = p[:-2] + p[1:-1] + p[2:]\n"
                 "    out.copy_(s)\n")


def gemv_task() -> list:
    """(task record, {kind: candidate source}) of a task shaped like the dataset's gemv family, whose
    largest configuration is an 8192 x 8192 double matrix (512 MB a set; with this benchmark's three
    correctness seeds, no timing-only set and 4 unseen ones, 2 GiB, at a 2-GiB host budget before the
    turn; with RL's one seed, 6 sets)."""
    from cudaperf.tasks.ctask import ArrayGen, CConfig, CParam, CTask, ParamKind, to_task
    from cudaperf.types import Tolerance

    gemv = CTask(
        task_id="c_bench_gemv", family="bench", entry="gemv",
        source="void gemv(const double* a, const double* xv, double* c, int m, int kk) {\n"
               "    for (int i = 0; i < m; ++i) {\n        double s = 0.0;\n"
               "        for (int j = 0; j < kk; ++j) s += a[(long)i * kk + j] * xv[j];\n"
               "        c[i] = s;\n    }\n}\n",
        params=(CParam("a", "double", ParamKind.IN, "m*kk"), CParam("xv", "double", ParamKind.IN, "kk"),
                CParam("c", "double", ParamKind.OUT, "m"), CParam("m", "int", ParamKind.SCALAR),
                CParam("kk", "int", ParamKind.SCALAR)),
        inputs={"a": ArrayGen("uniform", -1, 1), "xv": ArrayGen("uniform", -1, 1)},
        configs=(CConfig("small", {"m": 64, "kk": 100}), CConfig("large", {"m": 8192, "kk": 8192}),
                 CConfig("odd", {"m": 3001, "kk": 2047})),
        tolerance=Tolerance(1e-8, 1e-8))
    right = "def gemv(a, xv, c, m, kk):\n    c.copy_(a.view(m, kk) @ xv)\n"
    sources = {"right": right,
               "slower": right.replace("c.copy_(a.view(m, kk) @ xv)",
                                       "c.copy_((a.view(m, kk) @ xv + a.view(m, kk) @ xv) * 0.5)"),
               "wrong": right.replace("@ xv)", "@ xv + 1.0)")}
    return [(to_task(gemv), sources)]


def pairs(tasks: list, copies: int, label: str, weak: int = 0) -> list:
    """Each task's candidates together, `copies` times; with `weak`, a weak policy's group instead: per
    task and copy `weak` wrong candidates (distinct texts) before its one right one."""
    from cudaperf.types import Solution, SolutionFormat

    out = []
    for copy in range(copies):
        for task, sources in tasks:
            kinds = ([("wrong", k) for k in range(weak)] + [("right", 0)] if weak
                     else [(kind, 0) for kind in sources])
            for kind, k in kinds:
                sid = f"{task.task_id}/{kind}/{copy}" + (f".{k}" if weak else "")
                text = f"{sources[kind]}# {label} {copy} {k}\n"
                out.append((task, Solution(sid, text, SolutionFormat.FAST)))
    return out


def one_run(label: str, args) -> dict:
    from cudaperf.anticheat.policy import Policy
    from cudaperf.eval_modes import RlSettings
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig

    tasks = gemv_task() if args.gemv else c_tasks()
    store = ({} if args.shared_c_references_bytes is None  # a tree without the setting runs too
             else {"shared_c_references_bytes": args.shared_c_references_bytes})
    config = EvalConfig(device="cpu", mode="rl", timing=TimingConfig(baselines=("eager",)), analyze=False,
                        seeds=args.seeds,
                        policy=Policy(allow_torch_ops=True), **store,
                        # the setting named only when asked: a tree from before it runs this script too
                        rl=RlSettings(cpu_workers=args.workers, task_affinity=args.task_affinity,
                                      **_plan_setting(args)))
    with Evaluator(config) as ev:
        ev._workers.warm_up()
        if not args.cold_tasks:
            warm = [p for p in pairs(tasks, 1, label + "-warm") if "/right/" in p[1].solution_id]
            list(ev.evaluate_many(warm))
        t0 = time.perf_counter()
        results = list(ev.evaluate_many(pairs(tasks, args.copies, label, args.weak)))
        wall_s = time.perf_counter() - t0
        store_report = getattr(ev, "reference_store_report", {})  # over both passes
    timed = [r for r in results if r.timings]
    spent = referee_spent(results)
    return {"label": label, "n": len(results), "timed": len(timed), "wall_s": wall_s,
            "evals_per_min": 60.0 * len(results) / wall_s,
            "outcomes": {r.solution_id: r.outcome.value for r in results},
            "timed_stage_medians_s": {k: _median([r.stage_durations_s.get(k) for r in timed])
                                      for k in STAGES},
            # the referees' time computing references, summed over the run (cold tasks cost it)
            "referee_reference_ms": round(sum(s.get("reference", 0.0) for s in spent), 1),
            # every candidate's wait for its task's carrier, and every candidate's evaluation time, summed
            "plan_wait_sum_s": sum(r.stage_durations_s.get("plan_wait", 0.0) for r in results),
            "total_sum_s": sum(r.stage_durations_s.get("total", 0.0) for r in results),
            "carriers": sum(r.environment.get("baselines", "").startswith("timed") for r in results),
            # fetching from the referees' shared store (waits for another referee's computation included),
            # and its own cost around a computation (asking, publishing); then how many references the
            # referees computed, and how many the shared store served them
            "referee_reference_shared_ms": round(sum(s.get("reference_shared", 0.0) for s in spent), 1),
            "referee_reference_store_ms": round(sum(s.get("reference_store", 0.0) for s in spent), 1),
            "referee_reference_counts": {k: int(sum(s.get(f"reference_{k}_count", 0) for s in spent))
                                         for k in ("computed", "shared")},
            "reference_store": store_report,
            "stages_s": {r.solution_id: {k: round(v, 4) for k, v in r.stage_durations_s.items()}
                         for r in results}}


def _plan_setting(args) -> dict:
    """`RlSettings.plan_at_go_ahead` when named (a tree from before the setting runs with neither flag)."""
    if args.plan_at_go_ahead or args.plan_before_job:
        return {"plan_at_go_ahead": not args.plan_before_job}
    return {}


def _median(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--copies", type=int, default=2,
                        help="each candidate this many times (distinct texts)")
    parser.add_argument("--label", default="run")
    parser.add_argument("--task-affinity", action="store_true",
                        help="RlSettings.task_affinity: each batch thread on one worker, its last task first")
    parser.add_argument("--plan-at-go-ahead", action="store_true",
                        help="RlSettings.plan_at_go_ahead: the baselines' plan at each candidate's go-ahead")
    parser.add_argument("--plan-before-job", action="store_true",
                        help="RlSettings.plan_at_go_ahead=False: the plan before each candidate's job")
    parser.add_argument("--weak", type=int, default=0,
                        help="a weak policy's batch: per task and copy this many wrong candidates, then "
                             "its right one (instead of one right, one slower, one wrong)")
    parser.add_argument("--cold-tasks", action="store_true",
                        help="no warm pass of candidates: the timed pass's first candidates carry")
    parser.add_argument("--shared-c-references-bytes", type=int, default=None,
                        help="EvalConfig.shared_c_references_bytes (0: each referee computes its own); "
                             "unset: the tree's default")
    parser.add_argument("--seeds", type=int, default=3,
                        help="correctness seeds (EvalConfig.seeds; RL's rollouts use 1, RlConfig.eval_seeds)")
    parser.add_argument("--gemv", action="store_true",
                        help="the gemv-shaped task alone (512-MB sets on its largest configuration), in "
                             "place of the three tasks")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    row = one_run(args.label, args)
    medians = ", ".join(f"{k} {v:.3f}" for k, v in row["timed_stage_medians_s"].items() if v is not None)
    print(f"{row['label']}: {row['evals_per_min']:.1f} evaluations/min ({row['n']} in {row['wall_s']:.1f} s, "
          f"{row['timed']} timed, {row['carriers']} carriers); timed candidates' median s: {medians}; "
          f"referees' references {row['referee_reference_ms']:.0f} ms computing, "
          f"{row['referee_reference_shared_ms']:.0f} ms served ({row['referee_reference_counts']}); "
          f"plan_wait {row['plan_wait_sum_s']:.1f} of {row['total_sum_s']:.1f} s summed", flush=True)
    wrong = {k: v for k, v in row["outcomes"].items() if (v == "correct") == ("/wrong/" in k)}
    if wrong:
        print(f"unexpected outcomes: {wrong}", flush=True)
    if args.out:
        write_result(args.out, {"row": row})


if __name__ == "__main__":
    main()
