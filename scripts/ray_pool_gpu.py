"""The Ray evaluation pool on GPUs (issue 22): checks on the GPU machine, and evaluation throughput on N GPUs
against 1 GPU for the same candidates in one invocation.

    # GPU machine, Ray carried as wheels, the split parts copied to /tmp/rw (docs/scale.md, "On the GPU
    # machine"); --wheels joins the parts, checks SHA256SUMS, installs what is missing into /tmp/site:
    python3 scripts/ray_pool_gpu.py --wheels /tmp/rw --out "$OUT/ray_pool.json"
    # CPU machine, the small form (CPU-only actors, pure-PyTorch candidates, eager baseline):
    python3 scripts/ray_pool_gpu.py --cpu --torch-tasks 2 --out /tmp/ray_pool.json

Checks (each prints PASS or FAIL, and goes to the JSON):
1. trainer GPU kept free: a pool that starts Ray here with `PoolConfig(trainer_gpus=(0,))` never gets GPU 0:
   with one GPU it refuses to start (PoolError), with several its actors sit on the others and evaluate.
2. placement: one actor per GPU in one placement group, each seeing exactly one GPU, evaluating on 'cuda'.
3. verdicts: every pool run reaches the local evaluator's verdict on every candidate.
4. an actor killed mid-batch (`ray.kill`): every candidate has exactly one row in the ResultStore, with the
   local evaluator's verdict; the pool replaced the actor.
Throughput: the same candidates (dataset tasks round-robin over families, every fast implementation the
dataset generates for them, plus per task a wrong kernel and on every third task a build error, a candidate
that raises on import and a syntax error: `benchmarks/eval_modes.py` makes them; at least 40) through the
local `Evaluator` on GPU 0, the pool with 1 actor, and the pool with N actors (N = the visible GPUs, when
more than one). Each run starts fresh, warms every worker with one untimed candidate, then times one pass
over every candidate with cold builds (a comment in the CUDA text distinct per run). The build pool is the
same size in every run (cores - 1, split between the actors). Printed: the table (wall seconds,
evaluations per minute, speedup against the 1-GPU pool, verdict agreement) and the checks. Expected on
one H200: checks 1-4 PASS, the 1-GPU pool within ~10% of the local evaluator; on two GPUs >= 1.8x.

Not covered: training beside the pool (issue 22, item 3: `scripts/ray_train_gpu.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # eval_modes.py: the candidate mix
sys.path.insert(0, str(ROOT / "src"))
# Ray's worker processes inherit the environment of the Ray instance this script starts: they find cudaperf
# (and Ray itself, carried in /tmp/site) on the same paths.
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wheels", type=Path, default=None, help="carried Ray wheels to install first")
    p.add_argument("--site", type=Path, default=Path("/tmp/site"), help="where --wheels installs")
    p.add_argument("--torch-tasks", type=int, default=12, help="dataset PyTorch tasks")
    p.add_argument("--c-tasks", type=int, default=0, help="dataset C tasks (their serial-C timing shares "
                   "one machine-wide lock, so they scale less with GPUs)")
    p.add_argument("--min-candidates", type=int, default=40)
    p.add_argument("--baselines", default="eager", help="timed baselines, comma list (default eager)")
    p.add_argument("--mode", default="default", choices=("default", "rl"), help="evaluation mode")
    p.add_argument("--gpus", type=int, default=0, help="N for the N-GPU run (0: every visible GPU)")
    p.add_argument("--cpu", action="store_true", help="small form on a machine without a GPU")
    p.add_argument("--cpu-actors", type=int, default=2, help="actors of the --cpu form's N run")
    p.add_argument("--skip-local", action="store_true", help="no local-evaluator run (verdicts: 1-GPU pool)")
    p.add_argument("--cache-dir", default=None, help="build cache (default: a fresh temporary directory)")
    p.add_argument("--out", default=None, help="JSON file with everything")
    p.add_argument("--verbose", action="store_true")
    return p.parse_args(argv)


# -- Ray from carried wheels ------------------------------------------------------------------------

# The import name of each dependency Ray needs (wheel name -> module), to install only what is missing.
RAY_DEPENDENCIES = {"attrs": "attr", "certifi": "certifi", "charset_normalizer": "charset_normalizer",
                    "click": "click", "filelock": "filelock", "idna": "idna", "jsonschema": "jsonschema",
                    "jsonschema_specifications": "jsonschema_specifications", "msgpack": "msgpack",
                    "packaging": "packaging", "protobuf": "google.protobuf", "pyyaml": "yaml",
                    "referencing": "referencing", "requests": "requests", "rpds_py": "rpds",
                    "typing_extensions": "typing_extensions", "urllib3": "urllib3"}


def install_ray(wheels: Path, site: Path) -> None:
    """Join split wheel parts (NAME.part1, NAME.part2...), check them against SHA256SUMS, install Ray and
    the dependencies this Python cannot import into `site` (no network, no index), and put `site` on the
    paths of this process and of the Ray workers it starts."""
    for first in wheels.glob("*.whl.part1"):
        whole = wheels / first.name.removesuffix(".part1")
        parts = sorted(wheels.glob(whole.name + ".part*"), key=lambda p: int(p.suffix.removeprefix(".part")))
        whole.write_bytes(b"".join(p.read_bytes() for p in parts))
    for line in (wheels / "SHA256SUMS").read_text().splitlines() if (wheels / "SHA256SUMS").exists() else []:
        digest, name = line.split()
        if hashlib.sha256((wheels / name).read_bytes()).hexdigest() != digest:
            raise SystemExit(f"{name}: SHA-256 differs from SHA256SUMS (a part is missing or damaged)")
    chosen = [w for w in wheels.glob("*.whl") if w.name.startswith("ray-")
              or importlib.util.find_spec(RAY_DEPENDENCIES.get(w.name.split("-")[0], "?")) is None]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                    str(site), *map(str, chosen)], check=True)
    print(f"installed into {site}: {', '.join(sorted(w.name.split('-')[0] for w in chosen))}", flush=True)
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), os.environ["PYTHONPATH"]])


# -- candidates and configurations ------------------------------------------------------------------


def candidates(args: argparse.Namespace):
    from eval_modes import cpu_candidates, dataset_tasks, gpu_candidates

    tasks = dataset_tasks(args.torch_tasks, 0 if args.cpu else args.c_tasks, small_only=args.cpu)
    found = (cpu_candidates if args.cpu else gpu_candidates)(tasks)
    if len(found) < args.min_candidates and not args.cpu:
        raise SystemExit(f"{len(found)} candidates < --min-candidates {args.min_candidates}: add tasks")
    return tasks, found


def eval_config(args: argparse.Namespace, build_workers: int = 0):
    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig, TimingConfig

    baselines = tuple(b for b in args.baselines.split(",") if b)
    return EvalConfig(device="cpu" if args.cpu else "cuda", mode=args.mode, cache_dir=args.cache_dir,
                      timing=TimingConfig(baselines=baselines), analyze=not args.cpu,
                      policy=Policy(allow_torch_ops=True) if args.cpu else None, build_workers=build_workers)


def gpu_count(args: argparse.Namespace) -> int:
    if args.cpu:
        return 0
    import torch

    return torch.cuda.device_count()


def build_share(actors: int) -> int:
    """Build processes per actor: the machine's cores less one, split between the actors."""
    return max(1, ((os.cpu_count() or 2) - 1) // max(1, actors))


# -- check 1: the trainer's GPU ------------------------------------------------------------------------


def check_trainer_gpu(args: argparse.Namespace, pairs: list) -> dict:
    """Run before anything else starts Ray in this process: the pool starts its own instance here."""
    from cudaperf.scale import PoolConfig, PoolError, RayEvaluator

    gpus = gpu_count(args)
    config = eval_config(args, build_workers=build_share(max(1, gpus - 1)))
    if args.cpu:  # no GPU here: asking for CUDA shows the refusal a one-GPU machine gives
        config = dataclasses.replace(config, device="cuda")
    pool = RayEvaluator(config, PoolConfig(trainer_gpus=(0,), local_cpus=os.cpu_count()))
    try:
        report = pool.report()
    except PoolError as exc:
        pool.close()
        ok = gpus <= 1
        return {"check": "trainer GPU kept free", "ok": ok, "detail": f"refused to start: {exc}"[:300]}
    try:
        gpu_ids = sorted(g for p in report.placement.values() for g in p["gpu_ids"])
        (result,) = pool.evaluate_many([pairs[0]])
        ok = "0" not in gpu_ids and len(gpu_ids) == gpus - 1 and result.outcome.value == "correct"
        detail = f"actors on GPUs {gpu_ids}; a candidate: {result.outcome.value}"
    finally:
        pool.close()
    return {"check": "trainer GPU kept free", "ok": ok, "detail": detail}


# -- the runs ------------------------------------------------------------------------------------------


def labelled(tasks, found, label: str) -> list:
    from eval_modes import pairs_for_run

    return pairs_for_run(tasks, found, label)


def warm_pairs(tasks, found, label: str) -> list:
    """One right candidate per task with a text of its own: a worker that evaluated them has started and
    met every task (its reference, its first run), as in `benchmarks/eval_modes.py`."""
    from cudaperf.solutions import solution_from_text

    right = [c for c in found if c.kind == "right"]
    firsts = list({c.task_index: c for c in reversed(right)}.values())
    return [(t, solution_from_text(s.source, f"{s.solution_id}#{label}"))
            for t, s in labelled(tasks, firsts, label)]


def run_local(args, tasks, found) -> dict:
    from cudaperf.evaluate import Evaluator

    started = time.perf_counter()
    config = eval_config(args, build_workers=build_share(1))
    config = dataclasses.replace(config, gpus=None if args.cpu else (0,))
    with Evaluator(config) as ev:
        list(ev.evaluate_many(warm_pairs(tasks, found, "local-warm")))
        warm_s = time.perf_counter() - started
        return timed_pass("local evaluator", 1, ev.evaluate_many, labelled(tasks, found, "local"), warm_s,
                          args.verbose)


def run_pool(args, tasks, found, actors: int) -> dict:
    from cudaperf.scale import PoolConfig, RayEvaluator

    started = time.perf_counter()
    pool = PoolConfig(actors=actors, cpus_per_actor=build_share(actors))
    with RayEvaluator(eval_config(args), pool) as ev:
        report = ev.report()
        handles = ev.pool.live_actors()  # every actor warmed directly, not through the queue
        _ray().get([h.evaluate.remote(*p) for name, h in handles.items()
                    for p in warm_pairs(tasks, found, f"pool{actors}-warm-{name}")])
        warm_s = time.perf_counter() - started
        row = timed_pass(f"Ray pool, {actors} actor(s)", actors, ev.evaluate_many,
                         labelled(tasks, found, f"pool{actors}"), warm_s, args.verbose)
        final = ev.report()
    row["placement"] = report.placement
    row["done_per_actor"] = final.done_per_actor
    return row


def timed_pass(name: str, gpus: int, evaluate_many, pairs: list, warm_s: float, verbose: bool) -> dict:
    t0 = time.perf_counter()
    results = []
    for r in evaluate_many(pairs):
        results.append(r)
        if verbose:
            print(f"  [{time.perf_counter() - t0:6.1f} s] {name}: {r.solution_id}: {r.outcome.value}",
                  flush=True)
    wall_s = time.perf_counter() - t0
    return {"setup": name, "gpus": gpus, "n": len(results), "wall_s": wall_s, "warm_s": warm_s,
            "evals_per_min": 60.0 * len(results) / wall_s,
            "outcomes": {r.solution_id: r.outcome.value for r in results},
            "messages": {r.solution_id: r.message[:200] for r in results if r.outcome.value != "correct"}}


def _ray():
    import ray

    return ray


# -- checks 2 and 4 ------------------------------------------------------------------------------------


def check_placement(row: dict, actors: int, cpu: bool) -> dict:
    seen = [p["gpu_ids"] for p in row["placement"].values()]
    modes = {p["mode"] for p in row["placement"].values()}
    ids = [g for ids in seen for g in ids]
    ok = len(seen) == actors and (cpu or (all(len(g) == 1 for g in seen) and len(set(ids)) == actors
                                          and modes == {"cuda"}))
    return {"check": f"placement of {actors} actor(s)", "ok": ok, "detail": f"GPU ids {seen}, modes {modes}"}


def check_kill(args, tasks, found, expected: dict[str, str], actors: int, out_dir: Path) -> dict:
    from cudaperf.results import ResultStore
    from cudaperf.scale import PoolConfig, RayEvaluator

    right = [c for c in found if c.kind == "right"][:12]
    store = ResultStore(out_dir / "ray_pool_kill.jsonl")
    if store.path.exists():
        store.path.unlink()
    killed = None
    with RayEvaluator(eval_config(args), PoolConfig(actors=actors, cpus_per_actor=build_share(actors))) as ev:
        for _ in ev.evaluate_many(labelled(tasks, right, "kill"), store=store):
            if killed is None:
                killed = next((n for n, k in ev.pool.in_flight().items() if k), None)
                if killed is not None:
                    _ray().kill(ev.pool.live_actors()[killed])
        report = ev.report()
    rows = [json.loads(x) for x in store.path.read_text().splitlines()]
    ids = [r["solution_id"] for r in rows]
    same = all(expected.get(r["solution_id"]) in (None, r["outcome"]) for r in rows)
    ok = (killed is not None and sorted(ids) == sorted(c.solution_id for c in right) and same
          and report.lost >= 1 and report.replaced >= 1)
    return {"check": "an actor killed mid-batch", "ok": ok,
            "detail": f"killed {killed}; {len(rows)} rows for {len(right)} candidates, {len(set(ids))} "
                      "distinct; "
                      f"verdicts as before: {same}; lost {report.lost}, replaced {report.replaced}, "
                      f"re-run {report.reruns}"}


def check_verdicts(rows: list[dict]) -> dict:
    reference = rows[0]["outcomes"]
    differ = {r["setup"]: sorted(k for k, v in r["outcomes"].items() if reference.get(k) != v) for r in rows}
    ok = all(not d for d in differ.values()) and all(r["n"] == len(reference) for r in rows)
    return {"check": f"verdicts as the {rows[0]['setup']}", "ok": ok,
            "detail": "; ".join(f"{k}: {len(v)} differ {v[:4]}" for k, v in differ.items())}


# -- report --------------------------------------------------------------------------------------------


def table(rows: list[dict]) -> str:
    one = next((r for r in rows if r["setup"].startswith("Ray pool, 1 ")), rows[0])
    lines = ["| setup | GPUs | candidates | warm-up s | wall s | evals/min | vs 1-GPU pool |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setup']} | {r['gpus']} | {r['n']} | {r['warm_s']:.1f} | {r['wall_s']:.1f} | "
                     f"{r['evals_per_min']:.1f} | {r['evals_per_min'] / one['evals_per_min']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.wheels is not None:
        install_ray(args.wheels, args.site)
    if args.cache_dir is None:
        import tempfile

        args.cache_dir = tempfile.mkdtemp(prefix="ray-pool-cache-")
    tasks, found = candidates(args)
    print(f"{len(found)} candidates over {len(tasks)} tasks", flush=True)
    first_right = [c for c in found if c.kind == "right"][:1]
    checks = [check_trainer_gpu(args, labelled(tasks, first_right, "trainer"))]
    gpus = gpu_count(args)
    n = args.cpu_actors if args.cpu else (args.gpus or gpus)
    _ray().init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    rows = [] if args.skip_local else [run_local(args, tasks, found)]
    rows.append(run_pool(args, tasks, found, 1))
    checks.append(check_placement(rows[-1], 1, args.cpu))
    if n > 1:
        rows.append(run_pool(args, tasks, found, n))
        checks.append(check_placement(rows[-1], n, args.cpu))
    checks.append(check_verdicts(rows))
    print(table(rows), flush=True)
    write_out(args, rows, checks)  # the measured rows kept whatever the kill check does
    out_dir = Path(args.out).parent if args.out else Path(args.cache_dir)
    checks.append(guarded("an actor killed mid-batch",
                          lambda: check_kill(args, tasks, found, rows[0]["outcomes"], max(1, n), out_dir)))
    for c in checks:
        print(f"{'PASS' if c['ok'] else 'FAIL'}  {c['check']}: {c['detail']}")
    write_out(args, rows, checks)
    return 0 if all(c["ok"] for c in checks) else 1


def guarded(name: str, check) -> dict:
    """The check's row, or a failed one naming the exception it raised (a check that crashes is a FAIL,
    not the loss of the rows measured before it)."""
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - reported as the check's failure, with its cause
        return {"check": name, "ok": False, "detail": f"raised {type(exc).__name__}: {exc}"[:500]}


def write_out(args: argparse.Namespace, rows: list[dict], checks: list[dict]) -> None:
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows, "checks": checks,
                                              "environment": environment()}, indent=1, default=str))


@functools.cache  # once per run: the JSON is written before and after the kill check
def environment() -> dict:
    """The machine (`scripts/env_info.py`) and Ray's version where Ray is installed."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from env_info import env_info

    info = env_info()
    if importlib.util.find_spec("ray") is not None:
        info["ray"] = _ray().__version__
    return info


if __name__ == "__main__":
    sys.exit(main())
