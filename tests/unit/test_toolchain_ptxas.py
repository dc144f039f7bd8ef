"""ptxas resource-usage parsing, on real tool output generated on the CPU machine (nvcc / NVRTC / cuobjdump
13.0) from one test source: `add` (uses __constant__), `smem_reduce` (1 KB static smem, a barrier),
`spill` (compiled with -maxrregcount=32, so it spills), and `scale<T, BLOCK>` instantiated for float and
__half; plus `dyn` (dynamic smem only) and `s4000` (4000 B static smem) for the sm_90 reserved-smem case.
"""

from __future__ import annotations

from cudaperf.toolchain.ptxas import only_arch, parse_ptxas, parse_res_usage

# fmt: off
NVCC_SM80 = """\
ptxas info    : Overriding maximum register limit 256 for '_Z5scaleI6__halfLi128EEvPT_S1_i' \
with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for '_Z5scaleIfLi256EEvPT_S0_i' \
with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'spill' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'smem_reduce' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'add' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem, 64 bytes cmem[3]
ptxas info    : Compiling entry function '_Z5scaleI6__halfLi128EEvPT_S1_i' for 'sm_80'
ptxas info    : Function properties for _Z5scaleI6__halfLi128EEvPT_S1_i
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 6 registers, used 0 barriers, 368 bytes cmem[0]
ptxas info    : Compile time = 1.798 ms
ptxas info    : Compiling entry function '_Z5scaleIfLi256EEvPT_S0_i' for 'sm_80'
ptxas info    : Function properties for _Z5scaleIfLi256EEvPT_S0_i
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 368 bytes cmem[0]
ptxas info    : Compile time = 0.979 ms
ptxas info    : Compiling entry function 'spill' for 'sm_80'
ptxas info    : Function properties for spill
    928 bytes stack frame, 924 bytes spill stores, 1040 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 928 bytes cumulative stack size, 368 bytes cmem[0]
ptxas info    : Compile time = 48.863 ms
ptxas info    : Compiling entry function 'smem_reduce' for 'sm_80'
ptxas info    : Function properties for smem_reduce
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 9 registers, used 1 barriers, 1024 bytes smem, 372 bytes cmem[0]
ptxas info    : Compile time = 2.600 ms
ptxas info    : Compiling entry function 'add' for 'sm_80'
ptxas info    : Function properties for add
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers, 380 bytes cmem[0]
ptxas info    : Compile time = 1.094 ms
"""

NVCC_SM90 = """\
ptxas info    : Overriding maximum register limit 256 for '_Z5scaleI6__halfLi128EEvPT_S1_i' \
with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for '_Z5scaleIfLi256EEvPT_S0_i' \
with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'spill' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'smem_reduce' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'add' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5scaleI6__halfLi128EEvPT_S1_i' for 'sm_90'
ptxas info    : Function properties for _Z5scaleI6__halfLi128EEvPT_S1_i
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compile time = 2.198 ms
ptxas info    : Compiling entry function '_Z5scaleIfLi256EEvPT_S0_i' for 'sm_90'
ptxas info    : Function properties for _Z5scaleIfLi256EEvPT_S0_i
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compile time = 1.199 ms
ptxas info    : Compiling entry function 'spill' for 'sm_90'
ptxas info    : Function properties for spill
    880 bytes stack frame, 920 bytes spill stores, 1048 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 880 bytes cumulative stack size
ptxas info    : Compile time = 56.156 ms
ptxas info    : Compiling entry function 'smem_reduce' for 'sm_90'
ptxas info    : Function properties for smem_reduce
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 3.105 ms
ptxas info    : Compiling entry function 'add' for 'sm_90'
ptxas info    : Function properties for add
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers
ptxas info    : Compile time = 1.395 ms
"""

NVCC_DEVICE_FUNCTION_SM90 = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'uses_helper' for 'sm_90'
ptxas info    : Function properties for uses_helper
    128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 128 bytes cumulative stack size
ptxas info    : Compile time = 14.984 ms
ptxas info    : Function properties for _Z6helperPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""

NVCC_TWO_ARCHES = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'dyn' for 'sm_80'
ptxas info    : Function properties for dyn
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 2.061 ms
ptxas info    : Compiling entry function 's4000' for 'sm_80'
ptxas info    : Function properties for s4000
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 4000 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 0.835 ms
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'dyn' for 'sm_90'
ptxas info    : Function properties for dyn
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers
ptxas info    : Compile time = 2.487 ms
ptxas info    : Compiling entry function 's4000' for 'sm_90'
ptxas info    : Function properties for s4000
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 4000 bytes smem
ptxas info    : Compile time = 1.085 ms
"""

NVRTC_SM80 = """\
ptxas info    : Overriding maximum register limit 256 for '_Z5scaleI6__halfLi128EEvPT_S1_i' \
with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for '_Z5scaleIfLi256EEvPT_S0_i' \
with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'spill' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'smem_reduce' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'add' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem, 64 bytes cmem[3]
ptxas info    : Compiling entry function '_Z5scaleI6__halfLi128EEvPT_S1_i' for 'sm_80'
ptxas info    : Function properties for _Z5scaleI6__halfLi128EEvPT_S1_i
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 6 registers, used 0 barriers, 368 bytes cmem[0]
ptxas info    : Compile time = 5.340 ms
ptxas info    : Compiling entry function '_Z5scaleIfLi256EEvPT_S0_i' for 'sm_80'
ptxas info    : Function properties for _Z5scaleIfLi256EEvPT_S0_i
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 368 bytes cmem[0]
ptxas info    : Compile time = 0.899 ms
ptxas info    : Compiling entry function 'spill' for 'sm_80'
ptxas info    : Function properties for spill
ptxas         .     928 bytes stack frame, 924 bytes spill stores, 1040 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 928 bytes cumulative stack size, 368 bytes cmem[0]
ptxas info    : Compile time = 55.657 ms
ptxas info    : Compiling entry function 'smem_reduce' for 'sm_80'
ptxas info    : Function properties for smem_reduce
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem, 372 bytes cmem[0]
ptxas info    : Compile time = 3.117 ms
ptxas info    : Compiling entry function 'add' for 'sm_80'
ptxas info    : Function properties for add
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers, 380 bytes cmem[0]
ptxas info    : Compile time = 1.026 ms
"""

NVRTC_SM90 = """\
ptxas info    : Overriding maximum register limit 256 for '_Z5scaleI6__halfLi128EEvPT_S1_i' \
with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for '_Z5scaleIfLi256EEvPT_S0_i' \
with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'spill' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'smem_reduce' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'add' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5scaleI6__halfLi128EEvPT_S1_i' for 'sm_90'
ptxas info    : Function properties for _Z5scaleI6__halfLi128EEvPT_S1_i
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compile time = 2.377 ms
ptxas info    : Compiling entry function '_Z5scaleIfLi256EEvPT_S0_i' for 'sm_90'
ptxas info    : Function properties for _Z5scaleIfLi256EEvPT_S0_i
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compile time = 1.054 ms
ptxas info    : Compiling entry function 'spill' for 'sm_90'
ptxas info    : Function properties for spill
ptxas         .     880 bytes stack frame, 920 bytes spill stores, 1048 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 880 bytes cumulative stack size
ptxas info    : Compile time = 73.820 ms
ptxas info    : Compiling entry function 'smem_reduce' for 'sm_90'
ptxas info    : Function properties for smem_reduce
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 3.809 ms
ptxas info    : Compiling entry function 'add' for 'sm_90'
ptxas info    : Function properties for add
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers
ptxas info    : Compile time = 1.302 ms
"""

CUOBJDUMP_CUBIN_SM90 = """\

Resource usage:
 Common:
  GLOBAL:0 CONSTANT[3]:64
 Function _Z5scaleI6__halfLi128EEvPT_S1_i:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:544 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z5scaleIfLi256EEvPT_S0_i:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:544 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function spill:
  REG:32 STACK:880 SHARED:0 LOCAL:0 CONSTANT[0]:544 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function smem_reduce:
  REG:12 STACK:0 SHARED:2048 LOCAL:0 CONSTANT[0]:548 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function add:
  REG:12 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:556 TEXTURE:0 SURFACE:0 SAMPLER:0
"""

CUOBJDUMP_OBJECT_TWO_ARCHES = """\

Fatbin elf code:
================
arch = sm_80
code version = [1,8]
host = linux
compile_size = 64bit

Resource usage:
 Common:
  GLOBAL:0
 Function dyn:
  REG:10 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:360 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function s4000:
  REG:10 STACK:0 SHARED:4000 LOCAL:0 CONSTANT[0]:360 TEXTURE:0 SURFACE:0 SAMPLER:0

Fatbin elf code:
================
arch = sm_90
code version = [1,8]
host = linux
compile_size = 64bit

Resource usage:
 Common:
  GLOBAL:0
 Function dyn:
  REG:10 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function s4000:
  REG:10 STACK:0 SHARED:5024 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
# fmt: on


def _by_name(resources):
    return {r.kernel: r for r in resources}


def test_nvcc_log_lists_every_entry_function_in_order():
    names = [r.kernel for r in parse_ptxas(NVCC_SM80, "sm_80")]
    assert names == ["_Z5scaleI6__halfLi128EEvPT_S1_i", "_Z5scaleIfLi256EEvPT_S0_i", "spill", "smem_reduce",
                     "add"]


def test_nvcc_sm80_reads_registers_smem_barriers_and_cmem0():
    r = _by_name(parse_ptxas(NVCC_SM80, "sm_80"))["smem_reduce"]
    assert (r.registers, r.smem_static_bytes, r.barriers, r.cmem_bytes) == (9, 1024, 1, 372)


def test_nvcc_reads_stack_frame_and_spills():
    r = _by_name(parse_ptxas(NVCC_SM80, "sm_80"))["spill"]
    assert (r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes) == (928, 924, 1040)


def test_sm90_log_without_cmem_gives_zero_cmem():
    r = _by_name(parse_ptxas(NVCC_SM90, "sm_90"))["add"]
    assert (r.registers, r.cmem_bytes, r.arch) == (12, 0, "sm_90")


def test_nvrtc_prefixed_continuation_lines_are_read():
    r = _by_name(parse_ptxas(NVRTC_SM90, "sm_90"))["spill"]
    assert (r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes) == (880, 920, 1048)


def test_nvrtc_and_nvcc_logs_list_the_same_kernels():
    # Register counts may differ (NVRTC and nvcc front ends emit different PTX); the entries do not.
    def names(log):
        return [(r.kernel, r.arch) for r in parse_ptxas(log, "sm_80")]

    assert names(NVRTC_SM80) == names(NVCC_SM80)


def test_device_function_properties_do_not_overwrite_the_entry():
    (r,) = parse_ptxas(NVCC_DEVICE_FUNCTION_SM90, "sm_90")
    assert (r.kernel, r.stack_frame_bytes) == ("uses_helper", 128)


def test_arch_comes_from_the_log_when_it_names_one():
    arches = [(r.kernel, r.arch) for r in parse_ptxas(NVCC_TWO_ARCHES, "sm_75")]
    assert arches == [("dyn", "sm_80"), ("s4000", "sm_80"), ("dyn", "sm_90"), ("s4000", "sm_90")]


def test_ptxas_without_barrier_count_defaults_to_zero():
    # Hand-written in the format older ptxas releases print (no "used N barriers"), not tool output.
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_70'\n"
           "ptxas info    : Used 10 registers, 356 bytes cmem[0], 4 bytes cmem[2]\n")
    (r,) = parse_ptxas(log, "sm_70")
    assert (r.registers, r.barriers, r.cmem_bytes) == (10, 0, 356)


def test_error_log_gives_no_records():
    log = ('kernel.cu(1): error: identifier "y" is undefined\n'
           '1 error detected in the compilation of "kernel.cu".')
    assert parse_ptxas(log, "sm_90") == ()


def test_cuobjdump_cubin_uses_given_arch_and_reads_registers_and_stack():
    r = _by_name(parse_res_usage(CUOBJDUMP_CUBIN_SM90, "sm_90"))["spill"]
    assert (r.arch, r.registers, r.stack_frame_bytes) == ("sm_90", 32, 880)


def test_cuobjdump_sm90_reserved_smem_is_removed_once():
    r = _by_name(only_arch(parse_res_usage(CUOBJDUMP_OBJECT_TWO_ARCHES), "sm_90"))
    assert (r["s4000"].smem_static_bytes, r["dyn"].smem_static_bytes) == (4000, 0)


def test_cuobjdump_sm80_smem_is_taken_as_printed():
    r = _by_name(only_arch(parse_res_usage(CUOBJDUMP_OBJECT_TWO_ARCHES), "sm_80"))
    assert r["s4000"].smem_static_bytes == 4000


def test_cuobjdump_and_ptxas_agree_on_registers_and_smem_for_sm90():
    from_ptxas = {r.kernel: (r.registers, r.smem_static_bytes) for r in parse_ptxas(NVCC_TWO_ARCHES, "sm_90")
                  if r.arch == "sm_90"}
    from_dump = {r.kernel: (r.registers, r.smem_static_bytes)
                 for r in only_arch(parse_res_usage(CUOBJDUMP_OBJECT_TWO_ARCHES), "sm_90")}
    assert from_ptxas == from_dump


def test_cuobjdump_sections_are_labelled_by_their_arch():
    arches = sorted({r.arch for r in parse_res_usage(CUOBJDUMP_OBJECT_TWO_ARCHES)})
    assert arches == ["sm_80", "sm_90"]
