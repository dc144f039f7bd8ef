"""The fresh PyTorch families' implementations (generate/torch_impls/fresh_*.py), run on the CPU through the
`cpu_cuda` emulator and compared with the task's PyTorch reference (CPU) within the task's tolerance, on
two input seeds.

Sizes: the task's `small` configuration plus "tail" sizes that cross every chunk and pass boundary of the
kernels (bags longer than one 32-index chunk and rows wider than one column pass, dims that are not whole
float4s, rows longer than two_pass's 2048-column chunk, batches that do not fill coarsened's last block,
the odd matrix sizes), since the tasks' own large and odd sizes are too slow to emulate. Variants: one per
structurally different kernel (bag mode x length distribution, k x largest x post, matrix shape x
transposed B x bias).

The emulator's prelude gains `atomicMax(int*, int)` here (embedding_bag's atomic max), written as the
emulator writes its other atomics: a plain read-modify-write, since fibers never switch inside one.

Marked slow: every distinct kernel source is compiled by g++ (~0.3 s each, cached by content under
$CUDAPERF_EMU_CACHE or the temp dir).
"""

from __future__ import annotations

from functools import lru_cache

import pytest
from test_datasets_more_emulated import run_emulated  # the same comparison, allocations poisoned

from cudaperf.datasets import registry
from cudaperf.datasets.generate.torch_impls.fresh_batched_small_matmul import odd_dims
from cudaperf.datasets.measure.gpucheck import load_generated

pytest.importorskip("torch")

FAMILIES = ("embedding_bag", "row_topk", "batched_small_matmul")
STRUCTURE = {  # variant fields that change the kernels' structure
    "embedding_bag": ("mode", "lengths"),
    "row_topk": ("k", "largest", "post"),
    "batched_small_matmul": ("m", "k", "n", "trans_b", "bias"),
}
_ATOMIC_MAX = "static inline int atomicMax(int* p, int v) { int o = *p; if (v > o) *p = v; return o; }\n"


def _tail_sizes(task) -> list[dict]:
    v = task.variant
    if task.family == "embedding_bag":
        return [{"bags": 5, "avg": 40, "vocab": 64, "dim": 264},
                {"bags": 37, "avg": 9, "vocab": 101, "dim": 33}]
    if task.family == "row_topk":
        return [{"rows": 37, "cols": 97}, {"rows": 3, "cols": 4500}]
    m, k, n = odd_dims(v["m"], v["k"], v["n"])
    return [{"batch": 5, "m": m, "k": k, "n": n}, {"batch": 17, "m": v["m"], "k": v["k"], "n": v["n"]}]


@lru_cache(maxsize=1)
def picked_tasks() -> tuple:
    seen, out = set(), []
    for task in registry.build_index(0, families=list(FAMILIES)):
        key = (task.family, *(task.variant[f] for f in STRUCTURE[task.family]))
        if key not in seen:
            seen.add(key)
            out.append(task)
    return tuple(out)


def _cases() -> list:
    return [pytest.param(task, impl, id=f"{task.family}-"
                         f"{'-'.join(str(task.variant[f]) for f in STRUCTURE[task.family])}/{impl.strategy}")
            for task in picked_tasks() for impl in registry.implementations(task)]



@pytest.fixture
def emulator(monkeypatch):
    import cpu_cuda

    monkeypatch.setattr(cpu_cuda, "PRELUDE", cpu_cuda.PRELUDE + _ATOMIC_MAX)
    return cpu_cuda.CpuCuda()


@pytest.mark.slow
@pytest.mark.parametrize(("task", "impl"), _cases())
def test_emulated_fresh_implementation_matches_reference(task, impl, emulator):
    small = next(c for c in load_generated(task.text, "cfg").get_input_configs() if c["name"] == "small")
    for kwargs in [small, *_tail_sizes(task)]:
        params = {k: v for k, v in kwargs.items() if k != "name"}
        for seed in (0, 1):
            ok, message = run_emulated(task, impl, params, seed, cuda=emulator)
            assert ok, (impl.impl_id, params, seed, message)
