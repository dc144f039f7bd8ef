"""The LM ranker (cudaperf.ranker.lm_ranker): a tiny Llama from a config with a BPE trained here, trained
with the Bradley-Terry loss on pairs whose winner a token decides; save and load; the contract on a real
dataset task. Needs transformers and tokenizers (the `train` extra)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from cudaperf.ranker.contract import Ranker
from cudaperf.ranker.lm_ranker import LMRanker, LMRankerConfig, solution_text, tiny_model

KERNEL = "__global__ void k(float* x, int n) {{ int i = threadIdx.x; {body} }}"


def _pairs(n: int, seed: int):
    """(faster, slower) texts: the faster one reads with float4, the slower one strides."""
    rng = np.random.default_rng(seed)
    fast, slow = [], []
    for _ in range(n):
        pad = " ".join(f"v{int(v)}" for v in rng.integers(0, 50, size=6))
        fast.append(KERNEL.format(body=f"float4 a = ((float4*)x)[i]; {pad}"))
        slow.append(KERNEL.format(body=f"float a = x[i * n]; {pad}"))
    return fast, slow


@pytest.fixture(scope="module")
def trained():
    fast, slow = _pairs(64, 0)
    model, tok = tiny_model(fast + slow, vocab_size=300, hidden_size=32, max_tokens=64)
    ranker = LMRanker(model, tok, LMRankerConfig(max_tokens=64, batch_pairs=8, steps=40, learning_rate=3e-3))
    losses = ranker.train(fast, slow)
    return ranker, losses


def test_bradley_terry_training_lowers_the_loss(trained):
    _, losses = trained
    assert np.mean(losses[-10:]) < np.mean(losses[:10])


def test_trained_lm_ranker_orders_unseen_pairs(trained):
    ranker, _ = trained
    fast, slow = _pairs(32, 1)
    assert (ranker.rewards(fast) > ranker.rewards(slow)).mean() > 0.9


def test_training_stops_at_max_seconds_before_its_steps():
    fast, slow = _pairs(16, 1)
    model, tok = tiny_model(fast + slow, vocab_size=300, hidden_size=32, max_tokens=64)
    config = LMRankerConfig(max_tokens=64, batch_pairs=4, steps=10_000, max_seconds=0.5)
    losses = LMRanker(model, tok, config).train(fast, slow)
    assert 0 < len(losses) < 10_000


def test_fitted_scale_makes_compare_a_probability(trained):
    ranker, _ = trained
    fast, slow = _pairs(32, 2)
    ranker.fit_scale(ranker.rewards(fast), ranker.rewards(slow))
    assert ranker.probability_of_score(0.0) == 0.5 and ranker.probability_of_score(0.05) > 0.5


def test_saved_lm_ranker_reloads_with_the_same_rewards(tmp_path, trained):
    ranker, _ = trained
    fast, _ = _pairs(4, 3)
    loaded = LMRanker.load(ranker.save(tmp_path / "lm"))
    assert np.allclose(loaded.rewards(fast), ranker.rewards(fast), atol=1e-5)


def test_lm_ranker_meets_the_ranker_contract_on_a_dataset_task(trained):
    from cudaperf.datasets import registry

    ranker, _ = trained
    task = registry.build_index(0, families=["map"])[0]
    a, b = [i.source for i in registry.implementations(task)[:2]]
    p = ranker.compare(a, b, task, "small")
    assert isinstance(ranker, Ranker) and p + ranker.compare(b, a, task, "small") == pytest.approx(1.0)


def test_model_input_starts_with_the_configuration_sizes():
    from cudaperf.ranker.problem import ProblemSizes

    text = solution_text("# comment\nx = 1\n", ProblemSizes(10, 5, 4, 1, {"n": 10.0}))
    assert text.startswith("in_elems=10 out_elems=5") and "comment" not in text
