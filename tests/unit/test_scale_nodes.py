"""A lost node: the Ray evaluation pool on a real multi-node Ray cluster simulated on this machine
(`ray.cluster_utils.Cluster`: a head without CPUs and one raylet per worker node), CPU-only evaluation in
sandboxed workers. A node holding in-flight candidates is removed mid-batch and a fresh node joins: the
placement group moves the lost bundle there, the replacement actor starts on it, and every candidate has
exactly one result. The node goes while its actor evaluates its first candidate (which starts the actor's
sandboxed worker: seconds), so that candidate is in flight. Slow (three raylets on two cores): about a minute.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import json
import textwrap
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from cudaperf.anticheat.policy import Policy
from cudaperf.evaluate import EvalConfig, TimingConfig
from cudaperf.results import ResultStore
from cudaperf.scale import PoolConfig, RayEvaluator
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import task_from_source

pytestmark = pytest.mark.slow

TASK = task_from_source(textwrap.dedent("""
    import torch
    import torch.nn as nn

    CUDAPERF_TASK = {"no_derived_configs": "a test of the Ray pool"}

    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2

    def get_input_configs():
        return [{"name": "small", "n": 16}]

    def get_inputs(n=16):
        return [torch.randn(8, n)]

    def get_init_inputs(n=16):
        return []
"""), "relu_x2")
RIGHT = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
        "        return torch.relu(x) * 2  # {k}\n"
# Node failures noticed in about a second rather than Ray's default of about fifteen.
FAST_HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 2}


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "_system_config": FAST_HEALTH_CHECKS})
    nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster, nodes
    ray.shutdown()
    cluster.shutdown()


def test_a_node_lost_mid_batch_is_replaced_and_nothing_is_lost(cluster, tmp_path):
    cluster, nodes = cluster
    config = EvalConfig(device="cpu", analyze=False, seeds=1, policy=Policy(allow_torch_ops=True),
                        cache_dir=str(tmp_path / "cache"),
                        timing=TimingConfig(baselines=("eager",), budget_ms=5.0, warmup_ms=1.0))
    store = ResultStore(tmp_path / "results.jsonl")
    pairs = [(TASK, solution_from_text(RIGHT.format(k=k), f"node-{k}")) for k in range(8)]
    ids = [n.node_id for n in nodes]
    with RayEvaluator(config, PoolConfig(cpu_actors=2, strategy="SPREAD")) as evaluator:
        batch = threading.Thread(target=lambda: list(evaluator.evaluate_many(pairs, store=store)))
        batch.start()
        busy = _busy_actor(evaluator)  # its first candidate starts the sandboxed worker: seconds
        node_id = evaluator.report().placement[busy]["node_id"]
        removed = next(n for n in nodes if n.node_id == node_id)
        cluster.remove_node(removed, allow_graceful=False)
        fresh = cluster.add_node(num_cpus=1)
        batch.join()
        report = _when_live(evaluator, 2)
    lines = [json.loads(x) for x in store.path.read_text().splitlines()]
    assert sorted(x["solution_id"] for x in lines) == sorted(s.solution_id for _, s in pairs)
    assert [(x["outcome"], x["message"]) for x in lines if x["outcome"] != "correct"] == []
    assert report.lost >= 1 and report.replaced >= 1 and report.live == 2
    assert {p["node_id"] for p in report.placement.values()} == {fresh.node_id} | set(ids) - {removed.node_id}


def _busy_actor(evaluator: RayEvaluator, timeout_s: float = 60.0) -> str:
    stop = time.monotonic() + timeout_s
    while time.monotonic() < stop:
        busy = [name for name, n in evaluator.pool.in_flight().items() if n]
        if busy:
            return busy[0]
        time.sleep(0.05)
    raise AssertionError("no actor took a candidate")


def _when_live(evaluator: RayEvaluator, actors: int, timeout_s: float = 60.0):
    """The pool's report once `actors` are ready (a replacement may still be starting after the batch)."""
    stop = time.monotonic() + timeout_s
    while evaluator.report().live < actors and time.monotonic() < stop:
        time.sleep(0.2)
    return evaluator.report()
