"""GPU check of the fresh PyTorch families' implementations (generate/torch_impls/fresh_*.py) before their
measurement: for two structurally different tasks per family, every implementation on every
configuration (small, odd, large) and the two correctness seeds, compared with the PyTorch reference by the
measurement's own comparison (`correctness.compare` with the task's tolerances), the caching allocator
poisoned before each candidate runs, and the inputs checked for mutation.

Tasks: embedding_bag max over heavy-tailed bags (the atomic strategy's atomicMax path) and weighted sum
over ragged bags; row_topk with k = 16 in the router shape and a softmax over the top k of the vocabulary
shape (two_pass with several chunks); batched_small_matmul 64x64x64 with B transposed (34 KB of shared
memory, 4x4 register tiles) and 8x8x8 without bias (16 matrices per coarsened block).

Run: `python3 -m pytest -q -m gpu tests/gpu/test_fresh_torch_families_gpu.py -rf` — every case passes;
a failure names the implementation, configuration, seed and the comparison's message.
"""

from __future__ import annotations

import pytest

from cudaperf.datasets import registry
from cudaperf.datasets.measure.gpucheck import load_generated

SEEDS = (0, 1)
PICKS = {  # family -> predicates on the variant, one task each (the first that matches)
    "embedding_bag": (lambda v: v["mode"] == "max" and v["lengths"] == "skewed",
                      lambda v: v["mode"] == "wsum" and v["lengths"] == "ragged"),
    "row_topk": (lambda v: v["shape"] == "router" and v["k"] == 16,
                 lambda v: v["shape"] == "vocab" and v["post"] == "softmax"),
    "batched_small_matmul": (lambda v: v["m"] == v["k"] == 64 and v["trans_b"],
                             lambda v: v["m"] == v["k"] == 8 and not v["trans_b"] and not v["bias"]),
}


def _picked() -> list:
    tasks = registry.build_index(0, families=list(PICKS))
    return [next(t for t in tasks if t.family == family and pick(t.variant))
            for family, picks in PICKS.items() for pick in picks]


def _cases() -> list:
    return [pytest.param(task, impl, config, id=f"{impl.impl_id}@{config}")
            for task in _picked() for impl in registry.implementations(task)
            for config in ("small", "odd", "large")]



@pytest.mark.gpu
@pytest.mark.parametrize(("task", "impl", "config"), _cases())
def test_fresh_implementation_matches_reference(task, impl, config, monkeypatch):
    import torch

    from cudaperf.correctness import clone_inputs, compare, inputs_mutated, poison_allocator
    from cudaperf.tasks import runtime, task_from_source

    record = task_from_source(task.text, task.task_id)
    # TF32 as the measurement sets it for the reference (off unless the task allows it), restored after
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", record.allow_tf32)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", record.allow_tf32)
    module = runtime.load_module(record)
    cfg = next(c for c in record.configs if c.name == config)
    init = runtime.make_init_inputs(module, cfg)
    for seed in SEEDS:
        torch.manual_seed(seed)
        model = module.Model(*init).cuda().eval()
        torch.manual_seed(seed)
        new = load_generated(impl.source, impl.impl_id.replace("/", "_")).ModelNew(*init).cuda().eval()
        inputs = runtime.make_inputs(module, cfg, seed, "cuda")
        saved = clone_inputs(inputs)
        with torch.no_grad():
            want = model(*inputs)
            poison_allocator("cuda", want.numel() * want.element_size())
            got = new(*inputs)
        torch.cuda.synchronize()
        verdict = compare(got, want, None, overrides=record.tolerances)
        assert verdict.ok, (impl.impl_id, config, seed, verdict.message)
        assert not inputs_mutated(saved, inputs), (impl.impl_id, config, seed, "inputs mutated")
