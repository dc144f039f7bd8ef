"""The store of C reference outputs a pool's referees share (execute/shared_references.py): each
(task, configuration, seed) computed once for all referees; keyed by the task's whole declaration;
verdicts the same with and without it; one computation when two ask at once; a byte budget; nothing a
failure or a dead referee leaves behind; entries nobody can change. Referees here are `Referee`
objects in this process, each with its own socket to one `Broker` (the parent's side), as in a pool;
the last test runs a real pool of two CPU workers with their referee processes."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cudaperf.execute.c_session import CReference
from cudaperf.execute.outputs import Key, Region
from cudaperf.execute.referee import Referee, create_region_fd
from cudaperf.execute.shared_references import Broker, Client, socket_pair
from cudaperf.tasks.ctask import to_task

sys.path.insert(0, str(Path(__file__).parent))
from test_c_session import SQUARE, SQUARE_OK
from test_c_session import _job as c_job

CONFIGS_X_SEEDS = 6  # SQUARE: three configurations, two seeds


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """A private build cache for the C reference library."""
    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def broker():
    store = Broker(1 << 20)
    yield store
    store.close()


def _client(broker: Broker) -> Client:
    ours, theirs = socket_pair()
    broker.attach(ours)
    return Client(theirs)


def _referee(broker: Broker | None) -> Referee:
    shared = _client(broker) if broker is not None else None
    return Referee(Region(create_region_fd(1 << 16), 1 << 16), torch.device("cpu"), shared)


def _judged(referee: Referee, ctask=SQUARE, secret: str = "00ff00ff") -> Referee:
    """The referee after a C job's message: its references prepared (at once, for C tasks)."""
    referee.handle({"type": "job", "job": c_job(ctask, SQUARE_OK, secret=secret)})
    assert not referee.job.harness, referee.job.harness
    return referee


def _counts(referee: Referee) -> dict[str, int]:
    return dict(referee.spent.counts)


def _outputs(referee: Referee) -> list[np.ndarray]:
    return [e.outputs["out"] for e in referee.c_store.entries()]


def _entry(nbytes: int, value: float = 1.0) -> CReference:
    out = np.full(nbytes // 4, value, dtype=np.float32)
    out.flags.writeable = False
    return CReference({"n": nbytes // 4}, {"out": out}, 1.0, nbytes=out.nbytes)


def test_two_referees_compute_a_reference_once_and_the_second_is_served(broker):
    first, second = _judged(_referee(broker)), _judged(_referee(broker))
    assert _counts(first) == {"reference_computed": CONFIGS_X_SEEDS}
    assert _counts(second) == {"reference_shared": CONFIGS_X_SEEDS}
    assert all(np.array_equal(a, b) for a, b in zip(_outputs(first), _outputs(second), strict=True))


def test_a_task_with_the_same_id_and_other_source_is_not_served_the_other_s_references(broker):
    plus_one = dataclasses.replace(SQUARE, source=SQUARE.source.replace("x[i] * x[i]", "x[i] * x[i] + 1"))
    assert to_task(plus_one).task_id == to_task(SQUARE).task_id
    first, second = _judged(_referee(broker)), _judged(_referee(broker), plus_one)
    assert _counts(second) == {"reference_computed": CONFIGS_X_SEEDS}
    assert all(np.allclose(b, a + 1) for a, b in zip(_outputs(first), _outputs(second), strict=True))


def test_another_secret_makes_other_keys(broker):
    _judged(_referee(broker))
    other = _judged(_referee(broker), secret="11ee11ee")
    assert _counts(other) == {"reference_computed": CONFIGS_X_SEEDS}


def _verdict(referee: Referee, wrong: bool) -> dict:
    """The verdict on a candidate whose outputs are the square of each input (plus one when wrong)."""
    from cudaperf.types import to_dict

    judge = referee.job.judge
    for config in judge.config_names():
        for index in range(len(judge.seeds)):
            x = torch.from_numpy(judge.reference(config, index).values["x"].copy())
            for run in (1, 2):
                out = x * x + (1.0 if wrong else 0.0)
                judge.add(Key(config, index, run), {"output": (out,), "inputs_after": None, "mutated": ""})
    return to_dict(judge.verdict())


@pytest.mark.parametrize("wrong", [False, True])
def test_a_verdict_is_the_same_from_served_references_as_from_a_referee_s_own(broker, wrong):
    _judged(_referee(broker))  # computes and publishes
    served, alone = _judged(_referee(broker)), _judged(_referee(None))
    assert _counts(served) == {"reference_shared": CONFIGS_X_SEEDS}
    verdict = _verdict(served, wrong)
    assert verdict == _verdict(alone, wrong)
    assert all(c["correct"] is not wrong for c in verdict["correctness"])


def test_two_threads_asking_at_once_compute_once(broker):
    computed, results = [], []
    start = threading.Barrier(2)

    def compute() -> CReference:
        computed.append(threading.get_ident())
        time.sleep(0.3)  # the other thread asks meanwhile
        return _entry(4096, 3.0)

    def ask(client: Client) -> None:
        start.wait()
        results.append(client.fetch("k", compute))

    threads = [threading.Thread(target=ask, args=(_client(broker),)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(computed) == 1
    assert sorted(how for _, how in results) == ["computed", "shared"]
    assert all(np.array_equal(e.outputs["out"], np.full(1024, 3.0, np.float32)) for e, _ in results)
    assert broker.report()["waited"] == 1


def test_past_the_budget_the_least_recently_used_entry_is_evicted():
    broker = Broker(3 * 4096)
    try:
        client = _client(broker)
        for key in ("a", "b", "c", "d"):
            client.fetch(key, lambda: _entry(4096))
        assert client.fetch("a", lambda: _entry(4096))[1] == "computed"  # evicted by d: computed again
        assert client.fetch("d", lambda: _entry(4096))[1] == "shared"  # (after a's publication, in order)
        report = broker.report()
        assert (report["entries"], report["bytes"], report["evicted"]) == (3, 3 * 4096, 2)  # then b
    finally:
        broker.close()


def test_an_entry_larger_than_the_budget_is_not_stored():
    broker = Broker(4096)
    try:
        client = _client(broker)
        assert client.fetch("big", lambda: _entry(8192))[1] == "computed"
        assert client.fetch("big", lambda: _entry(8192))[1] == "computed"
        report = broker.report()
        assert (report["entries"], report["too_large"], report["computed"]) == (0, 1, 0)
    finally:
        broker.close()


def test_a_failed_computation_is_not_stored_and_the_next_asker_computes(broker):
    client = _client(broker)

    def fail() -> CReference:
        raise RuntimeError("the serial C reference failed")

    with pytest.raises(RuntimeError):
        client.fetch("k", fail)
    assert client.fetch("k", lambda: _entry(4096))[1] == "computed"
    assert broker.report()["failed"] == 1


def test_a_referee_that_dies_while_computing_hands_its_key_to_a_waiter(broker):
    dying, waiting = _client(broker), _client(broker)
    reply, _ = dying._ask({"op": "get", "key": "k"})
    assert reply["op"] == "compute"
    result: list = []
    thread = threading.Thread(target=lambda: result.append(waiting.fetch("k", lambda: _entry(4096))))
    thread.start()
    time.sleep(0.2)  # the waiter is queued behind the dying referee
    dying.close()
    thread.join(timeout=30)
    assert result and result[0][1] == "computed"
    assert (broker.report()["waited"], broker.report()["failed"]) == (1, 1)


def test_a_served_entry_cannot_be_changed_by_anyone(broker):
    client = _client(broker)
    client.fetch("k", lambda: _entry(4096))
    reply, fds = client._ask({"op": "get", "key": "k"})
    fd = fds[0]
    try:
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"\0" * 16, 0)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    entry, how = client.fetch("k", lambda: _entry(4096))
    assert how == "shared" and not entry.outputs["out"].flags.writeable


def test_the_store_s_memory_reaches_no_program_a_referee_starts(broker):
    client = _client(broker)
    client.fetch("k", lambda: _entry(4096))
    _, fds = client._ask({"op": "get", "key": "k"})
    try:
        assert fcntl.fcntl(fds[0], fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    finally:
        os.close(fds[0])


def test_a_pool_s_two_referees_compute_a_c_task_s_references_once(tmp_path):
    import json

    from cudaperf.execute import Limits, StageTimeouts, WorkerPool

    os.chmod(tmp_path, 0o755)  # the worker's uid reads the C reference library from it
    limits = Limits(address_space_bytes=8 << 30, cache_dir=str(tmp_path))
    with WorkerPool([None, None], limits, timeouts=StageTimeouts(default_s=120.0, start_s=180.0)) as pool:
        job = c_job(SQUARE, SQUARE_OK, cache_dir=str(tmp_path))
        replies = [pool.run_on(i, job) for i in (0, 1)]
        report = pool.reference_store_report()
    for reply in replies:
        correct = all(c["correct"] for c in reply.payload["correctness"])
        assert reply.outcome is None and correct, reply.message
    spent = [reply.sandbox["referee_ms"] for reply in replies]
    computed = [s.get("reference_computed_count") for s in spent]
    assert computed == [CONFIGS_X_SEEDS, None], json.dumps(spent)
    assert spent[1].get("reference_shared_count") == CONFIGS_X_SEEDS
    assert (report["computed"], report["served"]) == (CONFIGS_X_SEEDS, CONFIGS_X_SEEDS)
