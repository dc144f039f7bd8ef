"""GPU check of the implementations (generate/torch_impls/) of matmul_epilogue, conv_activation, pooling,
attention, scan_torch, gather_scatter and loss: for one task per kernel structure, every implementation on
every configuration (small, odd, large), compared with the PyTorch reference within the task's tolerance.

test_datasets_gpu.py already runs the first task of every family; this file covers the structures the first
task does not (conv/pooling geometry, each attention piece with and without the causal mask, every scan op
in both directions and both dims, each gather/scatter op, each loss x reduction). Correctness only (no
timing), TF32 off for matmul and cuDNN as the evaluator sets it for tasks (cuDNN's default is on, which
would put the reference convolutions outside their own tolerance), freed allocator blocks poisoned with NaN
before each candidate runs.

Run: `python3 -m pytest -q -m gpu tests/gpu/test_datasets_more_gpu.py -rf` — each failure names the
implementation id, configuration and max error.
"""

from __future__ import annotations

import pytest

from cudaperf.datasets import registry
from cudaperf.datasets.measure.gpucheck import load_generated

FAMILIES = ("matmul_epilogue", "conv_activation", "pooling", "attention", "scan_torch", "gather_scatter",
            "loss")
STRUCTURE = {  # variant fields that change the kernels' structure
    "matmul_epilogue": ("bias", "residual"), "conv_activation": ("dims", "k", "stride", "pad"),
    "pooling": ("kind", "dims", "k", "stride", "pad"), "attention": ("piece", "causal"),
    "scan_torch": ("op", "reverse", "dim"), "gather_scatter": ("op",), "loss": ("loss", "reduce"),
}
# conv and pooling geometries: a fixed spread instead of all of them (each large config is a big launch)
KEEP = {
    "conv_activation": {(2, 3, 1, 1), (2, 5, 2, 0), (2, 1, 2, 1), (1, 3, 1, 1), (1, 5, 2, 0), (1, 3, 2, 1)},
    "pooling": {("max", 2, 3, 2, 1), ("avg", 2, 3, 1, 1), ("avg", 2, 4, 2, 1), ("max", 1, 3, 2, 1),
                ("avg", 1, 4, 1, 0), ("max", 2, 2, 2, 0)},
}


def _picked() -> list:
    seen, out = set(), []
    for task in registry.build_index(0, families=FAMILIES):
        key = tuple(task.variant[f] for f in STRUCTURE[task.family])
        if (task.family, key) in seen or (task.family in KEEP and key not in KEEP[task.family]):
            continue
        seen.add((task.family, key))
        out.append(task)
    return out


def _cases() -> list:
    return [pytest.param(task, impl, config, id=f"{impl.impl_id}@{config}")
            for task in _picked() for impl in registry.implementations(task)
            for config in ("small", "odd", "large")]



@pytest.fixture
def strict_fp32():
    import torch

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.gpu
@pytest.mark.parametrize(("task", "impl", "config"), _cases())
def test_more_implementation_matches_reference(task, impl, config, strict_fp32):
    import torch

    from cudaperf.correctness import poison_allocator
    from cudaperf.tasks import runtime, task_from_source

    record = task_from_source(task.text, task.task_id)
    module = runtime.load_module(record)
    cfg = next(c for c in record.configs if c.name == config)
    init = runtime.make_init_inputs(module, cfg)
    torch.manual_seed(0)
    model = module.Model(*init).cuda().eval()
    torch.manual_seed(0)
    new = load_generated(impl.source, impl.impl_id.replace("/", "_")).ModelNew(*init).cuda().eval()
    inputs = runtime.make_inputs(module, cfg, 0, "cuda")
    with torch.no_grad():
        want = model(*inputs)
        poison_allocator("cuda", want.numel() * want.element_size())
        got = new(*inputs)
    torch.cuda.synchronize()
    tol = record.tolerances.get("float32")
    atol, rtol = (tol.atol, tol.rtol) if tol else (1e-4, 1e-4)
    assert got.shape == want.shape, (impl.impl_id, config, tuple(got.shape), tuple(want.shape))
    err = float((got.double() - want.double()).abs().nan_to_num(float("inf")).max()) if want.numel() else 0.0
    assert torch.allclose(got, want, atol=atol, rtol=rtol), (impl.impl_id, config, err)
