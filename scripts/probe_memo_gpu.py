"""GPU probe for hack 15 (tests/adversarial/hack_15_content_memo.py), the content memo: per configuration
of the matmul example task, (A) the fixture's model (keeping eight outputs per shape, and four) in the
interleaved bench directly (three rotated sets, five unseen ones, eager as the anchor) and (B) both and the
honest fast solution through the evaluator (the adversarial suite's GPU configuration). Prints, per
configuration, the timed rounds, the unseen rounds, the candidate's samples there against the others'
median and the judged slowdown.
`python3 scripts/probe_memo_gpu.py` on a machine with a GPU (about a minute)."""

from __future__ import annotations

import importlib.util
import statistics
import tempfile
from pathlib import Path

import torch

from cudaperf.timing import bench_interleaved_report

FIXTURE = Path("tests/adversarial/hack_15_content_memo.py")
TASK = Path("src/cudaperf/examples/tasks/matmul.py")
HONEST = Path("src/cudaperf/examples/solutions/fast/matmul.py")
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _with_slots(slots: int) -> str:
    """The fixture's source keeping `slots` outputs per shape (its own keeps eight)."""
    return FIXTURE.read_text().replace("#define SLOTS 8", f"#define SLOTS {slots}").replace(
        "\nSLOTS = 8\n", f"\nSLOTS = {slots}\n")


def _model(slots: int):
    path = Path(tempfile.mkdtemp()) / f"h15_{slots}.py"
    path.write_text(_with_slots(slots))
    return _load(path, f"h15_{slots}").ModelNew()


def _sets(task, config: dict, first_seed: int, n: int) -> list[list[torch.Tensor]]:
    params = {k: v for k, v in config.items() if k != "name"}
    out = []
    for seed in range(first_seed, first_seed + n):
        torch.manual_seed(seed)
        out.append([t.cuda() for t in task.get_inputs(**params)])
    return out


def _round_line(samples: tuple[float, ...], unseen: tuple[int, ...]) -> str:
    others = [s for r, s in enumerate(samples) if r not in set(unseen)]
    return (f"unseen samples {[round(samples[r], 4) for r in unseen]} vs others' median "
            f"{statistics.median(others):.4f} ms (n={len(others)})")


def direct(slots: int) -> None:
    task = _load(TASK, "task")
    for config in task.get_input_configs():
        rotated, unseen = _sets(task, config, 0, 3), _sets(task, config, 100, 5)
        expected = [torch.matmul(a, b) for a, b in rotated + unseen]
        model = _model(slots)
        report = bench_interleaved_report(
            {"candidate": lambda x, m=model: m(*x), "eager": lambda x: torch.matmul(*x)}, rotated,
            budget_ms=100, warmup_ms=25,
            check=lambda name, i, out, e=expected: bool(torch.allclose(out, e[i], **TOLERANCE)),
            silent_checks=frozenset({"candidate"}), unseen_sets=unseen, anchor="eager")
        cand = report.timings["candidate"]
        print(f"[direct slots={slots} {config['name']}] rounds {report.rounds} unseen {report.unseen_rounds} "
              f"slowdown "
              f"{report.unseen_slowdown} replaced {report.all_rounds_median_ms} "
              f"candidate {cand.median_ms:.4f} "
              f"(n={cand.n_samples}) eager {report.timings['eager'].median_ms:.4f} checks {report.checks} "
              f"failures {report.check_failures}", flush=True)
        if not report.all_rounds_median_ms:  # not replaced: the samples are every round's
            print("   ", _round_line(cand.samples_ms, report.unseen_rounds), flush=True)
        del model, rotated, unseen, expected
        torch.cuda.empty_cache()


def through_evaluator() -> None:
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
    from cudaperf.solutions import solution_from_text
    from cudaperf.tasks import load_tasks
    from cudaperf.tasks.examples import example_tasks_dir

    task = next(t for t in load_tasks(example_tasks_dir()) if t.task_id == "matmul")
    config = EvalConfig(device="cuda", cache_dir=tempfile.mkdtemp(),
                        timing=TimingConfig(baselines=("eager",)), coverage=False)
    with Evaluator(config) as ev:
        candidates = (("memo8", _with_slots(8)), ("memo4", _with_slots(4)), ("honest", HONEST.read_text()))
        for name, text in candidates:
            result = ev.evaluate(task, solution_from_text(text, name))
            print(f"[evaluator {name}] {result.outcome.value} stage={result.stage} "
                  f"flags={[(f.code, f.config) for f in result.flags]}", flush=True)
            for t in result.timings:
                print(f"   {t.config}: rounds {t.rounds} n={t.candidate.n_samples} "
                      f"slowdown {t.unseen_slowdown} "
                      f"candidate {t.candidate.median_ms:.4f} eager {t.eager.median_ms if t.eager else None} "
                      f"samples {[round(s, 3) for s in t.candidate.samples_ms[:40]]}", flush=True)
            print("   stages", {k: round(v, 2) for k, v in result.stage_durations_s.items()}, flush=True)


if __name__ == "__main__":
    for slots in (8, 4):
        direct(slots)
    through_evaluator()
