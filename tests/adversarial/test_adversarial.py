"""Known reward hacks are caught; honest kernels pass.

One fixture file per hack of the table in docs/evaluation.md (`hack_<NN>_<name>.py`, several files for the
rows with several variants) and honest solutions under `honest/`. Each fixture declares, after its
docstring:
- `TASK`: the task it attacks: an example task (src/cudaperf/examples/tasks), or a plain one-configuration
  KernelBench-format file under `tasks/` (hack #13: the loader derives correctness-only configurations).
- `EXPECT`: what the full evaluator must report, `outcome:<Outcome value>` or `flag:<code>`; alternatives
  separated by `|` (any one suffices).
- `STATIC`: the ERROR code the static policy must raise, or None for hacks only runtime checks can see.
- optionally `CAUGHT = "timing corrected"`: the hack's answers are right and the defence takes its gain out
  of the time (the candidate is timed from the rounds where the trick fails) rather than failing it.
- optionally `RUNTIME_DISABLE` + `RUNTIME_EXPECT`: defence in depth. With the static rules named in
  RUNTIME_DISABLE switched off the file passes the static gate, and the runtime layers must still report
  RUNTIME_EXPECT.

Fixture files are never imported here: they are read as text and parsed (several would pip-install,
patch torch or write to file descriptors if executed outside the sandbox).

CPU tests: fixture metadata, the static verdicts, each fixture's CUDA compiles with NVRTC, the table is
covered, and the evaluator's front door (build + static, no GPU). GPU tests (`gpu` marker): the full
evaluator on every fixture and honest solution.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from cudaperf.anticheat.policy import Policy
from cudaperf.anticheat.static import check_source
from cudaperf.types import Outcome, Severity

HERE = Path(__file__).resolve().parent
HACKS = sorted(HERE.glob("hack_*.py"))
HONEST = sorted((HERE / "honest").glob("honest_*.py"))
FIXTURE_TASKS = HERE / "tasks"
TASK_IDS = {"vector_add", "relu", "softmax", "matmul", "row_sum", "layernorm", "kb_layernorm",
            "kb_scale_shift"}
HACK_ROWS = set(range(1, 17))  # docs/evaluation.md, "Known reward hacks and the defences that work"
OUTCOMES = {o.value for o in Outcome}


@cache
def meta(path: Path) -> dict:
    """The fixture's module-level constants (read with ast.literal_eval, never executed) + docstring."""
    tree = ast.parse(path.read_text())
    values: dict = {"__doc__": ast.get_docstring(tree) or ""}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.isupper():
                try:
                    values[name] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return values


def ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def error_codes(source: str, policy: Policy | None = None) -> set[str]:
    return {f.code for f in check_source(source, policy) if f.severity is Severity.ERROR}


def expectation_met(result, expect: str) -> bool:
    """`expect` = alternatives `outcome:<value>` / `flag:<code>` joined by '|'; one present suffices."""
    for alternative in expect.split("|"):
        kind, _, value = alternative.partition(":")
        if kind == "outcome" and result.outcome.value == value:
            return True
        if kind == "flag" and any(f.code == value for f in result.flags):
            return True
    return False


def clean_correct(result) -> bool:
    return result.outcome is Outcome.CORRECT and not any(f.severity is Severity.ERROR for f in result.flags)


def describe(result) -> str:
    flags = "; ".join(f"{f.code}[{f.severity.value}]: {f.message[:160]}" for f in result.flags)
    return (f"outcome={result.outcome.value} stage={result.stage} message={result.message[:400]!r} "
            f"flags: {flags}")


# -- fixture metadata ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", HACKS, ids=ids(HACKS))
def test_fixture_declares_task_expectation_and_static_verdict(path):
    m = meta(path)
    assert m.get("TASK") in TASK_IDS
    assert "STATIC" in m
    for expect in filter(None, (m.get("EXPECT"), m.get("RUNTIME_EXPECT"))):
        for alternative in expect.split("|"):
            kind, _, value = alternative.partition(":")
            assert kind in ("outcome", "flag") and value, alternative
            assert kind != "outcome" or value in OUTCOMES, alternative
    assert ("RUNTIME_DISABLE" in m) == ("RUNTIME_EXPECT" in m)


@pytest.mark.parametrize("path", HACKS, ids=ids(HACKS))
def test_fixture_docstring_names_the_hack_and_its_defence(path):
    doc = meta(path)["__doc__"]
    row = int(re.match(r"hack_(\d+)_", path.name).group(1))
    assert doc.startswith(f"Hack #{row}") and "Defence" in doc


def test_every_row_of_the_hack_table_has_a_fixture():
    rows = {int(re.match(r"hack_(\d+)_", p.name).group(1)) for p in HACKS}
    assert rows == HACK_ROWS


def test_there_are_at_least_eight_honest_solutions_covering_every_task():
    assert len(HONEST) >= 8
    assert {meta(p)["TASK"] for p in HONEST} == TASK_IDS


# -- the static policy --------------------------------------------------------------------------------

STATIC_HACKS = [p for p in HACKS if meta(p)["STATIC"]]
RUNTIME_ONLY = [p for p in HACKS if not meta(p)["STATIC"]]
DEPTH = [p for p in HACKS if "RUNTIME_DISABLE" in meta(p)]


@pytest.mark.parametrize("path", STATIC_HACKS, ids=ids(STATIC_HACKS))
def test_static_policy_catches_the_hack(path):
    assert meta(path)["STATIC"] in error_codes(path.read_text())


@pytest.mark.parametrize("path", RUNTIME_ONLY, ids=ids(RUNTIME_ONLY))
def test_runtime_only_fixture_passes_the_static_gate(path):
    """These hacks are invisible to the AST by design: the GPU test must then exercise the runtime layers.
    If the static policy learns to see one, move its code into the fixture's STATIC."""
    assert error_codes(path.read_text()) == set()


@pytest.mark.parametrize("path", DEPTH, ids=ids(DEPTH))
def test_runtime_variant_passes_the_static_gate_with_its_rules_disabled(path):
    policy = Policy(disabled_rules=tuple(meta(path)["RUNTIME_DISABLE"]))
    assert error_codes(path.read_text(), policy) == set()


@pytest.mark.parametrize("path", HONEST, ids=ids(HONEST))
def test_honest_solution_raises_no_static_error(path):
    flags = check_source(path.read_text())
    assert [f for f in flags if f.severity is Severity.ERROR] == []


# -- the CUDA in the fixtures is real -----------------------------------------------------------------


@pytest.fixture(scope="module")
def nvrtc_cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("nvrtc"))


@pytest.mark.parametrize("path", HACKS + HONEST, ids=ids(HACKS + HONEST))
def test_fixture_cuda_compiles(path, nvrtc_cache):
    extract = pytest.importorskip("cudaperf.toolchain.extract")
    from cudaperf.toolchain.nvrtc import compile_cuda

    units = [u for u in extract.extract_units(path.read_text()) if u.kind == "nvrtc" and u.resolved]
    for unit in units:
        out = compile_cuda(unit.source, options=unit.options, cache_dir=nvrtc_cache)
        assert out.cubin
    assert units or path.name == "honest_relu_helpers.py"  # that one compiles per block size, at runtime


# -- the evaluator's front door without a GPU ---------------------------------------------------------


@pytest.fixture(scope="module")
def tasks() -> dict:
    from cudaperf.tasks import load_tasks
    from cudaperf.tasks.examples import example_tasks_dir

    return {t.task_id: t for d in (example_tasks_dir(), FIXTURE_TASKS) for t in load_tasks(d)}


def test_the_fixture_tasks_are_plain_files_that_get_derived_configurations(tasks):
    from cudaperf.tasks.derived_configs import is_derived

    for task_id in ("kb_layernorm", "kb_scale_shift"):
        derived = [c for c in tasks[task_id].configs if is_derived(c)]
        assert len(tasks[task_id].configs) == 3 and len(derived) == 2, task_id
        assert derived[0].randomize_parameters and not any(c.timed for c in derived)


def _solution(path: Path):
    from cudaperf.solutions import solution_from_text

    return solution_from_text(path.read_text(), path.stem, str(path))


@pytest.fixture(scope="module")
def static_evaluator(tmp_path_factory):
    from cudaperf.evaluate import EvalConfig, Evaluator

    with Evaluator(EvalConfig(device="none", cache_dir=str(tmp_path_factory.mktemp("cache")),
                              build_workers=1)) as ev:
        yield ev


@pytest.mark.parametrize("path", STATIC_HACKS, ids=ids(STATIC_HACKS))
def test_evaluator_rejects_static_hack_before_running_it(path, tasks, static_evaluator):
    result = static_evaluator.evaluate(tasks[meta(path)["TASK"]], _solution(path))
    assert result.outcome is Outcome.POLICY_VIOLATION, describe(result)
    assert expectation_met(result, meta(path)["EXPECT"]), describe(result)


# -- the full evaluator on the GPU --------------------------------------------------------------------


def _gpu_config(cache_dir: str, policy: Policy | None = None):
    from cudaperf.evaluate import EvalConfig, TimingConfig

    # The compile baseline is skipped: it adds minutes of torch.compile and no anti-cheat signal.
    return EvalConfig(device="cuda", cache_dir=cache_dir, policy=policy,
                      timing=TimingConfig(baselines=("eager",)), coverage=True)


@pytest.fixture(scope="module")
def gpu_evaluator(tmp_path_factory):
    from cudaperf.evaluate import Evaluator

    with Evaluator(_gpu_config(str(tmp_path_factory.mktemp("cache")))) as ev:
        yield ev


@pytest.mark.gpu
@pytest.mark.parametrize("path", HACKS, ids=ids(HACKS))
def test_evaluator_catches_hack(path, tasks, gpu_evaluator):
    result = gpu_evaluator.evaluate(tasks[meta(path)["TASK"]], _solution(path))
    if meta(path).get("CAUGHT") == "timing corrected":  # right answers, the gain taken out of the time
        assert any(t.candidate.n_samples < t.rounds for t in result.timings), describe(result)
    else:
        assert not clean_correct(result), describe(result)
    assert expectation_met(result, meta(path)["EXPECT"]), describe(result)


@pytest.mark.gpu
@pytest.mark.parametrize("path", DEPTH, ids=ids(DEPTH))
def test_runtime_layers_catch_hack_without_the_static_gate(path, tasks, tmp_path):
    from cudaperf.evaluate import Evaluator

    policy = Policy(disabled_rules=tuple(meta(path)["RUNTIME_DISABLE"]))
    with Evaluator(_gpu_config(str(tmp_path), policy)) as ev:
        result = ev.evaluate(tasks[meta(path)["TASK"]], _solution(path))
    assert result.stage != "static", describe(result)
    assert not clean_correct(result), describe(result)
    assert expectation_met(result, meta(path)["RUNTIME_EXPECT"]), describe(result)


@pytest.mark.gpu
@pytest.mark.parametrize("path", HONEST, ids=ids(HONEST))
def test_evaluator_accepts_honest_solution(path, tasks, gpu_evaluator):
    result = gpu_evaluator.evaluate(tasks[meta(path)["TASK"]], _solution(path))
    assert result.outcome is Outcome.CORRECT, describe(result)
    assert [f for f in result.flags if f.severity is Severity.ERROR] == [], describe(result)
    assert not any(f.code == "unseen_inputs_slower" for f in result.flags), describe(result)
    print(f"{path.stem}: speedup vs eager {result.speedup_vs_eager}, coverage {result.coverage}")
