"""Source -> binaries: find a solution's CUDA (AST), compile it (NVRTC / load_inline), cache it, and
report ptxas resource usage; a process pool runs builds on every core.

Modules: `extract` (units and format, no execution), `signature` (kernel parameter types), `nvrtc`
(compile + disk cache), `inline` (load_inline prebuilds), `ptxas` (resource-usage parsers), `cache`
(keys and atomic writes), `pool` (`build_solution`, `BuildPool`).

Not covered: running kernels (`cudaperf.cuda` launches, `cudaperf.execute` runs candidates).
Importing this package loads neither torch nor the CUDA libraries.
"""

from cudaperf.toolchain.extract import CudaUnit, detect_format, extract_units
from cudaperf.toolchain.nvrtc import CompileError, NvrtcOutput, compile_cuda
from cudaperf.toolchain.pool import BuildPool, build_solution
from cudaperf.toolchain.ptxas import parse_ptxas, parse_res_usage

__all__ = [
    "BuildPool",
    "CompileError",
    "CudaUnit",
    "NvrtcOutput",
    "build_solution",
    "compile_cuda",
    "detect_format",
    "extract_units",
    "parse_ptxas",
    "parse_res_usage",
]
