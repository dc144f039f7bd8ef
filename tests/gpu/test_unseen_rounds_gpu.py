"""Unseen rounds on the GPU (marker `gpu`): each unseen set is drawn on the device at its round
(`torch_session.TorchSession.draw_unseen`) with the random generators' state put back, and an honest
candidate through the evaluator (referee on) has every timed configuration judged and none of them timed
from its unseen rounds. What they cost against no unseen sets: `scripts/probe_unseen_cost_gpu.py`. Run:
    python3 -m pytest -q -s tests/gpu/test_unseen_rounds_gpu.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
from cudaperf.execute.torch_session import _drawn_aside
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import load_task
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.tasks.runtime import load_module, make_inputs
from cudaperf.types import Outcome

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    task = load_task(example_tasks_dir() / "softmax.py")
    text = (example_solutions_dir("fast") / "softmax.py").read_text()
    config = EvalConfig(device="cuda", cache_dir=str(tmp_path_factory.mktemp("cache")), coverage=False,
                        timing=TimingConfig(baselines=("eager",)))
    with Evaluator(config) as evaluator:
        return evaluator.evaluate(task, solution_from_text(text, "softmax-fast"))


def test_an_honest_candidate_is_correct_with_every_timed_configuration_judged(honest):
    assert honest.outcome is Outcome.CORRECT, honest.message
    assert honest.timings and all(t.unseen_slowdown is not None for t in honest.timings), honest.timings


def test_an_honest_candidate_gets_every_unseen_set_and_keeps_every_round(honest):
    codes = {f.code for f in honest.flags}
    assert not codes & {"unseen_sets_reduced", "unseen_inputs_slower"}, honest.flags
    assert all(t.candidate.n_samples == t.rounds for t in honest.timings)


def test_a_drawn_set_is_the_seed_s_inputs_and_leaves_the_generators_as_they_were():
    task = load_task(example_tasks_dir() / "softmax.py")
    config = task.configs[0]
    module = load_module(task, config)
    torch.manual_seed(7)
    before = (torch.get_rng_state(), torch.cuda.get_rng_state())
    drawn = _drawn_aside(module, config, 1234, torch.device("cuda"))
    after = (torch.get_rng_state(), torch.cuda.get_rng_state())
    assert all(torch.equal(b, a) for b, a in zip(before, after, strict=True))
    expected = make_inputs(module, config, 1234, "cuda")
    assert all(d.is_cuda and torch.equal(d, e) for d, e in zip(drawn, expected, strict=True))
