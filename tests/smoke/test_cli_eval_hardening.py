"""`cudaperf eval` as a newcomer and a hostile batch meet it (issue 18): a missing entry point is a static
error on every machine, every result that is not correct is printed with its reason, a batch of candidates
whose outputs hold NaN, infinities, huge and denormal values (or that raise) stores a row for every one
and exits 0, `cudaperf report` reads that file, and the self-check passes on honest tasks.

The batch and self-check tests run a real CPU-mode sandboxed worker (pure-PyTorch candidates stand in
for kernels); the GPU version with real kernels is tests/gpu/test_hostile_batch_gpu.py."""

from __future__ import annotations

import contextlib
import io
import json
import textwrap

import pytest

from cudaperf.cli import main
from cudaperf.results import ResultStore, to_json_line
from cudaperf.tasks.examples import example_tasks_dir
from cudaperf.types import EvalResult, Outcome, from_dict

# A plain KernelBench-format task (one configuration, so the loader derives two more) whose reference
# output itself holds infinities, huge and denormal values: a correct copy of it is timed with them.
SPECIAL = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, x):
            y = torch.where(x > 2.0, torch.full_like(x, float("inf")), x * 1e37)
            return torch.where(x < -2.0, x * 1e-41, y)

    batch_size = 32
    dim = 96

    def get_inputs():
        return [torch.randn(batch_size, dim)]

    def get_init_inputs():
        return []
""")

CANDIDATE = ("import torch\nimport torch.nn as nn\n\n"
             "class ModelNew(nn.Module):\n    def forward(self, x):\n{body}")
CANDIDATES = {
    "special__honest": """        y = torch.where(x > 2.0, torch.full_like(x, float("inf")), x * 1e37)
        return torch.where(x < -2.0, x * 1e-41, y)
""",
    "special__all_nan": "        return torch.full_like(x, float('nan'))\n",
    "special__plus_inf": "        return torch.full_like(x, float('inf'))\n",
    "special__minus_inf": "        return torch.full_like(x, float('-inf'))\n",
    "special__huge": "        return x * 3e38\n",
    "special__denormal": "        return x * 1e-44\n",
    "special__raises": "        raise RuntimeError('the kernel exploded')\n",
    "special__returns_none": "        return None\n",
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path / "cache"))


def _write(directory, files: dict[str, str]):
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


@pytest.mark.parametrize("source", ["", "import torch\n\nclass Something(torch.nn.Module):\n    pass\n"],
                         ids=["empty", "no-modelnew"])
def test_a_missing_entry_point_fails_statically_on_a_cpu_machine(tmp_path, capsys, source):
    solution = tmp_path / "relu.py"
    solution.write_text(source)
    rc = main(["eval", str(example_tasks_dir() / "relu.py"), str(solution), "--device", "none", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert (rc, printed["outcome"], printed["stage"], printed["build"]) == (
        1, Outcome.INVALID_SOLUTION.value, "static", None)


def test_a_batch_prints_the_reason_of_every_result_that_is_not_correct(tmp_path, capsys):
    solutions = _write(tmp_path / "sols", {"relu.py": "", "softmax.py": "x = 1\n"})
    rc = main(["eval", "--tasks", str(example_tasks_dir()), "--solutions", str(solutions),
               "--out", str(tmp_path / "r.jsonl"), "--device", "none"])
    out = capsys.readouterr().out
    assert rc == 0 and "Why results are not correct" in out
    assert "the solution is empty" in out and "no `class ModelNew`" in out


def test_report_prints_the_reasons(tmp_path, capsys):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(EvalResult("relu", "a", Outcome.SKIPPED, message="no CUDA GPU on this machine: skipped"))
    assert main(["report", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert "Why results are not correct" in out and "no CUDA GPU on this machine" in out


@pytest.fixture(scope="module")
def hostile_batch(tmp_path_factory):
    """The batch command over the hostile candidates, once: (exit status, printed lines, results file)."""
    root = tmp_path_factory.mktemp("hostile")
    mp = pytest.MonkeyPatch()
    mp.setenv("CUDAPERF_CACHE_DIR", str(root / "cache"))
    tasks = _write(root / "tasks", {"special.py": SPECIAL})
    sols = _write(root / "sols", {f"{k}.py": CANDIDATE.format(body=v) for k, v in CANDIDATES.items()})
    out = root / "r.jsonl"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        rc = main(["eval", "--tasks", str(tasks), "--solutions", str(sols), "--out", str(out), "--device",
                   "cpu", "--allow-torch-ops", "--baselines", "eager", "--seeds", "1", "--timing-budget-ms",
                   "2", "--json"])
    mp.undo()
    return rc, [line for line in buffer.getvalue().splitlines() if line.startswith("{")], out


def test_a_hostile_batch_exits_normally(hostile_batch):
    assert hostile_batch[0] == 0


def test_every_hostile_candidate_has_a_stored_row(hostile_batch):
    stored = {r.solution_id.rsplit("/", 1)[-1]: r for r in ResultStore(hostile_batch[2]).load()}
    assert set(stored) == set(CANDIDATES)
    assert stored["special__honest"].outcome is Outcome.CORRECT, stored["special__honest"].message
    assert stored["special__honest"].timings, "the honest copy is timed"
    wrong = {k: r.outcome for k, r in stored.items() if k != "special__honest"}
    assert Outcome.CORRECT not in wrong.values() and Outcome.HARNESS_ERROR not in wrong.values(), wrong


def test_every_hostile_result_is_printed_as_a_json_line(hostile_batch):
    printed = [json.loads(line) for line in hostile_batch[1]]
    assert len(printed) == len(CANDIDATES)


def test_stored_hostile_rows_read_back_unchanged(hostile_batch):
    """Written, read, written again: the same line (NaN != NaN, so the text form is compared)."""
    for result in ResultStore(hostile_batch[2]).load():
        line = to_json_line(result)
        assert to_json_line(from_dict(EvalResult, json.loads(line))) == line


def test_report_reads_the_hostile_batch(hostile_batch, capsys):
    assert main(["report", str(hostile_batch[2]), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "Why results are not correct" in out and "special" in out


@pytest.mark.slow
def test_the_self_check_passes_on_honest_tasks(tmp_path, capsys):
    tasks = _write(tmp_path / "tasks", {"special.py": SPECIAL})
    out = tmp_path / "self.jsonl"
    rc = main(["eval", "--self-check", str(tasks), str(example_tasks_dir() / "relu.py"), "--out", str(out),
               "--device", "cpu", "--seeds", "1", "--timing-budget-ms", "2"])
    results = {r.task_id: r for r in ResultStore(out).load()}
    assert rc == 0 and set(results) == {"special", "relu"}
    assert all(r.outcome is Outcome.CORRECT for r in results.values()), {
        k: r.message for k, r in results.items()}
    assert {c.config for c in results["special"].correctness} == {"default", "derived_1", "derived_2"}
