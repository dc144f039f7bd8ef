"""The refinement loop as an environment for RL: `reset(task) -> prompt`, `step(reply) -> feedback,
reward, done`.

One `RefineEnv` is one trajectory of one task. A step extracts the code from the reply (`extract.py`),
has it evaluated (`evaluation.CandidateEvaluator`, the one seam to the judge), scores it with the unified
reward (`cudaperf.reward.compute_reward`), renders the feedback (`feedback.py`) and builds the next prompt
(`context.py`). Prompts are chat messages as plain `{"role", "content"}` dicts and steps return plain
records (`StepResult`, `TurnRecord`), all picklable; nothing here knows a training framework.

Many environments step concurrently against one evaluator through `step_many`: their candidates go to the
evaluator as one batch (builds overlap, GPU workers stay busy), and each environment's step completes as
its result arrives; `step_arriving` does the same for replies that arrive over time (each candidate
handed to the evaluator as its reply comes, `evaluation.evaluate_arriving`). A step is also split into
`prepare` (extraction) and `observe` (everything after the evaluation) for callers that batch evaluations
themselves.

Pickling: an environment pickles with its task, configuration and history; its evaluator, token counter
and ranker stay behind (`attach` them again after unpickling; without a counter, tokens are estimated).

Not covered: generating replies (the caller's model), per-turn advantages (`TurnRecord.reward` is the
turn's own score; `trajectory.Trajectory.returns` gives Kevin's discounted returns).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cudaperf.agent.backends.base import Generation
from cudaperf.agent.context import Context, ContextConfig, build_context
from cudaperf.agent.evaluation import CandidateEvaluator, evaluate_arriving
from cudaperf.agent.extract import Extraction, ExtractOutcome, extract_code
from cudaperf.agent.feedback import (
    FeedbackConfig,
    TokenCounter,
    approx_tokens,
    render_feedback,
    structural_hints,
)
from cudaperf.agent.prompting import (
    TaskPrompt,
    derived_config_names,
    render_refine_message,
    render_task_prompt,
)
from cudaperf.agent.trajectory import (
    TurnRecord,
    default_baseline,
    headline_speedup,
    messages_as_dicts,
    now,
)
from cudaperf.reward import RewardConfig, compute_reward, resolve_config
from cudaperf.solutions import solution_from_text
from cudaperf.types import EvalResult, InputConfig, Outcome, Solution, SolutionFormat, Task

RankerFn = Callable[[str, Task, InputConfig], float]
"""The offline ranker's `score(source, task, config) -> float` (expected in [0, 1]: how likely the kernel
beats the reference on that input configuration). The environment averages it over the task's
configurations; a ranker that raises gives no score for that turn (never a failed step)."""


@dataclass(frozen=True)
class EnvConfig:
    max_turns: int = 4
    """Turns per trajectory (Kevin: 4 in training, 8 at evaluation)."""
    target_speedup: float | None = None
    """End the trajectory early once a correct answer reaches this speedup over `baseline` (None: never)."""
    baseline: str = "auto"
    """The speedup that counts: 'eager', 'compile', 'serial_c', 'naive_cuda', or 'auto' (eager for PyTorch
    tasks, the naive CUDA port for C tasks)."""
    format: str = "fast"
    """Solution format asked for: 'fast' (NVRTC through cudaperf.cuda) or 'inline' (load_inline)."""
    reward: RewardConfig | str = "cudaperf"
    """A `RewardConfig` or a preset name ('cudaperf', 'kevin', 'cuda-agent', or 'pkg.module:function')."""
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    structural_hints: bool = True
    """Add the structural analysis' line-level findings to the feedback."""
    on_conflict: str = "reject"
    """Two different solution blocks in one reply: 'reject' (tell the model) or 'last' (run the last)."""
    accept_other_format: bool = False
    """Evaluate an answer in the other solution format than `format` (a load_inline module when the fast
    format was asked for, or the reverse). Off: the turn is the classified outcome `wrong_format`, told to
    the model, nothing evaluated. Off by default because a load_inline answer brings native host code into
    the process where its own timings are measured, and native code there can claim a speed it does not
    have (dev/LOG.md, open questions); the fast format keeps the candidate's host code in Python, under
    the worker's audit hook."""
    policy: Any = None
    """The anti-cheat `Policy` the prompt states; give the evaluator's, so they agree (None: strict)."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"EnvConfig.max_turns={self.max_turns}: at least 1")
        if self.target_speedup is not None and not self.target_speedup > 0:
            raise ValueError(f"EnvConfig.target_speedup={self.target_speedup}: a positive speedup, or None")
        if self.format not in ("fast", "inline"):
            raise ValueError(f"EnvConfig.format={self.format!r}: use 'fast' or 'inline'")
        resolve_config(self.reward)  # an unknown preset fails here, before any work


class StepResult(NamedTuple):
    feedback: str  # the user message for the next turn (the feedback and what to do next)
    reward: float  # this turn's score
    done: bool  # the trajectory is over (last turn, or target speedup reached)
    record: TurnRecord  # everything about the turn, as written to the trajectory file


@dataclass(frozen=True)
class Pending:
    """A reply whose code has been extracted and awaits evaluation (`RefineEnv.prepare`)."""

    turn: int
    context: Context
    reply: Generation
    extraction: Extraction
    solution: Solution | None  # None: nothing to evaluate
    extract_s: float


class RefineEnv:
    """One refinement trajectory of one task (see the module docstring)."""

    def __init__(self, config: EnvConfig | None = None, *, evaluator: CandidateEvaluator | None = None,
                 ranker: RankerFn | None = None, count_tokens: TokenCounter | None = None,
                 sample: int = 0, model: str = ""):
        self.config = config or EnvConfig()
        self.sample, self.model = sample, model
        self.evaluator, self.ranker = evaluator, ranker
        self.count_tokens = count_tokens or approx_tokens
        self.task: Task | None = None
        self.prompt: TaskPrompt | None = None
        self.history: list[TurnRecord] = []
        self._reward_config = resolve_config(self.config.reward)
        self._context: Context | None = None

    # -- the RL interface ---------------------------------------------------------------------------
    def reset(self, task: Task) -> list[dict[str, str]]:
        """Start a trajectory on `task`; returns the first prompt as chat messages."""
        self.task = task
        self.prompt = render_task_prompt(task, self.config.format, self.config.policy)
        self.history = []
        self._context = None
        return self.prompt_messages()

    def step(self, reply: str | Generation) -> StepResult:
        """Evaluate one reply with this environment's evaluator and move to the next turn."""
        if self.evaluator is None:
            raise RuntimeError("RefineEnv.step needs an evaluator: RefineEnv(evaluator=...) or "
                               "env.attach(evaluator=...)")
        return step_many([self], [reply], self.evaluator)[0]

    def prompt_messages(self) -> list[dict[str, str]]:
        """The conversation for the next turn as plain dicts."""
        return messages_as_dicts(self.context().messages)

    # -- state -------------------------------------------------------------------------------------
    @property
    def turn(self) -> int:
        return len(self.history)

    @property
    def done(self) -> bool:
        return bool(self.history) and self.history[-1].done

    @property
    def baseline(self) -> str:
        if self.config.baseline != "auto":
            return self.config.baseline
        return default_baseline(self._task())

    def context(self) -> Context:
        """The prompt for the next turn (built once per turn), with its length."""
        if self._context is None:
            self._context = build_context(self._prompt(), self.history, self.config.context,
                                          self.count_tokens)
        return self._context

    def restore(self, task: Task, records: Sequence[TurnRecord]) -> None:
        """Continue a trajectory from its recorded turns (resume)."""
        self.reset(task)
        self.history = sorted(records, key=lambda r: r.turn)
        self._context = None  # reset() built the first turn's prompt

    def attach(self, *, evaluator: CandidateEvaluator | None = None, ranker: RankerFn | None = None,
               count_tokens: TokenCounter | None = None) -> None:
        """Give the environment what does not travel with it (after unpickling)."""
        self.evaluator = evaluator or self.evaluator
        self.ranker = ranker or self.ranker
        self.count_tokens = count_tokens or self.count_tokens

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(evaluator=None, ranker=None, count_tokens=approx_tokens, _context=None)
        return state

    # -- the two halves of a step -----------------------------------------------------------------
    def prepare(self, reply: str | Generation) -> Pending:
        """Extract the code of `reply` (the answer to `self.context()`); nothing is evaluated yet."""
        if self.done:
            raise RuntimeError(f"trajectory {self._task().task_id}/{self.sample} is over; call reset()")
        gen = reply if isinstance(reply, Generation) else Generation(reply, 0, 0, "stop", 0.0)
        t0 = time.perf_counter()
        prompt = self._prompt()
        extraction = extract_code(gen.text, prompt.entry, prompt.entry_kind, finish_reason=gen.finish_reason,
                                  on_conflict=self.config.on_conflict)
        solution = None
        if extraction.code is not None:
            sid = f"{self._task().task_id}/s{self.sample}/t{self.turn}"
            solution = solution_from_text(extraction.code, sid)
            refused = self._other_format(solution)
            if refused is not None:
                extraction, solution = refused, None
        return Pending(self.turn, self.context(), gen, extraction, solution, time.perf_counter() - t0)

    def _other_format(self, solution: Solution) -> Extraction | None:
        """`wrong_format` for a module in the other format than the one asked for (unless accepted)."""
        asked = self.config.format
        other = {"fast": SolutionFormat.INLINE, "inline": SolutionFormat.FAST}[asked]
        if self.config.accept_other_format or solution.format is not other:
            return None
        names = {"fast": "the fast format (CUDA compiled by NVRTC through `cudaperf.cuda`)",
                 "inline": "the load_inline format (`torch.utils.cpp_extension.load_inline`)"}
        return Extraction(ExtractOutcome.WRONG_FORMAT, None,
                          f"Your answer uses {names[other.value]}, but this task asks for {names[asked]}: "
                          f"nothing was run. Write the module in {names[asked]}.")

    def observe(self, pending: Pending, result: EvalResult | None) -> StepResult:
        """Finish the turn of `pending` with its evaluation (None when nothing was evaluated)."""
        durations = {"generate": pending.reply.duration_s, "extract": pending.extract_s}
        result = result or self._unevaluated(pending)
        code = pending.extraction.code
        t0 = time.perf_counter()
        ranker_score = self._ranker_score(code)
        breakdown = compute_reward(result, result.features, ranker_score, self._reward_config,
                                   kernel_time_ms=result.kernel_time_ms)
        t1 = time.perf_counter()
        hints = structural_hints(result, code, self._arch()) if self.config.structural_hints else ()
        t2 = time.perf_counter()
        speedup = headline_speedup(result, self.baseline)
        fb = render_feedback(result, pending.extraction, code=code, hints=hints, ranker_score=ranker_score,
                             reward=breakdown, baseline=self.baseline,
                             extra_configs=derived_config_names(self._task()), config=self.config.feedback,
                             count_tokens=self.count_tokens)
        message = render_refine_message(pending.turn, fb.text, fb.instruction)
        durations.update(reward=t1 - t0, hints=t2 - t1, feedback=time.perf_counter() - t2)
        record = self._record(pending, result, breakdown, ranker_score, speedup, message, durations)
        self.history.append(record)
        self._context = None
        return StepResult(message, record.reward, record.done, record)

    # -- helpers -----------------------------------------------------------------------------------
    def _record(self, pending: Pending, result: EvalResult, breakdown, ranker_score: float | None,
                speedup: float | None, message: str, durations: dict[str, float]) -> TurnRecord:
        target = self.config.target_speedup
        done = pending.turn + 1 >= self.config.max_turns or (
            target is not None and speedup is not None and speedup >= target)
        return TurnRecord(
            task_id=self._task().task_id, sample=self.sample, turn=pending.turn,
            prompt=pending.context.messages, response=pending.reply.text, code=pending.extraction.code,
            result=result, reward=breakdown.total, feedback=message,
            extraction=pending.extraction.outcome.value, finish_reason=pending.reply.finish_reason,
            prompt_tokens=pending.reply.prompt_tokens or pending.context.prompt_tokens,
            completion_tokens=pending.reply.completion_tokens, baseline=self.baseline, speedup=speedup,
            reward_breakdown=breakdown, ranker_score=ranker_score, done=done, durations_s=durations,
            model=self.model, created_at=now())

    def _unevaluated(self, pending: Pending) -> EvalResult:
        """The record of a reply that never reached the evaluator. A backend failure is the harness's
        fault (HARNESS_ERROR: the reward calls it not applicable); a reply without usable code is the
        model's (INVALID_SOLUTION, stage "extract")."""
        task_id = self._task().task_id
        base = {"task_id": task_id, "solution_id": f"{task_id}/s{self.sample}/t{pending.turn}",
                "created_at": now()}
        if pending.reply.finish_reason == "error":
            return EvalResult(**base, outcome=Outcome.HARNESS_ERROR, stage="generate",
                              message=f"the model backend failed: {pending.reply.error or 'no reply'}")
        extraction = pending.extraction
        return EvalResult(**base, outcome=Outcome.INVALID_SOLUTION, stage="extract",
                          message=f"{extraction.outcome.value}: {extraction.feedback}")

    def _ranker_score(self, code: str | None) -> float | None:
        if self.ranker is None or code is None:
            return None
        task = self._task()
        try:
            scores = [float(self.ranker(code, task, c)) for c in task.configs]
        except Exception:  # noqa: BLE001 - a ranker fault costs this turn its ranker term, nothing more
            return None
        return sum(scores) / len(scores) if scores else None

    def _arch(self) -> str:
        return self.evaluator.arch if self.evaluator is not None else "sm_90"

    def _task(self) -> Task:
        if self.task is None:
            raise RuntimeError("RefineEnv used before reset(task)")
        return self.task

    def _prompt(self) -> TaskPrompt:
        if self.prompt is None:
            raise RuntimeError("RefineEnv used before reset(task)")
        return self.prompt


def step_many(envs: Sequence[RefineEnv], replies: Sequence[str | Generation], evaluator: CandidateEvaluator,
              on_step: Callable[[int, StepResult], None] | None = None) -> list[StepResult]:
    """Step every environment with its reply; all candidates are evaluated as one batch. `on_step(i,
    step)` is called as each environment's step completes."""
    if len(envs) != len(replies):
        raise ValueError(f"step_many: {len(envs)} environments but {len(replies)} replies")
    return step_arriving(envs, list(enumerate(replies)), evaluator, on_step)


def step_arriving(envs: Sequence[RefineEnv], replies: Iterable[tuple[int, str | Generation]],
                  evaluator: CandidateEvaluator,
                  on_step: Callable[[int, StepResult], None] | None = None) -> list[StepResult]:
    """`step_many` for replies that arrive over time, in any order, as (environment index, reply): each
    reply is prepared and its candidate handed to the evaluator on arrival (`evaluate_arriving`; read in
    the evaluator's thread when it takes arriving batches), so evaluation starts before the last reply
    exists. Returns when every environment has its step; those whose reply has no code step last."""
    pending: list[Pending | None] = [None] * len(envs)
    steps: list[StepResult | None] = [None] * len(envs)
    sent: list[int] = []  # the environment of each candidate handed to the evaluator
    without_code: list[int] = []

    def candidates() -> Iterator[tuple[Task, Solution]]:
        for i, reply in replies:
            if pending[i] is not None:
                raise ValueError(f"step_arriving: environment {i} got a second reply")
            pending[i] = prepared = envs[i].prepare(reply)
            if prepared.solution is None:
                without_code.append(i)
            else:
                sent.append(i)
                yield envs[i]._task(), prepared.solution

    def finish(i: int, result: EvalResult | None) -> None:
        steps[i] = envs[i].observe(pending[i], result)  # type: ignore[arg-type]
        if on_step is not None:
            on_step(i, steps[i])

    for k, result in evaluate_arriving(evaluator, candidates()):
        finish(sent[k], result)
    for i in without_code:
        finish(i, None)
    missing = [i for i, s in enumerate(steps) if s is None]
    if missing:
        raise RuntimeError(f"no step for environments {missing}: no reply, or no result from the evaluator")
    return steps  # type: ignore[return-value]


__all__ = ["EnvConfig", "Pending", "RankerFn", "RefineEnv", "StepResult", "step_arriving", "step_many"]
