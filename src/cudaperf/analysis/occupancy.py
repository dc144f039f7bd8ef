"""Theoretical occupancy: an exact port of `cudaOccMaxActiveBlocksPerMultiprocessor` (cuda_occupancy.h).

Covers: the per-SM block limits from warps, blocks, registers, shared memory, block barriers (Hopper) and
virtual resources, the limiting-factor bit set, and the allocated registers / shared memory per block, for
compute capabilities 7.x, 8.x and 9.x (the table `ARCHS` holds sm_75, sm_80, sm_86, sm_89 and sm_90).
`tests/unit/test_occupancy_header.py` compiles the header itself with g++ and checks this port against it
on ten thousand random configurations: keep the two in lock-step, branch for branch.

Not covered: partitioned global caching (only cc 5.2/5.3/6.x support it), pre-Volta cache configs, the
block-size suggestion APIs, and anything the driver decides at run time (ncu's shared-memory limit uses the
carveout the driver picked and can read lower than this).

Why a port and not a binding: the header is host C++ with no library to load; compiling it per call would
cost a g++ run, and the formula is short enough to mirror exactly.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cudaperf.types import Occupancy

INT_MAX = 2**31 - 1


class OccError(int, enum.Enum):
    """cudaOccError: failures are values."""

    SUCCESS = 0
    INVALID_INPUT = 1
    UNKNOWN_DEVICE = 2


class Limit(enum.IntFlag):
    """cudaOccLimitingFactor bits."""

    WARPS = 0x01
    REGISTERS = 0x02
    SHARED_MEMORY = 0x04
    BLOCKS = 0x08
    BARRIERS = 0x10
    VIRTUAL_RESOURCES = 0x20


_LIMIT_NAMES = {
    Limit.WARPS: "warps",
    Limit.REGISTERS: "registers",
    Limit.SHARED_MEMORY: "shared_memory",
    Limit.BLOCKS: "blocks",
    Limit.BARRIERS: "barriers",
    Limit.VIRTUAL_RESOURCES: "virtual_resources",
}


@dataclass(frozen=True)
class DeviceProps:
    """cudaOccDeviceProp: what the calculator needs to know about a GPU."""

    compute_major: int
    compute_minor: int
    max_threads_per_sm: int
    smem_per_sm_bytes: int
    smem_per_block_optin_bytes: int
    reserved_smem_per_block_bytes: int
    max_threads_per_block: int = 1024
    regs_per_block: int = 65536
    regs_per_sm: int = 65536
    warp_size: int = 32
    smem_per_block_bytes: int = 48 * 1024
    num_sms: int = 1


# NVIDIA's per-compute-capability limits (docs/structure.md), checked against cudaGetDeviceProperties on
# each generation; the H200's read on the device.
ARCHS: dict[str, DeviceProps] = {
    "sm_75": DeviceProps(7, 5, 1024, 64 * 1024, 64 * 1024, 0),
    "sm_80": DeviceProps(8, 0, 2048, 164 * 1024, 166_912, 1024),
    "sm_86": DeviceProps(8, 6, 1536, 100 * 1024, 101_376, 1024),
    "sm_89": DeviceProps(8, 9, 1536, 100 * 1024, 101_376, 1024),
    "sm_90": DeviceProps(9, 0, 2048, 233_472, 232_448, 1024, num_sms=132),
}


class ShmemLimitConfig(int, enum.Enum):
    DEFAULT = 0  # the 48 KB per-block limit
    OPTIN = 1  # the opt-in limit, used when the kernel asks for more than 48 KB


@dataclass(frozen=True)
class FuncAttributes:
    """cudaOccFuncAttributes. Defaults follow the header's conversion from cudaFuncAttributes
    (opt-in shared-memory config, one block barrier), which is what the CUDA runtime API uses."""

    registers: int
    smem_static_bytes: int = 0
    max_threads_per_block: int = 1024
    shmem_limit_config: ShmemLimitConfig = ShmemLimitConfig.OPTIN
    max_dynamic_smem_bytes: int = 48 * 1024
    num_block_barriers: int = 1
    virtual_resource_count: int = 0


@dataclass(frozen=True)
class DeviceState:
    """cudaOccDeviceState: cache config (0 none, 1 shared, 2 L1, 3 equal) and carveout (-1 default,
    0..100 %)."""

    cache_config: int = 0
    carveout: int = -1


@dataclass(frozen=True)
class OccupancyResult:
    """cudaOccResult plus the error code."""

    error: OccError
    active_blocks: int = 0
    limiting_factors: int = 0
    block_limit_regs: int = 0
    block_limit_smem: int = 0
    block_limit_warps: int = 0
    block_limit_blocks: int = 0
    block_limit_barriers: int = 0
    block_limit_virtual: int = 0
    allocated_regs_per_block: int = 0
    allocated_smem_per_block_bytes: int = 0

    @property
    def factor_names(self) -> tuple[str, ...]:
        return tuple(name for bit, name in _LIMIT_NAMES.items() if self.limiting_factors & bit)


def _div_up(x: int, y: int) -> int:
    # C integer division of non-negative ints, as __occDivideRoundUp
    return (x + (y - 1)) // y


def _round_up(x: int, y: int) -> int:
    return y * _div_up(x, y)


def _max_blocks_per_sm(props: DeviceProps) -> int | None:
    major, minor = props.compute_major, props.compute_minor
    if major == 7:
        return 16 if minor == 5 else 32
    if major == 8:
        return 32 if minor == 0 else (24 if minor == 9 else 16)
    if major == 9:
        return 32
    return None


# Carveout steps (KB) per generation, as cudaOccAlignUpShmemSizeVoltaPlus.
def _carveout_steps_kb(props: DeviceProps) -> tuple[int, ...] | None:
    major, minor = props.compute_major, props.compute_minor
    if major == 7:
        return (32, 64) if minor == 5 else (0, 8, 16, 32, 64, 96)
    if major == 8:
        if minor in (0, 7):
            return (0, 8, 16, 32, 64, 100, 132, 164)
        return (0, 8, 16, 32, 64, 100)
    if major == 9:
        return (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
    return None


def _align_up_smem(size: int, props: DeviceProps) -> tuple[OccError, int]:
    steps = _carveout_steps_kb(props)
    if steps is None:
        return OccError.UNKNOWN_DEVICE, size
    turing = props.compute_major == 7 and props.compute_minor == 5
    if size == 0 and not turing:
        return OccError.SUCCESS, 0
    for kb in steps:
        if size <= kb * 1024:
            return OccError.SUCCESS, kb * 1024
    return OccError.INVALID_INPUT, size


def _smem_preference(props: DeviceProps, state: DeviceState) -> tuple[OccError, int]:
    pref = state.carveout
    if pref < -1 or pref > 100:
        return OccError.INVALID_INPUT, 0
    if pref == -1:
        pref = {2: 0, 1: 100, 3: 50}.get(state.cache_config, -1)
    size = props.smem_per_sm_bytes if pref == -1 else (pref * props.smem_per_sm_bytes) // 100
    return _align_up_smem(size, props)


def _smem_per_block_limit(props: DeviceProps, config: ShmemLimitConfig, smem_per_cta: int) -> int:
    limit = props.smem_per_block_bytes
    if config == ShmemLimitConfig.OPTIN and smem_per_cta > props.smem_per_block_bytes:
        limit = props.smem_per_block_optin_bytes
    if props.compute_major >= 8:  # Ampere on: the driver reserves shared memory per block
        limit += props.reserved_smem_per_block_bytes
    return limit


def _smem_limit(props, attrs, state, dynamic_smem_bytes) -> tuple[OccError, int, int]:
    """(error, block limit, allocated bytes per block)."""
    granularity = 256 if props.compute_major == 7 else 128
    err, preference = _smem_preference(props, state)
    if err != OccError.SUCCESS:
        return err, 0, 0
    static = attrs.smem_static_bytes + props.reserved_smem_per_block_bytes
    allocated = _round_up(static + dynamic_smem_bytes, granularity)
    max_usage = static + attrs.max_dynamic_smem_bytes
    dyn_exceeded = (
        attrs.shmem_limit_config != ShmemLimitConfig.DEFAULT
        and dynamic_smem_bytes > attrs.max_dynamic_smem_bytes
    )
    total_exceeded = allocated > _smem_per_block_limit(props, attrs.shmem_limit_config, max_usage)
    if dyn_exceeded or total_exceeded:
        return OccError.SUCCESS, 0, allocated
    per_sm = preference
    if preference < allocated:  # Volta+: a carveout smaller than one block is raised to fit it
        err, per_sm = _align_up_smem(allocated, props)
        if err != OccError.SUCCESS:
            return err, 0, allocated
    return OccError.SUCCESS, (per_sm // allocated if allocated > 0 else INT_MAX), allocated


def _regs_limit(props: DeviceProps, attrs: FuncAttributes, block_size: int) -> tuple[int, int]:
    """(block limit, allocated registers per block); registers are allocated per warp in units of 256."""
    sub_partitions = 4
    warps = _div_up(block_size, props.warp_size)
    per_warp = _round_up(attrs.registers * props.warp_size, 256)
    per_cta = per_warp * warps
    # the hardware check assumes allocation on all sub-partitions at once (header comment)
    assumed = per_warp * _round_up(warps, sub_partitions)
    if props.regs_per_block < assumed or props.regs_per_block < per_cta or attrs.registers > 256:
        return 0, per_cta
    if per_warp == 0:
        return INT_MAX, per_cta
    warps_per_sub = (props.regs_per_sm // sub_partitions) // per_warp
    return (warps_per_sub * sub_partitions) // warps, per_cta


def _input_ok(props: DeviceProps, attrs: FuncAttributes, block_size: int) -> bool:
    positive = (
        props.max_threads_per_block, props.max_threads_per_sm, props.regs_per_block, props.regs_per_sm,
        props.warp_size, props.smem_per_block_bytes, props.smem_per_sm_bytes, props.num_sms,
    )
    return block_size > 0 and min(positive) > 0 and attrs.max_threads_per_block > 0 and attrs.registers >= 0


def max_active_blocks(
    props: DeviceProps, attrs: FuncAttributes, state: DeviceState, block_size: int, dynamic_smem_bytes: int
) -> OccupancyResult:
    """cudaOccMaxActiveBlocksPerMultiprocessor, branch for branch."""
    if not _input_ok(props, attrs, block_size):
        return OccupancyResult(OccError.INVALID_INPUT)
    blocks = _max_blocks_per_sm(props)
    if blocks is None:
        return OccupancyResult(OccError.UNKNOWN_DEVICE)
    regs, regs_alloc = _regs_limit(props, attrs, block_size)
    if block_size > props.max_threads_per_block:
        warps = 0
    else:
        warps = (props.max_threads_per_sm // props.warp_size) // _div_up(block_size, props.warp_size)
    err, smem, smem_alloc = _smem_limit(props, attrs, state, dynamic_smem_bytes)
    if err != OccError.SUCCESS:
        return OccupancyResult(err)
    virtual = INT_MAX  # virtual resources exist from cc 10 on
    limit = min(regs, smem, warps, blocks, virtual)
    factors = 0
    for value, bit in ((warps, Limit.WARPS), (regs, Limit.REGISTERS), (smem, Limit.SHARED_MEMORY),
                       (blocks, Limit.BLOCKS), (virtual, Limit.VIRTUAL_RESOURCES)):
        if limit == value:
            factors |= bit
    bars = INT_MAX
    if props.compute_major >= 9 and attrs.num_block_barriers > 0:
        bars = (blocks * 2) // attrs.num_block_barriers
        limit = min(bars, limit)
        if limit == bars:
            factors |= Limit.BARRIERS
    return OccupancyResult(
        OccError.SUCCESS, limit, int(factors), regs, smem, warps, blocks, bars, virtual, regs_alloc,
        smem_alloc,
    )


def theoretical_occupancy(
    arch: str,
    block_size: int,
    registers: int,
    smem_static_bytes: int = 0,
    smem_dynamic_bytes: int = 0,
    *,
    state: DeviceState | None = None,
) -> Occupancy | None:
    """Occupancy of one kernel launch as the CUDA runtime computes it; None for an unknown arch or bad input.

    The kernel is assumed to have opted in to as much dynamic shared memory as it launches with (a launch
    above 48 KB fails otherwise, so any kernel that runs did).
    """
    props = ARCHS.get(arch)
    if props is None:
        return None
    attrs = FuncAttributes(
        registers=registers,
        smem_static_bytes=smem_static_bytes,
        max_dynamic_smem_bytes=max(smem_dynamic_bytes, props.smem_per_block_bytes - smem_static_bytes, 0),
    )
    result = max_active_blocks(props, attrs, state or DeviceState(), block_size, smem_dynamic_bytes)
    if result.error != OccError.SUCCESS:
        return None
    warps = _div_up(block_size, props.warp_size)
    max_warps = props.max_threads_per_sm // props.warp_size
    return Occupancy(
        arch=arch,
        block_size=block_size,
        active_blocks_per_sm=result.active_blocks,
        occupancy=result.active_blocks * warps / max_warps,
        limiting_factors=result.factor_names,
    )
