"""The two evaluation modes side by side, same candidates, one run: evaluations per minute, repeatability of
the speedups, the width of the timing's confidence interval, and whether the verdicts agree.

Candidates (GPU form): dataset tasks of both kinds (PyTorch→CUDA and C→CUDA, round-robin over their
families, from the task index at seed 0) with every implementation the dataset generates for them (fast
format; the C naive port is the baseline, not a candidate), and failures mixed in: per task a wrong
kernel (thread 0 of block 0 returns before writing, in a kernel with no barrier or shuffle, so it cannot
hang), and on every third task a CUDA build error, a candidate that raises on import and a Python syntax
error. `--cpu` (the small form, for a machine without a GPU): CPU-mode workers, dataset PyTorch tasks
cut to their `small` configuration, pure-PyTorch candidates (the task's own model as `ModelNew`, a slower
copy that computes twice, a wrong one, one that raises, a syntax error; torch ops allowed), the eager
baseline only.

Each repeat runs the default mode and the RL mode (once per `--rl-workers` count: arms rl-wN), in rotating
order, each on a fresh Evaluator with its own copy of the candidates (a comment in the CUDA text differs per
run, so every build is cold and overlaps with the evaluation). A run is an untimed warm pass (the workers'
start, and one correct candidate per task: in the RL mode it carries the task's baselines, in the default mode
it warms the worker's torch.compile and reference caches; with `--cold-tasks` the workers' start alone, so
the timed pass's first candidates of each task carry, as in a comparison round), then the timed pass over
every candidate. Printed:
per mode the median evaluations per minute, the median |Δ| of each candidate's speedups between repeats (Δ =
s_r / s_0 - 1), the median 95% confidence half-width of the candidates' medians
(`eval_modes.median_ci95_rel`), the RL mode's schedule (passes, carriers, gate waits, baseline drift, and the
timed pass's wall time per state of the GPU gate: free, shared, draining, exclusive), and every candidate
whose outcome differs between runs (there should be none). JSON with everything goes to `--out`.

    python benchmarks/eval_modes.py --cpu --repeats 2 --torch-tasks 4 --out FILE.json     # CPU machine
    python benchmarks/eval_modes.py --repeats 1 --out FILE.json --cache-dir DIR           # H200, call 1
    python benchmarks/eval_modes.py --repeats 1 --out FILE.json --cache-dir DIR --append  # H200, call 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import referee_spent, write_result

STAGES = ("build_wait", "setup", "reference", "correctness", "timing_prep", "timing", "coverage",
          "check_pass", "gate_wait", "plan_wait", "total")  # medians of these per run go to the JSON
WRONG_GUARD = "if (blockIdx.x == 0 && threadIdx.x == 0) return;  // benchmark: a wrong kernel"
BARRIERS = re.compile(r"__syncthreads|_sync\s*\(|__syncwarp|cooperative_groups|grid\.sync")


# -- candidates -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Candidate:
    task_index: int
    solution_id: str
    source: str
    kind: str  # "right", "slow", "wrong", "build_error", "raises", "syntax"


def dataset_tasks(n_torch: int, n_c: int, small_only: bool = False) -> list:
    """`n_torch` PyTorch and `n_c` C tasks of the index (seed 0), round-robin over their families."""
    from cudaperf.datasets import registry
    from cudaperf.types import TaskKind

    chosen = []
    for kind, n in ((TaskKind.PYTORCH, n_torch), (TaskKind.C, n_c)):
        by_family: dict[str, list] = {}
        for g in registry.build_index(0, kinds=(kind,)):
            by_family.setdefault(g.family, []).append(g)
        rows = list(by_family.values())
        picked = [rows[i % len(rows)][i // len(rows)] for i in range(n)
                  if i // len(rows) < len(rows[i % len(rows)])]
        chosen += [(g, _task_record(g, small_only)) for g in picked]
    return chosen


def _task_record(generated, small_only: bool):
    from cudaperf.datasets import registry
    from cudaperf.tasks import task_from_source
    from cudaperf.tasks.ctask import from_json, to_task
    from cudaperf.types import TaskKind

    if generated.kind is TaskKind.PYTORCH:
        task = task_from_source(generated.text, generated.task_id)
        if small_only:  # the CPU form: the smallest declared configuration only
            task = dataclasses.replace(task, configs=task.configs[:1])
        return task
    naive = next((i.source for i in registry.implementations(generated) if i.baseline), None)
    return to_task(from_json(generated.text), naive_cuda=naive)


def gpu_candidates(tasks: list) -> list[Candidate]:
    from cudaperf.datasets import registry

    out = []
    for ti, (generated, task) in enumerate(tasks):
        impls = [i for i in registry.implementations(generated) if not i.baseline]
        out += [Candidate(ti, f"{task.task_id}/{i.strategy}", i.source, "right") for i in impls]
        plain = next((i for i in impls if not BARRIERS.search(i.source)), None)
        if plain is not None:
            out.append(Candidate(ti, f"{task.task_id}/wrong", _in_kernel(plain.source, WRONG_GUARD), "wrong"))
        if ti % 3 == 0 and impls:
            base = impls[0].source
            out += [Candidate(ti, f"{task.task_id}/build_error", _in_kernel(base, "int broken = ;"),
                              "build_error"),
                    Candidate(ti, f"{task.task_id}/raises",
                              base + "\nraise RuntimeError('benchmark: fails on import')\n", "raises"),
                    Candidate(ti, f"{task.task_id}/syntax", base.replace("def ", "def (", 1), "syntax")]
    return out


def copies(candidates: list[Candidate], k: int) -> list[Candidate]:
    """Each candidate `k` times (ids `.../copy-j`, texts made distinct), in rounds: every candidate's first
    copy, then every second, ...: a longer stream per task, as an RL run gives its tasks (the RL mode's
    carriers and drift only show over many timed candidates of a task)."""
    if k <= 1:
        return candidates
    return [Candidate(c.task_index, f"{c.solution_id}/copy-{j}", _marked(c.source, f"copy {j}"), c.kind)
            for j in range(k) for c in candidates]


def _marked(source: str, text: str) -> str:
    """`source` with a comment saying `text`: a line of CUDA before the first kernel, where there is one
    (the kernel's text, and so its build, differs), else a Python line at the end."""
    at = source.find("__global__")
    if at < 0:
        return source + f"\n# {text}\n"
    line = source.rfind("\n", 0, at) + 1
    return source[:line] + f"// {text}\n" + source[line:]


def _in_kernel(source: str, line: str) -> str:
    """`line` as the first statement of the first `__global__` function's body."""
    at = source.find("__global__")
    brace = source.find("{", at)
    return source[:brace + 1] + f"\n    {line}\n" + source[brace + 1:]


def cpu_candidates(tasks: list) -> list[Candidate]:
    out = []
    for ti, (_, task) in enumerate(tasks):
        own = task.source.replace("class Model(", "class ModelNew(")
        slow = own.replace("    def forward(self", "    def forward(self, *args):\n"
                           "        self._forward(*args)\n        return self._forward(*args)\n\n"
                           "    def _forward(self", 1)
        wrong = own.replace("    def forward(self", "    def forward(self, *args):\n"
                            "        return self._forward(*args) * 1.01 + 0.01\n\n    def _forward(self", 1)
        raises = own.replace("    def forward(self", "    def forward(self, *args):\n"
                             "        raise RuntimeError('benchmark: fails')\n\n    def _forward(self", 1)
        out += [Candidate(ti, f"{task.task_id}/own", own, "right"),
                Candidate(ti, f"{task.task_id}/slow", slow, "slow"),
                Candidate(ti, f"{task.task_id}/wrong", wrong, "wrong"),
                Candidate(ti, f"{task.task_id}/raises", raises, "raises")]
        if ti % 2 == 0:
            out.append(Candidate(ti, f"{task.task_id}/syntax", own.replace("def ", "def (", 1), "syntax"))
    return out


def pairs_for_run(tasks: list, candidates: list[Candidate], label: str) -> list:
    """(Task, Solution) per candidate, the text made distinct for this run (cold builds), ids unchanged."""
    from cudaperf.solutions import solution_from_text

    return [(tasks[c.task_index][1], solution_from_text(_marked(c.source, f"eval_modes run {label}"),
                                                        c.solution_id))
            for c in candidates]


# -- one run ----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RlArm:
    """One run of the RL mode in a repeat: its workers per GPU, its ranking budget when not the library's
    (`RlSettings.budget_ms`; the warm-up then half of it), whether jobs leave the gate at the worker's
    result (`RlSettings.release_at_result`), task affinity, the baselines' plan at the go-ahead
    (`RlSettings.plan_at_go_ahead`), whether the referees share one store of C references
    (`EvalConfig.shared_c_references_bytes`; on by default) and whether only the baselines a reward reads
    are timed (`cudaperf.reward.SPEEDUP_BASELINES`, what `RlConfig.timing_baselines='reward'` times: no
    serial C, so a C task's candidates time the naive port live and none carries)."""

    workers: int
    budget_ms: float | None = None
    release_at_result: bool = False
    task_affinity: bool = False
    plan_at_go_ahead: bool = False
    shared_references: bool = True
    reward_baselines: bool = False

    @staticmethod
    def parse(text: str) -> RlArm:
        """"W" or "W/B", then any of the letters "r", "a", "p", "n" and "w": W workers, a B ms budget, the
        gate left at the worker's result (`RlSettings.release_at_result`), task affinity
        (`RlSettings.task_affinity`), the plan at the go-ahead (`RlSettings.plan_at_go_ahead`), no shared
        store of C references (each referee computes its own), the reward's baselines only."""
        head = text.strip().rstrip("rapnw")
        letters = text.strip()[len(head):]
        workers, _, budget = head.partition("/")
        return RlArm(int(workers), float(budget) if budget else None, "r" in letters, "a" in letters,
                     "p" in letters, "n" not in letters, "w" in letters)

    @property
    def name(self) -> str:
        return (f"rl-w{self.workers}" + (f"-b{self.budget_ms:g}" if self.budget_ms is not None else "")
                + ("-r" if self.release_at_result else "") + ("-a" if self.task_affinity else "")
                + ("-p" if self.plan_at_go_ahead else "") + ("" if self.shared_references else "-n")
                + ("-w" if self.reward_baselines else ""))


def arms(rl: list[RlArm]) -> list[tuple[str, str, RlArm | None]]:
    """(arm, mode, RL settings) per arm: the default mode, and the RL mode once per `RlArm` (named "rl"
    when there is one, `RlArm.name` otherwise)."""
    named = [("rl" if len(rl) == 1 else arm.name, "rl", arm) for arm in rl]
    return [("default", "default", None), *named]


def _rl_settings(args, arm: RlArm | None):
    from cudaperf.eval_modes import RlSettings

    budget = {} if arm is None or arm.budget_ms is None else {
        "budget_ms": arm.budget_ms, "warmup_ms": min(RlSettings().warmup_ms, arm.budget_ms / 2)}
    workers = arm.workers if arm is not None else None
    return RlSettings(workers_per_gpu=workers or args.workers_per_gpu,
                      cpu_workers=workers or args.cpu_workers,
                      drift_every=args.drift_every or RlSettings().drift_every,
                      live_anchor=args.live_anchor,
                      release_at_result=arm is not None and arm.release_at_result,
                      task_affinity=arm is not None and arm.task_affinity,
                      plan_at_go_ahead=arm is not None and arm.plan_at_go_ahead, **budget)


def one_run(mode: str, label: str, tasks, candidates, args, arm: RlArm | None = None) -> dict:
    from cudaperf.anticheat.policy import Policy
    from cudaperf.eval_modes import median_ci95_rel
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
    from cudaperf.execute.job_profile import profile_into

    baselines = tuple(b for b in args.baselines.split(",") if b) if args.baselines else (
        ("eager",) if args.cpu else TimingConfig().baselines)
    if arm is not None and arm.reward_baselines:
        from cudaperf.reward import SPEEDUP_BASELINES

        baselines = SPEEDUP_BASELINES
    config = EvalConfig(device="cpu" if args.cpu else "cuda", mode=mode, cache_dir=args.cache_dir,
                        timing=TimingConfig(baselines=baselines), analyze=not args.cpu,
                        policy=Policy(allow_torch_ops=True) if args.cpu else None,
                        rl=_rl_settings(args, arm),
                        **({} if arm is None or arm.shared_references else {"shared_c_references_bytes": 0}))
    pairs = pairs_for_run(tasks, candidates, label)
    warm_ids = {next(c.solution_id for c in candidates if c.task_index == ti and c.kind == "right")
                for ti in range(len(tasks))}
    profile_into(args.profile_dir, label + "-warm")
    started = time.perf_counter()
    with Evaluator(config) as ev:
        if ev._workers is not None:
            ev._workers.warm_up()
        warm = [p for p in pairs_for_run(tasks, candidates, label + "-warm") if p[1].solution_id in warm_ids]
        list(ev.evaluate_many([] if args.cold_tasks else warm))
        warm_s = time.perf_counter() - started
        profile_into(args.profile_dir, label)  # the warm pass's jobs went to label-warm
        before = ev.mode_report  # the warm pass's share, taken off below
        cpu0 = time.process_time()  # the evaluating process's CPU time, all its threads
        t0 = time.perf_counter()
        results, finished_s = [], {}
        for r in ev.evaluate_many(pairs):
            results.append(r)
            finished_s[r.solution_id] = round(time.perf_counter() - t0, 4)
            if args.verbose:
                print(f"  [{time.perf_counter() - t0:6.1f} s] {r.solution_id}: {r.outcome.value}", flush=True)
        wall_s = time.perf_counter() - t0
        parent_cpu_s = time.process_time() - cpu0
        report = ev.mode_report
        store = getattr(ev, "reference_store_report", {})  # both passes: computed, served, waited...
    report = timed_pass_share(report, before)
    cis = [median_ci95_rel(t.candidate) for r in results for t in r.timings]
    return {"mode": mode, "label": label, "n": len(results), "wall_s": wall_s, "warm_pass_s": warm_s,
            "evals_per_min": 60.0 * len(results) / wall_s,
            "parent_cpu_s": parent_cpu_s,  # near wall_s: the evaluating process (its GIL) is the limit
            "outcomes": {r.solution_id: r.outcome.value for r in results},
            "messages": {r.solution_id: r.message[:200] for r in results if r.outcome.value != "correct"},
            "speedups": {r.solution_id: r.speedups for r in results if r.speedups},
            "through_anchor": {r.solution_id: json.loads(r.environment["speedups_through_anchor"])
                               for r in results if "speedups_through_anchor" in r.environment},
            "ci95_rel_median": _median([c for c in cis if c is not None]),
            "samples_median": _median([t.candidate.n_samples for r in results for t in r.timings]),
            # every timed configuration's slowdown on the unseen input sets (honest candidates: the spread
            # the limit must stay above), and the candidates timed from those rounds alone
            "unseen_slowdowns": [t.unseen_slowdown for r in results for t in r.timings
                                 if t.unseen_slowdown is not None],
            "unseen_flagged": sorted({r.solution_id for r in results for f in r.flags
                                      if f.code == "unseen_inputs_slower"}),
            "timing_s_median": _median([r.stage_durations_s.get("timing") for r in results
                                        if "timing" in r.stage_durations_s]),
            "stage_medians_s": {k: _median([r.stage_durations_s.get(k) for r in results]) for k in STAGES},
            "stage_sums_s": {k: sum(r.stage_durations_s.get(k) or 0.0 for r in results) for k in STAGES},
            "finished_s": finished_s,  # when each result reached the caller, from the timed pass's start
            "referee_ms_sums": _referee_sums(results),
            "reference_store": store,
            # the same over the timed jobs alone: what their holds of the gate (the exclusive turn) include
            "referee_ms_sums_timed": _referee_sums([r for r in results if r.timings]),
            "stages_s": {r.solution_id: {k: round(v, 4) for k, v in r.stage_durations_s.items()}
                         for r in results},
            "schedule": report}


COUNTS = ("checked", "timed", "carriers", "verdict_changed")
RECORDS = ("drift", "anchor_offset", "live_drift")


def timed_pass_share(report: dict, before: dict) -> dict:
    """The RL schedule's report (`Evaluator.mode_report`, kept over the evaluator's life) less what the
    warm pass had put in it: counts, gate waits and states taken off, drift records after the warm pass's
    only (their lists only grow, up to `BaselineCache.LIVE_DRIFT_KEPT`)."""
    from cudaperf.eval_modes import drift_figures

    if not report:
        return report
    out = dict(report)
    for key in COUNTS:
        out[key] = report[key] - before.get(key, 0)
    for key in ("gate_wait_s", "gate_state_s"):
        if key in report:
            out[key] = {k: v - before.get(key, {}).get(k, 0.0) for k, v in report[key].items()}
    for key in RECORDS:
        if key in report:
            out[key] = drift_figures(report[key]["records"][before.get(key, {}).get("n", 0):])
    return out


def _referee_sums(results: list) -> dict[str, float]:
    """The referee's time per message kind, the worker's waits for it and the bytes moved, summed over
    the results."""
    sums: dict[str, float] = {}
    for spent in referee_spent(results):
        for kind, ms in spent.items():
            if isinstance(ms, (int, float)) and not kind.endswith(("_gbps", "_pinned")):  # rates: not summed
                sums[kind] = round(sums.get(kind, 0.0) + ms, 3)
    return dict(sorted(sums.items(), key=lambda kv: -kv[1]))


# -- summary ----------------------------------------------------------------------------------------

def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def repeatability(rows: list[dict]) -> dict:
    """Median |s_r / s_0 - 1| over candidates and baselines, r >= 1 (s_0: the first repeat's speedup)."""
    first, deltas, per_baseline = rows[0]["speedups"], [], {}
    for row in rows[1:]:
        for sid, speedups in row["speedups"].items():
            for name, value in speedups.items():
                before = first.get(sid, {}).get(name)
                if before:
                    d = abs(value / before - 1)
                    deltas.append(d)
                    per_baseline.setdefault(name, []).append(d)
    return {"median_abs_delta": _median(deltas), "pairs": len(deltas),
            "per_baseline": {k: _median(v) for k, v in sorted(per_baseline.items())}}


def against_default(rl_rows: list[dict], default_rows: list[dict]) -> dict:
    """The RL mode's speedups against cached baselines held against the default mode's (every baseline
    live there), pairing every RL run with every default run: median |rl / default - 1| for the speedup
    as the RL mode reports it (the carrier's median over this pass's) and chained through the live
    anchor (`eval_modes.through_anchor`), and the median signed ratio of each."""
    direct, chained = [], []
    for rl in rl_rows:
        for sid, through in rl.get("through_anchor", {}).items():
            for default in default_rows:
                for name, value in through.items():
                    ref = default["speedups"].get(sid, {}).get(name)
                    reported = rl["speedups"].get(sid, {}).get(name)
                    if ref and reported:
                        direct.append(reported / ref)
                        chained.append(value / ref)
    return {"pairs": len(direct), "reported": _ratio_figures(direct),
            "through_anchor": _ratio_figures(chained)}


def _ratio_figures(ratios: list[float]) -> dict:
    return {"median_abs_delta": _median([abs(r - 1) for r in ratios]), "median_ratio": _median(ratios)}


def _arm(row: dict) -> str:
    return row.get("arm", row["mode"])


def summarise(rows: list[dict]) -> dict:
    out: dict = {}
    names = list(dict.fromkeys(_arm(r) for r in rows))
    for name in names:
        mine = [r for r in rows if _arm(r) == name]
        out[name] = {"evals_per_min": _median([r["evals_per_min"] for r in mine]),
                     "repeatability": repeatability(mine),
                     "ci95_rel_median": _median([r["ci95_rel_median"] for r in mine]),
                     "samples_median": _median([r["samples_median"] for r in mine]),
                     "timing_s_median": _median([r["timing_s_median"] for r in mine]),
                     "unseen": _unseen_figures(mine)}
    out["arms"] = names
    rl = [n for n in names if n.startswith("rl")]
    if rl and "default" in out:  # the RL arm that got the most through, against the default mode
        best = max(rl, key=lambda n: out[n]["evals_per_min"] or 0.0)
        out["rl_vs_default"] = out[best]["evals_per_min"] / out["default"]["evals_per_min"]
    defaults = [r for r in rows if _arm(r) == "default"]
    out["against_default"] = {n: against_default([r for r in rows if _arm(r) == n], defaults) for n in rl}
    ids = rows[0]["outcomes"]
    out["differing"] = {sid: [r["outcomes"].get(sid) for r in rows] for sid in ids
                        if len({r["outcomes"].get(sid) for r in rows}) > 1}
    return out


def _unseen_figures(rows: list[dict]) -> dict:
    """The unseen rounds' slowdowns over an arm's runs: how many, their median, 95th percentile and
    largest, and how many candidates were timed from those rounds alone."""
    values = sorted(v for r in rows for v in r.get("unseen_slowdowns", []))
    if not values:
        return {"n": 0}
    return {"n": len(values), "median": _median(values), "p95": values[min(len(values) - 1,
            int(0.95 * len(values)))], "max": values[-1],
            "flagged": sum(len(r.get("unseen_flagged", [])) for r in rows)}


def table(summary: dict, n: int) -> str:
    lines = [f"{n} candidates per run", "| mode | evals/min | median abs Δ speedup (pairs) | CI95 half-width "
             "| samples | timing s |", "|---|---|---|---|---|---|"]
    for name in summary["arms"]:
        s = summary[name]
        rep = s["repeatability"]
        lines.append(f"| {name} | {s['evals_per_min']:.1f} | {_pct(rep['median_abs_delta'])} "
                     f"({rep['pairs']}) | {_pct(s['ci95_rel_median'])} | {s['samples_median']} "
                     f"| {_num(s['timing_s_median'])} |")
    ratio = summary.get("rl_vs_default")
    best = f"{_num(ratio)}x" if ratio else "n/a"
    lines.append(f"best rl / default = {best}; verdicts differing between runs: {len(summary['differing'])}")
    for name in summary["arms"]:
        u = summary[name].get("unseen", {"n": 0})
        if u["n"]:
            lines.append(f"{name}: slowdown on unseen input sets over {u['n']} timed configurations: median "
                         f"{u['median']:.3f}, p95 {u['p95']:.3f}, max {u['max']:.3f}; timed from them alone: "
                         f"{u['flagged']} candidate(s)")
    return "\n".join(lines)


_NONE = {"n": 0, "median_abs": None, "max_abs": None}  # a schedule report without the records


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def earlier_rows(path: str | None) -> list[dict]:
    if not path or not Path(path).exists():
        return []
    return json.loads(Path(path).read_text()).get("rows", [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="the small form: CPU-mode workers, PyTorch tasks")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--torch-tasks", type=int, default=None, help="default 10 (GPU), 4 (--cpu)")
    parser.add_argument("--c-tasks", type=int, default=None, help="default 6 (GPU), 0 (--cpu)")
    parser.add_argument("--baselines", default=None, help="comma-separated; default eager,compile (GPU; C "
                        "tasks time serial_c and naive_cuda), eager (--cpu)")
    parser.add_argument("--workers-per-gpu", type=int, default=4)
    parser.add_argument("--rl-workers", default=None,
                        help="comma-separated RL arms, each W (workers per GPU) or W/B (and a ranking budget "
                        "of B ms), then any of r (jobs leave the gate at the worker's result, "
                        "RlSettings.release_at_result), a (RlSettings.task_affinity), p "
                        "(RlSettings.plan_at_go_ahead), n (no shared store of C references) and w (only the "
                        "baselines a reward reads: RlConfig.timing_baselines='reward'): the RL mode "
                        "runs once per arm in the same run (rl-wW, rl-wW-bB, rl-wW-r-a-p-n-w); default: "
                        "--workers-per-gpu (--cpu-workers with --cpu)")
    parser.add_argument("--cpu-workers", type=int, default=2)
    parser.add_argument("--drift-every", type=int, default=None,
                        help="RL mode: every Nth timed candidate of a task re-times every baseline (default: "
                        "the library's, RlSettings.drift_every)")
    parser.add_argument("--no-live-anchor", dest="live_anchor", action="store_false",
                        help="RL mode: time no baseline with anchored candidates (every baseline cached)")
    parser.add_argument("--cache-dir", default=None, help="build cache (default: a fresh temp dir)")
    parser.add_argument("--verbose", action="store_true", help="one line per result")
    parser.add_argument("--profile-dir", default=None,
                        help="profile every worker's jobs into DIR/<run label>/ "
                        "(cudaperf.execute.job_profile; summary: benchmarks/profile_summary.py DIR)")
    parser.add_argument("--out", default=None, help="write everything as JSON here")
    parser.add_argument("--copies", type=int, default=1,
                        help="each candidate this many times (distinct texts): longer streams per task")
    parser.add_argument("--rl-only", action="store_true", help="the RL arms only (no default-mode run)")
    parser.add_argument("--cold-tasks", action="store_true",
                        help="no candidates in the warm pass (the workers' start only): the timed pass meets "
                        "every task fresh and its first candidates carry, as a comparison round does")
    parser.add_argument("--append", action="store_true", help="continue the runs already in --out (the same "
                        "options), so the repeats can be spread over several calls; the summary covers all")
    args = parser.parse_args(argv)
    n_torch = args.torch_tasks if args.torch_tasks is not None else (4 if args.cpu else 10)
    n_c = 0 if args.cpu else (args.c_tasks if args.c_tasks is not None else 6)
    args.cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="cudaperf-eval-modes-")
    tasks = dataset_tasks(n_torch, n_c, small_only=args.cpu)
    candidates = copies(cpu_candidates(tasks) if args.cpu else gpu_candidates(tasks), args.copies)
    kinds = {k: sum(c.kind == k for c in candidates) for k in sorted({c.kind for c in candidates})}
    print(f"{len(tasks)} tasks, {len(candidates)} candidates: {kinds}", flush=True)
    rows = earlier_rows(args.out) if args.append else []
    first = 1 + max((r["repeat"] for r in rows), default=-1)
    rl = [RlArm.parse(t) for t in args.rl_workers.split(",")] if args.rl_workers else [
        RlArm(args.cpu_workers if args.cpu else args.workers_per_gpu)]
    runs = arms(rl)[1:] if args.rl_only else arms(rl)
    for rep in range(first, first + args.repeats):
        for name, mode, arm in (runs[::-1] if rep % 2 == 0 else runs):  # RL first: its runs are shorter
            row = one_run(mode, f"{name}-{rep}", tasks, candidates, args, arm)
            rows.append({"repeat": rep, "arm": name, **row})
            print(f"repeat {rep} {name:7s}: {row['evals_per_min']:.1f} evals/min ({row['n']} in "
                  f"{row['wall_s']:.1f} s, evaluator CPU {row['parent_cpu_s']:.1f} s; warm pass "
                  f"{row['warm_pass_s']:.1f} s)", flush=True)
            write_result(args.out, {"rows": rows, "candidates": kinds,
                                    "tasks": [t.task_id for _, t in tasks]})
    summary = summarise(rows)
    print(table(summary, len(candidates)))
    rl = [(_arm(r), r["schedule"]) for r in rows if r["mode"] == "rl"]
    for arm, s in rl:
        waits = s["gate_wait_s"]
        print(f"{arm} schedule: checked {s['checked']}, timed {s['timed']}, carriers {s['carriers']}, "
              f"verdict changed {s['verdict_changed']}, gate wait {waits['shared']:.1f} s shared / "
              f"{waits['exclusive']:.1f} s exclusive; " + ", ".join(
                  f"{name} {d['n']} (median |ratio-1| {_pct(d['median_abs'])}, max {_pct(d['max_abs'])})"
                  for name, d in (("carrier drift", s["drift"]),
                                  ("live reference against its carrier", s.get("anchor_offset", _NONE)),
                                  ("live anchor drift from its reference", s["live_drift"]))))
        states = s.get("gate_state_s") or {}
        print("  the timed pass's GPU gate: " + ", ".join(f"{k} {v:.1f} s" for k, v in states.items()))
    for arm, a in summary.get("against_default", {}).items():
        print(f"{arm} speedups against cached baselines vs the default mode's ({a['pairs']} pairs): as "
              f"reported |Δ| {_pct(a['reported']['median_abs_delta'])} (ratio "
              f"{_num(a['reported']['median_ratio'])}), through the anchor |Δ| "
              f"{_pct(a['through_anchor']['median_abs_delta'])} "
              f"(ratio {_num(a['through_anchor']['median_ratio'])})")
    for sid, outs in summary["differing"].items():
        print(f"  differs: {sid}: {outs}")
    write_result(args.out, {"rows": rows, "summary": summary, "candidates": kinds,
                            "tasks": [t.task_id for _, t in tasks]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
