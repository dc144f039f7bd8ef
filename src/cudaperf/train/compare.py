"""Before/after evaluation of policies (issue 23 item 6): base, SFT and RL models on held-out tasks,
through the agent loop, over several sampling seeds, with the spread of every figure.

Recipe: for every model (`name=SPEC`: a backend spec of `cudaperf.agent.backends`, or a model directory,
e.g. a training run's `final/`), every task set (`heldout`: held-out tasks of the training families,
`train/heldout.py`; `val` / `test`: the dataset's held-out families; or `NAME=TASK_SPEC`) and every seed,
`agent.loop.refine` runs `samples` trajectories of `turns` turns per task against one evaluator
(`agent.evaluation.LocalEvaluator`, `eval_mode='rl'` by default), with the environment the RL rollouts use
(reward preset, context budget, anti-cheat policy), each distinct answer evaluated once
(`share_repeated_answers`). Each (model, set, seed) is one run directory
`<output_dir>/<model>/<set>/seed<k>/` holding `trajectories.jsonl` (one line per turn, written as it
finishes) and, once complete, `figures.json`; a second call skips complete runs and continues partial ones
from their last turn (`TrajectoryStore`), so the comparison survives calls of a few minutes each.

Figures per run (`RunFigures`): first-turn correct rate (over trajectories), best-of-turns correct rate (a
trajectory with any correct turn), fast_1 (share of tasks whose best kernel is correct and faster than the
baseline: eager for PyTorch tasks, the naive CUDA port for C tasks with `baseline='auto'`), fast_1_sure (the
same, counting only kernels whose speedup's bootstrap lower bound clears 1.0x:
`cudaperf.speedup_confidence`; a copy of the baseline lands above 1.0x about half the time), geometric-mean
speedup of the best kernels of solved tasks and over all tasks (an unsolved task counted 1.0: it keeps its
baseline; also from the first turns alone, as fast_1_sure is: what refinement adds to speed), mean
structural score of the correct turns (`structural_score` of the unified reward), and the anti-cheat flagged
share. Over seeds each figure gets mean, std (n-1), min and max (`Spread`); `table_markdown` and
`comparison.json` show them per model and set. Paired over seeds (`paired_gains`, both sides on the same
tasks and sampling seed): every model against every model of another policy before it, and every model's
best-of-turns against its first turn (correct rate, fast_1_sure and geometric-mean speedup;
`compare_table.REFINEMENT` says why the speed rows favour later turns by selection alone), each seed's
change and their spread; which trajectories' outcomes differ between two models (`paired_outcomes`), and the
outcomes counted by task family (`family_outcomes`: each run's `figures.json` names its tasks' families).
Models named `GROUP@seedK` are training seeds of one policy: `write_comparison` adds the same over training
seeds (`train.training_seeds`). The figures and tables themselves are `train.compare_table`'s; this module
runs the comparison and writes them. A model directory whose weights are not all finite is refused before
any run (`check_models`).

Not covered: training (`sft.py`, `rl.py`), the evaluator's own checks (`cudaperf.evaluate`), drawing
(`cudaperf report --html` reads each run's trajectories.jsonl).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from cudaperf.agent.backends.base import GENERATION_CACHES
from cudaperf.agent.backends.decoding_attention import check_attention
from cudaperf.agent.backends.decoding_probe import DECODING_PROBE_FILE
from cudaperf.train.compare_table import (
    SeedOutcomes,
    SeedRuns,
    families_markdown,
    family_outcomes,
    gains_markdown,
    outcomes_markdown,
    paired_gains,
    paired_outcomes,
    run_figures,
    table_from_runs,
    table_markdown,
    task_family,
    trajectory_outcomes,
)
from cudaperf.train.config import ConfigError, check_headroom
from cudaperf.train.training_seeds import (
    policy_name,
    seed_groups,
    training_seed_gains,
    training_seed_table,
    training_seeds_markdown,
)

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
    directory (a run's final/, loaded as hf:DIR). NAME names the table row and the run directory; names
    GROUP@seedK (rl@seed0, rl@seed1, ...) are training seeds of one policy, also reported over them."""
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
    min_headroom: float = 0.0
    """Only tasks the dataset shows can be made this much faster than their baseline or more (as
    `RlConfig.min_headroom`; needs `measurements`), in every set, before `limit_tasks`. 0: every task."""
    measurements: str = ""
    """Directory of `dataset measure` results that `min_headroom` reads."""
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
    share_repeated_answers: bool = True
    """Evaluate each distinct answer once over the whole comparison (`agent.shared_answers`): an answer
    written again, character for character, by another seed or model gets the first one's result, so two
    models that answer alike are judged on one measurement. Off: every answer is evaluated. Not part of a
    run's settings (a result is the same answer's either way, up to timing noise)."""
    anchor_copies: bool = True
    """In the 'rl' evaluation mode, a C answer that is its task's naive CUDA port, docstrings aside, takes
    the port's timings from the task's last timed pass (`RlSettings.anchor_copies`): a speedup of 1.0, so a
    copy of the baseline never counts as faster by timing noise (fast_1), nor slower. Off: every copy is
    timed. Not part of a run's settings, like `share_repeated_answers`."""
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
        try:
            seed_groups(names)
        except ValueError as e:
            raise ConfigError(f"models: {e}; name each training seed once (NAME@seedK)") from None
        check_headroom(self.min_headroom, self.measurements)
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
    from cudaperf.agent.shared_answers import SharedAnswers
    from cudaperf.train.monitor import report_slow_results, report_stalls

    started = time.perf_counter()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare_config.json").write_text(json.dumps(asdict(config), indent=2) + "\n")
    check_runs(config)
    check_models(config)
    task_sets = resolve_sets(config)
    deadline = time.monotonic() + 60 * config.max_minutes if config.max_minutes else None
    own = evaluator is None
    evaluator = evaluator or make_evaluator(config)
    # a stalled round names its laggards, and one with no result at all says where its jobs wait
    judge = ReportingEvaluator(SharedAnswers(evaluator) if config.share_repeated_answers else evaluator,
                               report_slow_results(started), report_stalls(started, out))
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
    table = write_comparison(config, complete_runs(config), complete_outcomes(config),
                             complete_families(config))
    return CompareReport(str(out), done, skipped, unfinished, table, time.perf_counter() - started)


def resolve_sets(config: CompareConfig, sets: Sequence[str] | None = None) -> dict[str, list[Any]]:
    """Set name -> its tasks, for `config.sets` (or `sets`), the measurements `min_headroom` reads read
    once for all of them."""
    from cudaperf.train.heldout import headroom_ids

    only = headroom_ids(config.min_headroom, config.measurements)
    return {name: _tasks(spec, config, only) for name, spec in map(set_spec, sets or config.sets)}


def _tasks(spec: str, config: CompareConfig, only: frozenset[str] | None) -> list[Any]:
    from cudaperf.train.heldout import resolve_tasks

    found = resolve_tasks([spec], kinds=config.kinds, families=config.families, limit=config.limit_tasks,
                          holdout_fraction=config.holdout_fraction if spec.startswith("heldout:") else 0.0,
                          only=only)
    if not found.tasks:
        raise ConfigError(f"task set {spec!r}: no task ({'; '.join(found.errors[:3]) or 'none matched'})")
    return list(found.tasks)


def make_evaluator(config: CompareConfig) -> Any:
    from cudaperf.agent.evaluation import LocalEvaluator
    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig, RlSettings, TimingConfig

    return LocalEvaluator(EvalConfig(device=config.eval_device, mode=config.eval_mode,
                                     seeds=config.eval_seeds,
                                     policy=Policy(allow_torch_ops=config.allow_torch_ops),
                                     timing=TimingConfig(budget_ms=config.timing_budget_ms),
                                     rl=RlSettings(anchor_copies=config.anchor_copies)))


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
    if config.min_headroom:  # only when set: runs from before the field compare equal without it
        values["min_headroom"] = config.min_headroom
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


def check_models(config: CompareConfig) -> None:
    """Refuse a model directory whose weights are not all finite (a training run that diverged): its
    sampler would die on NaN probabilities mid-comparison, after the other models' rounds."""
    from cudaperf.train.finite_guard import weights_finite

    for entry in config.models:
        spec = model_spec(entry)
        if spec.startswith("hf:") and not weights_finite(Path(spec[3:]).expanduser()):
            raise ConfigError(f"{model_name(entry)}: {spec[3:]} holds non-finite weights (a training run "
                              "that diverged): leave the model out, or promote a checkpoint with finite "
                              "weights")


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
              "figures": asdict(figures), "timing": timing, "tasks": [t.task_id for t in tasks],
              "outcomes": trajectory_outcomes(trajectories),
              "families": {t.task_id: task_family(t) for t in tasks}}
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


def _complete_records(config: CompareConfig) -> Iterator[tuple[str, str, int, dict[str, Any]]]:
    """(model, set, seed, the run's figures.json) of every complete run."""
    out = Path(config.output_dir)
    for entry in config.models:
        for set_name, _ in map(set_spec, config.sets):
            for k in config.seeds:
                path = _run_dir(out, entry, set_name, k) / FIGURES_FILE
                if path.is_file():
                    yield model_name(entry), set_name, k, json.loads(path.read_text())


def complete_runs(config: CompareConfig) -> SeedRuns:
    """The figures of every complete run (`figures.json` files)."""
    runs: SeedRuns = {}
    for model, set_name, _, run in _complete_records(config):
        runs.setdefault(model, {}).setdefault(set_name, {})[run["seed"]] = run["figures"]
    return runs


def complete_outcomes(config: CompareConfig) -> SeedOutcomes:
    """Every complete run's `trajectory_outcomes` (runs written before they were kept have none)."""
    outcomes: SeedOutcomes = {}
    for model, set_name, seed, run in _complete_records(config):
        if "outcomes" in run:
            outcomes.setdefault(model, {}).setdefault(set_name, {})[seed] = run["outcomes"]
    return outcomes


def complete_families(config: CompareConfig) -> dict[str, str]:
    """Task id -> `task_family` over every complete run (runs written before they were kept have none)."""
    families: dict[str, str] = {}
    for _, _, _, run in _complete_records(config):
        families.update(run.get("families", {}))
    return families


def comparison_sections(runs: SeedRuns, outcomes: SeedOutcomes | None = None,
                        families: dict[str, str] | None = None,
                        turns: int = 2) -> tuple[dict[str, Any], str]:
    """(the comparison's sections, its markdown) from complete or partial runs: the per-model table, the
    changes paired over sampling seeds, the paired outcomes of the trajectories (`outcomes`:
    `complete_outcomes`), those outcomes by task family (`families`: `complete_families`) and, where
    models are training seeds of one policy (`train.training_seeds`), the changes over training seeds.
    `write_comparison` writes them; `scripts/compare_partial.py` prints them."""
    table = table_from_runs(runs)
    gains = paired_gains(runs, policy_of=policy_name)
    pairs = paired_outcomes(outcomes or {}, policy_of=policy_name)
    by_family = family_outcomes(outcomes or {}, families or {})
    seeded = {"table": training_seed_table(runs), "gains": training_seed_gains(runs)}
    sections = {"table": table, "gains": gains, "outcomes": pairs, "by_family": by_family,
                "training_seeds": seeded}
    markdown = (table_markdown(table, turns) + gains_markdown(gains) + outcomes_markdown(pairs)
                + families_markdown(by_family) + training_seeds_markdown(seeded["table"], seeded["gains"]))
    return sections, markdown


def write_comparison(config: CompareConfig, runs: SeedRuns, outcomes: SeedOutcomes | None = None,
                     families: dict[str, str] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """comparison.json (the configuration and `comparison_sections`) and comparison.md from the complete
    runs. Returns the per-model table."""
    sections, markdown = comparison_sections(runs, outcomes, families, config.turns)
    out = Path(config.output_dir)
    record = {"config": asdict(config), **sections}
    (out / COMPARISON_JSON).write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
    (out / COMPARISON_MD).write_text(markdown)
    return sections["table"]


def config_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(CompareConfig))


__all__ = ["COMPARISON_JSON", "COMPARISON_MD", "CompareConfig", "CompareReport", "comparison_sections",
           "complete_outcomes",
           "complete_runs", "make_evaluator", "model_name", "model_spec", "refine_config", "resolve_sets",
           "run_compare", "set_spec", "write_comparison"]
