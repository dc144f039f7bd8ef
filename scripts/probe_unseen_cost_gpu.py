"""GPU probe of what the unseen rounds cost the timing stage: the fast example solutions of three example
tasks through the evaluator (referee on, eager baseline, a 5 ms budget as the RL mode's ranking budget),
each three times with `TimingConfig.unseen_sets` 5 and 0 alternating, printing the timing stage's wall
time and the referee's time per part (`environment["referee_ms"]`). `python3 scripts/probe_unseen_cost_gpu.py
[DEVICE]` (default cuda; about a minute)."""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import tempfile

from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import load_tasks
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir

TASKS = ("vector_add", "softmax", "row_sum")
REPEATS = 3


def main(device: str) -> None:
    tasks = {t.task_id: t for t in load_tasks(example_tasks_dir()) if t.task_id in TASKS}
    cache = tempfile.mkdtemp()
    stack = contextlib.ExitStack()
    configs = {n: EvalConfig(device=device, cache_dir=cache, coverage=False, timing=TimingConfig(
        budget_ms=5, warmup_ms=2, baselines=("eager",), unseen_sets=n)) for n in (5, 0)}
    evaluators = {n: stack.enter_context(Evaluator(config)) for n, config in configs.items()}
    spent: dict[tuple[str, int], list[float]] = {}
    with stack:
        for _ in range(REPEATS):
            for task_id, task in tasks.items():
                text = (example_solutions_dir("fast") / f"{task_id}.py").read_text()
                for n, ev in evaluators.items():
                    result = ev.evaluate(task, solution_from_text(text, f"{task_id}-u{n}"))
                    timing_s = result.stage_durations_s.get("timing", float("nan"))
                    spent.setdefault((task_id, n), []).append(timing_s)
                    referee = json.loads(result.environment.get("referee_ms", "{}") or "{}")
                    parts = [(k, v) for k, v in referee.items() if "bytes" not in k]
                    top = sorted(parts, key=lambda kv: -kv[1])
                    total_s = result.stage_durations_s.get("total", 0)
                    print(f"{task_id} unseen={n}: {result.outcome.value} timing {timing_s:.2f} s, total "
                          f"{total_s:.2f} s; referee ms {top[:8]}", flush=True)
    for (task_id, n), values in sorted(spent.items()):
        print(f"[median] {task_id} unseen={n}: timing {statistics.median(values):.2f} s over {len(values)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cuda")
