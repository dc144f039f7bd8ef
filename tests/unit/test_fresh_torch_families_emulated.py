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


def _poisoned_new_empty(monkeypatch) -> None:
    """Tensor.new_empty fills with NaN (floats): an output element a kernel never writes cannot pass."""
    import torch

    new_empty = torch.Tensor.new_empty

    def poisoned(self, *a, **k):
        t = new_empty(self, *a, **k)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch.Tensor, "new_empty", poisoned)


def run_emulated(task, impl, cuda, kwargs: dict, seed: int) -> str:
    """'' when the emulated implementation matches the reference, else what differs."""
    import torch

    ref = load_generated(task.text, "ref_" + task.task_id)
    atol, rtol = ref.CUDAPERF_TASK["tolerances"]["float32"]
    init = ref.get_init_inputs(**kwargs)
    torch.manual_seed(seed)
    model = ref.Model(*init).eval()
    torch.manual_seed(seed)
    cand = load_generated(impl.source, impl.impl_id.replace("/", "_"))
    cand.cuda = cuda
    new = cand.ModelNew(*init).eval()
    torch.manual_seed(seed + 1)
    inputs = ref.get_inputs(**kwargs)
    with torch.no_grad():
        want, got = model(*inputs), new(*inputs)
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
    if not torch.allclose(got, want, atol=atol, rtol=rtol):
        err = (got.double() - want.double()).abs().nan_to_num(float("inf")).max()
        return f"max abs error {float(err):.3g} (nan: {int(got.isnan().sum())})"
    return ""


@pytest.mark.slow
@pytest.mark.parametrize(("task", "impl"), _cases())
def test_emulated_fresh_implementation_matches_reference(task, impl, emulator, monkeypatch):
    _poisoned_new_empty(monkeypatch)
    small = next(c for c in load_generated(task.text, "cfg").get_input_configs() if c["name"] == "small")
    for kwargs in [small, *_tail_sizes(task)]:
        params = {k: v for k, v in kwargs.items() if k != "name"}
        for seed in (0, 1):
            message = run_emulated(task, impl, emulator, params, seed)
            assert message == "", (impl.impl_id, params, seed, message)
