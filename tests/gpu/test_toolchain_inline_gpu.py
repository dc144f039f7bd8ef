"""A KernelBench-style load_inline solution prebuilt by the pool is loaded by a fresh process without a
rebuild (the point of building ahead: ~50 s per extension on the H200 machine).

Run by the lead on the GPU machine: `python -m pytest -q -s tests/gpu/test_toolchain_inline_gpu.py`
(the first build takes about a minute; `-s` prints the build and reload times).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cudaperf
from cudaperf.toolchain.inline import extensions_dir_for, worker_env
from cudaperf.toolchain.pool import build_solution
from cudaperf.types import Outcome, Solution, SolutionFormat

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.xdist_group("inline")]

SOLUTION = textwrap.dedent('''
    import torch
    from torch.utils.cpp_extension import load_inline

    cuda_source = """
    #include <torch/extension.h>
    __global__ void add_kernel(const float* a, const float* b, float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = a[i] + b[i];
    }
    torch::Tensor add(torch::Tensor a, torch::Tensor b) {
        auto out = torch::empty_like(a);
        int n = a.numel();
        add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                             out.data_ptr<float>(), n);
        return out;
    }
    """
    cpp_source = "torch::Tensor add(torch::Tensor a, torch::Tensor b);"

    ext = load_inline(name="cudaperf_gpu_test_add", cpp_sources=cpp_source, cuda_sources=cuda_source,
                      functions=["add"], verbose=False)


    class ModelNew(torch.nn.Module):
        def forward(self, a, b):
            return ext.add(a, b)
''')

# What the GPU worker does: the candidate's own load_inline call, under the environment the build used.
WORKER = textwrap.dedent('''
    import json, sys, time
    import torch
    from torch.utils.cpp_extension import load_inline
    from cudaperf.toolchain.extract import extract_units

    (unit,) = extract_units(open(sys.argv[1]).read())
    t0 = time.perf_counter()
    ext = load_inline(*unit.args, **unit.kwargs)
    seconds = time.perf_counter() - t0
    a, b = torch.randn(100_003, device="cuda"), torch.randn(100_003, device="cuda")
    print(json.dumps({"seconds": seconds, "correct": bool(torch.equal(ext.add(a, b), a + b))}))
''')


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    solution = Solution(solution_id="inline-add", source=SOLUTION, format=SolutionFormat.INLINE)
    result = build_solution(solution, arch="sm_90", cache_dir=str(cache))
    print(f"\nload_inline prebuild: {result.duration_s:.1f} s, outcome {result.outcome.value}")
    return solution, cache, result


def test_prebuild_succeeds(built):
    _, _, result = built
    assert result.outcome is Outcome.CORRECT, result.log


def test_prebuild_reports_resources_of_the_kernel_for_the_target_arch(built):
    _, _, result = built
    kernels = [r for r in result.resources if "add_kernel" in r.kernel]
    assert kernels and all(r.arch == "sm_90" and r.registers > 0 for r in kernels)


def test_worker_load_does_not_rebuild(built, tmp_path):
    solution, cache, _ = built
    ext_dir = extensions_dir_for(solution, cache)
    so_files = sorted(ext_dir.rglob("*.so"))
    mtimes = [p.stat().st_mtime_ns for p in so_files]
    (tmp_path / "solution.py").write_text(SOLUTION)
    (tmp_path / "worker.py").write_text(WORKER)
    src_root = str(Path(cudaperf.__file__).resolve().parents[1])  # cudaperf importable without installation
    env = {**os.environ, **worker_env(ext_dir),
           "PYTHONPATH": os.pathsep.join(p for p in (src_root, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, str(tmp_path / "worker.py"), str(tmp_path / "solution.py")],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\nworker load_inline of the prebuilt extension: {report['seconds']:.2f} s")
    assert report["correct"]
    assert so_files and [p.stat().st_mtime_ns for p in so_files] == mtimes  # nothing was relinked
    assert report["seconds"] < 5.0
