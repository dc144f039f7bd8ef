"""The implementations of the seven PyTorch families beyond the elementwise and row-wise ones
(generate/torch_impls/), run on the CPU through the `cpu_cuda` emulator and compared with the task's
PyTorch reference (CPU) within the task's tolerance.

Sizes: the task's `small` configuration plus per-family "tail" sizes chosen to cross every tile, chunk and
block boundary of the kernels with partial tiles (matmul m, n > 64 and k % 16 != 0, conv outputs wider
than one tile, scans longer than a 1024-element block chunk, head dims not a multiple of 32, ...), since
the tasks' own large and odd sizes are too slow to emulate. Variants: one per structurally different
kernel (bias/residual, conv geometry, pooling kind and geometry, attention piece x causal, scan op x
direction x dim, gather op, loss x reduction).

Marked slow: every distinct kernel source is compiled by g++ (~0.3 s each, cached by content under
$CUDAPERF_EMU_CACHE or the temp dir) and threads that synchronise run as fibers.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from cudaperf.datasets import registry
from cudaperf.datasets.measure.gpucheck import load_generated

pytest.importorskip("torch")

SEVEN = ("matmul_epilogue", "conv_activation", "pooling", "attention", "scan_torch", "gather_scatter", "loss")
TAIL_SIZES: dict[str, list[dict]] = {
    "matmul_epilogue": [{"m": 70, "k": 77, "n": 67}],
    "conv_activation": [{"batch": 2, "cin": 3, "cout": 5, "size": 37}],
    "conv_activation_1d": [{"batch": 2, "cin": 3, "cout": 5, "size": 600}],
    "pooling": [{"batch": 2, "ch": 3, "size": 37}],
    "pooling_1d": [{"batch": 2, "ch": 3, "size": 600}],
    "attention": [{"batch": 2, "heads": 3, "seq": 45, "hdim": 24},
                  {"batch": 1, "heads": 2, "seq": 70, "hdim": 40}],
    # few lines (block_tree runs 256 fibers per line), lines longer than a 1024-element chunk and than 32
    "scan_torch": [{"batch": 2, "rows": 3, "dim": 1100}, {"batch": 1, "rows": 3, "dim": 45}],
    "scan_torch_dim1": [{"batch": 1, "rows": 1030, "dim": 3}, {"batch": 2, "rows": 45, "dim": 3}],
    "gather_scatter": [{"batch": 3, "seq": 37, "vocab": 101, "dim": 33},
                       {"batch": 2, "seq": 50, "vocab": 64, "dim": 36}],
    "loss": [{"batch": 5, "dim": 1100}, {"batch": 3, "dim": 7}],
}


def _structure(task) -> tuple:
    """The variant fields that change the kernels' structure (not constants such as scales or op chains)."""
    v = task.variant
    return {
        "matmul_epilogue": lambda: (v["bias"], v["residual"]),
        "conv_activation": lambda: (v["dims"], v["k"], v["stride"], v["pad"]),
        "pooling": lambda: (v["kind"], v["dims"], v["k"], v["stride"], v["pad"]),
        "attention": lambda: (v["piece"], v["causal"], v["scale"] == "rsqrt"),
        "scan_torch": lambda: (v["op"], v["reverse"], v["dim"]),
        "gather_scatter": lambda: (v["op"],),
        "loss": lambda: (v["loss"], v["reduce"]),
    }[task.family]()


@lru_cache(maxsize=1)
def picked_tasks() -> tuple:
    """One task per structure; for conv and pooling every geometry would be ~200 builds, so a fixed spread."""
    seen, out = set(), []
    for task in registry.build_index(0, families=list(SEVEN)):
        key = (task.family, _structure(task))
        if key in seen:
            continue
        seen.add(key)
        out.append(task)
    keep_conv = {(2, 3, 1, 1), (2, 5, 2, 0), (2, 1, 2, 1), (1, 3, 1, 1), (1, 5, 2, 0), (1, 1, 1, 1),
                 (2, 3, 2, 1),
                 (1, 3, 2, 1)}
    keep_pool = {("max", 2, 3, 2, 1), ("avg", 2, 3, 1, 1), ("max", 2, 2, 2, 0), ("avg", 2, 4, 2, 1),
                 ("max", 1, 3, 2, 1), ("avg", 1, 4, 1, 0), ("max", 1, 2, 1, 1), ("avg", 2, 2, 1, 0)}
    return tuple(t for t in out if (t.family != "conv_activation" or _structure(t) in keep_conv)
                 and (t.family != "pooling" or _structure(t) in keep_pool))


def _sizes(task) -> list[dict]:
    fam = task.family
    if fam in ("conv_activation", "pooling") and task.variant["dims"] == 1:
        fam += "_1d"
    if fam == "scan_torch" and task.variant["dim"] == 1:
        fam += "_dim1"
    return TAIL_SIZES[fam]


def _cases() -> list:
    cases = []
    for task in picked_tasks():
        for impl in registry.implementations(task):
            cases.append(pytest.param(task, impl, id=f"{task.family}-{'-'.join(map(str, _structure(task)))}"
                                                      f"/{impl.strategy}"))
    return cases



class _Poisoned:
    """torch.empty_like / Tensor.new_empty / new_empty-style allocations filled with NaN (or a large int)
    while the candidate runs, so an output element a kernel never writes cannot pass by luck."""

    def __enter__(self):
        import torch

        self.torch = torch
        self.saved = (torch.empty_like, torch.Tensor.new_empty)

        def fill(t):
            return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-123456789)

        empty_like, new_empty = self.saved
        torch.empty_like = lambda *a, **k: fill(empty_like(*a, **k))
        torch.Tensor.new_empty = lambda self_, *a, **k: fill(new_empty(self_, *a, **k))
        return self

    def __exit__(self, *exc):
        self.torch.empty_like, self.torch.Tensor.new_empty = self.saved


def run_emulated(task, impl, kwargs: dict, seed: int = 0, cuda=None) -> tuple[bool, str]:
    """(True, '') when the implementation, its kernels run by `cuda` (default: a fresh `CpuCuda`), matches
    the reference on `kwargs` with the task's float32 tolerances, allocations poisoned; else what differs."""
    import torch
    from cpu_cuda import CpuCuda

    ref = load_generated(task.text, "ref_" + task.task_id)
    atol, rtol = ref.CUDAPERF_TASK["tolerances"]["float32"]
    init = ref.get_init_inputs(**kwargs)
    torch.manual_seed(seed)
    model = ref.Model(*init).eval()
    torch.manual_seed(seed)
    cand = load_generated(impl.source, impl.impl_id.replace("/", "_"))
    cand.cuda = cuda if cuda is not None else CpuCuda()
    new = cand.ModelNew(*init).eval()
    torch.manual_seed(seed + 1)
    inputs = ref.get_inputs(**kwargs)
    with torch.no_grad():
        want = model(*inputs)
        with _Poisoned():
            got = new(*inputs)
    if got.shape != want.shape:
        return False, f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
    if not torch.allclose(got, want, atol=atol, rtol=rtol):
        err = (got.double() - want.double()).abs()
        return False, (f"max abs error {float(err.nan_to_num(float('inf')).max()):.3g} "
                       f"(nan: {int(got.isnan().sum())})")
    return True, ""


@pytest.mark.slow
@pytest.mark.parametrize(("task", "impl"), _cases())
def test_emulated_implementation_matches_reference(task, impl):
    small = next(c for c in load_generated(task.text, "cfg").get_input_configs() if c["name"] == "small")
    for kwargs in [small, *_sizes(task)]:
        ok, message = run_emulated(task, impl, {k: v for k, v in kwargs.items() if k != "name"})
        assert ok, (impl.impl_id, kwargs, message)
