"""The shared output region on a GPU (execute/outputs.py): pinned in both the worker and the referee
(`environment["region"]` and `referee_ms`'s `*_pinned`), and a 1 GiB output assembled from it onto the
device at 10 GB/s or more (pageable copies ran at about 5-8 on the H200). Run with `-s` to see the rates:

    python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/gpu/test_region_gpu.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cudaperf.anticheat.policy import Policy
from cudaperf.execute import Limits, StageTimeouts, WorkerPool
from cudaperf.execute.outputs import Assembler, Key, Moved, Region, Shipper, describe, settle_device
from cudaperf.execute.referee import create_region_fd
from cudaperf.jobs import EvalJob, TimingConfig, job_message
from cudaperf.tasks import task_from_source
from cudaperf.types import Solution, SolutionFormat

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from test_session import CORRECT, TASK  # the same small PyTorch task, here on the GPU

pytestmark = pytest.mark.gpu
TIMEOUTS = StageTimeouts(default_s=120.0, start_s=180.0)


@pytest.fixture(scope="module")
def reply():
    """One correct candidate on the GPU through a real worker (the default boundary) and its referee."""
    job = EvalJob(task=task_from_source(TASK, "relu_linear"), solution=Solution("s1", CORRECT,
                  SolutionFormat.PYTORCH), device="cuda:0", seeds=(1, 2), policy=Policy(allow_torch_ops=True),
                  timing=TimingConfig(budget_ms=2.0, warmup_ms=0.5, baselines=("eager",)))
    with WorkerPool([0], Limits(), timeouts=TIMEOUTS) as pool:
        pool.warm_up()
        return pool.run(job_message(job, "00ff00ff"))


def test_the_region_is_pinned_in_the_worker_and_in_the_referee(reply):
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    region = json.loads(reply.payload["environment"]["region"])
    spent = reply.sandbox["referee_ms"]
    print(f"\n[region-gpu] region: {region}; referee_ms: {spent}")
    assert region == {"referee": "pinned", "worker": "pinned"}, region
    assert spent["referee_pinned"] == 1.0 and spent["worker_pinned"] == 1.0


def test_a_1_gib_output_is_assembled_onto_the_device_at_10_gbps():
    size = 64 << 20  # the default region (Limits.output_region_bytes): 16 chunks
    fd = create_region_fd(size)
    region = Region(fd, size)
    device = torch.device("cuda", 0)
    try:
        assert region.pin(), region.pin_note
        output = torch.randn(1 << 28, device=device)  # 1 GiB of float32
        spec, _ = describe((output, None))
        assembler = Assembler(spec, device, 2 << 30)
        assembled = Moved()

        def exchange(message: dict) -> dict:  # what the referee does with one announcement
            began = time.perf_counter()
            for part in message["parts"]:
                assembler.take(region, part["start"], part["nbytes"], part["offset"])
            settle_device(device)
            assembled.add(sum(p["nbytes"] for p in message["parts"]), time.perf_counter() - began)
            return {}

        shipper = Shipper(exchange, region)
        shipper.ship(Key("big", 0, 1), {"output": output, "inputs_after": None})
        shipper.flush()
        assert torch.equal(assembler.value()[0], output)
        rates = {"assembled": assembled.figures("a")["a_gbps"],
                 "filled": shipper.moved.figures("f")["f_gbps"]}
        print(f"\n[region-gpu] 1 GiB through a pinned 64 MiB region: {rates} GB/s")
        assert rates["assembled"] >= 10.0, rates
    finally:
        region.close()
        os.close(fd)
