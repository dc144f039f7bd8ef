"""The refine loop: K trajectories of N turns for each task, every turn written as it finishes.

The recipe of one round: build every active trajectory's prompt (`context.py`), generate all replies with
one batched backend call (or chunks of `generate_batch`), step every environment against one evaluator
(`environment.step_many`: the candidates go to the judge as one batch, and each turn is written to the
trajectory file the moment its result is in: flushed at once, fsynced once per round), drop the
trajectories that are done (last turn, or target speedup reached), repeat. Each round's wall time is
split into prompt building, generation, evaluation and the loop's own overhead (extraction, rewards,
structural hints, feedback, writing), so the loop's cost is measured, not guessed.

Resume: trajectories already in the file continue from their last recorded turn (the conversation is
rebuilt from the records); finished ones are left alone. With a deadline, no round starts after it (the
run stops between rounds, every finished turn on disk, and a resume picks it up). A round's replies are
kept beside the trajectory file from the moment they are generated until the round's turns are synced
(`pending_replies.py`), so a run stopped during a round's evaluation resumes it without generating its
replies again (the round's `reused_replies` counts them; their generation time is in their records).

Not covered: loading tasks (`taskset.py`), the model (`backends/`), the judge (`evaluation.py`), per-turn
figures (`summary.py`), the command line (`cudaperf.commands.optimize_cmd`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from cudaperf.agent.backends.base import Generation, GenerationConfig, ModelBackend
from cudaperf.agent.environment import EnvConfig, RankerFn, RefineEnv, StepResult, step_many
from cudaperf.agent.evaluation import CandidateEvaluator
from cudaperf.agent.pending_replies import PendingReplies
from cudaperf.agent.summary import evaluation_split
from cudaperf.agent.trajectory import Trajectory, TrajectoryStore, TurnRecord, group
from cudaperf.types import Task


@dataclass(frozen=True)
class RefineConfig:
    turns: int = 4
    """Turns per trajectory (N)."""
    samples: int = 1
    """Trajectories per task (K), generated side by side."""
    target_speedup: float | None = None
    """Stop a trajectory once a correct answer reaches this speedup over its baseline (None: never)."""
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    """Sampling settings passed to the backend for every reply."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Everything else about a trajectory (format, reward, feedback, context); its `max_turns` and
    `target_speedup` are replaced by `turns` and `target_speedup` above."""
    generate_batch: int = 0
    """Conversations per backend call (0: every active trajectory in one call)."""

    def __post_init__(self) -> None:
        if self.turns < 1 or self.samples < 1:
            raise ValueError(f"RefineConfig: turns={self.turns} and samples={self.samples} must be >= 1")
        if self.generate_batch < 0:
            raise ValueError(f"RefineConfig.generate_batch={self.generate_batch}: 0 (all at once) or more")

    @property
    def env_config(self) -> EnvConfig:
        return replace(self.env, max_turns=self.turns, target_speedup=self.target_speedup)


@dataclass(frozen=True)
class RoundTiming:
    """Where the wall time of one round (one turn of every active trajectory) went, in seconds."""

    round: int
    trajectories: int
    wall_s: float
    context_s: float  # building prompts and counting their tokens
    generate_s: float  # the backend calls
    evaluate_s: float  # waiting for the evaluator (the batch's wall time minus the loop's work inside it)
    loop_s: float  # the loop's own work: extraction, rewards, hints, feedback, writing records
    write_s: float = 0.0  # of which: appending records to the trajectory file
    build_s: float = 0.0  # the evaluation in candidate-seconds (overlapping): compiles,
    correctness_s: float = 0.0  # correctness stages,
    timing_s: float = 0.0  # timing and coverage stages (`summary.evaluation_split`)
    reused_replies: int = 0  # replies an earlier, stopped run generated for this round (not generated now)

    @property
    def overhead_s(self) -> float:
        """Everything but generation and evaluation (prompt building included)."""
        return self.wall_s - self.generate_s - self.evaluate_s

    @property
    def overhead_fraction(self) -> float:
        return self.overhead_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True)
class RunResult:
    trajectories: tuple[Trajectory, ...]
    rounds: tuple[RoundTiming, ...]
    resumed_turns: int = 0  # turns read back from the file instead of run
    unfinished: int = 0  # trajectories left unfinished by the deadline (a resume continues them)


OnTurn = Callable[[TurnRecord], None]


def refine(tasks: Sequence[Task], backend: ModelBackend, evaluator: CandidateEvaluator,
           config: RefineConfig = RefineConfig(), store: TrajectoryStore | None = None, *,
           ranker: RankerFn | None = None, on_turn: OnTurn | None = None,
           deadline_s: float | None = None) -> RunResult:
    """Run K trajectories of N turns on every task (see the module docstring); returns every trajectory
    (resumed ones included) and the timing of each round. `deadline_s`: seconds from now after which no
    new round starts."""
    stop_at = time.monotonic() + deadline_s if deadline_s is not None else None
    envs, resumed = _environments(tasks, backend, evaluator, config, store, ranker)
    pending = PendingReplies.beside(store.path) if store is not None else None
    rounds: list[RoundTiming] = []
    active = [e for e in envs if not e.done and e.turn < config.turns]
    while active and (stop_at is None or time.monotonic() < stop_at):
        rounds.append(_round(len(rounds), active, backend, evaluator, config, store, on_turn, pending))
        active = [e for e in active if not e.done]
    records = [r for e in envs for r in e.history]
    return RunResult(tuple(group(records)), tuple(rounds), resumed, len(active))


def _environments(tasks, backend, evaluator, config, store, ranker) -> tuple[list[RefineEnv], int]:
    earlier = {(t.task_id, t.sample): t.turns for t in store.trajectories()} if store is not None else {}
    envs, resumed = [], 0
    for task in tasks:
        for sample in range(config.samples):
            env = RefineEnv(config.env_config, evaluator=evaluator, ranker=ranker,
                            count_tokens=backend.count_tokens, sample=sample, model=backend.name)
            turns = earlier.get((task.task_id, sample), ())[: config.turns]
            if turns:
                env.restore(task, turns)
                resumed += len(turns)
            else:
                env.reset(task)
            envs.append(env)
    return envs, resumed


def _round(index: int, active: list[RefineEnv], backend: ModelBackend, evaluator: CandidateEvaluator,
           config: RefineConfig, store: TrajectoryStore | None, on_turn: OnTurn | None,
           pending: PendingReplies | None = None) -> RoundTiming:
    t0 = time.perf_counter()
    conversations = [env.context().messages for env in active]
    t1 = time.perf_counter()
    replies, reused = _replies(active, conversations, backend, config, pending)
    t2 = time.perf_counter()
    write_s = 0.0

    def written(i: int, step: StepResult) -> None:
        nonlocal write_s
        w0 = time.perf_counter()
        if store is not None:
            store.append(step.record, sync=False)  # flushed now; fsynced once for the round below
        write_s += time.perf_counter() - w0
        if on_turn is not None:
            on_turn(step.record)

    steps = step_many(active, replies, evaluator, on_step=written)
    if store is not None:
        w0 = time.perf_counter()
        store.sync()
        if pending is not None:
            pending.clear()  # the round's turns are on disk
        write_s += time.perf_counter() - w0
    t3 = time.perf_counter()
    # The loop's own work inside step_many (extraction, reward, hints, feedback): measured per turn.
    loop_s = write_s + sum(sum(v for k, v in s.record.durations_s.items() if k != "generate") for s in steps)
    evaluate_s = max(0.0, (t3 - t2) - loop_s)
    split = evaluation_split([s.record.result for s in steps])
    return RoundTiming(index, len(active), t3 - t0, t1 - t0, t2 - t1, evaluate_s, loop_s, write_s,
                       reused_replies=reused, **split)


def _replies(active: list[RefineEnv], conversations: list, backend: ModelBackend, config: RefineConfig,
             pending: PendingReplies | None) -> tuple[list[Generation], int]:
    """Each active trajectory's reply for this round: kept from a stopped run where there is one, the
    others generated (and kept until the round's turns are on disk); how many were kept."""
    keys = [(env.task.task_id, env.sample, env.turn) for env in active]
    kept = pending.take(backend.name, keys) if pending is not None else {}
    todo = [i for i, key in enumerate(keys) if key not in kept]
    fresh = iter(_generate(backend, [conversations[i] for i in todo], config) if todo else [])
    replies = [kept[key] if key in kept else next(fresh) for key in keys]
    if pending is not None and todo:
        pending.save(backend.name, keys, replies)
    return replies, len(keys) - len(todo)


def _generate(backend: ModelBackend, conversations: list, config: RefineConfig) -> list[Generation]:
    size = config.generate_batch or len(conversations)
    out: list[Generation] = []
    for start in range(0, len(conversations), size):
        chunk = conversations[start:start + size]
        try:
            replies = list(backend.generate(chunk, config.generation))
        except Exception as exc:  # noqa: BLE001 - the contract says never raise; a backend that does
            replies = []          # costs this chunk's turns (HARNESS_ERROR), not the whole run
            why = f"the backend raised {type(exc).__name__}: {exc}"
        else:
            why = f"backend returned {len(replies)} replies for {len(chunk)} conversations"
        if len(replies) != len(chunk):  # never let a broken backend shift replies between tasks
            replies = [Generation("", 0, 0, "error", 0.0, error=why[:2000])] * len(chunk)
        out.extend(replies)
    return out


__all__ = ["OnTurn", "RefineConfig", "RoundTiming", "RunResult", "refine"]
