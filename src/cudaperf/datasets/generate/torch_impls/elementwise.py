"""Implementations of the `elementwise` family (a chain of unary ops, optionally combined with a second
input): naive (one thread per element), grid_stride, coarsened (4 per thread), vectorized (float4
loads and stores with a scalar tail).

Not covered: other dtypes than float32.
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.torch_impls.parts import model_new
from cudaperf.datasets.records import Implementation

_BIN = {"": "{r}", "add": "{r} + y[i]", "mul": "{r} * y[i]", "max": "fmaxf({r}, y[i])", "sub": "{r} - y[i]"}


def elementwise_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    _, expr = chain_exprs(v["ops"], "x", "v")
    b = v["binary"]
    fwd_args = "x, y" if b else "x"
    yparam = "const float* __restrict__ y, " if b else ""
    ycall = "y, " if b else ""
    f = f"__device__ __forceinline__ float f(float v) {{ return {expr}; }}\n"
    body_expr = _BIN[b].format(r="f(x[i])")
    kernels = {
        "naive": (("long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n    if (i < n) out[i] = "
                   f"{body_expr};"), "(n + 255) // 256"),
        "grid_stride": (("for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; "
                         f"i += (long long)gridDim.x * blockDim.x) out[i] = {body_expr};"),
                        "max(1, min((n + 255) // 256, 1056))"),
        "coarsened": (("long long base = blockIdx.x * (long long)blockDim.x * 4 + threadIdx.x;\n"
                       "#pragma unroll\n"
                       "    for (int k = 0; k < 4; ++k) { long long i = base + k * blockDim.x; "
                       f"if (i < n) out[i] = {body_expr}; }}"), "(n + 1023) // 1024"),
    }
    vec_b = {"": "", "add": " + yy.{c}", "mul": " * yy.{c}", "max": "", "sub": " - yy.{c}"}[b]
    comps = "\n".join(
        f"        r.{c} = "
        + (f"fmaxf(f(xx.{c}), yy.{c})" if b == "max" else f"f(xx.{c}){vec_b.format(c=c)}") + ";"
        for c in "xyzw")
    yload = "        float4 yy = reinterpret_cast<const float4*>(y)[q];\n" if b else ""
    kernels["vectorized"] = (
        ("long long nq = n / 4, tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
         "    for (long long q = tid; q < nq; q += (long long)gridDim.x * blockDim.x) {\n"
         f"        float4 xx = reinterpret_cast<const float4*>(x)[q];\n{yload}        float4 r;\n{comps}\n"
         "        reinterpret_cast<float4*>(out)[q] = r;\n    }\n"
         f"    long long i = nq * 4 + tid;\n    if (i < n) out[i] = {body_expr};"), "max(1, min((n // 4 + "
                                                                                   "255) // 256, 1056))")
    out = []
    for strategy, (code, grid) in kernels.items():
        cuda = (f"{f}\nextern \"C\" __global__ void ew(const float* __restrict__ x, {yparam}float* "
                "__restrict__ out,"
                f" long long n) {{\n    {code}\n}}\n")
        body = (f"        out = torch.empty_like(x)\n        n = x.numel()\n"
                f"        mod.ew(({grid},), (256,), x, {ycall}out, n)\n        return out\n")
        src = model_new(f"{strategy} elementwise chain for {task_id}", "", "", fwd_args, body, cuda)
        out.append(Implementation(f"{task_id}/{strategy}", task_id, strategy, src, (strategy, "elementwise"),
                                  strategy == "naive"))
    return out
