"""The rounding-sensitivity filter, on the CPU: a task whose reference answer moves beyond the task's own
tolerance under a rounding change that a correct kernel is free to make cannot judge kernels, so it is
left out like a degenerate task (flags `fma_sensitive`, `libm_sensitive`, `precision_sensitive`).

- C→CUDA: nvcc fuses multiply-adds by default; the serial C reference is built with `-std=c11`, under
  which GCC does not. The reference is built a second time with fused multiply-adds
  (`-ffp-contract=fast -mfma`) and both builds run on every configuration and correctness seed; a
  comparison that fails flags `fma_sensitive`. A threshold on a float sum (`x > mean + c ? 1 : 0`) is the
  typical case: one element in millions lands on the other side. When the fused build emits no FMA
  instruction its outputs are the same by construction and nothing is run.
- PyTorch→CUDA: the float32 reference is compared with the same model run in float64 (the better
  answer) on every configuration and correctness seed, within half the task's tolerance: a kernel whose
  float32 answer is as far from the exact one as the reference's, in another direction, lands up to
  twice that distance from the reference. A failure flags `precision_sensitive`. A non-Lipschitz
  epilogue on a long dot product (`sqrt(|x @ W|)`) is the typical case: near zero the float32 rounding
  of the dot product is amplified past the tolerance, so a kernel as accurate as the reference fails.

- C→CUDA again: CUDA's math functions are not glibc's; each may return a result up to its documented
  maximum error away (`CUDA_ULPS`: 2 ulp for `expf`, `cosf`, `atanf`, `tanhf`, 3 for `hypotf`, ...). The
  reference is built twice more with every such call's result moved by that many ulp, up or down by a
  hash of its argument, the second build with every direction reversed; a comparison with the plain
  build that fails flags `libm_sensitive`. A jump (`p > q ? p - q : 0.9f * q`) or a square root at zero
  (`sqrtf(fabsf(p - q))`) over two such calls is the typical case.

All checks use the comparison the GPU harness uses (`cudaperf.correctness.compare`) with the task's
tolerance, and the measurement's correctness seeds.

Not covered: other rounding differences between the host and the GPU (the order of a parallel sum). The
checks are also samples: a sensitive point hit by one element in millions on the GPU's inputs may be
missed on the CPU's arithmetic, and the nudged builds try two of the many ways the errors can combine. The
GPU measurement still records any failure they leave.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEEDS = (0, 1)  # the measurement's correctness seeds (measure.MeasureOptions.seeds)
FMA_MNEMONICS = ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")
# The maximum ulp error of CUDA's single-precision functions (CUDA C++ Programming Guide, "Mathematical
# Functions", standard functions table; sqrtf and x/y are exact under nvcc's and NVRTC's default
# -prec-sqrt/-prec-div, fabsf/fmaxf/fminf/floorf are exact): name -> (arguments, ulp).
CUDA_ULPS: dict[str, tuple[int, int]] = {
    "expf": (1, 2), "exp2f": (1, 2), "exp10f": (1, 2), "expm1f": (1, 1), "logf": (1, 1), "log2f": (1, 1),
    "log10f": (1, 2), "log1pf": (1, 1), "sinf": (1, 2), "cosf": (1, 2), "tanf": (1, 4), "asinf": (1, 2),
    "acosf": (1, 2), "atanf": (1, 2), "sinhf": (1, 3), "coshf": (1, 2), "tanhf": (1, 2), "cbrtf": (1, 1),
    "erff": (1, 2), "erfcf": (1, 4), "atan2f": (2, 3), "hypotf": (2, 3), "powf": (2, 4),
}
NUDGE_FLIP_MACRO = "CUDAPERF_NUDGE_FLIP"


@dataclass(frozen=True)
class Sensitivity:
    """The verdict of one task: a flag (empty when stable) and the first failing comparison."""

    flag: str = ""
    message: str = ""


@functools.lru_cache(maxsize=1)
def host_has_fma() -> bool:
    """Whether this CPU runs FMA3 code (a fused build would die with SIGILL without it)."""
    try:
        return " fma " in f" {Path('/proc/cpuinfo').read_text().replace(chr(10), ' ')} "
    except OSError:
        return False


def fused_flags() -> tuple[str, ...]:
    from cudaperf.tasks import cref

    return (*cref.CFLAGS, "-ffp-contract=fast", "-mfma")


def emits_fma(source: str, cc: str | None = None) -> bool:
    """Whether the fused build of `source` contains an FMA instruction (assembly of `cc -S`)."""
    from cudaperf.tasks import cref

    flags = [f for f in fused_flags() if f not in ("-shared", "-fPIC")]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ref.c").write_text(source)
        proc = subprocess.run([cc or cref.CC, *flags, "-S", "-o", "-", "ref.c"], cwd=tmp,
                              capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"fused build failed:\n{proc.stderr[-2000:]}")
    return any(m in proc.stdout for m in FMA_MNEMONICS)


def c_sensitivity(ctask: Any, cache_dir: str | None = None) -> Sensitivity:
    """`fma_sensitive` when the fused reference fails the comparison with the plain one."""
    if not emits_fma(ctask.source):
        return Sensitivity()
    message = _first_disagreement(ctask, [(ctask, fused_flags())], cache_dir)
    return Sensitivity("fma_sensitive", message) if message else Sensitivity()


def libm_calls(source: str) -> tuple[str, ...]:
    """The functions of `CUDA_ULPS` that `source` calls, in table order."""
    return tuple(name for name in CUDA_ULPS if re.search(rf"\b{name}\s*\(", source))


def nudge_prelude(names: tuple[str, ...]) -> str:
    """C that redefines each of `names` as the libm call with its result moved by the function's CUDA ulp
    bound, up or down by a hash of the argument bits and the function (reversed when the build defines
    CUDAPERF_NUDGE_FLIP=1). Hand-written: no library perturbs libm results inside a C build. A macro's
    own name is not expanded again inside it, so `expf(x)` within the expansion is glibc's."""
    lines = ["#include <math.h>", "#include <stdint.h>", "#include <string.h>",
             f"#ifndef {NUDGE_FLIP_MACRO}", f"#define {NUDGE_FLIP_MACRO} 0", "#endif",
             "static inline float cudaperf_nudge(float r, float key, uint32_t salt, int ulps) {",
             "    uint32_t u; memcpy(&u, &key, sizeof u);",
             "    u ^= salt; u *= 0x9E3779B1u; u ^= u >> 15; u *= 0x85EBCA6Bu; u ^= u >> 13;",
             f"    int up = (int)((u >> 7) & 1u) ^ {NUDGE_FLIP_MACRO};",
             "    if (!isfinite(r)) return r;",
             "    for (int i = 0; i < ulps; ++i) r = nextafterf(r, up ? INFINITY : -INFINITY);",
             "    return r;", "}"]
    for i, name in enumerate(names):
        arity, ulps = CUDA_ULPS[name]
        args = ", ".join(f"a{k}" for k in range(arity))
        key = " + ".join(f"(a{k})" for k in range(arity))
        lines.append(f"#define {name}({args}) "
                     f"cudaperf_nudge({name}({args}), {key}, {0x1000193 * (i + 1)}u, {ulps})")
    return "\n".join(lines) + "\n"


def libm_sensitivity(ctask: Any, cache_dir: str | None = None) -> Sensitivity:
    """`libm_sensitive` when a reference with its math calls' results nudged by CUDA's error bounds fails
    the comparison with the plain one."""
    from cudaperf.tasks import cref

    names = libm_calls(ctask.source)
    if not names:
        return Sensitivity()
    nudged = dataclasses.replace(ctask, source=nudge_prelude(names) + ctask.source)
    variants = [(nudged, (*cref.CFLAGS, f"-D{NUDGE_FLIP_MACRO}={flip}")) for flip in (0, 1)]
    message = _first_disagreement(ctask, variants, cache_dir)
    return Sensitivity("libm_sensitive", message) if message else Sensitivity()


def _first_disagreement(ctask: Any, variants: list[tuple[Any, tuple[str, ...]]],
                        cache_dir: str | None) -> str:
    """The first comparison (configuration, seed) in which a variant build (task, flags) fails against
    the plain reference build, as a message; '' when none does."""
    from cudaperf.tasks import cref

    builds = [cref.build_reference(t, cache_dir=cache_dir, flags=f)
              for t, f in [(ctask, cref.CFLAGS), *variants]]
    for build in builds:
        if not build.ok:
            raise RuntimeError(f"reference build failed:\n{build.log}")
    outputs = [p.name for p in ctask.outputs]
    for config in ctask.configs:
        for seed in SEEDS:
            plain = cref.make_inputs(ctask, config, seed)
            runs = [cref.copy_values(plain) for _ in variants]
            for build, values in zip(builds, [plain, *runs], strict=True):
                cref.call(ctask, build, values)
            for values in runs:
                message = _first_failure({n: values[n] for n in outputs}, {n: plain[n] for n in outputs},
                                         ctask.tolerance_for(config))
                if message:
                    return f"{config.name} seed {seed}: {message}"
    return ""


def torch_sensitivity(text: str, task_id: str) -> Sensitivity:
    """`precision_sensitive` when the float32 reference fails the comparison with its float64 run."""
    import torch

    from cudaperf import correctness
    from cudaperf.tasks import runtime, task_from_source

    record = task_from_source(text, task_id)
    module = runtime.load_module(record)
    tol = _halved(record.tolerances.get("float32") or correctness.tolerance_for(torch.float32))
    for config in record.configs:
        torch.manual_seed(0)
        model = module.Model(*runtime.make_init_inputs(module, config)).eval()
        wide = copy.deepcopy(model).double()
        for seed in SEEDS:
            inputs = runtime.make_inputs(module, config, seed, "cpu")
            with torch.no_grad():
                out = model(*inputs)
                exact = _in_float64(wide, [_widen(x) for x in inputs])
            ref = _narrow(exact, out)
            if _tensor_within_bound(out, ref, tol):
                continue
            result = correctness.compare(out, ref, tol, path="output")
            if not result.ok:
                return Sensitivity("precision_sensitive", f"{config.name} seed {seed}: {result.message}")
    return Sensitivity()


def _tensor_within_bound(out: Any, ref: Any, tol: Any) -> bool:
    """True when every element where `out` and `ref` differ is finite and within `correctness.compare`'s
    bound for it, computed by `correctness._bound` itself (so the verdict is the comparison's, element for
    element). Comparing 16M-element outputs costs ~0.7 s a call, most of the check's time; equal elements
    are never outside the bound, so only a failing or non-finite differing element runs `compare` in
    full, for its message. Anything but one real floating tensor of the reference's shape and dtype goes
    to `compare` directly."""
    import torch

    from cudaperf import correctness

    if not (isinstance(out, torch.Tensor) and isinstance(ref, torch.Tensor)) or not ref.is_floating_point() \
            or out.shape != ref.shape or out.dtype != ref.dtype:
        return False
    differ = out != ref
    if not bool(differ.any()):
        return True
    a, b = correctness._real_view(out), correctness._real_view(ref)
    if not (bool(torch.isfinite(a[differ]).all()) and bool(torch.isfinite(b[differ]).all())):
        return False
    bound, _ = correctness._bound(b, tol, torch.isfinite(b))
    return bool(((a[differ] - b[differ]).abs() <= bound[differ]).all())


def _in_float64(model: Any, inputs: list[Any]) -> Any:
    """The model's float64 run; tensors it creates without a dtype (`torch.zeros(...)`) are float64 too."""
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return model(*inputs)
    finally:
        torch.set_default_dtype(previous)


def _halved(tol: Any) -> Any:
    """Each of two float32 answers gets half the distance the comparison allows between them."""
    return dataclasses.replace(tol, atol=tol.atol / 2, rtol=tol.rtol / 2)


def _widen(x: Any) -> Any:
    import torch

    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _narrow(exact: Any, like: Any) -> Any:
    """The float64 answer rounded to the float32 output's dtypes (structure kept)."""
    import torch

    if isinstance(exact, torch.Tensor):
        return exact.to(like.dtype)
    if isinstance(exact, (list, tuple)):
        return type(exact)(_narrow(e, o) for e, o in zip(exact, like, strict=True))
    return exact


def _first_failure(outputs: dict[str, Any], reference: dict[str, Any], tol: Any) -> str:
    """`correctness.compare`'s message for the first output that fails it ('' when all pass)."""
    import torch

    from cudaperf import correctness

    for name, ref in reference.items():
        out, ref_t = torch.from_numpy(outputs[name]), torch.from_numpy(ref)
        if _tensor_within_bound(out, ref_t, tol):
            continue
        result = correctness.compare(out, ref_t, tol, path=name)
        if not result.ok:
            return result.message
    return ""


CHECKS = ("fma", "libm", "precision")  # `check_task(only=...)`: fma and libm on C tasks, precision on PyTorch


def check_task(task: Any, cache_dir: str | None = None, only: str | None = None) -> dict[str, Any]:
    """One verdict row (validate*.jsonl) for a generated task: every check of its kind (`check:
    rounding`), or with `only` the one named check (`check: <only>`; ok where it does not apply)."""
    from cudaperf.tasks.ctask import from_json
    from cudaperf.types import TaskKind

    if only is not None and only not in CHECKS:
        raise ValueError(f"unknown check {only!r}; expected one of {', '.join(CHECKS)}")
    row: dict[str, Any] = {"task_id": task.task_id, "kind": task.kind.value, "family": task.family,
                           "check": only or "rounding"}
    wanted = [name for name in CHECKS if only in (None, name)]
    try:
        if task.kind is TaskKind.C:
            ctask = from_json(task.text)
            checks = [(c_sensitivity, "fma"), (libm_sensitivity, "libm")]
            verdict = next((v for fn, name in checks if name in wanted
                            for v in [fn(ctask, cache_dir)] if v.flag), Sensitivity())
        else:
            verdict = torch_sensitivity(task.text, task.task_id) if "precision" in wanted else Sensitivity()
    except Exception as exc:  # noqa: BLE001 - a reference that fails here is a finding about the task
        verdict = Sensitivity("reference_error", f"{type(exc).__name__}: {exc}"[:500])
    row.update(ok=not verdict.flag, flags=[verdict.flag] if verdict.flag else [],
               message=verdict.message[:500])
    return row


def main(argv: list[str] | None = None) -> int:
    """`python3 -m cudaperf.datasets.filters.rounding OUT.jsonl [--shard i/n] [--first DIR] [--only CHECK]`:
    append one verdict per task of the seed-0 index to OUT (a rerun skips the tasks already there), the
    tasks measured in DIR first; with --only, that check alone (for a check added after a full run)."""
    import argparse
    import json
    import sys
    import time

    from cudaperf.datasets import registry
    from cudaperf.datasets.jsonl import read_records

    p = argparse.ArgumentParser(prog="cudaperf.datasets.filters.rounding", description=main.__doc__)
    p.add_argument("out", type=Path)
    p.add_argument("--shard", default="0/1", help="i/n: every n-th task from the i-th")
    p.add_argument("--first", type=Path, default=None, help="a measurement directory: its tasks go first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=CHECKS, default=None, help="run this check alone")
    args = p.parse_args(argv)
    if args.only in (None, "fma") and not host_has_fma():
        print("this CPU has no FMA3: the fused C build cannot run here", file=sys.stderr)
        return 2
    index, n = (int(x) for x in args.shard.split("/"))
    measured = {r.get("task_id") for r in read_records([args.first])[0]} if args.first else set()
    tasks = sorted(registry.build_index(args.seed), key=lambda t: (t.task_id not in measured, t.task_id))
    done = {json.loads(line)["task_id"] for line in args.out.read_text().splitlines() if line.strip()} \
        if args.out.exists() else set()
    todo = [t for t in tasks[index::n] if t.task_id not in done]
    start, flagged = time.monotonic(), 0
    with args.out.open("a") as fh:
        for i, task in enumerate(todo, 1):
            row = check_task(task, only=args.only)
            fh.write(json.dumps(row, sort_keys=True) + "\n")
            fh.flush()  # one line per task: an interrupted run loses at most the task in flight
            flagged += not row["ok"]
            if i % 25 == 0 or i == len(todo):
                print(f"[{time.monotonic() - start:7.0f} s] {i}/{len(todo)} checked, {flagged} flagged",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
