"""Full-size KernelBench-format problems through the evaluator's self-check on the GPU (marker `gpu`): the
sizes that broke fixed limits (issue 18, item 2) are evaluated, sized by the memory plan. Each task's
reference runs as its candidate, so every one must be CORRECT:

- a ReLU over 4096 x 393216 floats: a 6.4 GB output, over the old fixed 4 GiB cap;
- a sum over the middle dimension of 128 x 4096 x 4095 floats: 8.6 GB of input, whose reference step
  asked for 64 GiB (the fingerprint's uint8 -> int64 sum);
- an 11 x 11 average pooling over 16 x 64 x 2048 x 2048 floats: 17 GB of input, three seeds and three
  timing input sets of which do not fit beside their clones.

Run: `python3 -m pytest -q -s tests/gpu/test_full_size_gpu.py` (about a minute on an H200).
"""

from __future__ import annotations

import textwrap

import pytest

from cudaperf.evaluate import Evaluator, TimingConfig, self_check_config, self_check_solution
from cudaperf.tasks import task_from_source
from cudaperf.types import Outcome

pytestmark = pytest.mark.gpu

TEMPLATE = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, *args):
            super().__init__()
            self.args = args

        def forward(self, x):
            return {expr}


    {sizes}


    def get_inputs():
        return [torch.rand({shape})]


    def get_init_inputs():
        return {init}
''')

TASKS = {
    "full_relu": {"expr": "torch.relu(x)", "sizes": "batch_size = 4096\ndim = 393216",
                  "shape": "batch_size, dim", "init": "[]"},
    "full_sum": {"expr": "torch.sum(x, dim=self.args[0], keepdim=True)",
                 "sizes": "batch_size = 128\ndim1 = 4096\ndim2 = 4095\nreduce_dim = 1",
                 "shape": "batch_size, dim1, dim2", "init": "[reduce_dim]"},
    "full_avg_pool": {"expr": "torch.nn.functional.avg_pool2d(x, self.args[0])",
                      "sizes": ("batch_size = 16\nchannels = 64\nheight = 2048\nwidth = 2048\n"
                                "kernel_size = 11"),
                      "shape": "batch_size, channels, height, width", "init": "[kernel_size]"},
}


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    config = self_check_config(device="cuda", seeds=1, cache_dir=str(tmp_path_factory.mktemp("cache")),
                               timing=TimingConfig(budget_ms=5, warmup_ms=1, baselines=("eager",)))
    with Evaluator(config) as ev:
        yield ev


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_a_full_size_problem_passes_its_self_check(evaluator, task_id):
    task = task_from_source(TEMPLATE.format(**TASKS[task_id]), task_id)
    result = evaluator.evaluate(task, self_check_solution(task))
    print(f"{task_id}: {result.outcome.value} in {sum(result.stage_durations_s.values()):.1f} s; "
          f"{result.environment.get('memory_plan')}; "
          f"{[f.message for f in result.flags if f.code == 'memory_plan_degraded']}")
    assert result.outcome is Outcome.CORRECT, (result.stage, result.message[:2000])
    assert result.timings and "memory_plan" in result.environment
