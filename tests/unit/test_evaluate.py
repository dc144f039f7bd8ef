"""The evaluation recipe on the CPU machine: outcome decision, the no-GPU path, and CPU-mode runs through
real sandboxed worker processes (pure-PyTorch candidates stand in for kernels where no GPU exists)."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig, decide_outcome
from cudaperf.solutions import solution_from_text
from cudaperf.stats import geomean
from cudaperf.types import ConfigCorrectness, Flag, InputConfig, Outcome, Severity, Task, TaskKind

TASK_SRC = textwrap.dedent("""
    import torch

    class Model(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    def get_input_configs():
        return [{"name": "small", "n": 1000}, {"name": "odd", "n": 4097}]

    def get_inputs(n=1000):
        return [torch.randn(n), torch.randn(n)]

    def get_init_inputs():
        return []
""")

FAST_SRC = textwrap.dedent('''
    import torch
    from cudaperf import cuda

    SRC = r"""
    extern "C" __global__ void add(const float* a, const float* b, float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = a[i] + b[i];
    }
    """
    _add = cuda.compile(SRC, "add")

    class ModelNew(torch.nn.Module):
        def forward(self, a, b):
            out = torch.empty_like(a)
            n = a.numel()
            _add(((n + 255) // 256,), (256,), a, b, out, n)
            return out
''')


def _task() -> Task:
    return Task(
        task_id="add",
        kind=TaskKind.PYTORCH,
        source=TASK_SRC,
        configs=(InputConfig("small", {"n": 1000}), InputConfig("odd", {"n": 4097})),
    )


def _ok(config: str) -> ConfigCorrectness:
    return ConfigCorrectness(config=config, correct=True, seeds=3)


def test_worker_fault_outcome_wins_over_correctness():
    outcome, _ = decide_outcome(Outcome.TIMEOUT, "stage correctness", (_ok("a"),), ())
    assert outcome is Outcome.TIMEOUT


def test_policy_error_flag_makes_policy_violation():
    flag = Flag("torch_compute_op", "aten.add called in forward", Severity.ERROR)
    outcome, message = decide_outcome(None, "", (_ok("a"),), (flag,))
    assert outcome is Outcome.POLICY_VIOLATION and "aten.add" in message


def test_a_cheat_code_raised_outside_the_rule_registry_makes_policy_violation():
    flag = Flag("lingering_threads", "1 Python thread(s) still running after the job", Severity.ERROR)
    assert decide_outcome(None, "", (_ok("a"),), (flag,))[0] is Outcome.POLICY_VIOLATION


def test_other_error_flag_makes_incorrect():
    flag = Flag("input_mutated", "input 0 changed", Severity.ERROR)
    assert decide_outcome(None, "", (_ok("a"),), (flag,))[0] is Outcome.INCORRECT


def test_warning_flags_do_not_fail_a_correct_result():
    flag = Flag("slow_build", "took long", Severity.WARNING)
    assert decide_outcome(None, "", (_ok("a"),), (flag,))[0] is Outcome.CORRECT


def test_one_wrong_config_makes_incorrect():
    bad = ConfigCorrectness(config="b", correct=False, seeds=3, message="max rel error 3.2")
    outcome, message = decide_outcome(None, "", (_ok("a"), bad), ())
    assert outcome is Outcome.INCORRECT and "b:" in message


def test_no_correctness_is_a_harness_error():
    assert decide_outcome(None, "", (), ())[0] is Outcome.HARNESS_ERROR


def test_geomean_ignores_missing_values():
    assert geomean([2.0, None, 8.0]) == pytest.approx(4.0)
    assert geomean([None]) is None


def test_bad_device_name_is_rejected_with_the_fix():
    with pytest.raises(ValueError, match="use 'auto'"):
        EvalConfig(device="gpu")


def test_without_gpu_build_and_static_run_and_the_rest_is_skipped(tmp_path):
    with Evaluator(EvalConfig(device="none", cache_dir=str(tmp_path), build_workers=1)) as ev:
        result = ev.evaluate(_task(), solution_from_text(FAST_SRC, "fast-add"))
    assert result.outcome is Outcome.SKIPPED
    assert result.build is not None and result.build.ok
    assert "skipped" in result.message


def test_without_gpu_the_structural_features_are_still_attached(tmp_path):
    with Evaluator(EvalConfig(device="none", cache_dir=str(tmp_path), build_workers=1)) as ev:
        result = ev.evaluate(_task(), solution_from_text(FAST_SRC, "fast-add"))
    (kernel,) = result.features
    assert kernel.kernel == "add" and kernel.resources is not None and kernel.resources.registers > 0


def test_without_tree_sitter_the_result_stands_with_a_note(tmp_path, monkeypatch):
    import sys

    import cudaperf.analysis as package

    for name in [n for n in sys.modules if n.startswith("cudaperf.analysis.")]:  # forget what loaded
        monkeypatch.delitem(sys.modules, name)
        monkeypatch.delattr(package, name.rsplit(".", 1)[1], raising=False)
    monkeypatch.setitem(sys.modules, "tree_sitter", None)  # import fails as if not installed
    with Evaluator(EvalConfig(device="none", cache_dir=str(tmp_path), build_workers=1)) as ev:
        result = ev.evaluate(_task(), solution_from_text(FAST_SRC, "fast-add"))
    assert result.outcome is Outcome.SKIPPED and result.features == ()
    assert any(f.code == "analysis_note" and "cudaperf[analysis]" in f.message for f in result.flags)


def test_syntax_error_is_classified_before_any_build(tmp_path):
    with Evaluator(EvalConfig(device="none", cache_dir=str(tmp_path), build_workers=1)) as ev:
        result = ev.evaluate(_task(), solution_from_text("def ModelNew(:\n", "broken"))
    assert result.outcome is Outcome.SYNTAX_ERROR


def test_compile_error_carries_the_compiler_log(tmp_path):
    bad = FAST_SRC.replace("const float* a", "const flaot* a")
    with Evaluator(EvalConfig(device="none", cache_dir=str(tmp_path), build_workers=1)) as ev:
        result = ev.evaluate(_task(), solution_from_text(bad, "bad"))
    assert result.outcome is Outcome.COMPILE_ERROR
    assert "flaot" in (result.build.log + result.message)


def test_torch_ops_in_forward_are_a_policy_violation_by_default(tmp_path):
    src = ("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
           "        return torch.add(a, b)\n")
    with Evaluator(EvalConfig(device="none", cache_dir=str(tmp_path), build_workers=1)) as ev:
        result = ev.evaluate(_task(), solution_from_text(src, "torch-add"))
    assert result.outcome is Outcome.POLICY_VIOLATION


def _cpu_config(tmp_path, baselines: tuple[str, ...] = ("eager",)) -> EvalConfig:
    from cudaperf.anticheat.policy import Policy

    return EvalConfig(
        device="cpu",
        cache_dir=str(tmp_path),
        build_workers=1,
        seeds=2,
        policy=Policy(allow_torch_ops=True),
        timing=TimingConfig(budget_ms=5, warmup_ms=1, baselines=baselines),
    )


PURE_TORCH = (
    "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        return {expr}\n"
)


@pytest.fixture(scope="module")
def cpu_evaluator(tmp_path_factory):
    """One CPU-mode Evaluator (one real sandboxed worker) for the tests below, timing against eager only:
    the worker starts once, and no test pays for inductor's C++ build of a torch.compile baseline
    (10-30 s on the shared 2-core machine; that path has its own slow test)."""
    with Evaluator(_cpu_config(tmp_path_factory.mktemp("cpu-eval"))) as ev:
        yield ev


def test_cpu_mode_correct_candidate_through_the_sandbox(cpu_evaluator):
    ev = cpu_evaluator
    result = ev.evaluate(_task(), solution_from_text(PURE_TORCH.format(expr="a + b"), "ok"))
    assert result.outcome is Outcome.CORRECT, result.message
    assert {c.config for c in result.correctness} == {"small", "odd"}


def test_each_timed_configuration_reports_its_rounds_and_its_disposals(cpu_evaluator):
    result = cpu_evaluator.evaluate(_task(), solution_from_text(PURE_TORCH.format(expr="a + b"), "timed"))
    assert result.timings and all(t.rounds > 0 for t in result.timings)
    assert all(t.dispose_ms > 0 for t in result.timings)  # refereed: the eager baseline's outputs disposed


def test_a_timing_without_the_overhead_function_reports_none(tmp_path):
    config = dataclasses.replace(_cpu_config(tmp_path), timing=dataclasses.replace(
        _cpu_config(tmp_path).timing, overhead=False))
    with Evaluator(config) as ev:
        result = ev.evaluate(_task(), solution_from_text(PURE_TORCH.format(expr="a + b"), "no-overhead"))
    assert result.timings and all(t.overhead_ms is None for t in result.timings), result.message


def test_cpu_mode_honest_candidates_keep_the_same_worker(cpu_evaluator):
    sols = [solution_from_text(PURE_TORCH.format(expr="a + b"), f"same-{i}") for i in range(3)]
    results = list(cpu_evaluator.evaluate_many([(_task(), s) for s in sols]))
    assert all(r.outcome is Outcome.CORRECT for r in results), [r.message for r in results]
    assert [f.code for r in results for f in r.flags if f.code == "worker_state_changed"] == []


def test_cpu_mode_batch_keeps_every_result_and_resumes(cpu_evaluator, tmp_path):
    from cudaperf.results import ResultStore

    ev = cpu_evaluator
    store = ResultStore(tmp_path / "r.jsonl")
    sols = [solution_from_text(PURE_TORCH.format(expr=e), f"s{i}") for i, e in enumerate(["a + b", "a - b"])]
    first = list(ev.evaluate_many([(_task(), s) for s in sols], store=store))
    again = list(ev.evaluate_many([(_task(), s) for s in sols], store=store))
    assert sorted(r.outcome.value for r in first) == ["correct", "incorrect"]
    assert again == [] and len(store.load()) == 2


@pytest.mark.slow
def test_cpu_mode_times_the_torch_compile_baseline_through_the_sandbox(tmp_path):
    with Evaluator(_cpu_config(tmp_path, baselines=("eager", "compile"))) as ev:
        result = ev.evaluate(_task(), solution_from_text(PURE_TORCH.format(expr="a + b"), "ok"))
    assert result.outcome is Outcome.CORRECT, result.message
    assert all(t.compiled is not None for t in result.timings) and result.speedup_vs_compile is not None


def test_extra_baselines_from_the_worker_become_config_baselines_and_speedups():
    from cudaperf.evaluate import _with_extra_baselines, speedups_by_baseline
    from cudaperf.types import ConfigTiming, Timing

    cand = Timing(median_ms=1.0, iqr_ms=0.0, min_ms=1.0, mean_ms=1.0, n_samples=10)
    serial = Timing(median_ms=40.0, iqr_ms=0.0, min_ms=40.0, mean_ms=40.0, n_samples=3)
    timings = _with_extra_baselines((ConfigTiming("large", cand),), {"large": {"serial_c": serial}})
    assert timings[0].baselines["serial_c"].median_ms == 40.0
    assert speedups_by_baseline(timings) == {"serial_c": pytest.approx(40.0)}


def test_the_referee_and_boundary_switches_reach_the_worker_pool(tmp_path):
    with Evaluator(EvalConfig(device="cpu", cache_dir=str(tmp_path), referee=False, boundary=False)) as ev:
        limits = ev._workers.limits
    assert (limits.referee, limits.boundary) == (False, False)


def test_a_timed_result_with_native_host_code_says_its_timings_are_unverified():
    from cudaperf.evaluate import with_native_timing_note
    from cudaperf.types import ConfigTiming, EvalResult, Outcome, Solution, SolutionFormat, Timing

    timing = ConfigTiming("c", Timing(1.0, 0.0, 1.0, 1.0, 10))
    timed = EvalResult("t", "s", Outcome.CORRECT, timings=(timing,))
    inline, c, fast = (Solution("s", "x", f) for f in (SolutionFormat.INLINE, SolutionFormat.CUDA_C,
                                                       SolutionFormat.FAST))
    assert [f.code for f in with_native_timing_note(inline, timed).flags] == ["timing_unverified"]
    assert [f.code for f in with_native_timing_note(c, timed).flags] == ["timing_unverified"]
    assert with_native_timing_note(fast, timed).flags == timed.flags
    untimed = EvalResult("t", "s", Outcome.INCORRECT)
    assert with_native_timing_note(inline, untimed).flags == ()
