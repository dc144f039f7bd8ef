"""The fresh C→CUDA families (compaction, escape_time, polynomial; generate/fresh_c_families.py): held out
of the dataset, split "fresh", well-formed tasks whose serial reference runs and is not degenerate, one
naive baseline among known strategies, NVRTC compiles of every implementation of sampled tasks, and
(slow) every implementation of one task per kernel structure run on the CPU through the `cpu_cuda`
emulator against the serial C reference, on the small configuration and on tail sizes that cross tile,
block and vector boundaries with partial ones.

The GPU check of the same implementations on every configuration: tests/gpu/test_fresh_c_families_gpu.py.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections import Counter
from functools import lru_cache

import numpy as np
import pytest

from cudaperf.datasets import registry, splits
from cudaperf.datasets.filters import degenerate
from cudaperf.datasets.generate.fresh_c_families import FIXED_BITS, FRESH_C_FAMILIES, SCENES
from cudaperf.datasets.records import STRATEGIES, GeneratedTask
from cudaperf.tasks import cref
from cudaperf.tasks.ctask import CConfig, compile_check, from_json, make_inputs, validate

FAMILIES = tuple(f.name for f in FRESH_C_FAMILIES)
# variant fields that change the kernels' structure (the rest are constants: thresholds, scenes)
STRUCTURE = {"compaction": ("dtype", "output"), "escape_time": ("kind", "out"),
             "polynomial": ("kind", "dtype")}
# sizes beyond `small` for the emulated runs: partial 256-, 1024- and 2048-element tiles and vector tails,
# a compaction long enough that the one-block scan of block_tree's 1026 tile counts takes two per thread,
# images that are not multiples of the 32x8 blocks or of the 8x4 tiles of the dynamic schedule
TAILS = {"compaction": ({"n": 3 * 2048 + 77}, {"n": 1026 * 256 - 3}),
         "escape_time": ({"h": 37, "w": 61},),
         "polynomial": ({"n": 3 * 1024 + 255}, {"n": 1025})}


@lru_cache(maxsize=1)
def index() -> tuple[GeneratedTask, ...]:
    return tuple(registry.build_index(0, families=FAMILIES))


def one_per_structure() -> list[GeneratedTask]:
    seen, out = set(), []
    for task in index():
        key = (task.family, *(task.variant[f] for f in STRUCTURE[task.family]))
        if key not in seen:
            seen.add(key)
            out.append(task)
    return out


def sample(per_family: int) -> list[GeneratedTask]:
    """`per_family` tasks of each family, structurally different where possible."""
    seen: Counter = Counter()
    out = []
    for task in one_per_structure():
        if seen[task.family] < per_family:
            seen[task.family] += 1
            out.append(task)
    return out


def test_each_family_has_between_24_and_48_tasks():
    counts = Counter(t.family for t in index())
    assert set(counts) == set(FAMILIES) and all(24 <= c <= 48 for c in counts.values()), counts


def test_fresh_c_families_are_not_dataset_families():
    assert not set(FAMILIES) & {f.name for f in registry.all_families()}
    assert all(registry.is_fresh(name) for name in FAMILIES)


def test_fresh_c_tasks_get_the_fresh_split():
    assert set(splits.split_tasks(list(index()), 0).values()) == {splits.FRESH_SPLIT}


def test_every_task_is_well_formed_with_small_large_and_odd_configs():
    tasks = [from_json(t.text) for t in index()]
    assert [t.task_id for t in tasks if validate(t)] == []
    assert {tuple(c.name for c in t.configs) for t in tasks} == {("small", "large", "odd")}


def test_every_task_has_one_naive_baseline_and_five_known_strategies():
    for task in index():
        impls = registry.implementations(task)
        assert len({i.strategy for i in impls}) == 5 and {i.strategy for i in impls} <= set(STRATEGIES)
        assert sum(i.baseline for i in impls) == 1, task.task_id


def test_serial_reference_runs_and_is_not_degenerate_on_sampled_tasks(tmp_path):
    reports = [degenerate.check_task(t, cache_dir=str(tmp_path)) for t in sample(3)]
    assert [(r.task_id, r.flags, r.message) for r in reports if not r.ok] == []


def test_every_implementation_of_sampled_tasks_compiles_to_cubin():
    failures = []
    for task in sample(2):
        for impl in registry.implementations(task):
            check = compile_check(impl.source)
            if not check.ok:
                failures.append((impl.impl_id, check.status.value, check.log[:300]))
    assert failures == []


def test_compaction_reference_keeps_the_passing_elements_in_order(tmp_path):
    task = next(t for t in index() if t.family == "compaction" and t.variant["output"] == "pairs")
    ctask = from_json(task.text)
    values = make_inputs(ctask, ctask.config("small"), 0)
    out = cref.run_reference(ctask, ctask.config("small"), 0, cache_dir=tmp_path).outputs
    k = int(out["count"][0])
    kept = np.flatnonzero(_keep(task.variant["keep"], values["src"]))
    assert k == kept.size and np.array_equal(out["idx"][:k], kept)
    assert np.array_equal(out["dst"][:k], values["src"][kept])
    assert np.all(out["idx"][k:] == -1) and np.all(out["dst"][k:] == 0)


def test_escape_time_fixed_point_squares_cannot_overflow():
    """z * z must fit in 63 bits, so |z| < 2^(63 / 2 - FIXED_BITS) wherever it is squared: at the start
    (julia: z0 is a pixel, at most half the view's width from 0 on each axis, as every image is at most as
    tall as it is wide) and after a step from |z| <= 2 (the bailout), where |z| <= 2^power + |c|."""
    limit = 2 ** (63 / 2 - FIXED_BITS)
    tasks = [from_json(t.text) for t in index() if t.family == "escape_time"]
    assert all(c.scalars["h"] <= c.scalars["w"] for t in tasks for c in t.configs)
    for kind, scenes in SCENES.items():
        power = 3 if kind == "multibrot3" else 2
        for cre, cim, span in scenes:
            half = span / 2 * 1.01  # the view, moved by up to 1% of its width
            if kind == "julia":
                c_max, z0_max = np.hypot(abs(cre) + span / 100, abs(cim) + span / 100), np.hypot(half, half)
            else:
                c_max, z0_max = np.hypot(abs(cre) + half, abs(cim) + half), 0.0
            assert 2 ** power + c_max < limit and z0_max < limit, (kind, cre, cim, span)


def _keep(expr: str, x: np.ndarray) -> np.ndarray:
    """The predicate of a compaction task evaluated by numpy (C's % truncates toward zero, as np.fmod)."""
    expr = re.sub(r"(\d)f\b", r"\1", expr.replace("fabsf", "np.abs").replace("fabs", "np.abs"))
    if "%" in expr:
        left, right = expr.split("%")
        m, op, rhs = right.split()
        rem = np.fmod(x, int(m))
        return rem == int(rhs) if op == "==" else rem != int(rhs)
    return eval(expr, {"np": np, "x": x})  # noqa: S307 - our own generated predicate


# ------------------------------------------------------------------------------------------------
# every implementation on the CPU emulator (slow)

# CUDA built-ins the fresh kernels use beyond those of the emulator's prelude. The ballot exchanges the
# lanes' predicates through the emulator's warp slots, as its shuffles do (one barrier to publish, one to
# read), and flags a warp with exited lanes the same way.
EMU_EXTRAS = r"""
struct __attribute__((aligned(16))) double2 { double x, y; };
static inline unsigned __ballot_sync(unsigned, int pred) {
    emu::Barrier& wb = emu::warp_bars[emu::cur->warp];
    if (wb.live != 32) emu::error = 2;
    int base = emu::cur->warp * 32;
    emu::slots[base + emu::cur->lane] = pred ? 1 : 0;
    emu::arrive(wb);
    unsigned r = 0;
    for (int l = 0; l < 32; ++l) r |= (unsigned)(emu::slots[base + l] != 0) << l;
    emu::arrive(wb);
    return r;
}
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline unsigned long long atomicExch(unsigned long long* p, unsigned long long v) {
    unsigned long long o = *p; *p = v; return o;
}
"""


class _EmulatedCuda:
    """The `cuda` name of a solution module, backed by the `cpu_cuda` emulator plus EMU_EXTRAS."""

    def __init__(self):
        from cpu_cuda import CpuCuda

        self.inner = CpuCuda()

    def load(self, source: str, **_: object):
        return self.inner.load(EMU_EXTRAS + source)


def _structure_id(task: GeneratedTask) -> str:
    return "-".join([task.family, *(str(task.variant[f]) for f in STRUCTURE[task.family])])


def _emulated_cases() -> list:
    return [pytest.param(task, impl, id=f"{_structure_id(task)}/{impl.strategy}")
            for task in one_per_structure() for impl in registry.implementations(task)]


def _run_emulated(task: GeneratedTask, impl, config: CConfig) -> str:
    """'' when the emulated implementation matches the serial reference, else what differs."""
    torch = pytest.importorskip("torch")
    from cudaperf.correctness import compare

    ctask = from_json(task.text)
    values = make_inputs(ctask, config, seed=0)
    want = cref.run_reference(ctask, config, 0, values=cref.copy_values(values))
    module = types.ModuleType(impl.impl_id.replace("/", "_"))
    exec(compile(impl.source, impl.impl_id, "exec"), module.__dict__)  # noqa: S102 - our own generated code
    module.cuda = _EmulatedCuda()
    kwargs = {k: torch.from_numpy(np.copy(v)) if isinstance(v, np.ndarray) else v for k, v in values.items()}
    for p in ctask.outputs:  # a sentinel, as the GPU harness does: an element never written fails
        kwargs[p.name].fill_(float("nan") if kwargs[p.name].is_floating_point() else 0x5A)
    getattr(module, ctask.entry)(**kwargs)
    for name, ref in want.outputs.items():
        verdict = compare(kwargs[name], torch.from_numpy(ref), ctask.tolerance_for(config), path=name)
        if not verdict.ok:
            return f"{config.scalars}: {verdict.message}"
    return ""


@pytest.mark.slow
@pytest.mark.parametrize(("task", "impl"), _emulated_cases())
def test_emulated_implementation_matches_the_serial_reference(task, impl):
    small = from_json(task.text).config("small")
    configs = [small] + [dataclasses.replace(small, name=f"tail{k}", scalars={**small.scalars, **s})
                         for k, s in enumerate(TAILS[task.family])]
    problems = [p for p in (_run_emulated(task, impl, c) for c in configs) if p]
    assert problems == [], impl.impl_id
