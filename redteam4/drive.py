"""Run candidates through the real CPU-mode evaluator and print outcome, flags, speedups.

usage: python drive.py TASK.py [--strict] [--mode rl] [--baselines eager,compile] CAND.py ...
"""
import argparse
import os
import time
from pathlib import Path

from cudaperf.anticheat.policy import Policy
from cudaperf.eval_modes import RlSettings
from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import task_from_source
from cudaperf.types import Severity

p = argparse.ArgumentParser()
p.add_argument("task")
p.add_argument("cands", nargs="+")
p.add_argument("--strict", action="store_true")
p.add_argument("--mode", default="default")
p.add_argument("--baselines", default="eager")
p.add_argument("--budget", type=float, default=50.0)
p.add_argument("--workers", type=int, default=1)
p.add_argument("--repeat", type=int, default=1)
a = p.parse_args()

tp = Path(a.task)
task = task_from_source(tp.read_text(), tp.stem, str(tp))
cfg = EvalConfig(device="cpu", mode=a.mode, analyze=False, build_workers=1,
                 cache_dir="/tmp/rt_cache",
                 policy=None if a.strict else Policy(allow_torch_ops=True),
                 timing=TimingConfig(baselines=tuple(a.baselines.split(",")), budget_ms=a.budget,
                                     warmup_ms=a.budget / 4),
                 rl=RlSettings(cpu_workers=a.workers, live_anchor=not os.environ.get("RT_NOLIVE")))
pairs = []
for r in range(a.repeat):
    for c in a.cands:
        pairs.append((task, solution_from_text(Path(c).read_text(), f"{Path(c).stem}#{r}", c)))
t0 = time.time()
with Evaluator(cfg) as ev:
    for res in ev.evaluate_many(pairs):
        errs = [f for f in res.flags if f.severity is Severity.ERROR]
        print(f"== {res.solution_id}: outcome={res.outcome.value} stage={res.stage} "
              f"clean_correct={res.outcome.value == 'correct' and not errs}")
        print(f"   speedups={ {k: round(v, 3) for k, v in res.speedups.items()} } msg={res.message[:300]!r}")
        for t in res.timings:
            print(f"   timing {t.config}: cand={t.candidate.median_ms:.4f}ms "
                  f"eager={t.eager.median_ms if t.eager else None} "
                  f"compiled={t.compiled.median_ms if t.compiled else None} sol={t.speed_of_light_ms} "
                  f"overhead={t.overhead_ms} rounds={t.rounds}")
        for f in res.flags:
            print(f"   flag {f.code}[{f.severity.value}] {f.message[:200]}")
        if os.environ.get("RT_SANDBOX"):
            print("   sandbox:", res.environment.get("sandbox"))
        if res.outcome.value not in ("correct",) or os.environ.get("RT_LOGS"):
            print("   logs:", res.logs[-1500:])
print(f"wall {time.time() - t0:.1f}s")
