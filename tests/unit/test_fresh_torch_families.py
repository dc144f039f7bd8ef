"""The fresh PyTorch families (generate/fresh_torch_families.py: embedding_bag, row_topk,
batched_small_matmul), on the CPU: they are held out of the dataset, their tasks load with three
configurations, pass the degenerate filter (references run on the small configuration, two seeds), draw
int64 indices and offsets that the reference accepts, and their implementations are well formed, pass
the static anti-cheat policy and compile to cubin with NVRTC (a sample of tasks per family).

Their results are checked on the CPU by test_fresh_torch_families_emulated.py (slow) and on the GPU by
tests/gpu/test_fresh_torch_families_gpu.py.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import pytest

from cudaperf.datasets import registry, splits
from cudaperf.datasets.measure.gpucheck import load_generated
from cudaperf.datasets.records import STRATEGIES, GeneratedTask

FAMILIES = ("embedding_bag", "row_topk", "batched_small_matmul")


@lru_cache(maxsize=1)
def tasks() -> tuple[GeneratedTask, ...]:
    return tuple(registry.build_index(0, families=list(FAMILIES)))



def _sample(per_family: int) -> list[GeneratedTask]:
    """Tasks spread over each family (every 8th), `per_family` of each."""
    out = []
    for family in FAMILIES:
        mine = [t for t in tasks() if t.family == family]
        out += mine[::8][:per_family]
    return out


def test_the_families_are_fresh_and_not_in_the_dataset():
    fresh = {f.name for f in registry.fresh_families()}
    dataset = {f.name for f in registry.all_families()}
    assert set(FAMILIES) <= fresh and not set(FAMILIES) & dataset


def test_each_family_has_24_to_48_tasks():
    counts = Counter(t.family for t in tasks())
    assert all(24 <= counts[f] <= 48 for f in FAMILIES), counts


def test_their_tasks_get_the_fresh_split():
    assert set(splits.split_tasks(tasks(), 0).values()) == {splits.FRESH_SPLIT}


def test_every_task_loads_with_small_large_odd_configurations():
    from cudaperf.tasks import task_from_source

    for task in tasks():
        record = task_from_source(task.text, task.task_id)
        assert [c.name for c in record.configs] == ["small", "large", "odd"], task.task_id
        assert record.family == task.family


def test_odd_configurations_use_only_odd_sizes():
    for task in tasks():
        odd = next(c for c in load_generated(task.text, "cfg").get_input_configs() if c["name"] == "odd")
        assert all(v % 2 == 1 for k, v in odd.items() if k != "name"), (task.task_id, odd)


def test_every_task_passes_the_degenerate_filter():
    from cudaperf.datasets.filters import degenerate

    flagged = {t.task_id: r.flags for t in tasks() if (r := degenerate.check_task(t)).flags}
    assert flagged == {}


def test_bag_indices_and_offsets_are_valid_int64_on_every_configuration():
    import torch

    for task in (t for t in tasks() if t.family == "embedding_bag"):
        module = load_generated(task.text, "bag")
        for cfg in module.get_input_configs():
            params = {k: v for k, v in cfg.items() if k != "name"}
            torch.manual_seed(1)
            idx, off = module.get_inputs(**params)[:2]
            assert idx.dtype == off.dtype == torch.int64, task.task_id
            assert int(idx.min()) >= 0 and int(idx.max()) < params["vocab"], (task.task_id, cfg["name"])
            assert off.shape == (params["bags"],) and int(off[0]) == 0, (task.task_id, cfg["name"])
            assert bool((off[1:] >= off[:-1]).all()), (task.task_id, cfg["name"])
            assert int(off[-1]) <= idx.numel(), (task.task_id, cfg["name"])


def test_skewed_bags_have_a_heavy_tail():
    import torch

    task = next(t for t in tasks() if t.family == "embedding_bag" and t.variant["lengths"] == "skewed")
    module = load_generated(task.text, "bag")
    torch.manual_seed(0)
    off = module.skewed_offsets(8192, 8192 * 40)
    lengths = torch.diff(torch.cat([off, torch.tensor([8192 * 40])]))
    assert int(lengths.max()) > 20 * 40 and float(lengths.float().median()) < 40


def test_implementations_are_well_formed():
    for task in tasks():
        impls = registry.implementations(task)
        assert len({i.strategy for i in impls}) == len(impls) >= 4, task.task_id
        assert all(i.strategy in STRATEGIES and i.task_id == task.task_id for i in impls), task.task_id
        assert [i.strategy for i in impls if i.baseline] == ["naive"], task.task_id
        assert all(i.tags[0] == i.strategy for i in impls), task.task_id


def test_sampled_implementations_compile_to_cubin():
    pytest.importorskip("cuda.core")
    from cudaperf.tasks.ctask import compile_check

    failures = [(impl.impl_id, check.log[:400]) for task in _sample(2)
                for impl in registry.implementations(task) if not (check := compile_check(impl.source)).ok]
    assert failures == []


def test_static_policy_accepts_sampled_implementations():
    from cudaperf.anticheat.policy import Policy
    from cudaperf.anticheat.static import check_source

    policy = Policy()
    flagged = [(i.impl_id, [f.code for f in flags]) for task in _sample(3)
               for i in registry.implementations(task) if (flags := check_source(i.source, policy))]
    assert flagged == []
