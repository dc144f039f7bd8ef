"""Diagnose two failures seen only on the lent H200 machine; prints a JSON report.

Covers: (1) `import torch` failing in some processes with a TorchScript schema error ("annotate(strtag)"):
it imports torch in fresh processes alone, several at once, after tree-sitter, without bytecode writing
(-B), and with and without the bytecode cache of the torch package; (2) NVRTC logs without ptxas facts:
it compiles one kernel uncached and prints the NVRTC version, the log and the parsed resources, and
analyses the first validation case with and without the compile cache.
Not covered: anything else; this is a one-off probe whose findings go into dev/LOG.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

KERNEL = 'extern "C" __global__ void k(const float* a, float* b, int n) {' \
         ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] = 2.0f * a[i]; }'


def _py(code: str, *flags: str) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=300)
    lines = (p.stderr + p.stdout).strip().splitlines()
    tail = lines[-40:] if p.returncode else lines[-3:]  # the whole traceback when it failed
    return {"rc": p.returncode, "s": round(time.perf_counter() - t0, 2), "tail": [t[:400] for t in tail]}


def _concurrent(code: str, n: int, *flags: str) -> list[dict]:
    procs = [subprocess.Popen([sys.executable, *flags, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    out = []
    for p in procs:
        _, err = p.communicate(timeout=300)
        out.append({"rc": p.returncode,
                    "tail": [t[:400] for t in err.strip().splitlines()[-(30 if p.returncode else 1):]]})
    return out


# What a build-pool worker and the validation script do before their torch import: NVRTC through cuda-core
# in the same process. Prints the shared libraries then mapped, so a clash between two copies shows.
NVRTC_THEN_TORCH = (
    "from cudaperf.toolchain.nvrtc import compile_cuda\n"
    f"out = compile_cuda({KERNEL!r}, arch='sm_90', use_cache=False)\n"
    "print('resources', out.resources)\n"
    "libs = sorted({l.split()[-1] for l in open('/proc/self/maps') if '.so' in l})\n"
    "print('\\n'.join(x for x in libs "
    "if any(k in x for k in ('nvrtc', 'stdc++', 'torch', 'cuda', 'nvJit'))))\n"
    "import torch, torch.utils._debug_mode\n"
    "print('torch ok', torch.__version__)\n"
)
ANALYSE_THEN_TORCH = (
    "from cudaperf.analysis import analyze_source\n"
    f"r = analyze_source({KERNEL!r}, kind='cuda', sass=False, use_cache=False)\n"
    "print('registers', [k.resources for k in r.kernels])\n"
    "import torch, torch.utils._debug_mode\n"
    "print('torch ok', torch.__version__)\n"
)


def torch_probes() -> dict:
    imp = "import torch, torch.utils._debug_mode; print(torch.__version__)"
    ts = "import tree_sitter, tree_sitter_cuda; " + imp
    cp = "import cudaperf.analysis.validation; " + imp
    return {
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("PYTHON", "LC_", "LANG", "TORCH", "CUDA", "LD_"))},
        "python": sys.version, "flags": str(sys.flags), "site": sorted(os.listdir("/tmp/site"))
        if os.path.isdir("/tmp/site") else None,
        "nvrtc_then_torch": _py(NVRTC_THEN_TORCH),
        "analyse_then_torch": _py(ANALYSE_THEN_TORCH),
        "alone_isolated_-I": _py(imp, "-I"),
        "alone": _py(imp),
        "alone_-B": _py(imp, "-B"),
        "tree_sitter_first": _py(ts),
        "cudaperf_analysis_first": _py(cp),
        "concurrent_8": _concurrent(imp, 8),
        "concurrent_8_-B": _concurrent(imp, 8, "-B"),
        "concurrent_8_cudaperf_first": _concurrent(cp, 8),
    }


def nvrtc_probe() -> dict:
    from cudaperf.toolchain.nvrtc import compile_cuda, nvrtc_options, nvrtc_version

    out = compile_cuda(KERNEL, arch="sm_90", use_cache=False)
    libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if "nvrtc" in line})
    return {"nvrtc_version": nvrtc_version(), "nvrtc_libraries": libs, "options": nvrtc_options("sm_90", ()),
            "log": out.log[:2000],
            "resources": [str(r) for r in out.resources]}


def analysis_probe() -> dict:
    from cudaperf.analysis import analyze_source
    from cudaperf.analysis.validation import all_cases

    case = all_cases()[0]
    out = {}
    for use_cache in (True, False):
        report = analyze_source(case.source, kind="cuda", launch=case.launch, sizes=case.sizes, sass=False,
                                use_cache=use_cache)
        f = report.kernels[0]
        out[f"cache={use_cache}"] = {"kernel": f.kernel, "resources": str(f.resources),
                                     "occupancy": str(f.occupancy),
                                     "diagnostics": list(report.diagnostics)[:5],
                                     "kernel_diagnostics": list(f.diagnostics)[:5]}
    return out


def main() -> None:
    report: dict = {}
    for name, fn in (("torch", torch_probes), ("nvrtc", nvrtc_probe), ("analysis", analysis_probe)):
        try:
            report[name] = fn()
        except Exception as exc:  # noqa: BLE001 - a probe that fails is itself the finding
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
