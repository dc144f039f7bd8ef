"""Running a task's own code: seeded inputs on the requested device, constructor arguments per
configuration, and meta-device size descriptions."""

from __future__ import annotations

import textwrap

import torch

from cudaperf.tasks import task_from_source
from cudaperf.tasks.runtime import (
    accepted_kwargs,
    describe_task,
    load_module,
    make_init_inputs,
    make_inputs,
    run_reference_cpu,
)
from cudaperf.types import InputConfig

SRC = textwrap.dedent('''
    import numpy as np
    import torch

    class Model(torch.nn.Module):
        def __init__(self, dim, scale=1.0):
            super().__init__()
            self.scale = scale

        def forward(self, x, y):
            return x * self.scale + y.sum()

    def get_input_configs():
        return [{"name": "small", "rows": 3, "dim": 5}, {"name": "big", "rows": 1000, "dim": 1000}]

    def get_inputs(rows=3, dim=5):
        # y comes from numpy: a CPU tensor whatever the default device is
        return [torch.randn(rows, dim), torch.from_numpy(np.ones(dim, dtype=np.float32))]

    def get_init_inputs(dim=5):
        return [dim]
''')

SMALL = InputConfig("small", {"rows": 3, "dim": 5})


def _task():
    return task_from_source(SRC, "scaled")


def test_same_seed_gives_same_inputs():
    module = load_module(_task())
    a, b = make_inputs(module, SMALL, 7, "cpu"), make_inputs(module, SMALL, 7, "cpu")
    assert torch.equal(a[0], b[0])


def test_other_seed_gives_other_inputs():
    module = load_module(_task())
    assert not torch.equal(make_inputs(module, SMALL, 7, "cpu")[0], make_inputs(module, SMALL, 8, "cpu")[0])


def test_inputs_follow_the_config_params():
    module = load_module(_task())
    assert make_inputs(module, SMALL, 0, "cpu")[0].shape == (3, 5)


def test_inputs_are_created_on_the_default_device():
    # meta stands in for cuda here: randn must run under the requested device, not on the CPU
    module = load_module(_task())
    assert make_inputs(module, SMALL, 0, "meta")[0].device.type == "meta"


def test_inputs_made_elsewhere_are_moved_to_the_device():
    module = load_module(_task())
    assert make_inputs(module, SMALL, 0, "meta")[1].device.type == "meta"


def test_init_inputs_receive_only_accepted_params():
    module = load_module(_task())
    assert make_init_inputs(module, SMALL) == [5]


def test_missing_get_init_inputs_means_no_arguments():
    src = "import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\n"
    assert make_init_inputs(load_module(task_from_source(src, "t")), InputConfig("default")) == []


def test_accepted_kwargs_passes_everything_to_var_keyword():
    def fn(**kw):
        return kw

    assert accepted_kwargs(fn, {"a": 1, "b": 2}) == {"a": 1, "b": 2}


def test_describe_task_gives_sizes_without_allocating():
    infos = describe_task(_task(), run_reference=True)
    big = infos[1]
    assert (big.inputs[0].shape, big.input_bytes, big.outputs[0].shape) == ((1000, 1000), 4_004_000,
                                                                            (1000, 1000))


def test_describe_task_reports_code_that_fails_on_meta():
    src = SRC.replace("return [torch.randn(rows, dim),", "return [torch.randn(rows, dim).numpy(),")
    infos = describe_task(task_from_source(src, "t"))
    assert all("meta" in i.error or "numpy" in i.error.lower() for i in infos) and infos[0].error


def test_run_reference_cpu_is_empty_for_a_good_task():
    assert run_reference_cpu(_task(), SMALL) == ""


def test_run_reference_cpu_reports_nan_outputs():
    src = SRC.replace("return x * self.scale + y.sum()", "return x * float('nan')")
    assert "NaN" in run_reference_cpu(task_from_source(src, "t"), SMALL)
