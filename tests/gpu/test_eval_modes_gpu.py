"""The RL evaluation mode on a GPU: several workers on one GPU, the check and timed passes, baselines carried
once per task and cached, the eager anchor live. One batch (the example tasks' fast solutions, each twice
with distinct texts, a wrong kernel, a build error, and a C task's naive port as its candidate) runs in
both modes, and the RL mode again with its options (the gate left at the result and task affinity; the
baselines' plan at the go-ahead); the verdicts must be the same. Short budgets and one seed keep it to
about a minute and a half."""

from __future__ import annotations

import pytest

from cudaperf.evaluate import EvalConfig, Evaluator, RlSettings, TimingConfig
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import load_task
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.types import Outcome, TaskKind

pytestmark = pytest.mark.gpu

TIMING = TimingConfig(budget_ms=20, warmup_ms=5)


def _pairs() -> list:
    tasks = {p.stem: load_task(p) for p in sorted(example_tasks_dir().glob("*.py"))}
    pairs = []
    for path in sorted(example_solutions_dir("fast").glob("*.py")):
        text = path.read_text()
        for k in range(2):  # two candidates per task: the second is timed against cached baselines
            pairs.append((tasks[path.stem], solution_from_text(text + f"\n# copy {k}\n", f"{path.stem}-{k}")))
    relu = (example_solutions_dir("fast") / "relu.py").read_text()
    wrong = relu.replace("x < 0.0f ? 0.0f : x", "x < 0.0f ? 0.0f : x + 1.0f")
    broken = relu.replace("__global__", "__global__ int broken = ;", 1)
    pairs += [(tasks["relu"], solution_from_text(wrong, "relu-wrong")),
              (tasks["relu"], solution_from_text(broken, "relu-build-error"))]
    return pairs + _c_pairs()


def _c_pairs() -> list:
    """A C task of the dataset with its naive port as the candidate (correct by construction)."""
    from cudaperf.datasets import registry
    from cudaperf.tasks.ctask import baseline_source, from_json, to_task

    generated = registry.build_index(0, kinds=(TaskKind.C,), families=["map"])[0]
    naive = next(i.source for i in registry.implementations(generated) if i.baseline)
    task = to_task(from_json(generated.text), naive_cuda=naive)
    source = baseline_source(task, "naive_cuda")
    return [(task, solution_from_text(source + f"\n# copy {k}\n", f"c-naive-{k}")) for k in range(2)]


def _run(mode: str, cache_dir: str, **options: bool) -> tuple[dict, dict]:
    # anchor_copies off: the C candidates are copies of the naive port standing in for any correct answer,
    # timed as such (tests/gpu/test_anchor_copies_gpu.py has the copies' own schedule)
    config = EvalConfig(device="cuda", seeds=1, timing=TIMING, mode=mode, cache_dir=cache_dir,
                        rl=RlSettings(workers_per_gpu=3, **{"anchor_copies": False, **options}))
    with Evaluator(config) as ev:
        results = {r.solution_id: r for r in ev.evaluate_many(_pairs())}
        return results, ev.mode_report


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("cache"))
    runs = {mode: _run(mode, cache) for mode in ("default", "rl")}
    return {**runs, "rl-options": _run("rl", cache, release_at_result=True, task_affinity=True),
            "rl-go-ahead": _run("rl", cache, plan_at_go_ahead=True)}


def test_both_modes_reach_the_same_verdicts(both):
    default, rl = both["default"][0], both["rl"][0]
    assert {k: r.outcome for k, r in rl.items()} == {k: r.outcome for k, r in default.items()}
    assert default["relu-wrong"].outcome is Outcome.INCORRECT
    assert default["relu-build-error"].outcome is not Outcome.CORRECT


def test_the_gate_left_at_the_result_and_task_affinity_reach_the_same_verdicts_timed(both):
    default, released = both["default"][0], both["rl-options"][0]
    assert {k: r.outcome for k, r in released.items()} == {k: r.outcome for k, r in default.items()}
    assert all(r.timings for r in released.values() if r.outcome is Outcome.CORRECT)


def test_every_task_has_one_carrier_and_its_other_candidates_reuse_the_cached_baselines(both):
    results, report = both["rl"]
    correct = [r for r in results.values() if r.outcome is Outcome.CORRECT]
    carriers = [r for r in correct if r.environment.get("baselines", "").startswith("timed")]
    assert len(carriers) == report["carriers"] == len({r.task_id for r in correct})
    cached = [r for r in correct if "cached from" in r.environment.get("baselines", "")]
    assert len(cached) == len(correct) - len(carriers)


def test_anchored_pytorch_candidates_have_a_live_eager_and_a_cached_compile_speedup(both):
    results, _ = both["rl"]
    anchored = [r for r in results.values() if "eager live" in r.environment.get("baselines", "")]
    assert anchored
    assert all(r.speedup_vs_eager and r.speedup_vs_compile for r in anchored)
    assert {r.environment["timing"] for r in anchored} == {"10 ms budget, baselines eager"}


def test_anchored_c_candidates_have_the_naive_port_live_and_serial_c_cached(both):
    results, _ = both["rl"]
    c = [r for k, r in results.items() if k.startswith("c-naive") and "naive_cuda live" in
         r.environment.get("baselines", "")]
    assert c and all({"serial_c", "naive_cuda"} <= set(r.speedups) for r in c)


def test_only_correct_candidates_reach_the_timed_pass(both):
    results, report = both["rl"]
    assert report["checked"] == sum(r.stage != "static" for r in results.values())
    assert report["timed"] == sum(r.outcome is Outcome.CORRECT for r in results.values())


def test_with_the_plan_at_the_go_ahead_the_verdicts_and_the_carriers_are_the_same(both):
    default, (results, report) = both["default"][0], both["rl-go-ahead"]
    assert {k: r.outcome for k, r in results.items()} == {k: r.outcome for k, r in default.items()}
    correct = [r for r in results.values() if r.outcome is Outcome.CORRECT]
    assert report["carriers"] == len({r.task_id for r in correct})


def test_with_the_plan_at_the_go_ahead_anchored_candidates_time_their_anchor_alone(both):
    results, _ = both["rl-go-ahead"]
    c = [r for k, r in results.items() if k.startswith("c-naive") and "naive_cuda live" in
         r.environment.get("baselines", "")]
    assert c and all({"serial_c", "naive_cuda"} <= set(r.speedups) for r in c)
    anchored = [r for r in results.values() if "eager live" in r.environment.get("baselines", "")]
    assert anchored and {r.environment["timing"] for r in anchored} == {"10 ms budget, baselines eager"}
    assert not any(f.code == "verdict_mismatch" for r in results.values() for f in r.flags)
