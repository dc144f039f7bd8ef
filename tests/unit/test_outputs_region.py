"""The shared region's pinning and the accounting of bytes moved through it (execute/outputs.py,
execute/referee.py): without a GPU the region stays pageable and says why; the worker's shipper counts
what it fills, per message and in all; the parent passes that account on and nothing else; the referee
reports per job the bytes assembled and judged and their rates, and each side's pinning, in a real
sandboxed worker and referee (CPU mode). Pinning on a GPU, and the rate of a 1 GiB assembly, are in
tests/gpu/test_region_gpu.py."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cudaperf.execute import Limits, StageTimeouts, WorkerPool, referee
from cudaperf.execute.outputs import Assembler, Key, Moved, Region, Shipper
from cudaperf.execute.referee import create_region_fd

sys.path.insert(0, str(Path(__file__).parent))
from test_referee import _job
from test_session import CORRECT

TIMEOUTS = StageTimeouts(default_s=120.0, start_s=180.0)


@pytest.fixture
def region():
    fd = create_region_fd(4096)
    made = Region(fd, 4096)
    yield made
    made.close()
    os.close(fd)


def test_a_region_without_a_gpu_stays_pageable_and_says_why(region):
    assert not region.pin() and not region.pinned
    assert region.pin_note == "no GPU"


def test_a_registration_that_fails_is_recorded_not_raised(region, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # this torch has no CUDA: the call fails
    assert not region.pin()
    assert region.pin_note.startswith("cuMemHostRegister unavailable:")


def test_the_region_is_tried_once(region):
    region.pin()
    region.pin_note = "sentinel"
    assert not region.pin() and region.pin_note == "sentinel"


def test_moved_figures_are_milliseconds_bytes_and_gigabytes_per_second():
    moved = Moved()
    moved.add(1_500_000_000, 0.5)
    moved.add(500_000_000, 0.5)
    assert moved.figures("assemble") == {"assemble_ms": 1000.0, "assemble_bytes": 2e9, "assemble_gbps": 2.0}
    assert Moved().figures("x")["x_gbps"] == 0.0


def test_each_message_carries_the_bytes_the_worker_filled_for_it(region):
    messages = []

    def exchange(message: dict) -> dict:
        messages.append(message)
        for part in message["parts"]:
            Assembler(part["spec"], torch.device("cpu"), 1 << 30) if "spec" in part else None
        return {}

    shipper = Shipper(exchange, region)
    shipper.ship(Key("a", 0, 1), {"output": torch.randn(3000), "inputs_after": None})  # three chunks
    for i in range(3):
        shipper.ship(Key("b", i, 1), {"output": torch.randn(100), "inputs_after": None})
    shipper.flush()
    assert [m["fill_bytes"] for m in messages] == [4096, 4096, 3808, 1200]
    assert all(m["fill_ms"] >= 0 and m["pin"] == "not tried" for m in messages)  # CPU outputs: no pinning
    assert shipper.moved.nbytes == 12000 + 1200


def test_the_parent_passes_the_fill_account_and_nothing_else():
    part = {"key": ["a", 0, 1], "spec": {}, "start": 0, "nbytes": 4, "offset": 0, "extra": 1}
    body = referee.forwardable({"type": "output", "parts": [part], "fill_bytes": 4, "fill_ms": 0.5,
                                "pin": "x" * 1000, "other": "dropped"})
    assert set(body) == {"type", "parts", "fill_bytes", "fill_ms", "pin"} and len(body["pin"]) == 300
    assert "extra" not in body["parts"][0]
    typed = referee.forwardable({"type": "timed", "parts": [part], "fill_bytes": "4", "fill_ms": [1]})
    assert set(typed) == {"type", "parts"}


@pytest.fixture(scope="module")
def reply():
    """One correct candidate through a real sandboxed worker and its referee (CPU mode, a small region)."""
    limits = Limits(address_space_bytes=8 << 30, output_region_bytes=4096)
    with WorkerPool(None, dataclasses.replace(limits), timeouts=TIMEOUTS) as pool:
        pool.warm_up()
        return pool.run(_job(CORRECT))


def test_the_referee_reports_the_bytes_it_assembled_and_judged_per_job(reply):
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    spent = reply.sandbox["referee_ms"]
    assert spent["assemble_bytes"] > 0 and spent["assemble_ms"] > 0 and spent["assemble_gbps"] > 0
    assert spent["compare_bytes"] > 0 and spent["compare_gbps"] > 0
    assert spent["timed_compare_bytes"] > 0  # the re-checked timing outputs
    assert spent["assemble_bytes"] == spent["compare_bytes"] + spent["timed_compare_bytes"]


def test_the_worker_s_fill_account_matches_what_the_referee_assembled(reply):
    spent = reply.sandbox["referee_ms"]
    assert spent["worker_fill_bytes"] == spent["assemble_bytes"] and spent["worker_fill_ms"] > 0


def test_each_side_s_pinning_is_in_the_result_s_environment(reply):
    region = json.loads(reply.payload["environment"]["region"])
    assert region == {"referee": "a CPU referee: its copies are memcpy", "worker": "not tried"}
    spent = reply.sandbox["referee_ms"]
    assert spent["referee_pinned"] == 0.0 and spent["worker_pinned"] == 0.0
