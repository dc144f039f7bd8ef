"""Implementations of the `matmul_epilogue` family, out = epi(x W^T + b) (+ x[:, :n] when residual):
naive, smem_tiled, register_tiled and tensor_core matmuls with the epilogue fused (matmul_kernels.py),
and unfused (a tiled matmul, then a separate epilogue kernel).

Not covered: other dtypes than float32.
"""

from __future__ import annotations

from typing import Any

from cudaperf.datasets.generate.elementwise_ops import chain_exprs
from cudaperf.datasets.generate.torch_impls.matmul_kernels import (
    FIN_PARAMS,
    MM_WITH_TENSOR_CORES,
    mm_launch,
    mm_tiled,
    raw_fin,
)
from cudaperf.datasets.generate.torch_impls.parts import implementation
from cudaperf.datasets.records import Implementation


def _matmul_fin(v: dict[str, Any]) -> str:
    _, epi = chain_exprs(v["ops"], "x", "v")
    bias = " + e0[j]" if v["bias"] else ""
    res = " + e1[(long long)i * k + j]" if v["residual"] else ""
    return (f"__device__ __forceinline__ float epi(float v) {{ return {epi}; }}\n"
            f"__device__ __forceinline__ float fin({FIN_PARAMS}) {{ return epi(acc{bias}){res}; }}\n")


_MM_EPILOGUE = """
extern "C" __global__ void epilogue(const float* __restrict__ t, float* __restrict__ out,
                                    const float* __restrict__ e0, const float* __restrict__ e1,
                                    int m, int n, int k) {
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= (long long)m * n) return;
    out[e] = fin(t[e], 0, (int)(e / n), (int)(e % n), m, n, k, e0, e1, 1.0f);
}
"""


def matmul_impls(v: dict[str, Any], task_id: str) -> list[Implementation]:
    fin = _matmul_fin(v)
    init = f"        self.linear = nn.Linear(k, n, bias={bool(v['bias'])})\n"
    head = ("kk = x.shape[-1]\nm = x.numel() // kk\nn = self.linear.out_features\n"
            "out = x.new_empty((*x.shape[:-1], n))\n")
    args = "x, self.linear.weight, {dst}, {e0}, {e1}, m, n, kk, 0, 0, 0, 1.0"
    out = []
    for strategy, (gen, tile) in MM_WITH_TENSOR_CORES.items():
        cuda = fin + gen("gemm", "nt", "fin")
        launch_args = args.format(dst="out", e0="self.linear.bias", e1="x")
        body = head + mm_launch("gemm", tile, "m", "n", "1", launch_args)
        tags = ("matmul", "fused") if strategy != "naive" else ("matmul",)
        out.append(implementation(task_id, strategy, "linear + epilogue", cuda, body + "\nreturn out", "x",
                                  tags, init, ", k, n"))
    cuda = fin + raw_fin() + mm_tiled("gemm", "nt", "raw") + _MM_EPILOGUE
    body = (head + "t = x.new_empty((m, n))\n" + mm_launch("gemm", 16, "m", "n", "1", args.format(
        dst="t", e0="None", e1="None")) + "\nmod.epilogue(((m * n + 255) // 256,), (256,), t, out, "
            "self.linear.bias, x, m, n, kk)\nreturn out")
    out.append(implementation(task_id, "unfused", "linear + epilogue", cuda, body, "x",
                              ("matmul", "smem_tiled"), init, ", k, n"))
    return out
