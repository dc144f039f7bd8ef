"""Build-path benchmark: NVRTC compile latency (cold and cache hit) and build-pool throughput.

    python scripts/bench_build.py [--reps 7] [--solutions 32] [--json out.json]

Prints one table of median latencies per kernel (cold compile without cache, disk-cache hit, in-process
`cudaperf.cuda.compile` hit) and one of pool throughput (solutions per second, each solution a distinct
kernel so every build is a real NVRTC compile) with 1 worker and with every core. Needs no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from cudaperf import cuda
from cudaperf.toolchain.nvrtc import compile_cuda, nvrtc_version
from cudaperf.toolchain.pool import BuildPool
from cudaperf.types import Solution, SolutionFormat

KERNELS = {
    "add": (('extern "C" __global__ void add(const float* a, const float* b, float* o, int n) {\n'
            "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = a[i] + b[i];\n}\n"), ()),
    "block_reduce": (
        ('extern "C" __global__ void block_reduce(const float* x, float* out, int n) {\n'
        "  __shared__ float buf[256]; int i = blockIdx.x * 256 + threadIdx.x;\n"
        "  buf[threadIdx.x] = i < n ? x[i] : 0.f; __syncthreads();\n"
        "  for (int s = 128; s > 0; s >>= 1) { if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];"
        " __syncthreads(); }\n"
        "  if (threadIdx.x == 0) out[blockIdx.x] = buf[0];\n}\n"), ()),
    "tiled_matmul_fp16_bf16": (
        ("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
        "template <typename T, int TILE>\n"
        "__global__ void matmul(const T* A, const T* B, float* C, int M, int N, int K) {\n"
        "  __shared__ float As[TILE][TILE]; __shared__ float Bs[TILE][TILE];\n"
        "  int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x; "
        "float acc = 0.f;\n"
        "  for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {\n"
        "    int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;\n"
        "    As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? (float)A[row * K + ka] : 0.f;\n"
        "    Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? (float)B[kb * N + col] : 0.f;\n"
        "    __syncthreads();\n"
        "    #pragma unroll\n"
        "    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];\n"
        "    __syncthreads();\n  }\n"
        "  if (row < M && col < N) C[row * N + col] = acc;\n}\n"),
        ("matmul<__half, 32>", "matmul<__nv_bfloat16, 32>", "matmul<float, 16>")),
}


def _median_s(fn, reps: int) -> float:
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def bench_compile(reps: int, cache_dir: str) -> list[dict]:
    t0 = time.perf_counter()
    compile_cuda(KERNELS["add"][0] + "// warm-up\n", arch="sm_90", use_cache=False)
    first_s = time.perf_counter() - t0  # includes loading libnvrtc in this process
    rows = [{"kernel": "(first compile in process)", "cold_ms": first_s * 1e3}]
    os.environ["CUDAPERF_CACHE_DIR"] = cache_dir
    for name, (source, exprs) in KERNELS.items():
        cold = _median_s(lambda s=source, e=exprs: compile_cuda(s, arch="sm_90", name_expressions=e,
                                                                use_cache=False), reps)
        compile_cuda(source, arch="sm_90", name_expressions=exprs, cache_dir=cache_dir)
        hit = _median_s(lambda s=source, e=exprs: compile_cuda(s, arch="sm_90", name_expressions=e,
                                                               cache_dir=cache_dir), reps)
        kernel_name = exprs[0] if exprs else name
        cuda.compile(source, kernel_name, arch="sm_90", name_expressions=exprs)
        helper = _median_s(lambda s=source, k=kernel_name, e=exprs: cuda.compile(s, k, arch="sm_90",
                                                                                 name_expressions=e), reps)
        rows.append({"kernel": name, "cold_ms": cold * 1e3, "disk_hit_ms": hit * 1e3,
                     "helper_hit_us": helper * 1e6})
    return rows


def _solutions(n: int, salt: str) -> list[Solution]:
    out = []
    for i in range(n):
        src = KERNELS["add"][0].replace("a[i] + b[i]", f"a[i] + b[i] * {i + 1}.0f /* {salt} */")
        text = f"from cudaperf import cuda\nSRC = '''{src}'''\nk = cuda.compile(SRC, 'add')\n"
        out.append(Solution(solution_id=f"bench-{salt}-{i}", source=text, format=SolutionFormat.FAST))
    return out


def bench_pool(n: int, workers_list: list[int]) -> list[dict]:
    rows = []
    for workers in workers_list:
        with tempfile.TemporaryDirectory() as cache, BuildPool(workers) as pool:
            t0 = time.perf_counter()
            list(pool.map(_solutions(workers, f"warm{workers}"), cache_dir=cache))  # start every process
            startup_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            results = list(pool.map(_solutions(n, f"run{workers}"), cache_dir=cache))
            wall_s = time.perf_counter() - t0
        ok = sum(r.ok for r in results)
        rows.append({"workers": workers, "solutions": n, "ok": ok, "startup_s": startup_s, "wall_s": wall_s,
                     "solutions_per_s": n / wall_s})
    return rows


def _print_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="repetitions per latency median")
    parser.add_argument("--solutions", type=int, default=32, help="solutions per pool throughput run")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as cache:
        compile_rows = bench_compile(args.reps, cache)
    pool_rows = bench_pool(args.solutions, sorted({1, cores}))
    major, minor = nvrtc_version()
    print(f"NVRTC {major}.{minor}, arch sm_90, {cores} CPU cores, python {sys.version.split()[0]}")
    _print_table("compile latency (median)", compile_rows)
    _print_table("build pool throughput", pool_rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nvrtc": f"{major}.{minor}", "cores": cores, "compile": compile_rows,
                       "pool": pool_rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
