"""Why the RL mode's live anchor differs from its carrier's: a GPU probe, not a test.

On the H200 (session 20) the anchor timed with the ranking budget differed from the carrier's median of the
same baseline by 0.70-1.44x on small configurations (eager slower live, the naive CUDA port faster): the
two protocols, not the machine. This probe times eager in-process under four protocols, alternately, on
the same inputs, in one run, to separate the two differences between them:
- `carrier`: eager, torch.compile, the candidate and the empty function each round; 100 ms timed and
  25 ms warm-up per function (the default mode's and a carrier's);
- `ranking`: eager and the candidate; 10 / 5 ms, no empty function (an anchored candidate's);
- `carrier-fns-ranking-budget`: the carrier's four functions at 10 / 5 ms;
- `ranking-fns-carrier-budget`: the ranking's two functions at 100 / 25 ms.
Printed per task (the example tasks, their first configuration and their fast solution as the candidate):
eager's median per protocol (the median over repeats), its ratio to the carrier's, and per protocol the
samples whose host path outran the lead (`host_bound_samples`) and eager's lead launches. If the
budget arms move with `ranking`, the budget (warm-up, sample count) is the cause; if the function arms
do, the round's make-up is.

    python3 benchmarks/anchor_protocol_probe.py [--repeats 5] [--out FILE.json]
    python3 benchmarks/anchor_protocol_probe.py --device cpu --no-compile --repeats 1   # the plumbing only
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result

PROTOCOLS = {  # name: (functions, budget ms, warm-up ms, the empty function timed)
    "carrier": (("eager", "compile", "candidate"), 100.0, 25.0, True),
    "ranking": (("eager", "candidate"), 10.0, 5.0, False),
    "carrier-fns-ranking-budget": (("eager", "compile", "candidate"), 10.0, 5.0, True),
    "ranking-fns-carrier-budget": (("eager", "candidate"), 100.0, 25.0, False),
}


def _candidate(path: Path):
    spec = importlib.util.spec_from_file_location(f"probe_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ModelNew


def task_functions(name: str, device: str, with_compile: bool) -> tuple[dict, list, str]:
    """The task's eager model, its compiled baseline and the fast solution, and three input sets."""
    import torch

    from cudaperf.tasks import load_task
    from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
    from cudaperf.tasks.runtime import load_module, make_init_inputs, make_inputs
    from cudaperf.timing import compile_baseline

    task = load_task(example_tasks_dir() / f"{name}.py")
    config = task.configs[0]
    module = load_module(task, config)
    model = module.Model(*make_init_inputs(module, config)).to(device).eval()
    if device == "cpu":  # a dry run of the plumbing: the fast solutions launch CUDA kernels
        candidate = module.Model(*make_init_inputs(module, config))
    else:
        solution = _candidate(example_solutions_dir("fast") / f"{name}.py")
        candidate = solution(*make_init_inputs(module, config))
    candidate = candidate.to(device)
    sets = [make_inputs(module, config, seed, torch.device(device)) for seed in (1, 2, 3)]
    fns = {"eager": lambda inputs: model(*inputs), "candidate": lambda inputs: candidate(*inputs)}
    if with_compile:
        compiled = compile_baseline(model)
        fns["compile"] = lambda inputs: compiled(*inputs)
    return fns, sets, config.name


def probe_task(name: str, device: str, repeats: int, with_compile: bool) -> dict:
    import torch

    from cudaperf.timing import bench_interleaved_report

    fns, sets, config = task_functions(name, device, with_compile)
    runs: dict[str, list[dict]] = {p: [] for p in PROTOCOLS}
    with torch.no_grad():
        for repeat in range(repeats):
            for protocol, (names, budget, warmup, empty) in PROTOCOLS.items():
                chosen = {n: fns[n] for n in names if n in fns}
                report = bench_interleaved_report(chosen, sets, budget_ms=budget, warmup_ms=warmup,
                                                  measure_overhead=empty, device=device, seed=repeat)
                runs[protocol].append({"eager_ms": report.timings["eager"].median_ms,
                                       "samples": report.timings["eager"].n_samples,
                                       "host_bound": report.host_bound_samples.get("eager", 0),
                                       "lead_launches": report.lead_launches.get("eager", 0)})
    medians = {p: statistics.median(r["eager_ms"] for r in rs) for p, rs in runs.items()}
    return {"task": name, "config": config, "eager_median_ms": medians,
            "ratio_to_carrier": {p: m / medians["carrier"] for p, m in medians.items()}, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tasks", default="vector_add,relu,softmax,row_sum")  # compile: ~20 s each
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out (a CPU dry run)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = []
    print("| task | config | protocol | eager median ms | / carrier | samples | host-bound | lead launches |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.tasks.split(","):
        row = probe_task(name, args.device, args.repeats, not args.no_compile)
        rows.append(row)
        for protocol, runs in row["runs"].items():
            samples = statistics.median(r["samples"] for r in runs)
            print(f"| {name} | {row['config']} | {protocol} | {row['eager_median_ms'][protocol]:.4f} | "
                  f"{row['ratio_to_carrier'][protocol]:.3f} | {samples:g} | "
                  f"{sum(r['host_bound'] for r in runs)} | {max(r['lead_launches'] for r in runs)} |",
                  flush=True)
        protocols = {k: [list(v[0]), *v[1:]] for k, v in PROTOCOLS.items()}
        write_result(args.out, {"rows": rows, "protocols": protocols})
    return 0


if __name__ == "__main__":
    sys.exit(main())
