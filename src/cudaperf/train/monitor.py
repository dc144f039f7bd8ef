"""What a training run writes as it goes: metrics (JSONL and TensorBoard), the configuration beside every
checkpoint, and a fingerprint of every training batch (so a resumed run can be checked against an
uninterrupted one).

Covers: `MetricsWriter` (one JSON line per record, flushed at once, so a killed run loses at most the
line being written; the same scalars to TensorBoard under `<output_dir>/tensorboard`), `RunCallback` (a
`transformers.TrainerCallback`: the trainer's logs to the writer, the configuration into each
`checkpoint-<step>/`, the wall time of each optimiser step), `record_batch` (the fingerprint line of one
micro-batch in `batches.jsonl`; `RecordsBatches`, the trainer mix-in that calls it every training step),
`last_checkpoint` (the newest with finite weights), `report_slow_results` (a slow evaluation batch's
results in the run's log) and
`report_stalls` (a batch long without a result: where its jobs are in the log, every thread's stack in
`stalls.txt`), `record_evaluations` (every evaluated candidate, its code with it, in `evaluations.jsonl`
as its result arrives, so a step killed mid-rollout keeps what its candidates were and how long each
stage took).

Not covered: what the metrics mean (the rollout computes its own, `rollout.py`), plotting.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cudaperf.train.config import CommonConfig, save_config

METRICS_FILE = "metrics.jsonl"
BATCHES_FILE = "batches.jsonl"


class MetricsWriter:
    """Appends metric records to `<directory>/metrics.jsonl` and their numbers to TensorBoard."""

    def __init__(self, directory: str | Path, tensorboard: bool = True) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._file = open(self.directory / METRICS_FILE, "a", encoding="utf-8")  # noqa: SIM115 - long-lived
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.directory / "tensorboard"))
            except ImportError:  # tensorboard not installed: the JSONL still has everything
                self._tb = None

    def write(self, kind: str, step: int, values: Mapping[str, Any]) -> None:
        record = {"kind": kind, "step": step, "time": time.time(), **values}
        self._file.write(json.dumps(record, default=_plain) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._tb.add_scalar(f"{kind}/{key}", value, step)
            self._tb.flush()

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else str(value)


def read_metrics(directory: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The records of `metrics.jsonl` (a torn last line skipped), optionally of one kind."""
    path = Path(directory) / METRICS_FILE
    out = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if kind is None or record.get("kind") == kind:
            out.append(record)
    return out


def fingerprint(inputs: Any) -> dict[str, Any]:
    """What identifies a training micro-batch: the task ids of RL rows, or a hash of SFT token ids."""
    if isinstance(inputs, list):
        ids = [row.get("task_id", "") for row in inputs if isinstance(row, Mapping)]
        return {"ids": ids, "hash": hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]}
    tensor = inputs["input_ids"]
    return {"hash": hashlib.sha256(tensor.cpu().numpy().tobytes()).hexdigest()[:16],
            "shape": list(tensor.shape)}


def record_batch(output_dir: str | Path, step: int, inputs: Any) -> None:
    """Append the fingerprint of the micro-batch trained at optimiser step `step` (1-based)."""
    with open(Path(output_dir) / BATCHES_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step, **fingerprint(inputs)}) + "\n")


class RecordsBatches:
    """Mix-in before a `transformers.Trainer` subclass (TRL's SFT and GRPO trainers): every training
    micro-batch's fingerprint goes to `batches.jsonl` (`record_batch`) before the step runs."""

    def training_step(self, model, inputs, num_items_in_batch=None):
        record_batch(self.args.output_dir, self.state.global_step + 1, inputs)
        return super().training_step(model, inputs, num_items_in_batch)


def read_batches(output_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(output_dir) / BATCHES_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def last_checkpoint(output_dir: str | Path) -> str | None:
    """The newest `checkpoint-<step>` directory whose weights are finite (`finite_guard.weights_finite`),
    or None. One with non-finite weights (a diverged run's) is never resumed or promoted: it is named on
    stderr and the one before it is taken."""
    directory = Path(output_dir)
    if not directory.is_dir():
        return None
    from cudaperf.train.finite_guard import weights_finite

    # newest first, by step (transformers' get_last_checkpoint gives only the newest, and its sorting
    # helper is not in every version the GPU machine and this one run)
    steps = [(int(m.group(1)), d) for d in directory.iterdir()
             if d.is_dir() and (m := re.fullmatch(r"checkpoint-(\d+)", d.name))]
    for _, checkpoint in sorted(steps, reverse=True):
        if weights_finite(checkpoint):
            return str(checkpoint)
        print(f"note: {checkpoint} holds non-finite weights: not resumed or promoted", file=sys.stderr,
              flush=True)
    return None


def checkpoint_step(checkpoint: str | Path | None) -> int:
    """The optimiser steps a checkpoint folder holds (its trainer state's `global_step`; 0 for none)."""
    if checkpoint is None:
        return 0
    state = Path(checkpoint) / "trainer_state.json"
    return int(json.loads(state.read_text()).get("global_step", 0)) if state.is_file() else 0


def make_callback(config: CommonConfig, writer: MetricsWriter, started_s: float | None = None) -> Any:
    """A `TrainerCallback` that logs to `writer`, saves `config` into every checkpoint, times steps and
    stops the run with a checkpoint at the end of the last step that fits `config.max_minutes` (the next
    step is taken to last as long as the one just ended), or at SFT's `stop_at_step`, whichever comes
    first. An RL run whose rollout batch serves several steps (`RlConfig.num_iterations`) stops only at
    the end of a batch, the next batch taken to last as long as the one just ended: its first step holds
    the rollout, and a checkpoint between its steps would resume without it. `started_s`: the
    `time.perf_counter()` at which the run began, so that the minutes count what came before the trainer
    too (loading, building the examples, starting the evaluator); default: now."""
    from transformers import TrainerCallback

    steps_per_batch = getattr(config, "num_iterations", 1)
    stop_at_step = getattr(config, "stop_at_step", 0)  # SFT's step stop (`SftConfig.stop_at_step`)

    class RunCallback(TrainerCallback):
        def __init__(self) -> None:
            self.step_started = time.perf_counter()
            self.started = self.step_started if started_s is None else started_s
            self.step_seconds: list[float] = []
            self.batch_seconds: list[float] = []  # the steps of the batch in training so far

        def on_step_begin(self, args, state, control, **kwargs):
            self.step_started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            now = time.perf_counter()
            self.step_seconds.append(now - self.step_started)
            self.batch_seconds.append(now - self.step_started)
            if len(self.batch_seconds) < steps_per_batch:
                return  # within a rollout batch: never stop there
            batch_s, self.batch_seconds = sum(self.batch_seconds), []
            # Stop when the next batch, as long as this one, would end past the limit: an RL step takes
            # minutes, and a run lent a machine for a few must not start one it cannot finish.
            next_end_s = now - self.started + batch_s
            out_of_time = bool(config.max_minutes) and next_end_s > 60 * config.max_minutes
            if out_of_time or 0 < stop_at_step <= state.global_step:
                control.should_save = True  # the time or the steps are up: checkpoint, stop; a rerun resumes
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kwargs):
            values = dict(logs or {})
            if self.step_seconds:
                values["step_s"] = sum(self.step_seconds) / len(self.step_seconds)
                self.step_seconds = []
            writer.write("train", state.global_step, values)

        def on_save(self, args, state, control, **kwargs):
            save_config(config, Path(args.output_dir) / f"checkpoint-{state.global_step}")

    return RunCallback()


SLOW_RESULT_S = 20.0  # a result that took this long is reported
BATCH_TAIL_S = 30.0  # and every result once a batch has been out this long, with the candidates still out


def report_slow_results(started_s: float, slow_s: float = SLOW_RESULT_S, tail_s: float = BATCH_TAIL_S
                        ) -> Callable[[Any], None]:
    """The `on_result` of an `agent.evaluation.ReportingEvaluator` for a training run's log: a line
    (seconds since `started_s`, a `time.perf_counter()` reading) for a slow result, and for every result
    of a batch out longer than `tail_s`, naming the candidates still out; a fast batch prints nothing."""

    def on_result(progress: Any) -> None:
        took = (progress.result.stage_durations_s or {}).get("total") or 0.0
        if took >= slow_s or progress.elapsed_s >= tail_s:
            print(f"[{time.perf_counter() - started_s:.0f} s] {progress.line()}", file=sys.stderr, flush=True)

    return on_result


EVALUATIONS_FILE = "evaluations.jsonl"


def record_evaluations(started_s: float, directory: str | Path) -> Callable[[Any], None]:
    """An `on_result` of an `agent.evaluation.ReportingEvaluator`: one line per result in
    `<directory>/evaluations.jsonl` (seconds since `started_s`, a `time.perf_counter()` reading; the
    result's outcome, stage, stage times and flags; where a timed result's timing went, `timing_breakdown`;
    the candidate's source)."""
    path = Path(directory) / EVALUATIONS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)

    def on_result(progress: Any) -> None:
        r = progress.result
        line = {"at_s": round(time.perf_counter() - started_s, 1), "task_id": r.task_id,
                "solution_id": r.solution_id, "outcome": r.outcome.value, "stage": r.stage,
                "stage_durations_s": r.stage_durations_s, "flags": sorted({f.code for f in r.flags}),
                "timing": timing_breakdown(r) if r.timings else None,
                "source": progress.solution.source if progress.solution is not None else None}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, default=str) + "\n")  # a stray type must not stop the run

    return on_result


def timing_breakdown(result: Any) -> dict[str, Any]:
    """Where a timed result's timing stage went: per configuration its bench's rounds, its disposals' wall
    time (outside every sample), the candidate's samples and median, the baselines timed beside it; and
    the referee's time per message kind and part (`referee_ms` of the result's environment), if refereed.
    Why: an RL run's exclusive GPU turn per answer (~0.6 s on an H100) is mostly not its samples."""
    configs = [{"config": t.config, "rounds": t.rounds, "dispose_ms": round(t.dispose_ms, 3),
                "samples": t.candidate.n_samples, "candidate_ms": t.candidate.median_ms,
                "baselines": sorted(name for name in ("eager", "compile", *t.baselines)
                                    if t.baseline_timing(name) is not None)} for t in result.timings]
    return {"configs": configs, "referee_ms": _json_or_text(result.environment.get("referee_ms"))}


def _json_or_text(value: str | None) -> Any:
    """A JSON environment value parsed, or kept as text when it is not JSON (a record must not stop a run)."""
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value


STALLS_FILE = "stalls.txt"


def report_stalls(started_s: float, directory: str | Path) -> Callable[[Any], None]:
    """The `on_stall` of an `agent.evaluation.ReportingEvaluator` for a training run: the stall's line and
    the evaluator's account of its jobs in the log (seconds since `started_s`, a `time.perf_counter()`
    reading), and every thread's stack appended to `<directory>/stalls.txt`."""
    path = Path(directory) / STALLS_FILE

    def on_stall(stall: Any) -> None:
        at = f"[{time.perf_counter() - started_s:.0f} s]"
        lines = [f"{at} {stall.line()}", *(f"{at}   {a}" for a in stall.activity),
                 f"{at}   every thread's stack: {path}"]
        print("\n".join(lines), file=sys.stderr, flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n".join([f"=== {at} {stall.line(shown=len(stall.still_out))}", *stall.activity,
                               stall.stacks, ""]))

    return on_stall


__all__ = ["BATCHES_FILE", "METRICS_FILE", "MetricsWriter", "checkpoint_step", "fingerprint",
           "last_checkpoint", "make_callback", "read_batches", "read_metrics", "record_batch",
           "RecordsBatches", "record_evaluations", "report_slow_results", "report_stalls", "STALLS_FILE",
           "EVALUATIONS_FILE", "timing_breakdown"]
