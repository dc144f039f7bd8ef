"""Before/after evaluation of policies (issue 23 item 6): base, SFT and RL models on held-out tasks,
through the agent loop, over several sampling seeds, with the spread of every figure.

Recipe: for every model (`name=SPEC`: a backend spec of `cudaperf.agent.backends`, or a model directory,
e.g. a training run's `final/`), every task set (`heldout`: held-out tasks of the training families,
`train/heldout.py`; `val` / `test`: the dataset's held-out families; or `NAME=TASK_SPEC`) and every seed,
`agent.loop.refine` runs `samples` trajectories of `turns` turns per task against one evaluator
(`agent.evaluation.LocalEvaluator`, `eval_mode='rl'` by default), with the environment the RL rollouts use
(reward preset, context budget, anti-cheat policy). Each (model, set, seed) is one run directory
`<output_dir>/<model>/<set>/seed<k>/` holding `trajectories.jsonl` (one line per turn, written as it
finishes) and, once complete, `figures.json`; a second call skips complete runs and continues partial ones
from their last turn (`TrajectoryStore`), so the comparison survives calls of a few minutes each.

Figures per run (`RunFigures`): first-turn correct rate (over trajectories), best-of-turns correct rate
(a trajectory with any correct turn), fast_1 (share of tasks whose best kernel is correct and faster than
the baseline: eager for PyTorch tasks, the naive CUDA port for C tasks with `baseline='auto'`),
geometric-mean speedup of the best kernels of solved tasks and over all tasks (an unsolved task counted
1.0: it keeps its baseline), mean structural score of the correct turns (`structural_score` of the
unified reward), and the anti-cheat flagged share. Over seeds each figure gets mean, std (n-1), min and max
(`Spread`); `table_markdown` and `comparison.json` show them per model and set. Paired over seeds
(`paired_gains`, both sides on the same tasks and sampling seed): every model against every model before
it, and every model's best-of-turns against its first turn, each seed's change and their spread.

Not covered: training (`sft.py`, `rl.py`), the evaluator's own checks (`cudaperf.evaluate`), drawing
(`cudaperf report --html` reads each run's trajectories.jsonl).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from cudaperf.agent.backends.base import GENERATION_CACHES
from cudaperf.agent.backends.decoding_attention import check_attention
from cudaperf.agent.backends.decoding_probe import DECODING_PROBE_FILE
from cudaperf.train.config import ConfigError

RUN_FILE = "trajectories.jsonl"
FIGURES_FILE = "figures.json"
COMPARISON_JSON = "comparison.json"
COMPARISON_MD = "comparison.md"
SETS = {"heldout": "heldout:train", "val": "split:val", "test": "split:test", "train": "split:train"}


@dataclass(frozen=True)
class CompareConfig:
    """`cudaperf train eval`: which models, on which tasks, how many seeds and turns."""

    models: tuple[str, ...] = ("base=smollm2",)
    """Models as NAME=SPEC: a backend spec ('smollm2', 'hf:DIR', 'openai:URL', 'replay:FILE') or a model
    directory (a run's final/, loaded as hf:DIR). NAME names the table row and the run directory."""
    sets: tuple[str, ...] = ("heldout", "test")
    """Task sets: 'heldout' (held-out tasks of the training families), 'val' or 'test' (held-out
    families of the dataset's split), 'train', or NAME=TASK_SPEC (any spec `cudaperf optimize` takes)."""
    output_dir: str = "runs/compare"
    """One directory per model/set/seed with trajectories.jsonl and figures.json; comparison.json and
    comparison.md at the top."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Sampling seeds (each a full run; the spread over them is reported)."""
    turns: int = 4
    """Turns per trajectory (best-of-turns is over these)."""
    samples: int = 1
    """Trajectories per task and seed."""
    limit_tasks: int = 16
    """At most this many tasks per set, round-robin across families (0: all)."""
    kinds: tuple[str, ...] = ()
    """Task kinds ('pytorch', 'c'; empty: both)."""
    families: tuple[str, ...] = ()
    """Only these families (empty: all)."""
    holdout_fraction: float = 0.05
    """The training runs' `holdout_fraction` (the 'heldout' set is the tasks it held out)."""
    max_new_tokens: int = 2048
    """New tokens per reply."""
    temperature: float = 0.7
    """Sampling temperature (0: greedy, then every seed gives the same replies)."""
    top_p: float = 0.95
    """Nucleus sampling."""
    max_prompt_tokens: int = 6144
    """The agent's context is shrunk to fit this many tokens (as in the RL rollouts)."""
    reward: str = "cudaperf"
    """Reward preset the turns are scored with (the structural score comes from it)."""
    baseline: str = "auto"
    """The speedup that counts: 'auto' (eager for PyTorch tasks, the naive CUDA port for C tasks),
    'eager', 'compile', 'serial_c' or 'naive_cuda'."""
    device: str = "auto"
    """Where the models generate: 'auto', 'cpu' or 'cuda'."""
    generate_batch: int = 0
    """Conversations per backend call (0: all of a round at once)."""
    generation_cache: str = "dynamic"
    """How a local model decodes ('dynamic', 'static' or 'graph': `HFLocalOptions.cache`)."""
    generation_attention: str = "no_cudnn"
    """Attention kernels of a local model's `generate` ('no_cudnn' or 'any': `HFLocalOptions.attention`)."""
    eval_device: str = "auto"
    """Where candidates run: 'cuda', 'cpu' (pure-PyTorch answers only, needs allow_torch_ops), 'none' or
    'auto'."""
    eval_mode: str = "rl"
    """The evaluator's schedule: 'rl' (batched, every check kept) or 'default'."""
    allow_torch_ops: bool = False
    """Accept torch compute ops in answers (CPU smoke runs only)."""
    eval_seeds: int = 1
    """Input seeds per correctness check."""
    timing_budget_ms: float = 50.0
    """Timing budget per candidate and configuration."""
    max_minutes: float = 0.0
    """Start no round after this many minutes (0: no limit); calling again continues."""
    profile_decoding: bool = False
    """Time every decoding step of each local model's first `generate` call and profile a few of them
    (`agent.backends.decoding_probe`), written to `<output_dir>/<model>/decoding_probe.txt`. A measurement:
    the runs' trajectories do not depend on it."""
    batch_seeds: bool = False
    """Run all (set, seed) runs of a model side by side: one agent loop over every set's tasks with one
    trajectory per seed (trajectory k is seed k's), so a round is one batched generate call instead of one
    per run (a 135M model decodes a step in about the same time for 8 rows as for 128). Generation is
    seeded once per round with the first seed: the seeds are independent samples, as separate runs are,
    but not reproducible one by one. Needs samples=1."""

    def __post_init__(self) -> None:
        if not self.models or not self.sets or not self.seeds:
            raise ConfigError("models, sets and seeds must each name at least one")
        names = [model_name(m) for m in self.models]
        if len(set(names)) != len(names):
            raise ConfigError(f"models={self.models}: two share a name; write them as NAME=SPEC")
        if self.turns < 1 or self.samples < 1:
            raise ConfigError("turns and samples must be >= 1")
        if self.batch_seeds and self.samples != 1:
            raise ConfigError("batch_seeds puts seed k in trajectory k of each task: use samples=1")
        if self.generation_cache not in GENERATION_CACHES:
            raise ConfigError(f"generation_cache={self.generation_cache!r}: use one of {GENERATION_CACHES}")
        if why := check_attention(self.generation_attention):
            raise ConfigError(f"generation_{why}")
        if self.eval_device == "cpu" and not self.allow_torch_ops:
            raise ConfigError("eval_device='cpu' runs only pure-PyTorch answers: set allow_torch_ops=True "
                              "(a smoke run) or eval_device='cuda'")
        if self.eval_mode not in ("rl", "default"):
            raise ConfigError(f"eval_mode={self.eval_mode!r}: use 'rl' or 'default'")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device={self.device!r}: use 'auto', 'cpu' or 'cuda'")
        for s in self.sets:
            if "=" not in s and s not in SETS:
                raise ConfigError(f"sets: {s!r} is none of {sorted(SETS)}; write other task specs as "
                                  "NAME=SPEC")


def model_name(entry: str) -> str:
    return entry.split("=", 1)[0] if "=" in entry else Path(entry.split(":", 1)[-1]).name or entry


def model_spec(entry: str) -> str:
    """The backend spec of a models entry (a bare directory with a config.json becomes hf:DIR)."""
    spec = entry.split("=", 1)[1] if "=" in entry else entry
    return f"hf:{spec}" if (Path(spec).expanduser() / "config.json").is_file() else spec


def set_spec(entry: str) -> tuple[str, str]:
    """(name, task spec) of a sets entry."""
    if "=" in entry:
        name, spec = entry.split("=", 1)
        return name, spec
    return entry, SETS[entry]


# --------------------------------------------------------------------------------------------------
# Figures


@dataclass(frozen=True)
class RunFigures:
    """What one (model, set, seed) run scored (see the module docstring)."""

    tasks: int
    trajectories: int
    turns: int
    first_turn_correct: float
    best_of_turns_correct: float
    correct_rate: float  # over all turns
    fast_1: float
    speedup_geomean: float | None  # best kernels of solved tasks
    speedup_geomean_all: float  # every task, unsolved = 1.0
    structural_mean: float | None  # correct turns with a structural score
    flagged_rate: float  # turns with an anti-cheat violation
    no_code_rate: float
    mean_reward: float
    completion_tokens_per_turn: float


FIGURES = ("first_turn_correct", "best_of_turns_correct", "fast_1", "speedup_geomean", "speedup_geomean_all",
           "structural_mean", "correct_rate", "flagged_rate", "no_code_rate", "mean_reward")


def run_figures(trajectories: Sequence[Any], task_ids: Sequence[str] | None = None) -> RunFigures:
    """The figures of one run's trajectories (`agent.trajectory.Trajectory`); `task_ids`: the run's
    tasks (a task without any trajectory counts as unsolved)."""
    from cudaperf.agent.summary import best_per_task
    from cudaperf.anticheat.policy import is_violation

    turns = [r for tr in trajectories for r in tr.turns]
    ids = sorted(set(task_ids or ()) | {tr.task_id for tr in trajectories})
    best = best_per_task(trajectories)
    solved = [b.speedup for b in best.values() if b.correct and b.speedup is not None and b.speedup > 0]
    structural = [r.reward_breakdown.details["structural_score"] for r in turns if r.correct
                  and r.reward_breakdown is not None and "structural_score" in r.reward_breakdown.details]
    all_tasks = [math.log(best[t].speedup) if t in best and best[t].correct and best[t].speedup
                 and best[t].speedup > 0 else 0.0 for t in ids]
    return RunFigures(
        tasks=len(ids), trajectories=len(trajectories), turns=len(turns),
        first_turn_correct=_mean([float(tr.turns[0].correct) for tr in trajectories if tr.turns]),
        best_of_turns_correct=_mean([float(any(r.correct for r in tr.turns)) for tr in trajectories]),
        correct_rate=_mean([float(r.correct) for r in turns]),
        fast_1=sum(1 for s in solved if s > 1.0) / max(1, len(ids)),
        speedup_geomean=math.exp(_mean([math.log(s) for s in solved])) if solved else None,
        speedup_geomean_all=math.exp(_mean(all_tasks)) if all_tasks else 1.0,
        structural_mean=_mean(structural) if structural else None,
        flagged_rate=_mean([float(any(is_violation(f.code) for f in r.result.flags)) for r in turns]),
        no_code_rate=_mean([float(r.code is None) for r in turns]),
        mean_reward=_mean([r.reward for r in turns]),
        completion_tokens_per_turn=_mean([float(r.completion_tokens) for r in turns]))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True)
class Spread:
    """A figure over seeds: mean, sample standard deviation (0 for one seed), min, max, how many."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    n: int

    def cell(self, pct: bool) -> str:
        if self.mean is None:
            return "-"
        show = (lambda v: f"{100 * v:.1f}%") if pct else (lambda v: f"{v:.3f}")
        if self.n < 2:
            return show(self.mean)
        return f"{show(self.mean)} ± {show(self.std)} ({show(self.min)}–{show(self.max)})"


def spread(values: Sequence[float | None]) -> Spread:
    known = [v for v in values if v is not None]
    if not known:
        return Spread(None, None, None, None, 0)
    std = statistics.stdev(known) if len(known) > 1 else 0.0
    return Spread(statistics.fmean(known), std, min(known), max(known), len(known))


# --------------------------------------------------------------------------------------------------
# Running


@dataclass(frozen=True)
class CompareReport:
    output_dir: str
    runs_done: int  # complete runs, this call's and earlier ones
    runs_skipped: int  # complete before this call
    runs_unfinished: int  # stopped by max_minutes (call again)
    table: dict[str, dict[str, dict[str, Any]]]  # model -> set -> figure -> Spread as a dict
    seconds: float

    @property
    def finished(self) -> bool:
        return self.runs_unfinished == 0


BackendFactory = Callable[[str], Any]


def run_compare(config: CompareConfig, evaluator: Any = None,
                backend_factory: BackendFactory | None = None) -> CompareReport:
    """Every (model, set, seed) run not yet complete, then the table over what is complete.
    `evaluator` replaces the configured one; `backend_factory(spec)` replaces `load_backend`."""
    from cudaperf.agent.evaluation import ReportingEvaluator
    from cudaperf.train.monitor import report_slow_results, report_stalls

    started = time.perf_counter()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare_config.json").write_text(json.dumps(asdict(config), indent=2) + "\n")
    check_runs(config)
    task_sets = {name: _tasks(spec, config) for name, spec in map(set_spec, config.sets)}
    deadline = time.monotonic() + 60 * config.max_minutes if config.max_minutes else None
    own = evaluator is None
    evaluator = evaluator or make_evaluator(config)
    # a stalled round names its laggards, and one with no result at all says where its jobs wait
    judge = ReportingEvaluator(evaluator, report_slow_results(started), report_stalls(started, out))
    done = skipped = unfinished = 0
    try:
        for entry in config.models:
            pending = [(s, k) for s in task_sets for k in config.seeds
                       if not (_run_dir(out, entry, s, k) / FIGURES_FILE).is_file()]
            done += len(config.sets) * len(config.seeds) - len(pending)
            skipped += len(config.sets) * len(config.seeds) - len(pending)
            if not pending:
                continue
            if deadline is not None and time.monotonic() >= deadline:
                unfinished += len(pending)
                continue
            backend = (backend_factory or _load_backend(config))(model_spec(entry))
            if config.profile_decoding and hasattr(backend, "probe_to"):
                backend.probe_to = str(out / model_name(entry) / DECODING_PROBE_FILE)
            try:
                if config.batch_seeds:
                    complete = _batched_runs(config, entry, pending, task_sets, backend, judge, deadline)
                    done, unfinished = done + complete, unfinished + len(pending) - complete
                for set_name, seed in pending if not config.batch_seeds else ():
                    complete = _one_run(config, entry, set_name, seed, task_sets[set_name], backend,
                                        judge, deadline)
                    done, unfinished = done + complete, unfinished + (not complete)
            finally:
                backend.close()
    finally:
        if own:
            evaluator.close()
    runs = complete_runs(config)
    table = table_from_runs(runs)
    write_comparison(config, table, paired_gains(runs))
    return CompareReport(str(out), done, skipped, unfinished, table, time.perf_counter() - started)


def _tasks(spec: str, config: CompareConfig) -> list[Any]:
    from cudaperf.train.heldout import resolve_tasks

    found = resolve_tasks([spec], kinds=config.kinds, families=config.families, limit=config.limit_tasks,
                          holdout_fraction=config.holdout_fraction if spec.startswith("heldout:") else 0.0)
    if not found.tasks:
        raise ConfigError(f"task set {spec!r}: no task ({'; '.join(found.errors[:3]) or 'none matched'})")
    return list(found.tasks)


def make_evaluator(config: CompareConfig) -> Any:
    from cudaperf.agent.evaluation import LocalEvaluator
    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig, TimingConfig

    return LocalEvaluator(EvalConfig(device=config.eval_device, mode=config.eval_mode,
                                     seeds=config.eval_seeds,
                                     policy=Policy(allow_torch_ops=config.allow_torch_ops),
                                     timing=TimingConfig(budget_ms=config.timing_budget_ms)))


def _load_backend(config: CompareConfig) -> BackendFactory:
    from cudaperf.agent.backends.base import load_backend

    def load(spec: str) -> Any:
        if spec.startswith(("hf:", "smollm2")):  # a round's conversations in few generate calls (decoding
            return load_backend(spec, device=config.device, batch_size=GENERATE_ROWS,  # is overhead-bound)
                                cache=config.generation_cache, attention=config.generation_attention)
        return load_backend(spec)

    return load


def _run_dir(out: Path, entry: str, set_name: str, seed: int) -> Path:
    return out / model_name(entry) / set_name / f"seed{seed}"


RUN_SETTINGS = ("batch_seeds", "turns", "samples", "max_new_tokens", "temperature", "top_p",
                "max_prompt_tokens", "reward", "baseline", "allow_torch_ops", "eval_mode", "limit_tasks",
                "kinds", "families", "holdout_fraction")
SETTINGS_FILE = "run.json"
GENERATE_ROWS = 128  # rows per generate call of a local model


def _settings(config: CompareConfig) -> dict[str, Any]:
    values = {k: getattr(config, k) for k in RUN_SETTINGS}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def run_settings(config: CompareConfig, entry: str, set_name: str, seed: int) -> dict[str, Any]:
    """What a run's trajectories depend on; a later call must match it to continue or reuse the run."""
    return {"spec": model_spec(entry), "set": dict(map(set_spec, config.sets))[set_name], "seed": seed,
            **_settings(config)}


def batched_settings(config: CompareConfig, entry: str) -> dict[str, Any]:
    """What a model's batched trajectories (`batch_seeds`) depend on: every run's settings but the set
    and seed, and the sets and seeds themselves (trajectory k is seed k's)."""
    return {"spec": model_spec(entry), "sets": [spec for _, spec in map(set_spec, config.sets)],
            "seeds": list(config.seeds), **_settings(config)}


def check_runs(config: CompareConfig) -> None:
    """Refuse to continue or reuse runs made with other settings (their figures would not compare)."""
    out = Path(config.output_dir)
    for entry in config.models:
        for set_name, _ in map(set_spec, config.sets):
            for seed in config.seeds:
                _check_settings(_run_dir(out, entry, set_name, seed) / SETTINGS_FILE,
                                run_settings(config, entry, set_name, seed))
        if config.batch_seeds:
            _check_settings(out / model_name(entry) / BATCHED_SETTINGS_FILE, batched_settings(config, entry))


def _check_settings(path: Path, now: dict[str, Any]) -> None:
    if not path.is_file():
        return
    saved = json.loads(path.read_text())
    changed = sorted(k for k in now if saved.get(k) != now[k])
    if changed:
        diffs = ", ".join(f"{k}: {saved.get(k)!r} -> {now[k]!r}" for k in changed)
        raise ConfigError(f"{path.parent} was run with other settings ({diffs}): use the same settings or "
                          "another output_dir")


def _one_run(config: CompareConfig, entry: str, set_name: str, seed: int, tasks: list[Any], backend: Any,
             evaluator: Any, deadline: float | None) -> bool:
    """Run (or continue) one model on one set with one seed; True when it is complete."""
    from cudaperf.agent.loop import refine
    from cudaperf.agent.trajectory import TrajectoryStore

    directory = _run_dir(Path(config.output_dir), entry, set_name, seed)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SETTINGS_FILE).write_text(json.dumps(run_settings(config, entry, set_name, seed)) + "\n")
    store = TrajectoryStore(directory / RUN_FILE)
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    result = refine(tasks, backend, evaluator, refine_config(config, seed), store, deadline_s=left)
    if result.unfinished:
        return False
    _write_figures(directory, entry, set_name, seed, tasks, result.trajectories, result.rounds)
    return True


def _write_figures(directory: Path, entry: str, set_name: str, seed: int, tasks: list[Any],
                   trajectories: Sequence[Any], rounds: Sequence[Any]) -> None:
    figures = run_figures(trajectories, [t.task_id for t in tasks])
    timing = {"rounds": len(rounds), "generate_s": sum(r.generate_s for r in rounds),
              "evaluate_s": sum(r.evaluate_s for r in rounds), "wall_s": sum(r.wall_s for r in rounds)}
    record = {"model": model_name(entry), "spec": model_spec(entry), "set": set_name, "seed": seed,
              "figures": asdict(figures), "timing": timing, "tasks": [t.task_id for t in tasks]}
    (directory / FIGURES_FILE).write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")


BATCHED_FILE = "batched_trajectories.jsonl"
BATCHED_SETTINGS_FILE = "batched_run.json"


def _batched_runs(config: CompareConfig, entry: str, pending: list[tuple[str, int]],
                  task_sets: dict[str, list[Any]], backend: Any, evaluator: Any,
                  deadline: float | None) -> int:
    """`batch_seeds`: one agent loop over every set's tasks, trajectory k of a task being seed k's, kept
    in `<model>/batched_trajectories.jsonl` (a later call continues it); once every trajectory is done,
    each pending (set, seed) run gets its run directory (its turns, run.json, figures.json) as a separate
    run would. Returns how many runs are complete (all or none)."""
    from dataclasses import replace

    from cudaperf.agent.loop import refine
    from cudaperf.agent.trajectory import TrajectoryStore

    out = Path(config.output_dir)
    tasks = list({t.task_id: t for name in task_sets for t in task_sets[name]}.values())
    (out / model_name(entry)).mkdir(parents=True, exist_ok=True)
    (out / model_name(entry) / BATCHED_SETTINGS_FILE).write_text(json.dumps(batched_settings(config, entry))
                                                                  + "\n")
    store = TrajectoryStore(out / model_name(entry) / BATCHED_FILE)
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    run_config = replace(refine_config(config, config.seeds[0]), samples=len(config.seeds))
    result = refine(tasks, backend, evaluator, run_config, store, deadline_s=left)
    if result.unfinished:
        return 0
    for set_name, seed in pending:
        ids = {t.task_id for t in task_sets[set_name]}
        mine = [tr for tr in result.trajectories
                if tr.task_id in ids and tr.sample == config.seeds.index(seed)]
        directory = _run_dir(out, entry, set_name, seed)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / SETTINGS_FILE).write_text(json.dumps(run_settings(config, entry, set_name, seed)) + "\n")
        run_store = TrajectoryStore(directory / RUN_FILE)
        if not run_store.path.exists():
            for record in (r for tr in mine for r in tr.turns):
                run_store.append(record, sync=False)
            run_store.sync()
        _write_figures(directory, entry, set_name, seed, task_sets[set_name], mine, result.rounds)
    return len(pending)


def refine_config(config: CompareConfig, seed: int) -> Any:
    """The agent loop's configuration: the RL rollouts' environment, this seed's sampling."""
    from cudaperf.agent.backends.base import GenerationConfig
    from cudaperf.agent.context import ContextConfig
    from cudaperf.agent.environment import EnvConfig
    from cudaperf.agent.loop import RefineConfig
    from cudaperf.anticheat.policy import Policy

    env = EnvConfig(reward=config.reward, baseline=config.baseline,
                    context=ContextConfig(max_prompt_tokens=config.max_prompt_tokens),
                    policy=Policy(allow_torch_ops=config.allow_torch_ops))
    generation = GenerationConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                                  top_p=config.top_p, seed=seed)
    return RefineConfig(turns=config.turns, samples=config.samples, generation=generation, env=env,
                        generate_batch=config.generate_batch)


# --------------------------------------------------------------------------------------------------
# The table


SeedRuns = dict[str, dict[str, dict[int, dict[str, Any]]]]
"""model -> set -> seed -> that run's figures (`RunFigures` as a dict), models in the comparison's order."""


def complete_runs(config: CompareConfig) -> SeedRuns:
    """The figures of every complete run (`figures.json` files)."""
    out = Path(config.output_dir)
    runs: SeedRuns = {}
    for entry in config.models:
        for set_name, _ in map(set_spec, config.sets):
            for k in config.seeds:
                path = _run_dir(out, entry, set_name, k) / FIGURES_FILE
                if path.is_file():
                    run = json.loads(path.read_text())
                    by_seed = runs.setdefault(model_name(entry), {}).setdefault(set_name, {})
                    by_seed[run["seed"]] = run["figures"]
    return runs


def table_from_runs(runs: SeedRuns) -> dict[str, dict[str, dict[str, Any]]]:
    """model -> set -> `table_row` of its seeds' runs."""
    return {model: {set_name: table_row(sorted(by_seed), [by_seed[k] for k in sorted(by_seed)])
                    for set_name, by_seed in by_set.items() if by_seed}
            for model, by_set in runs.items()}


GAIN_FIGURES = ("first_turn_correct", "best_of_turns_correct", "speedup_geomean_all")
RATIO_FIGURES = {"speedup_geomean_all"}  # compared as later / earlier, not as a difference


def paired_gains(runs: SeedRuns) -> list[dict[str, Any]]:
    """What a model gains, seed by seed on the same tasks and sampling seed: every model against every
    model before it in `runs` (base, SFT, RL), per figure of `GAIN_FIGURES` (a difference; a ratio for the
    geometric-mean speedup), and every model's best-of-turns correct rate against its first-turn one (what
    refinement adds). Each row: set, what, figure, seeds, the spread of the seeds' changes and whether
    every seed's is a gain. The seed spread of such a change is what a claimed gain must exceed."""
    rows: list[dict[str, Any]] = []
    models = list(runs)
    for set_name in sorted({s for by_set in runs.values() for s in by_set}):
        for i, later in enumerate(models):
            for earlier in models[:i]:
                rows += _model_gains(set_name, later, earlier, runs[later].get(set_name, {}),
                                     runs[earlier].get(set_name, {}))
        for model in models:
            rows += _refinement_gain(set_name, model, runs[model].get(set_name, {}))
    return rows


def _model_gains(set_name: str, later: str, earlier: str, b: dict[int, dict[str, Any]],
                 a: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    seeds = sorted(set(a) & set(b))
    rows = []
    for figure in GAIN_FIGURES if seeds else ():
        ratio = figure in RATIO_FIGURES
        values = [b[k][figure] / a[k][figure] if ratio else b[k][figure] - a[k][figure] for k in seeds]
        rows.append(_gain(set_name, f"{later} vs {earlier}", figure, seeds, values, 1.0 if ratio else 0.0))
    return rows


def _refinement_gain(set_name: str, model: str, by_seed: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    seeds = sorted(by_seed)
    if not seeds:
        return []
    values = [by_seed[k]["best_of_turns_correct"] - by_seed[k]["first_turn_correct"] for k in seeds]
    return [_gain(set_name, f"{model}: best of turns vs first turn", "correct", seeds, values, 0.0)]


def _gain(set_name: str, what: str, figure: str, seeds: list[int], values: list[float],
          neutral: float) -> dict[str, Any]:
    return {"set": set_name, "what": what, "figure": figure, "seeds": seeds, "neutral": neutral,
            "change": asdict(spread(values)), "gain_every_seed": all(v > neutral for v in values)}


def gains_markdown(rows: list[dict[str, Any]]) -> str:
    """`paired_gains` as a table: each change's mean ± sample std (min–max) over the seeds."""
    if not rows:
        return ""
    head = ["set", "comparison", "figure", "seeds", "change over seeds", "a gain on every seed"]
    lines = [_row(head), _row(["---"] * len(head))]
    for r in rows:
        change = Spread(**r["change"])
        cell = change.cell(pct=False) if r["neutral"] == 1.0 else change.cell(pct=True).replace("%", " pt")
        lines.append(_row([r["set"], r["what"], r["figure"], len(r["seeds"]), cell,
                           "yes" if r["gain_every_seed"] else "no"]))
    return ("\nPaired over seeds (both sides on the same tasks with the same sampling seed): each seed's "
            "change, in percentage points (pt), or as a ratio for the geometric-mean speedup (1 = none).\n\n"
            + "\n".join(lines) + "\n")


def table_row(seeds: Sequence[int], figures: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One model and set of the table: each figure's spread over the seeds' runs (`RunFigures` as dicts)."""
    row: dict[str, Any] = {"seeds": list(seeds), "tasks": figures[0]["tasks"]}
    for name in FIGURES:
        row[name] = asdict(spread([f[name] for f in figures]))
    return row


PCT = {"first_turn_correct", "best_of_turns_correct", "fast_1", "correct_rate", "flagged_rate",
       "no_code_rate"}
COLUMNS = (("first_turn_correct", "first-turn correct"), ("best_of_turns_correct", "best-of-turns correct"),
           ("fast_1", "fast_1"), ("speedup_geomean", "geomean x (solved)"),
           ("speedup_geomean_all", "geomean x (all, unsolved=1)"), ("structural_mean", "structural"),
           ("flagged_rate", "anti-cheat flagged"))


def table_markdown(table: dict[str, dict[str, dict[str, Any]]], turns: int) -> str:
    """One row per model and set: mean ± std (min–max) over seeds."""
    head = ["set", "model", "seeds", "tasks", *[label for _, label in COLUMNS]]
    lines = [_row(head), _row(["---"] * len(head))]
    sets = sorted({s for by_set in table.values() for s in by_set})
    for set_name in sets:
        for model, by_set in table.items():
            row = by_set.get(set_name)
            if row is None:
                continue
            cells = [Spread(**row[name]).cell(name in PCT) for name, _ in COLUMNS]
            lines.append(_row([set_name, model, len(row["seeds"]), row["tasks"], *cells]))
    note = (f"\nBest of {turns} turns; cells: mean ± sample std (min–max) over seeds. fast_1 and geomean: "
            "the best kernel of each task against its baseline (eager for PyTorch tasks, the naive CUDA "
            "port for C tasks unless --baseline says otherwise).\n")
    return "\n".join(lines) + "\n" + note


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def write_comparison(config: CompareConfig, table: dict[str, dict[str, dict[str, Any]]],
                     gains: list[dict[str, Any]]) -> None:
    out = Path(config.output_dir)
    (out / COMPARISON_JSON).write_text(json.dumps({"config": asdict(config), "table": table, "gains": gains},
                                                  indent=1, allow_nan=False) + "\n")
    (out / COMPARISON_MD).write_text(table_markdown(table, config.turns) + gains_markdown(gains))


def config_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(CompareConfig))


__all__ = ["COMPARISON_JSON", "COMPARISON_MD", "CompareConfig", "CompareReport", "FIGURES", "RunFigures",
           "SeedRuns", "Spread", "complete_runs", "gains_markdown", "make_evaluator",
           "model_name", "model_spec", "paired_gains", "refine_config", "run_compare", "run_figures",
           "set_spec", "spread", "table_from_runs", "table_markdown", "table_row"]
