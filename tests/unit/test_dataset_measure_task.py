"""The in-child measurement recipe (measure_task.py) run on the CPU: the generated CUDA implementations
need a GPU, so each test substitutes implementations that compute on the CPU (the serial C reference
through ctypes for C tasks, the task's own `Model` for PyTorch tasks) plus deliberately wrong and raising
ones, then checks the rows the recipe emits. The timing harness uses its CPU clock here."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest
import torch

from cudaperf.datasets import registry
from cudaperf.datasets.measure.options import MeasureOptions
from cudaperf.datasets.measure.pool import GpuLock
from cudaperf.datasets.measure.task_measurement import (
    TIMING_NICE,
    CTaskMeasure,
    TorchTaskMeasure,
    raised_priority,
)
from cudaperf.datasets.records import GeneratedTask, Implementation
from cudaperf.types import TaskKind

C_VIA_REFERENCE = '''
from cudaperf.tasks import cref
from cudaperf.tasks.ctask import from_json

TASK = from_json({text!r})
BUILD = cref.build_reference(TASK)


def {entry}(**kw):
    values = {{k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in kw.items()}}
    cref.call(TASK, BUILD, values)  # CPU tensors share memory with their numpy views
    {after}
'''


def c_impl(task, strategy: str, after: str = "pass", baseline: bool = False) -> Implementation:
    from cudaperf.tasks.ctask import from_json

    entry = from_json(task.text).entry
    src = C_VIA_REFERENCE.format(text=task.text, entry=entry, after=after)
    return Implementation(f"{task.task_id}/{strategy}", task.task_id, strategy, src, (strategy,), baseline)


def run_recipe(kind, task, impls, configs=("small",), skip=frozenset(), lock=None, compile_baseline=False,
               **more_options):
    messages = []
    options = MeasureOptions(out_dir=Path("unused"), budget_ms=1.0, warmup_ms=0.5, min_reps=3, max_reps=5,
                             compile_baseline=compile_baseline, serial_budget_ms=1.0, **more_options)
    measurer = kind(task, options, torch.device("cpu"), lambda *m: messages.append(m), lock or GpuLock(None),
                    set(skip))
    measurer.impls = impls
    measurer.config_names = lambda: list(configs)
    info = measurer.run()
    rows = {(m[1]["config"], m[1]["strategy"]): m[1] for m in messages if m[0] == "row"}
    return info, rows, messages


@pytest.fixture(scope="module")
def c_task():
    return registry.build_index(0, families=["map"])[0]


def test_a_correct_c_implementation_is_timed_with_both_c_baselines(c_task):
    _, rows, _ = run_recipe(CTaskMeasure, c_task, [c_impl(c_task, "naive", baseline=True)])
    row = rows[("small", "naive")]
    assert row["status"] == "ok" and row["median_ms"] > 0 and row["n_samples"] >= 3
    assert row["naive_ms"] == row["median_ms"] and row["serial_c_ms"] > 0 and row["timing_checked"]


def test_timed_rows_say_at_which_nice_they_were_timed(c_task):
    _, rows, _ = run_recipe(CTaskMeasure, c_task, [c_impl(c_task, "naive", baseline=True)],
                            raise_priority=True)
    assert rows[("small", "naive")]["timing_nice"] == (TIMING_NICE if os.geteuid() == 0 else None)


def test_by_default_rows_are_timed_at_the_normal_nice(c_task):
    _, rows, _ = run_recipe(CTaskMeasure, c_task, [c_impl(c_task, "naive", baseline=True)])
    assert rows[("small", "naive")]["timing_nice"] is None


def test_by_default_the_compiled_baselines_first_run_holds_the_lock_shared(torch_task, compile_log):
    run_recipe(TorchTaskMeasure, torch_task, [torch_impl(torch_task, "naive", "ModelNew = Model\n")],
               lock=RecordingLock(compile_log), compile_baseline=True)
    after = compile_log[compile_log.index("compile") + 1:]
    assert after[:3] == ["shared+", "shared-", "exclusive+"]


def test_raised_priority_holds_inside_the_block_and_is_undone_after():
    if os.geteuid() != 0:
        pytest.skip("raising a thread's priority needs root")
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with raised_priority() as nice:
        inside = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert (nice, inside) == (TIMING_NICE, TIMING_NICE)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


def test_a_refused_priority_is_reported_as_none(monkeypatch):
    def refuse(*_):
        raise PermissionError("not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    with raised_priority() as nice:
        pass
    assert nice is None


WRITES_EVERYTHING = "[t.add_(1) for t in kw.values() if hasattr(t, 'add_') and t.is_floating_point()]"


def test_a_wrong_c_output_is_incorrect_and_not_timed(c_task):
    wrong = c_impl(c_task, "coarsened", after="kw['out'].add_(1)")
    _, rows, _ = run_recipe(CTaskMeasure, c_task, [c_impl(c_task, "naive", baseline=True), wrong])
    coarsened = rows[("small", "coarsened")]
    assert coarsened["status"] == "incorrect" and coarsened["median_ms"] is None


def test_an_implementation_writing_its_inputs_spoils_only_itself(c_task):
    vandal = c_impl(c_task, "coarsened", after=WRITES_EVERYTHING)
    _, rows, _ = run_recipe(CTaskMeasure, c_task, [vandal, c_impl(c_task, "naive", baseline=True)])
    assert rows[("small", "coarsened")]["status"] == "incorrect"
    assert rows[("small", "naive")]["status"] == "ok"


def test_an_unwritten_out_array_fails_on_the_poison(c_task):
    lazy = Implementation(f"{c_task.task_id}/grid_stride", c_task.task_id, "grid_stride",
                          "def " + registry_entry(c_task) + "(**kw):\n    pass\n")
    _, rows, _ = run_recipe(CTaskMeasure, c_task, [lazy])
    assert rows[("small", "grid_stride")]["status"] == "incorrect"


def registry_entry(task) -> str:
    from cudaperf.tasks.ctask import from_json

    return from_json(task.text).entry


def test_a_raising_implementation_is_a_runtime_error_row(c_task):
    boom = Implementation(f"{c_task.task_id}/vectorized", c_task.task_id, "vectorized",
                          "def " + registry_entry(c_task) + "(**kw):\n    raise RuntimeError('boom')\n")
    _, rows, _ = run_recipe(CTaskMeasure, c_task, [boom])
    vectorized = rows[("small", "vectorized")]
    assert vectorized["status"] == "runtime_error" and "boom" in vectorized["message"]


def test_skipped_keys_are_neither_planned_nor_measured(c_task):
    impls = [c_impl(c_task, "naive", baseline=True), c_impl(c_task, "grid_stride")]
    skip = {(c_task.task_id, "small", impls[1].impl_id)}
    _, rows, messages = run_recipe(CTaskMeasure, c_task, impls, skip=skip)
    plan = next(m for m in messages if m[0] == "plan")[2]
    assert set(rows) == {("small", "naive")} and tuple(skip.pop()) not in map(tuple, plan)


def test_inout_tasks_are_timed_without_rechecks():
    task = registry.build_index(0, families=["sort"])[0]
    _, rows, _ = run_recipe(CTaskMeasure, task, [c_impl(task, "naive", baseline=True)])
    assert rows[("small", "naive")]["status"] == "ok" and rows[("small", "naive")]["timing_checked"] is False


@pytest.fixture(scope="module")
def torch_task():
    return registry.build_index(0, families=["elementwise"])[0]


def torch_impl(task, strategy: str, extra: str) -> Implementation:
    return Implementation(f"{task.task_id}/{strategy}", task.task_id, strategy, task.text + "\n" + extra,
                          (strategy,))


def test_a_pytorch_implementation_is_checked_and_timed_against_eager(torch_task):
    same = torch_impl(torch_task, "naive", "ModelNew = Model\n")
    off = torch_impl(torch_task, "grid_stride", "class ModelNew(Model):\n    def forward(self, *a):\n"
                                                "        return super().forward(*a) + 1.0\n")
    _, rows, _ = run_recipe(TorchTaskMeasure, torch_task, [same, off])
    assert rows[("small", "naive")]["status"] == "ok" and rows[("small", "naive")]["eager_ms"] > 0
    assert rows[("small", "grid_stride")]["status"] == "incorrect"


def test_task_info_reports_where_the_time_went(torch_task):
    naive = torch_impl(torch_task, "naive", "ModelNew = Model\n")
    info, _, _ = run_recipe(TorchTaskMeasure, torch_task, [naive])
    assert info["status"] == "ok" and {"reference", "check", "timing"} <= set(info["durations_s"])


def test_a_lost_context_names_the_culprit_and_its_configuration(c_task, monkeypatch):
    from cudaperf.datasets.measure import task_measurement as measure_task
    from cudaperf.datasets.measure.pool import ContextLost

    monkeypatch.setattr(measure_task, "context_alive", lambda device: False)
    boom = Implementation(f"{c_task.task_id}/vectorized", c_task.task_id, "vectorized",
                          "def " + registry_entry(c_task) + "(**kw):\n    raise "
                                                            "RuntimeError('illegal address')\n")
    messages = []
    options = MeasureOptions(out_dir=Path("unused"), compile_baseline=False, serial_budget_ms=1.0)
    measurer = CTaskMeasure(c_task, options, torch.device("cpu"), lambda *m: messages.append(m),
                            GpuLock(None), set())
    measurer.impls = [boom]
    measurer.config_names = lambda: ["odd"]
    with pytest.raises(ContextLost, match="illegal address"):
        measurer.run()
    assert messages[-1] == ("phase", c_task.task_id, "context_lost", "odd", [boom.impl_id])


def test_a_kernel_that_does_not_compile_is_a_compile_error_row(c_task):
    src = ('from cudaperf import cuda\nSOURCE = "extern \\"C\\" __global__ void k() { syntax error }"\n'
           f"def {registry_entry(c_task)}(**kw):\n    cuda.load(SOURCE)\n")
    broken = Implementation(f"{c_task.task_id}/vectorized", c_task.task_id, "vectorized", src)
    _, rows, _ = run_recipe(CTaskMeasure, c_task, [broken])
    assert rows[("small", "vectorized")]["status"] == "compile_error"


class RecordingLock(GpuLock):
    """Records when each mode is taken and left, in one log with the compile events."""

    def __init__(self, log: list):
        super().__init__(None)
        self.log = log

    @contextlib.contextmanager
    def _held(self, operation, mode):
        self.log.append(f"{mode}+")
        yield
        self.log.append(f"{mode}-")


@pytest.fixture
def compile_log(monkeypatch):
    from torch._inductor import compile_fx

    log: list = []
    real = compile_fx.compile_fx

    def spy(*args, **kwargs):
        # compile_fx calls itself once more, through the module, to apply its config patches (the
        # baseline's Inductor options): one compile, logged by the call that does it
        if not kwargs.get("config_patches"):
            log.append("compile")
        return real(*args, **kwargs)

    monkeypatch.setattr(compile_fx, "compile_fx", spy)
    return log


def _outside_every_hold(log: list, event: str) -> bool:
    depth = 0
    for item in log:
        depth += item.endswith("+") - item.endswith("-")
        if item == event:
            return depth == 0
    raise AssertionError(f"{event} never happened: {log}")


def test_inductor_compiles_the_baseline_outside_the_gpu_lock(torch_task, compile_log):
    naive = torch_impl(torch_task, "naive", "ModelNew = Model\n")
    _, rows, _ = run_recipe(TorchTaskMeasure, torch_task, [naive],
                            lock=RecordingLock(compile_log), compile_baseline=True)
    assert rows[("small", "naive")]["compile_ms"] > 0 and _outside_every_hold(compile_log, "compile")


def test_an_exclusive_compile_first_run_holds_the_lock_alone(torch_task, compile_log):
    """`--exclusive-compile-first-run`: Triton's autotuning at the first launch shares the GPU with no one."""
    run_recipe(TorchTaskMeasure, torch_task, [torch_impl(torch_task, "naive", "ModelNew = Model\n")],
               lock=RecordingLock(compile_log), compile_baseline=True, compile_first_run_exclusive=True)
    after = compile_log[compile_log.index("compile") + 1:]
    assert after[:3] == ["exclusive+", "exclusive-", "exclusive+"]


GRAPH_BREAK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.relu(x)
        torch._dynamo.graph_break()
        return y * 2.0


def get_input_configs():
    return [{"name": "small", "n": 64}]


def get_inputs(n=64, **_):
    return [torch.randn(n)]


def get_init_inputs(**_):
    return []
'''


def test_a_model_with_a_graph_break_is_compiled_under_the_lock(compile_log, monkeypatch):
    monkeypatch.setattr(registry, "implementations", lambda task: [])  # the test sets its own
    task = GeneratedTask("pt_break_test", TaskKind.PYTORCH, "elementwise", {}, GRAPH_BREAK, "")
    _, rows, _ = run_recipe(TorchTaskMeasure, task, [torch_impl(task, "naive", "ModelNew = Model\n")],
                            lock=RecordingLock(compile_log), compile_baseline=True)
    assert rows[("small", "naive")]["compile_ms"] > 0 and not _outside_every_hold(compile_log, "compile")
