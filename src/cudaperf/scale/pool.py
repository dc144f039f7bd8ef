"""The Ray evaluation pool: actors each owning an `Evaluator`, placed in one placement group, fed one
candidate at a time, replaced when they die.

`RayEvalPool(eval_config, pool_config).open()` joins or starts Ray, reserves one bundle per actor in a
placement group (`{"GPU": gpus_per_actor, "CPU": cpus_per_actor}`, or CPU only), starts the actors, checks
where they landed (never on a trainer GPU of this node: `PoolConfig.trainer_gpus`), and starts a dispatcher
thread. `submit(task, solution)` returns a `concurrent.futures.Future[EvalResult]`; submitting a pair whose
evaluation is in flight returns the same future (idempotent by the candidate key `(task_id, solution_id)`).

Faults: when an actor or its node dies, Ray fails the actor's pending calls with an actor error; the
dispatcher kills what is left of the actor, starts a replacement in the same bundle (Ray moves a bundle
off a dead node when the cluster has room) and puts the actor's in-flight candidates back at the head of
the queue. A candidate is evaluated again at most `max_attempts` times, then becomes a HARNESS_ERROR
result; a result is set on its future once, so a re-run never yields a second row. An exception raised
inside an actor's method (a harness bug, not a lost actor) is that candidate's HARNESS_ERROR result.
When no actor is left (all lost, no replacement allowed or none could start), the waiting candidates get
HARNESS_ERROR results saying so: a future always completes.

Every result's `environment` gains `scale_actor` (bundle.generation), `scale_host` and `scale_attempt`.

Not covered: the result store, progress and the agent's seam (`cudaperf.scale.evaluator`); a hung actor
that Ray still reports alive (each job inside it is bounded by the sandbox's stage deadlines, and a
dead node is detected by Ray's health checks); several processes sharing one pool (each driver process
owns its pool and actors).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from cudaperf.evaluate import EvalConfig, harness_row
from cudaperf.scale.actor import EvalActor, actor_eval_config, workers_per_actor
from cudaperf.scale.config import PoolConfig, PoolError
from cudaperf.types import EvalResult, Outcome, Solution, Task

Key = tuple[str, str]
POLL_S = 0.1  # longest a new submission waits for the dispatcher while every actor is busy
# How long resources a removed placement group held may take to come back. Ray removes a group
# asynchronously: on an H100 machine a pool opened right after another one closed on the same Ray instance
# saw 0 GPUs free and refused to start. So `close` waits for its group's removal, and `open` waits this
# long for GPUs the cluster has but does not yet show free, before it decides.
RESOURCE_RETURN_S = 30.0


@dataclass(frozen=True)
class PoolReport:
    """What the pool did so far."""

    kind: str  # "gpu" or "cpu"
    actors: int  # bundles (actors placed at start)
    live: int  # actors ready now
    started: int  # actors started, replacements included
    lost: int  # actors that died or could not start
    replaced: int  # replacements started
    reruns: int  # candidates put back in the queue by a lost actor
    done: int  # results delivered
    done_per_actor: dict[str, int] = field(default_factory=dict)  # "bundle.generation" -> results
    placement: dict[str, dict[str, Any]] = field(default_factory=dict)  # ready actor -> its describe()


@dataclass(eq=False)
class _Item:
    key: Key
    task: Task
    solution: Solution
    future: Future
    not_after: float | None = None  # monotonic time after which it is not started (a deadline)
    attempts: int = 0  # evaluations cut short by a lost actor


@dataclass(eq=False)
class _Slot:
    """One bundle of the placement group and the actor currently in it."""

    bundle: int
    generation: int
    handle: Any
    ready_ref: Any | None  # the actor's describe() call while it starts; None once ready
    started_at: float
    state: str = "starting"  # starting | ready | gone
    info: dict[str, Any] = field(default_factory=dict)
    in_flight: dict[Any, _Item] = field(default_factory=dict)  # ObjectRef -> candidate

    @property
    def name(self) -> str:
        return f"{self.bundle}.{self.generation}"


class RayEvalPool:
    """Evaluation actors on Ray behind `submit` (see the module docstring). Use as a context manager."""

    def __init__(self, config: EvalConfig | None = None, pool: PoolConfig | None = None):
        self.config = config or EvalConfig()
        self.pool = pool or PoolConfig()
        self.kind = ""
        self._slots: list[_Slot] = []
        self._pending: collections.deque[_Item] = collections.deque()
        self._inbox: collections.deque[_Item] = collections.deque()  # submitted, not yet seen by the loop
        self._by_key: dict[Key, _Item] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pg: Any = None
        self._started_ray = False
        self._counts = collections.Counter()
        self._done_per_actor: collections.Counter = collections.Counter()
        self._remote: Any = None

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self) -> RayEvalPool:
        if self._thread is not None:
            return self
        ray = _ray()
        self._join_ray(ray)
        try:
            wanted = self.pool.gpus_per_actor * max(1, self.pool.actors)
            cpu_only = self.config.device in ("none", "cpu")
            gpus = 0.0 if cpu_only else _free_gpus(ray, wanted, RESOURCE_RETURN_S)
            self.kind = _actor_kind(self.config, self.pool, gpus)
            count = self.pool.actors or (int(gpus // self.pool.gpus_per_actor) if self.kind == "gpu"
                                         else self.pool.cpu_actors)
            self._pg = self._placement_group(ray, count)
            self._slots = [self._start_actor(ray, b, 0) for b in range(count)]
            self._await_first_actors(ray)
        except BaseException:
            self._teardown(ray)
            raise
        self._thread = threading.Thread(target=self._loop, name="cudaperf-ray-pool", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> RayEvalPool:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop dispatching; candidates not finished get HARNESS_ERROR results; actors closed (their
        sandboxed workers stopped), then killed; the placement group removed; a Ray instance the pool
        started shut down."""
        if self._thread is None and not self._slots:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            leftover = list(self._inbox) + list(self._pending)
            leftover += [item for slot in self._slots for item in slot.in_flight.values()]
            self._inbox.clear()
        for item in leftover:
            self._fail(item, "the evaluation pool was closed before this candidate finished")
        self._teardown(_ray())

    def _join_ray(self, ray: Any) -> None:
        if ray.is_initialized():  # this process already joined a cluster (a trainer's, a test's): use it
            return
        if self.pool.address is not None:
            ray.init(address=self.pool.address)
            return
        with _hidden_gpus(self.pool.trainer_gpus):
            # "local": a new instance even when another Ray runs on this machine (plain init would join it)
            ray.init(address="local", num_cpus=self.pool.local_cpus, include_dashboard=False)
        self._started_ray = True

    def _placement_group(self, ray: Any, count: int) -> Any:
        from ray.util.placement_group import placement_group

        if count < 1:
            raise PoolError(f"no actor to place: the cluster has no free GPU ({ray.available_resources()}); "
                            "set PoolConfig.actors, or evaluate CPU-only with EvalConfig.device='none'")
        bundle = {"CPU": self.pool.cpus_per_actor}
        if self.kind == "gpu":
            bundle["GPU"] = self.pool.gpus_per_actor
        pg = placement_group([dict(bundle) for _ in range(count)], strategy=self.pool.strategy)
        if not _ready_within(ray, pg.ready(), self.pool.start_timeout_s):
            with contextlib.suppress(Exception):
                ray.util.remove_placement_group(pg)
            raise PoolError(f"{count} bundles of {bundle} ({self.pool.strategy}) could not be placed in "
                            f"{self.pool.start_timeout_s:g} s; the cluster has {ray.available_resources()} "
                            "free: lower PoolConfig.actors or the per-actor resources")
        return pg

    def _start_actor(self, ray: Any, bundle: int, generation: int) -> _Slot:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self._remote is None:
            self._remote = ray.remote(EvalActor)
        gpu = self.kind == "gpu"
        in_flight = self.pool.in_flight_per_actor or workers_per_actor(self.config, gpu) + 1
        handle = self._remote.options(
            num_cpus=self.pool.cpus_per_actor, num_gpus=self.pool.gpus_per_actor if gpu else 0,
            max_concurrency=in_flight, max_restarts=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg,
                                                                 placement_group_bundle_index=bundle),
        ).remote(actor_eval_config(self.config, self.pool))
        self._counts["started"] += 1
        return _Slot(bundle, generation, handle, handle.describe.remote(), time.monotonic())

    def _await_first_actors(self, ray: Any) -> None:
        """Wait for the first actors and check where they landed: the pool starts whole or not at all."""
        refs = [s.ready_ref for s in self._slots]
        try:
            infos = ray.get(refs, timeout=self.pool.start_timeout_s)
        except Exception as exc:  # noqa: BLE001 - any failure to start is the pool's, said with its cause
            why = f"the evaluation actors did not start: {type(exc).__name__}: {exc}"
            raise PoolError(why[:2000]) from exc
        for slot, info in zip(self._slots, infos, strict=True):
            problem = self._misplaced(ray, info)
            if problem:
                raise PoolError(problem)
            slot.state, slot.info, slot.ready_ref = "ready", info, None

    def _misplaced(self, ray: Any, info: dict[str, Any]) -> str:
        """Why an actor must not stay where it landed ('' when it may): on a trainer GPU of this node."""
        if not self.pool.trainer_gpus or info["node_id"] != ray.get_runtime_context().get_node_id():
            return ""
        taken = sorted(set(info["gpu_ids"]) & {str(g) for g in self.pool.trainer_gpus})
        if not taken:
            return ""
        return (f"an evaluation actor got GPU {', '.join(taken)} of this node, which PoolConfig.trainer_gpus "
                "keeps for the trainer: start this node's Ray with CUDA_VISIBLE_DEVICES leaving those GPUs "
                "out (or let the pool start Ray locally), or put the trainer in its own placement group")

    def _teardown(self, ray: Any) -> None:
        ready = [s.handle for s in self._slots if s.state == "ready"]
        with contextlib.suppress(Exception):  # closing is best effort: the kill below ends them anyway
            ray.get([h.close.remote() for h in ready], timeout=60)
        for slot in self._slots:
            with contextlib.suppress(Exception):
                ray.kill(slot.handle)
        self._slots = []
        if self._pg is not None:
            with contextlib.suppress(Exception):
                ray.util.remove_placement_group(self._pg)
                _await_removal(ray, self._pg, RESOURCE_RETURN_S)
            self._pg = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    # -- submitting ------------------------------------------------------------------------------
    def submit(self, task: Task, solution: Solution, not_after: float | None = None) -> Future:
        """A future of the pair's `EvalResult`. `not_after` (monotonic seconds): if no actor has taken the
        pair by then, the future is cancelled instead (a deadline)."""
        if self._thread is None:
            raise RuntimeError("RayEvalPool used before open(): use `with RayEvalPool(...) as pool:`")
        key = (task.task_id, solution.solution_id)
        with self._lock:
            item = self._by_key.get(key)
            if item is None:
                item = _Item(key, task, solution, Future(), not_after)
                self._by_key[key] = item
                self._inbox.append(item)
        return item.future

    @property
    def arch(self) -> str:
        """The target architecture the actors build for (the first ready actor's)."""
        for slot in list(self._slots):
            if slot.info:
                return slot.info["arch"]
        return self.config.arch or "sm_90"

    @property
    def placement_group(self) -> Any:
        """The Ray placement group holding one bundle per actor (None before `open`)."""
        return self._pg

    def live_actors(self) -> dict[str, Any]:
        """The ready actors' handles by name ("bundle.generation"), e.g. for `ray.kill` in a test."""
        return {s.name: s.handle for s in list(self._slots) if s.state == "ready"}

    def in_flight(self) -> dict[str, int]:
        """Candidates each ready actor holds now."""
        return {s.name: len(s.in_flight) for s in list(self._slots) if s.state == "ready"}

    def report(self) -> PoolReport:
        slots = list(self._slots)
        c = self._counts
        return PoolReport(self.kind, len(slots), sum(s.state == "ready" for s in slots), c["started"],
                          c["lost"], c["replaced"], c["reruns"], c["done"], dict(self._done_per_actor),
                          {s.name: s.info for s in slots if s.state == "ready"})

    def mode_reports(self) -> dict[str, dict[str, Any]]:
        """Each ready actor's `Evaluator.mode_report` (the RL mode's schedule)."""
        ray = _ray()
        ready = [s for s in list(self._slots) if s.state == "ready"]
        return dict(zip([s.name for s in ready], ray.get([s.handle.mode_report.remote() for s in ready]),
                        strict=True))

    # -- the dispatcher thread -------------------------------------------------------------------
    def _loop(self) -> None:
        ray = _ray()
        while not self._stop.is_set():
            try:
                self._step(ray)
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one fault: record it
                self._fail_all(f"the evaluation pool's dispatcher failed: {type(exc).__name__}: {exc}")
                time.sleep(POLL_S)

    def _step(self, ray: Any) -> None:
        with self._lock:
            while self._inbox:
                self._pending.append(self._inbox.popleft())
        self._dispatch()
        watched = {s.ready_ref: s for s in self._slots if s.state == "starting"}
        watched.update({ref: s for s in self._slots for ref in s.in_flight})
        if not watched:
            self._fail_if_no_actor()
            self._stop.wait(POLL_S)
            return
        done, rest = ray.wait(list(watched), num_returns=1, timeout=POLL_S, fetch_local=False)
        if done and rest:  # settle everything already finished in one pass
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=False)
            done += more
        for ref in done:
            slot = watched[ref]
            if slot.ready_ref is not None and ref == slot.ready_ref:
                self._settle_start(ray, slot)
            elif slot.state == "ready" and ref in slot.in_flight:
                self._settle_result(ray, slot, ref)
        self._expire_starts(ray)

    def _dispatch(self) -> None:
        capacity = self.pool.in_flight_per_actor or workers_per_actor(self.config, self.kind == "gpu") + 1
        for slot in self._slots:
            while slot.state == "ready" and len(slot.in_flight) < capacity and self._pending:
                item = self._pending.popleft()
                if item.attempts == 0 and not self._may_start(item):
                    continue
                slot.in_flight[slot.handle.evaluate.remote(item.task, item.solution)] = item

    def _may_start(self, item: _Item) -> bool:
        """Mark a first dispatch as running; a candidate past its deadline (or cancelled) is dropped."""
        if item.not_after is not None and time.monotonic() > item.not_after:
            item.future.cancel()
        if not item.future.set_running_or_notify_cancel():  # also wakes as_completed for a cancelled one
            self._forget(item)
            return False
        return True

    def _settle_start(self, ray: Any, slot: _Slot) -> None:
        try:
            info = ray.get(slot.ready_ref)
        except Exception as exc:  # noqa: BLE001 - an actor that cannot start is replaced, with its cause
            self._lose(ray, slot, f"did not start: {type(exc).__name__}: {exc}")
            return
        problem = self._misplaced(ray, info)
        if problem:
            self._lose(ray, slot, problem, replace=False)
            return
        slot.state, slot.info, slot.ready_ref = "ready", info, None

    def _settle_result(self, ray: Any, slot: _Slot, ref: Any) -> None:
        from ray.exceptions import RayTaskError

        item = slot.in_flight.pop(ref)
        try:
            result = ray.get(ref)
        except RayTaskError as exc:  # raised inside the actor's method: a harness fault, not a lost actor
            self._finish(item, harness_row(_blank(item), "evaluating in the Ray actor", exc))
            return
        except Exception as exc:  # noqa: BLE001 - the actor (or its node) is gone: re-run elsewhere
            slot.in_flight[ref] = item
            self._lose(ray, slot, f"{type(exc).__name__}: {exc}")
            return
        notes = {"scale_actor": slot.name, "scale_host": str(slot.info.get("host", "")),
                 "scale_attempt": str(item.attempts + 1)}
        self._done_per_actor[slot.name] += 1
        self._finish(item, dataclasses.replace(result, environment={**result.environment, **notes}))

    def _lose(self, ray: Any, slot: _Slot, why: str, replace: bool = True) -> None:
        """An actor is gone: its candidates go back to the head of the queue (or fail after
        `max_attempts`), and a replacement starts in its bundle while replacements are allowed."""
        self._counts["lost"] += 1
        items = list(slot.in_flight.values())
        slot.in_flight.clear()
        slot.state = "gone"
        with contextlib.suppress(Exception):
            ray.kill(slot.handle)
        for item in reversed(items):
            item.attempts += 1
            if item.attempts >= self.pool.max_attempts:
                self._fail(item, f"evaluation actors were lost {item.attempts} times while evaluating this "
                                 f"candidate; the last: actor {slot.name} {why}")
            else:
                self._counts["reruns"] += 1
                self._pending.appendleft(item)
        allowed = self.pool.replacements_allowed(len(self._slots))
        if replace and self._counts["replaced"] < allowed:
            self._counts["replaced"] += 1
            index = next(i for i, s in enumerate(self._slots) if s is slot)
            self._slots[index] = self._start_actor(ray, slot.bundle, slot.generation + 1)

    def _expire_starts(self, ray: Any) -> None:
        now = time.monotonic()
        for slot in list(self._slots):
            if slot.state == "starting" and now - slot.started_at > self.pool.start_timeout_s:
                self._lose(ray, slot, f"did not start within {self.pool.start_timeout_s:g} s", replace=False)

    def _fail_if_no_actor(self) -> None:
        if self._pending and all(s.state == "gone" for s in self._slots):
            self._fail_all("no evaluation actor is left (every one was lost and no replacement could start)")

    def _fail_all(self, why: str) -> None:
        while self._pending:
            self._fail(self._pending.popleft(), why)

    def _fail(self, item: _Item, why: str) -> None:
        self._finish(item, dataclasses.replace(_blank(item), stage="harness", message=why[:2000]))

    def _finish(self, item: _Item, result: EvalResult) -> None:
        self._forget(item)
        self._counts["done"] += 1
        if not item.future.done():
            if item.future.running() or item.future.set_running_or_notify_cancel():
                item.future.set_result(result)

    def _forget(self, item: _Item) -> None:
        with self._lock:
            if self._by_key.get(item.key) is item:
                del self._by_key[item.key]


def _blank(item: _Item) -> EvalResult:
    from datetime import UTC, datetime

    return EvalResult(item.key[0], item.key[1], Outcome.HARNESS_ERROR,
                      created_at=datetime.now(UTC).isoformat(timespec="seconds"))


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise PoolError("the Ray evaluation pool needs Ray: pip install 'cudaperf[scale]'") from exc
    return ray


def _free_gpus(ray: Any, wanted: float, wait_s: float) -> float:
    """GPUs free in the cluster, waiting up to `wait_s` while fewer than `wanted` are free and the cluster
    has more than are free (all of them, when it has fewer than `wanted`): resources of a placement group
    removed a moment ago come back asynchronously. A cluster without GPUs is answered at once."""
    deadline = time.monotonic() + wait_s
    while True:
        free = ray.available_resources().get("GPU", 0.0)
        total = ray.cluster_resources().get("GPU", 0.0)
        if free >= min(wanted, total) or time.monotonic() >= deadline:
            return free
        time.sleep(0.2)


def _await_removal(ray: Any, pg: Any, wait_s: float) -> None:
    """Until Ray reports `pg` removed (or `wait_s` passes): its bundles' resources are then free again."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if ray.util.placement_group_table(pg).get("state") == "REMOVED":
            return
        time.sleep(0.1)


def _actor_kind(config: EvalConfig, pool: PoolConfig, free_gpus: float) -> str:
    """'gpu' when candidates run on GPUs the cluster has free, else 'cpu' (CPU-only evaluation)."""
    if config.device in ("none", "cpu"):
        return "cpu"
    if free_gpus >= pool.gpus_per_actor:
        return "gpu"
    if config.device == "cuda":
        raise PoolError(f"EvalConfig.device='cuda' but the Ray cluster has {free_gpus:g} GPUs free (each "
                        f"actor needs {pool.gpus_per_actor:g}): free GPUs, or use device='auto'")
    return "cpu"  # 'auto' without a GPU: build and static checks, as the local evaluator does


def _ready_within(ray: Any, ref: Any, timeout_s: float) -> bool:
    ready, _ = ray.wait([ref], timeout=timeout_s)
    return bool(ready)


@contextlib.contextmanager
def _hidden_gpus(trainer_gpus: tuple[int, ...]):
    """CUDA_VISIBLE_DEVICES without the trainer's GPUs while a local Ray instance starts: Ray hands its
    actors only the GPUs it saw then. Restored afterwards (a CUDA context already made is unaffected)."""
    if not trainer_gpus:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = before.split(",") if before else [str(i) for i in range(_gpu_count())]
    keep = [str(g) for g in trainer_gpus]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(d for d in visible if d.strip() not in keep)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def _gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count()


__all__ = ["PoolReport", "RayEvalPool"]
