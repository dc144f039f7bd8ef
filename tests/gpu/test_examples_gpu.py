"""The example solutions, run directly on the GPU against their references, independent of the evaluator:
every task × format × configuration, plus a misaligned-input case for the vectorised kernels and a
speed sanity check against eager PyTorch.

The six `load_inline` extensions are built first, in parallel subprocesses (each takes about a minute,
almost all of it host C++ with torch headers), into one TORCH_EXTENSIONS_DIR; importing them afterwards
only loads the built libraries.

Tolerance: atol = rtol = 1e-4, elementwise (KernelBench's fp32 bound). The inputs are sized so that the
rounding error of any fp32 summation order stays near 1e-5 (matmul inputs are scaled by K**-0.25), so
a failure here is a wrong kernel, not noise. TF32 is off for the references.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from cudaperf.tasks import load_tasks
from cudaperf.tasks.examples import EXAMPLE_TASK_IDS, example_solutions_dir, example_tasks_dir
from cudaperf.tasks.runtime import load_module, make_init_inputs, make_inputs

pytestmark = [pytest.mark.gpu, pytest.mark.xdist_group("examples")]  # one inline prebuild

FORMATS = ("fast", "inline")
TASKS = {t.task_id: t for t in load_tasks(example_tasks_dir())}
CASES = [(fmt, tid, c.name) for fmt in FORMATS for tid in EXAMPLE_TASK_IDS for c in TASKS[tid].configs]
SEEDS = (1, 2)
ATOL = RTOL = 1e-4
BUILD_TIMEOUT_S = 900


@pytest.fixture(scope="module", autouse=True)
def _strict_fp32():
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _build_one(path: Path, env: dict[str, str]) -> tuple[bool, str]:
    code = f"import runpy; runpy.run_path({str(path)!r})"
    try:
        proc = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True,
                              text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"build of {path.name} took more than {BUILD_TIMEOUT_S} s"
    return proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


@pytest.fixture(scope="module")
def inline_builds(tmp_path_factory) -> dict[str, tuple[bool, str]]:
    """Build every inline extension in parallel; task_id -> (ok, log tail)."""
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(tmp_path_factory.mktemp("torch_extensions")))
    major, minor = torch.cuda.get_device_capability()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    env = dict(os.environ)
    paths = {tid: example_solutions_dir("inline") / f"{tid}.py" for tid in EXAMPLE_TASK_IDS}
    with ThreadPoolExecutor(len(paths)) as pool:
        futures = {tid: pool.submit(_build_one, p, env) for tid, p in paths.items()}
        return {tid: f.result() for tid, f in futures.items()}


_MODULES: dict[tuple[str, str], object] = {}


def _solution_module(fmt: str, task_id: str, inline_builds=None):
    if fmt == "inline":
        ok, log = inline_builds[task_id]
        if not ok:
            pytest.fail(f"inline build of {task_id} failed:\n{log}")
    key = (fmt, task_id)
    if key not in _MODULES:
        path = example_solutions_dir(fmt) / f"{task_id}.py"
        spec = importlib.util.spec_from_file_location(f"cudaperf_example_{fmt}_{task_id}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MODULES[key] = module
    return _MODULES[key]


def _models(task, config, solution):
    """Reference and candidate built right after the same seed (so random parameters agree), on the GPU."""
    task_module = load_module(task)
    init = make_init_inputs(task_module, config)
    torch.manual_seed(1234)
    reference = task_module.Model(*init).cuda().eval()
    torch.manual_seed(1234)
    candidate = solution.ModelNew(*init).cuda().eval()
    return task_module, reference, candidate


def _assert_close(out, ref, where: str) -> None:
    assert type(out) is torch.Tensor, f"{where}: output is {type(out).__name__}"
    assert (out.shape, out.dtype, out.device) == (ref.shape, ref.dtype, ref.device), where
    err = (out - ref).abs()
    bound = ATOL + RTOL * ref.abs()
    worst = float((err / bound).max()) if err.numel() else 0.0
    assert bool(torch.isfinite(out).all()), f"{where}: non-finite output"
    assert worst <= 1.0, (f"{where}: max |out-ref| = {float(err.max()):.3e}, worst err/(atol+rtol|ref|) = "
                          f"{worst:.2f}")


@pytest.mark.parametrize("fmt, task_id, config_name", CASES)
def test_example_solution_matches_reference(fmt, task_id, config_name, inline_builds):
    task = TASKS[task_id]
    config = next(c for c in task.configs if c.name == config_name)
    solution = _solution_module(fmt, task_id, inline_builds)
    task_module, reference, candidate = _models(task, config, solution)
    with torch.no_grad():
        for seed in SEEDS:
            inputs = make_inputs(task_module, config, seed, "cuda")
            saved = [x.clone() for x in inputs]
            ref = reference(*inputs)
            out = candidate(*inputs)
            again = candidate(*inputs)
            torch.cuda.synchronize()
            where = f"{fmt}/{task_id}/{config_name}/seed {seed}"
            _assert_close(out, ref, where)
            assert torch.equal(out, again), f"{where}: two runs on the same inputs differ"
            assert all(torch.equal(a, b) for a, b in zip(inputs, saved)), f"{where}: inputs were modified"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("task_id", ["vector_add", "relu"])
def test_vectorised_kernels_handle_misaligned_inputs(fmt, task_id, inline_builds):
    # Views starting one float into their storage are not 16-byte aligned: the float4 path must step aside.
    solution = _solution_module(fmt, task_id, inline_builds)
    task = TASKS[task_id]
    config = task.configs[1]
    task_module, reference, candidate = _models(task, config, solution)
    inputs = make_inputs(task_module, config, 3, "cuda")
    shifted = []
    for x in inputs:
        flat = torch.empty(x.numel() + 1, device="cuda")
        flat[1:] = x.reshape(-1)
        shifted.append(flat[1:].view(x.shape))
    assert all(s.data_ptr() % 16 for s in shifted)
    with torch.no_grad():
        _assert_close(candidate(*shifted), reference(*inputs), f"{fmt}/{task_id} misaligned")


def _median_ms(fn, inputs, reps: int = 20) -> float:
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        fn(*inputs)
    times = []
    for _ in range(reps):
        flush.zero_()  # evict L2 so every call reads from DRAM
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


# Largest acceptable slowdown against eager PyTorch on the largest configuration. The examples are
# meant to be reasonable, not record-setting: memory-bound kernels should be near eager; the tiled SIMT
# matmul is expected to trail cuBLAS by a few times.
MAX_SLOWDOWN = {"matmul": 10.0}
DEFAULT_MAX_SLOWDOWN = 3.0


@pytest.mark.timing
@pytest.mark.parametrize("task_id", EXAMPLE_TASK_IDS)
def test_fast_example_is_reasonably_fast(task_id):
    task = TASKS[task_id]
    task_module = load_module(task)
    config = max(task.configs, key=lambda c: sum(
        x.numel() for x in make_inputs(task_module, c, 0, "meta") if isinstance(x, torch.Tensor)))
    _, reference, candidate = _models(task, config, _solution_module("fast", task_id))
    inputs = make_inputs(task_module, config, 5, "cuda")
    with torch.no_grad():
        eager_ms, cand_ms = _median_ms(reference, inputs), _median_ms(candidate, inputs)
    print(f"\n{task_id}/{config.name}: eager {eager_ms:.4f} ms, fast example {cand_ms:.4f} ms, "
          f"speedup {eager_ms / cand_ms:.2f}x")
    assert cand_ms <= MAX_SLOWDOWN.get(task_id, DEFAULT_MAX_SLOWDOWN) * eager_ms
