"""Derived configurations: a task with fewer than three configurations gets correctness-only ones from its
module-level size constants (other, smaller, odd values; parameters randomised in one)."""

from __future__ import annotations

import pytest
import torch

from cudaperf.tasks import derived_configs, runtime
from cudaperf.tasks.kernelbench import TaskError, task_from_source, timed_configs

RELU = '''
import torch
from torch import nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

batch_size = 4096
dim = 393216

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
'''

CONV = '''
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias

batch_size = 128
in_channels = 64
out_channels = 128
height = width = 128
kernel_size = 3
bias_shape = (out_channels, 1, 1)

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
'''

ATTENTION = '''
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x)[0]

batch_size = 16
seq_len = 512
embed_dim = 128
num_heads = 16

def get_inputs():
    return [torch.rand(batch_size, seq_len, embed_dim)]

def get_init_inputs():
    return [embed_dim, num_heads]
'''


def test_size_constants_include_arithmetic_and_tuples_but_not_unread_names():
    source = "N = 2048 * 2\nshape = (8192 * 2,)\nunused = 7\nscale = 0.5\nflag = True\nx = N + shape[0]\n"
    assert derived_configs.int_constants(source) == {"N": 4096, "shape": (16384,)}


def test_substitute_reruns_module_values_computed_from_a_constant():
    source = derived_configs.substitute(CONV, {"out_channels": 57})
    namespace: dict = {}
    exec(compile(source, "<conv>", "exec"), namespace)  # noqa: S102 - our own test source
    assert namespace["bias_shape"] == (57, 1, 1)


def test_a_one_configuration_task_gets_two_derived_correctness_only_configurations():
    task = task_from_source(RELU, "relu")
    derived = [c for c in task.configs if not c.timed]
    assert [c.name for c in derived] == ["derived_1", "derived_2"]
    assert timed_configs(task) == ("default",)


def test_derived_sizes_are_smaller_and_odd():
    task = task_from_source(RELU, "relu")
    for config in task.configs[1:]:
        for name, value in config.module_values.items():
            original = {"batch_size": 4096, "dim": 393216}[name]
            assert value < original and value % 2 == 1


def test_the_first_derived_configuration_randomises_parameters():
    task = task_from_source(RELU, "relu")
    assert [c.randomize_parameters for c in task.configs[1:]] == [True, False]


def test_derived_modules_make_inputs_of_the_derived_shape():
    task = task_from_source(RELU, "relu")
    config = task.configs[1]
    module = runtime.load_module(task, config)
    (x,) = runtime.make_inputs(module, config, seed=0, device="meta")
    assert tuple(x.shape) == (config.module_values["batch_size"], config.module_values["dim"])


def test_sizes_tied_by_the_model_fall_back_to_variants_the_reference_accepts():
    task = task_from_source(ATTENTION, "attention")
    assert len([c for c in task.configs if not c.timed]) == 2
    for config in task.configs[1:]:
        assert runtime.runs_on_meta(task, config) == ""


def test_a_task_with_three_configurations_gets_none():
    source = RELU + "\ndef get_input_configs():\n    return [{'name': n} for n in ('a', 'b', 'c')]\n"
    task = task_from_source(source, "relu3")
    assert all(c.timed for c in task.configs) and len(task.configs) == 3


def test_a_task_opts_out_with_a_stated_reason():
    source = RELU + "\nCUDAPERF_TASK = {'no_derived_configs': 'the size is the benchmark'}\n"
    task = task_from_source(source, "relu")
    assert len(task.configs) == 1
    assert task.notes == ("no derived configurations: the size is the benchmark",)


def test_opting_out_without_a_reason_is_refused():
    source = RELU + "\nCUDAPERF_TASK = {'no_derived_configs': ''}\n"
    with pytest.raises(TaskError, match="must state the reason"):
        task_from_source(source, "relu")


def test_a_task_without_size_constants_says_so():
    source = RELU.replace("batch_size = 4096\ndim = 393216\n", "").replace("batch_size, dim", "4, 5")
    task = task_from_source(source, "relu")
    assert len(task.configs) == 1 and "no module-level size constant" in task.notes[0]


def test_matching_constant_parameters_get_the_same_random_values():
    reference, candidate = torch.nn.LayerNorm(64), torch.nn.LayerNorm(64)
    assert runtime.randomize_constant_parameters(reference, candidate, seed=1) == ""
    assert torch.equal(reference.weight, candidate.weight) and torch.equal(reference.bias, candidate.bias)
    assert reference.weight.std() > 0.1 and reference.bias.std() > 0.1


def test_a_candidate_without_the_constant_parameters_is_named():
    reference, candidate = torch.nn.LayerNorm(64), torch.nn.Identity()
    note = runtime.randomize_constant_parameters(reference, candidate, seed=1)
    assert "weight" in note and reference.weight.std() > 0.1


def test_randomly_initialised_parameters_are_left_alone():
    torch.manual_seed(0)
    reference = torch.nn.Linear(8, 8)
    before = reference.weight.clone()
    runtime.randomize_constant_parameters(reference, torch.nn.Linear(8, 8), seed=1)
    assert torch.equal(reference.weight, before)


def test_integer_parameters_of_a_declared_configuration_are_varied_too():
    source = '''
import torch

class Model(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.lin = torch.nn.Linear(features, features)

    def forward(self, x):
        return self.lin(x)

def get_input_configs():
    return [{"name": "small", "batch": 16, "features": 64}, {"name": "big", "batch": 64, "features": 256}]

def get_inputs(batch=2, features=8):
    return [torch.randn(batch, features)]

def get_init_inputs(features=8):
    return [features]
'''
    task = task_from_source(source, "linear")
    (derived,) = [c for c in task.configs if not c.timed]
    assert derived.params["batch"] < 16 and derived.params["features"] < 64 and derived.params["batch"] % 2


def test_a_derivation_is_remembered_per_source(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path))
    first = task_from_source(RELU, "relu")
    calls = []
    again = derived_configs.cached_derive(RELU, first.configs[:1], lambda c: calls.append(c) or "")
    assert again.configs == first.configs[1:] and calls == []


RNN_STATE = '''
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.h0 = torch.zeros(batch_size, width)  # the module's batch size, read by the model itself

    def forward(self, x):
        return x + self.h0

batch_size = 16
width = 64

def get_inputs():
    return [torch.rand(batch_size, width)]

def get_init_inputs():
    return [width]
'''


def test_a_constant_the_model_reads_itself_keeps_its_value():
    """An honest candidate copies the task file, constants included: varying one the model reads as a
    global would make that copy wrong on every derived configuration."""
    task = task_from_source(RNN_STATE, "rnn_state")
    derived = [c for c in task.configs if derived_configs.is_derived(c)]
    assert derived and all("batch_size" not in c.module_values for c in derived)
    assert any("width" in c.module_values for c in derived)
