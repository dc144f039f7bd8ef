"""Full-size KernelBench-format problems through the evaluator's self-check on the GPU (marker `gpu`): the
sizes that broke fixed limits (issue 18, item 2) are evaluated, sized by the memory plan. Each task's
reference runs as its candidate, so every one must be CORRECT:

- a ReLU over 4096 x 393216 floats: a 6.4 GB output, over the old fixed 4 GiB cap (then refused by a plan
  that counted seven output-sized comparison temporaries, with 43 GB free beside the referee);
- a sum over the middle dimension of 128 x 4096 x 4095 floats: 8.6 GB of input, whose reference step
  asked for 64 GiB (the fingerprint's uint8 -> int64 sum), then the mutation check's 8 GiB byte mask;
- an 11 x 11 average pooling over 16 x 64 x 2048 x 2048 floats: 17 GB of input, three seeds and three
  timing input sets of which do not fit beside their clones.

Also on the device: one comparison and one mutation check of 1 GiB tensors allocate at most
`correctness.COMPARE_CHUNK_BYTES`; the referee gives its cached blocks back after a job's references; and
a sequence of distinct large tasks in the same Evaluator (a 4D tensor-matrix product whose old comparison
asked for 24 GiB, then the 17 GB pooling, then a 6 GiB ReLU) is CORRECT throughout: memory the worker and
the referee keep for later jobs gives way to the task at hand (KernelBench's self-check ran out of memory
there, with both caches full of earlier tasks' references).

Printed per task (`-s`), for reading the log: the device's free memory as this process and nvidia-smi
see it before the task, the outcome and time, where the worker's free bytes came from, the plan (peak and
its stage, degradations), and the worker's real peak against the plan's estimate.

Run: `python3 -m pytest -q -s tests/gpu/test_full_size_gpu.py` (about two minutes on an H200).
"""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from cudaperf.evaluate import Evaluator, TimingConfig, self_check_config, self_check_solution
from cudaperf.tasks import task_from_source
from cudaperf.types import Outcome

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

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
MATMUL_4D_SOURCE = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, a, b):
            return torch.einsum("bijl,lk->bijk", a, b)


    b = 16
    i = 256
    j = 512
    l = 256
    k = 768


    def get_inputs():
        return [torch.rand(b, i, j, l), torch.rand(l, k)]


    def get_init_inputs():
        return []
''')  # KernelBench level 1, problem 11, at its upstream size: 2 GiB of input, a 6 GiB output
GIB = 1 << 30


def _device_memory() -> str:
    """Free memory as this process sees it, and every process's use as nvidia-smi lists it."""
    free, total = torch.cuda.mem_get_info()
    try:
        smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        smi = f"nvidia-smi: {exc}"
    return f"driver free {free / 1e9:.2f} of {total / 1e9:.2f} GB; processes: " + "; ".join(
        line.strip() for line in smi.splitlines() if line.strip())


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    config = self_check_config(device="cuda", seeds=1, cache_dir=str(tmp_path_factory.mktemp("cache")),
                               timing=TimingConfig(budget_ms=5, warmup_ms=1, baselines=("eager",)))
    with Evaluator(config) as ev:
        yield ev


def _self_check(evaluator, task_id: str, source: str):
    """Evaluate the task's reference as its candidate, printing memory before and after; the result."""
    task = task_from_source(source, task_id)
    print(f"\n{task_id}: before: {_device_memory()}")
    result = evaluator.evaluate(task, self_check_solution(task))
    env = result.environment
    print(f"{task_id}: {result.outcome.value} in {sum(result.stage_durations_s.values()):.1f} s\n"
          f"  free: {env.get('memory_free')}\n  room: {env.get('memory_room', 'nothing given back')}\n"
          f"  plan: {env.get('memory_plan')}\n"
          f"  degraded: {[f.message for f in result.flags if f.code == 'memory_plan_degraded']}\n"
          f"  peak: {env.get('memory_peak')}\n  after: {_device_memory()}")
    return result


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_a_full_size_problem_passes_its_self_check(evaluator, task_id):
    result = _self_check(evaluator, task_id, TEMPLATE.format(**TASKS[task_id]))
    assert result.outcome is Outcome.CORRECT, (result.stage, result.message[:2000])
    assert result.timings and "memory_plan" in result.environment


def test_distinct_large_tasks_in_a_row_each_get_the_memory_earlier_ones_held(evaluator):
    sequence = [("seq_matmul_4d", MATMUL_4D_SOURCE),
                ("seq_avg_pool", TEMPLATE.format(**TASKS["full_avg_pool"])),
                ("seq_relu", TEMPLATE.format(**TASKS["full_relu"]))]
    outcomes = {}
    for task_id, source in sequence:
        result = _self_check(evaluator, task_id, source)
        outcomes[task_id] = (result.outcome, result.stage, result.message[:500])
    print(f"\nsequence: {[(k, v[0].value) for k, v in outcomes.items()]}")
    assert all(v[0] is Outcome.CORRECT for v in outcomes.values()), outcomes


def _allocated_by(fn) -> int:
    """Bytes `fn` allocated beyond what was allocated before it, at its peak."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def test_a_comparison_of_1_gib_tensors_allocates_at_most_the_chunk_bound():
    from cudaperf.correctness import COMPARE_CHUNK_BYTES, compare, mutated_positions

    ref = torch.rand(GIB // 4, device="cuda")
    same, out = ref.clone(), ref.clone()
    out[12345] += 1.0  # one mismatch: the failing path's second pass (the message) runs too
    rows = 1 << 14
    figures = {
        "compare (passing)": _allocated_by(lambda: compare(same, ref)),
        "compare (failing)": _allocated_by(lambda: compare(out, ref)),
        "compare (strided)": _allocated_by(lambda: compare(out.view(rows, -1).t(), ref.view(rows, -1).t())),
        "mutation check": _allocated_by(lambda: mutated_positions([ref], [out])),
        "mutation check (strided)": _allocated_by(
            lambda: mutated_positions([ref.view(rows, -1).t()], [same.view(rows, -1).t()])),
    }
    print("\n" + "; ".join(f"{k}: {v / 2**20:.0f} MiB" for k, v in figures.items())
          + f" (bound {COMPARE_CHUNK_BYTES >> 20} MiB, tensors {GIB >> 20} MiB each)")
    ref = same = out = None  # noqa: F841 - freed before the cache goes back
    torch.cuda.empty_cache()  # the evaluator's processes share the device with this one
    assert all(v <= COMPARE_CHUNK_BYTES for v in figures.values()), figures


def test_the_referee_gives_its_cached_blocks_back_after_a_jobs_references():
    from cudaperf.anticheat.policy import Policy
    from cudaperf.execute.outputs import Region
    from cudaperf.execute.referee import RELEASE_ABOVE_BYTES, Referee, create_region_fd
    from cudaperf.jobs import EvalJob, job_message
    from cudaperf.types import Solution, SolutionFormat

    source = TEMPLATE.format(expr="torch.relu(x)", sizes="batch_size = 1024\ndim = 524288",
                             shape="batch_size, dim", init="[]")  # 2 GiB inputs: a 2 GiB clone to cache
    task = task_from_source(source, "relu_2gib")
    job = EvalJob(task=task, solution=Solution("s", "", SolutionFormat.PYTORCH), device="cuda", seeds=(1,),
                  policy=Policy(allow_torch_ops=True))
    referee = Referee(Region(create_region_fd(1 << 20), 1 << 20), torch.device("cuda", 0))
    try:
        referee.handle({"type": "job", "job": job_message(job, "00ff")})
        referee.handle({"type": "sync"})  # the references are computed when the worker syncs
        assert referee.job is not None and not referee.job.harness, referee.job.harness
        assert len(referee.torch_store) >= 1  # they exist
        cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        referee.handle({"type": "end"})
        ended = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    finally:
        torch.set_grad_enabled(True)  # the referee's job turned it off in this process
        referee.torch_store.clear()
        torch.cuda.empty_cache()
    print(f"\nreferee cache after the references: {cached / 2**20:.0f} MiB; after the job: "
          f"{ended / 2**20:.0f} MiB (bound {RELEASE_ABOVE_BYTES >> 20} MiB)")
    assert cached <= RELEASE_ABOVE_BYTES and ended <= RELEASE_ABOVE_BYTES
