"""The contents a checked timing round runs on come from a shuffled deck of the input sets, so every set's
answer is re-checked early in a run, whatever the random draws (`timing._Run._pick_source`)."""

from __future__ import annotations

import random
import types

import pytest

torch = pytest.importorskip("torch")

from cudaperf.timing import _Run


def _run(n_sets: int, seed: int) -> _Run:
    sets = [[torch.zeros(4)] for _ in range(n_sets)]
    clock = types.SimpleNamespace(lead_kind="")
    return _Run({}, sets, None, clock, random.Random(seed), measure_overhead=False)


@pytest.mark.parametrize("n_sets", [2, 3, 5])
def test_every_set_is_a_contents_source_within_two_passes_of_checked_rounds(n_sets):
    for seed in range(200):
        run = _run(n_sets, seed)
        sources = {run._pick_source(r % n_sets) for r in range(2 * n_sets)}
        assert sources == set(range(n_sets)), (seed, sources)


def test_a_checked_round_never_runs_on_its_own_set_s_contents_when_another_fits():
    run = _run(3, 0)
    assert all(run._pick_source(r % 3) != r % 3 for r in range(60))
