"""On a GPU: the occupancy port against the driver, and ncu's view of coalesced vs strided loads.

The full static-vs-ncu agreement table is scripts/validate_static_vs_ncu.py (one ncu run, < 3 min).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cudaperf.analysis import ncu
from cudaperf.analysis.occupancy import theoretical_occupancy
from cudaperf.analysis.validation import all_cases

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "validate_static_vs_ncu.py"
RUNNABLE = [c for c in all_cases() if c.run]


def _device_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return f"sm_{major}{minor}"


def _check(result):
    """cuda-bindings calls return (err, *values); fail loudly on anything but success."""
    from cuda.bindings import driver

    err, *values = result if isinstance(result, tuple) else (result,)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else values


@pytest.mark.gpu
@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name for c in RUNNABLE])
def test_theoretical_occupancy_equals_the_drivers(case):
    # The driver API directly (module load, function lookup, occupancy query), the same in every
    # cuda-bindings 13.x. The first H200 run failed all 40 cases through cuda-core 1.2.0's Kernel helpers;
    # its log was lost (dev/LOG.md), and cuda-core's version is what differs between the machines.
    import torch
    from cuda.bindings import driver

    from cudaperf.toolchain.nvrtc import compile_cuda

    arch = _device_arch()
    torch.zeros(1, device="cuda")  # torch makes the primary context current on this thread
    out = compile_cuda(case.source, arch=arch)
    (res,) = out.resources
    module = _check(driver.cuModuleLoadData(out.cubin))
    func = _check(driver.cuModuleGetFunction(module, case.name.encode()))
    if case.smem_bytes > 48 * 1024:  # opt in, as any launch above 48 KB must
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(driver.cuFuncSetAttribute(func, attr, case.smem_bytes))
    threads = case.block[0] * case.block[1] * case.block[2]
    theirs = _check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, threads, case.smem_bytes))
    ours = theoretical_occupancy(arch, threads, res.registers, res.smem_static_bytes, case.smem_bytes)
    _check(driver.cuModuleUnload(module))
    assert ours is not None and ours.active_blocks_per_sm == theirs


@pytest.mark.gpu
@pytest.mark.timing  # ncu wants the GPU to itself
def test_ncu_sees_4_sectors_coalesced_and_32_strided():
    if ncu.find_ncu() is None:
        pytest.skip("ncu not installed")
    names = ["v_copy_coalesced", "v_copy_stride32"]
    result = ncu.profile([sys.executable, str(SCRIPT), "--child", "profile", "--names", ",".join(names)],
                         kernels=names,
                         metrics=["l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"],
                         check_metrics=False, timeout_s=300)
    assert result.ok, result.diagnostics
    ratio = {k.kernel: k.metrics["l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"]
             for k in result.kernels}
    assert ratio["v_copy_coalesced"] == pytest.approx(4, abs=0.5)
    assert ratio["v_copy_stride32"] == pytest.approx(32, abs=1)
