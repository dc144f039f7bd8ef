"""The occupancy port agrees exactly with the CUDA toolkit's own calculator (cuda_occupancy.h).

One g++ build of a small driver around the header, then one batch of random configurations through
stdin: every field of the result (error, blocks, limiting factors, each per-resource limit, allocations)
must match. Skipped with a reason where g++ or the header is missing.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from cudaperf.analysis.occupancy import (
    ARCHS,
    DeviceProps,
    DeviceState,
    FuncAttributes,
    OccError,
    ShmemLimitConfig,
    max_active_blocks,
)

HEADER = Path("/usr/local/cuda/include/cuda_occupancy.h")
CASES = 12_000

# The header is host-only C++ (it needs only <stddef.h>, <limits.h>, <string.h>); no CUDA define needed.
DRIVER = r"""
#include <cstdio>
#include "cuda_occupancy.h"
int main() {
  cudaOccDeviceProp p; cudaOccFuncAttributes a; cudaOccDeviceState s; cudaOccResult r;
  long long v[23];
  while (true) {
    for (int i = 0; i < 23; ++i) if (scanf("%lld", &v[i]) != 1) return 0;
    p.computeMajor = (int)v[0]; p.computeMinor = (int)v[1]; p.maxThreadsPerBlock = (int)v[2];
    p.maxThreadsPerMultiprocessor = (int)v[3]; p.regsPerBlock = (int)v[4];
    p.regsPerMultiprocessor = (int)v[5];
    p.warpSize = (int)v[6]; p.sharedMemPerBlock = (size_t)v[7]; p.sharedMemPerMultiprocessor = (size_t)v[8];
    p.numSms = (int)v[9]; p.sharedMemPerBlockOptin = (size_t)v[10];
    p.reservedSharedMemPerBlock = (size_t)v[11];
    a.maxThreadsPerBlock = (int)v[12]; a.numRegs = (int)v[13]; a.sharedSizeBytes = (size_t)v[14];
    a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = (cudaOccFuncShmemConfig)v[15];
    a.maxDynamicSharedSizeBytes = (size_t)v[16]; a.numBlockBarriers = (int)v[17];
    a.virtualResourceCount = (int)v[18];
    s.cacheConfig = (cudaOccCacheConfig)v[19]; s.carveoutConfig = (int)v[20];
    memset(&r, 0, sizeof r);
    int err = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, (int)v[21], (size_t)v[22]);
    if (err) { printf("%d\n", err); continue; }
    printf("%d %d %u %d %d %d %d %d %d %d %zu\n", err, r.activeBlocksPerMultiprocessor, r.limitingFactors,
           r.blockLimitRegs, r.blockLimitSharedMem, r.blockLimitWarps, r.blockLimitBlocks,
           r.blockLimitBarriers, r.blockLimitVirtual, r.allocatedRegistersPerBlock,
           r.allocatedSharedMemPerBlock);
  }
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    if not HEADER.exists() or shutil.which("g++") is None:
        pytest.skip("needs g++ and /usr/local/cuda/include/cuda_occupancy.h")
    d = tmp_path_factory.mktemp("occ")
    (d / "driver.cpp").write_text(DRIVER)
    exe = d / "driver"
    subprocess.run(["g++", "-O1", "-I", str(HEADER.parent), str(d / "driver.cpp"), "-o", str(exe)],
                   check=True, capture_output=True)
    return exe


def _random_case(rng: random.Random) -> tuple[DeviceProps, FuncAttributes, DeviceState, int, int]:
    props = ARCHS[rng.choice(sorted(ARCHS))]
    smem_scale = rng.choice([4 * 1024, 48 * 1024, 240 * 1024])
    attrs = FuncAttributes(
        registers=rng.choice([0, rng.randint(1, 64), rng.randint(1, 260)]),
        smem_static_bytes=rng.choice([0, rng.randint(0, smem_scale)]),
        max_threads_per_block=rng.choice([1024, rng.randint(1, 1024)]),
        shmem_limit_config=rng.choice(list(ShmemLimitConfig)),
        max_dynamic_smem_bytes=rng.choice([48 * 1024, rng.randint(0, 240 * 1024)]),
        num_block_barriers=rng.choice([0, 1, 1, 2, rng.randint(0, 16)]),
    )
    state = DeviceState(cache_config=rng.randint(0, 3), carveout=rng.choice([-1, -1, rng.randint(-2, 101)]))
    block = rng.choice([rng.randint(1, 1100), 32 * rng.randint(1, 33), 1 << rng.randint(0, 10)])
    dynamic = rng.choice([0, rng.randint(0, smem_scale)])
    return props, attrs, state, block, dynamic


def _line(props, attrs, state, block, dynamic) -> str:
    p, a = props, attrs
    fields = [p.compute_major, p.compute_minor, p.max_threads_per_block, p.max_threads_per_sm,
              p.regs_per_block, p.regs_per_sm, p.warp_size, p.smem_per_block_bytes, p.smem_per_sm_bytes,
              p.num_sms, p.smem_per_block_optin_bytes, p.reserved_smem_per_block_bytes,
              a.max_threads_per_block, a.registers, a.smem_static_bytes, int(a.shmem_limit_config),
              a.max_dynamic_smem_bytes, a.num_block_barriers, a.virtual_resource_count, state.cache_config,
              state.carveout, block, dynamic]
    return " ".join(map(str, fields))


def _python_answer(case) -> str:
    r = max_active_blocks(*case)
    if r.error != OccError.SUCCESS:
        return str(int(r.error))
    return " ".join(str(x) for x in (0, r.active_blocks, r.limiting_factors, r.block_limit_regs,
                                      r.block_limit_smem, r.block_limit_warps, r.block_limit_blocks,
                                      r.block_limit_barriers, r.block_limit_virtual,
                                      r.allocated_regs_per_block, r.allocated_smem_per_block_bytes))


def test_port_matches_header_on_random_configurations(driver):
    rng = random.Random(20240607)
    cases = [_random_case(rng) for _ in range(CASES)]
    stdin = "\n".join(_line(*c) for c in cases) + "\n"
    out = subprocess.run([str(driver)], input=stdin, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    mismatches = [(c, out[i], _python_answer(c)) for i, c in enumerate(cases) if out[i] != _python_answer(c)]
    assert not mismatches, f"{len(mismatches)} of {CASES} differ; first: {mismatches[:3]}"


def test_random_cases_cover_every_arch_and_limiting_factor():
    rng = random.Random(20240607)
    results = [max_active_blocks(*_random_case(rng)) for _ in range(CASES)]
    factors = 0
    for r in results:
        factors |= r.limiting_factors
    assert factors & 0x1F == 0x1F  # warps, registers, shared memory, blocks, barriers all exercised
    assert sum(r.error != OccError.SUCCESS for r in results) < CASES // 5
