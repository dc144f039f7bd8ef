"""The Ray evaluation pool on a real local Ray cluster (`ray.init` in this process, 4 logical CPUs): real
actors, each owning a real `Evaluator` with its sandboxed CPU worker and referee (pure-PyTorch candidates,
torch ops allowed: CPU-only evaluation), or build and static checks only (`device="none"`). Actors are
killed with `ray.kill` mid-batch. The agent's CLI and the RL trainer's rollouts run through the pool.
GPU actors: scripts/ray_pool_gpu.py (the lead runs it on the GPU machine). Lost nodes: test_scale_nodes.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP pool

import json
import pickle

import pytest

ray = pytest.importorskip("ray")

from relu2_task import RIGHT, relu2_source

from cudaperf.anticheat.policy import Policy
from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig
from cudaperf.results import ResultStore
from cudaperf.scale import PoolConfig, PoolError, RayEvalPool, RayEvaluator
from cudaperf.scale.pool import _hidden_gpus
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import task_from_source
from cudaperf.types import Outcome

TASK = task_from_source(relu2_source("a test of the Ray pool"), "relu2")
MIXED = {"right-0": RIGHT.format(k=0), "right-1": RIGHT.format(k=1),
         "wrong": RIGHT.format(k=0).replace("* 2", "* 2.01"),
         "raises": RIGHT.format(k=0).replace("return", "raise RuntimeError('no')\n        return"),
         "syntax": RIGHT.format(k=0).replace("def forward", "def forward(")}


def pairs_of(sources: dict[str, str]) -> list:
    return [(TASK, solution_from_text(src, sid)) for sid, src in sources.items()]


def rights(prefix: str, n: int) -> list:
    return pairs_of({f"{prefix}-{k}": RIGHT.format(k=f"{prefix} {k}") for k in range(n)})


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def cpu_config(tmp_path_factory) -> EvalConfig:
    return EvalConfig(device="cpu", analyze=False, seeds=1, policy=Policy(allow_torch_ops=True),
                      cache_dir=str(tmp_path_factory.mktemp("cache")),
                      timing=TimingConfig(baselines=("eager",), budget_ms=5.0, warmup_ms=1.0))


@pytest.fixture(scope="module")
def cpu_pool(cluster, cpu_config):
    """Two CPU-only actors, each with a sandboxed CPU worker, shared by the tests (lost ones are replaced)."""
    with RayEvaluator(cpu_config, PoolConfig(cpu_actors=2)) as evaluator:
        evaluator.pool.open()
        yield evaluator


@pytest.fixture(scope="module")
def mixed(cpu_pool):
    return {r.solution_id: r for r in cpu_pool.evaluate_many(pairs_of(MIXED))}


# -- the contract ---------------------------------------------------------------------------------------


def test_pool_reaches_the_local_evaluators_verdicts(mixed, cpu_config):
    with Evaluator(cpu_config) as local:
        expected = {r.solution_id: r.outcome for r in local.evaluate_many(pairs_of(MIXED))}
    assert {k: r.outcome for k, r in mixed.items()} == expected
    assert expected["right-0"] is Outcome.CORRECT and expected["wrong"] is Outcome.INCORRECT


def test_results_are_spread_over_every_actor_and_say_which(mixed, cpu_pool):
    ran = [r.environment["scale_actor"] for r in mixed.values() if r.outcome is not Outcome.SYNTAX_ERROR]
    assert len(set(ran)) == 2 and {a.split(".")[0] for a in ran} == {"0", "1"}


def test_actors_hold_one_bundle_each_in_one_placement_group(cpu_pool):
    table = ray.util.placement_group_table(cpu_pool.pool.placement_group)
    assert table["state"] == "CREATED" and table["strategy"] == "PACK"
    assert list(table["bundles"].values()) == [{"CPU": 1.0}, {"CPU": 1.0}]


def test_actors_run_at_the_priority_of_a_local_evaluator(cpu_pool):
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert {p["niceness"] for p in cpu_pool.report().placement.values()} == {ours}


def test_stream_gives_every_index_a_result_and_evaluates_a_repeated_pair_once(cpu_pool):
    a, b = rights("twice", 2)
    before = cpu_pool.report().done
    got = dict(cpu_pool.evaluate_stream([a, b, a]))
    assert sorted(got) == [0, 1, 2] and got[0] is got[2] and got[1].solution_id == "twice-1"
    assert cpu_pool.report().done - before == 2


# -- faults ---------------------------------------------------------------------------------------------


def test_an_actor_killed_mid_batch_loses_nothing_and_stores_no_duplicate(cpu_pool, tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    pairs = rights("kill", 10)
    before = cpu_pool.report()
    killed = None
    for _ in cpu_pool.evaluate_many(pairs, store=store):
        if killed is None:
            killed = next(name for name, n in cpu_pool.pool.in_flight().items() if n)
            ray.kill(cpu_pool.pool.live_actors()[killed])
    lines = [json.loads(x) for x in store.path.read_text().splitlines()]
    assert sorted(x["solution_id"] for x in lines) == sorted(s.solution_id for _, s in pairs)
    assert {x["outcome"] for x in lines} == {"correct"}
    after = cpu_pool.report()
    assert (after.lost - before.lost, after.replaced - before.replaced) == (1, 1)
    assert after.reruns > before.reruns and any(x["environment"]["scale_attempt"] == "2" for x in lines)


def test_resume_evaluates_only_pairs_missing_from_the_store(cpu_pool, tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    pairs = rights("resume", 4)
    assert len(list(cpu_pool.evaluate_many(pairs[:2], store=store))) == 2
    again = [r.solution_id for r in cpu_pool.evaluate_many(pairs, store=store)]
    assert sorted(again) == ["resume-2", "resume-3"] and len(store.path.read_text().splitlines()) == 4


def test_nothing_starts_after_the_deadline(cpu_pool, tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    assert list(cpu_pool.evaluate_many(rights("late", 3), store=store, deadline_s=0)) == []
    assert not store.path.exists()


def test_a_candidate_whose_actor_is_lost_max_attempts_times_is_a_harness_error(cluster, tmp_path):
    config = EvalConfig(device="none", cache_dir=str(tmp_path), policy=Policy(allow_torch_ops=True))
    with RayEvaluator(config, PoolConfig(cpu_actors=1, max_attempts=1)) as evaluator:
        ray.kill(next(iter(evaluator.pool.live_actors().values())))
        (first,) = evaluator.evaluate_many(rights("doomed", 1))
        (second,) = evaluator.evaluate_many(rights("after", 1))  # the replacement serves the next batch
    assert first.outcome is Outcome.HARNESS_ERROR and "lost 1 times" in first.message
    assert second.outcome is Outcome.SKIPPED and second.environment["scale_actor"] == "0.1"


def test_with_no_actor_left_every_waiting_candidate_is_a_harness_error(cluster, tmp_path):
    config = EvalConfig(device="none", cache_dir=str(tmp_path))
    with RayEvaluator(config, PoolConfig(cpu_actors=1, max_replacements=0)) as evaluator:
        ray.kill(next(iter(evaluator.pool.live_actors().values())))
        results = list(evaluator.evaluate_many(rights("orphan", 3)))
    assert len(results) == 3 and {r.outcome for r in results} == {Outcome.HARNESS_ERROR}
    assert all("no evaluation actor is left" in r.message for r in results)


# -- starting -------------------------------------------------------------------------------------------


def test_cuda_evaluation_without_a_gpu_in_the_cluster_refuses_to_start(cluster):
    with pytest.raises(PoolError, match="GPUs free"):
        RayEvalPool(EvalConfig(device="cuda"), PoolConfig()).open()


def test_a_local_ray_start_does_not_see_the_trainer_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    with _hidden_gpus((0, 2)):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_a_pickled_evaluator_carries_only_its_configurations(cpu_config):
    evaluator = RayEvaluator(cpu_config, PoolConfig(address="auto", cpu_actors=3))
    copy = pickle.loads(pickle.dumps(evaluator))
    assert (copy.config, copy.pool_config) == (cpu_config, evaluator.pool_config) and copy._pool is None


def test_pool_config_names_the_allowed_strategies():
    with pytest.raises(ValueError, match="PACK, SPREAD"):
        PoolConfig(strategy="RANDOM")


# -- the agent and the trainer --------------------------------------------------------------------------


def test_optimize_with_a_ray_address_evaluates_every_turn_on_the_pool(cluster, tmp_path, monkeypatch):
    from cudaperf.cli import main
    from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir

    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path / "cache"))
    good = (example_solutions_dir("fast") / "relu.py").read_text()
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps({"text": f"```python\n{c}```"}) + "\n"
                               for c in (good.replace("relu1(v.x)", "relu1(v.q)"), good)))
    code = main(["optimize", str(example_tasks_dir() / "relu.py"), "--model", f"replay:{replies}",
                 "--turns", "2", "--device", "none", "--out", str(tmp_path / "run"),
                 "--ray-address", "local"])
    lines = [json.loads(x) for x in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert code == 0 and [x["result"]["outcome"] for x in lines] == ["compile_error", "skipped"]
    assert all(x["result"]["environment"]["scale_actor"] for x in lines)


def test_rl_rollouts_get_their_turn_returns_from_the_pool(cpu_pool, tmp_path):
    pytest.importorskip("trl")
    from cudaperf.train.config import RlConfig
    from cudaperf.train.models import load_policy
    from cudaperf.train.rollout import GeneratedTokens, MultiTurnRollout, first_prompt

    config = RlConfig(model="tiny", output_dir=str(tmp_path), tasks=("examples",), trajectories=1,
                      max_turns=2, tasks_per_step=1, max_new_tokens=12, eval_device="cpu",
                      allow_torch_ops=True, device="cpu", gamma=0.4)
    _, tokenizer = load_policy(config)
    answers = [f"```python\n{RIGHT.format(k='rl').replace('* 2', '* 3')}```", f"```python\n{RIGHT}```"]

    class Scripted:  # the policy's replies by turn (a test double for the model only)
        turn = 0

        def generate(self, prompts, max_new_tokens):
            ids = tokenizer(answers[self.turn], add_special_tokens=False)["input_ids"]
            ids += [tokenizer.eos_token_id]
            self.turn += 1
            return [GeneratedTokens(tuple(ids), (0.0,) * len(ids), True) for _ in prompts]

    rollout = MultiTurnRollout(config, [TASK], cpu_pool, tokenizer)
    batch = rollout.run([first_prompt(TASK, config)] * config.num_generations, Scripted())
    (wrong, right), = batch.records
    assert not wrong.correct and right.correct and right.result.environment["scale_actor"]
    assert batch.columns["turn_return"] == pytest.approx([wrong.reward + 0.4 * right.reward, right.reward])


def test_progress_shows_the_actors_losses_and_reruns(cpu_pool, capsys):
    list(cpu_pool.evaluate_many(rights("shown", 2), progress=True))
    shown = capsys.readouterr().out
    assert "2/2" in shown and "actors (cpu)" in shown and "re-run" in shown


def test_train_rl_takes_a_ray_address_option(tmp_path):
    import argparse

    from cudaperf.commands.train_cmd import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["rl", "--output-dir", str(tmp_path), "--ray-address", "auto"])
    assert config_from_args(args).ray_address == "auto"


def test_a_resumed_rl_run_may_move_to_another_ray_cluster(tmp_path):
    from cudaperf.train.config import RlConfig, check_resume

    check_resume(RlConfig(output_dir=str(tmp_path)), RlConfig(output_dir=str(tmp_path), ray_address="auto"))


def test_the_rl_trainer_given_a_ray_address_evaluates_on_the_pool(tmp_path):
    from cudaperf.train.config import RlConfig
    from cudaperf.train.rl import make_evaluator

    config = RlConfig(model="tiny", output_dir=str(tmp_path), eval_device="cpu", device="cpu",
                      allow_torch_ops=True, ray_address="local", eval_workers=2)
    evaluator = make_evaluator(config)  # the pool itself opens on first use
    assert isinstance(evaluator, RayEvaluator)
    assert (evaluator.pool_config.address, evaluator.pool_config.actors) == (None, 2)
    assert evaluator.config.device == "cpu" and evaluator.config.gpus is None
