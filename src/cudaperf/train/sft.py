"""`cudaperf train sft`: supervised fine-tuning on the dataset's implementations with TRL's SFTTrainer.

Recipe: tasks of the train families (val families for the eval loss) -> examples (`sft_data.py`: the
agent's prompt, one implementation as the answer, loss on the answer only; with `refine_per_task`, also
second turns that improve on a slower implementation, `refine_data.py`; with `repair_per_task`, second
turns that fix a broken one, `repair_data.py`) -> SFTTrainer (optionally a LoRA adapter, new or
continued from an earlier run's: `init_adapter`) with checkpoints every `save_steps`, each holding the
configuration, resumed from the last one when the run is started again (the trainer restores optimiser,
scheduler, RNG states and skips the batches already seen, and each epoch's order is fixed by the seed and
the epoch, `epoch_order.py`, so the data order continues unchanged: `batches.jsonl` lets a test check
that; a checkpoint carried from another machine without its optimiser state resumes with the same data
order and schedule and a fresh optimiser: `carried_state.py`).
The trained model (adapter merged) and its tokenizer go to `<output_dir>/final`. The examples can be built
beforehand, on any machine (`build_examples_file`; `examples_file` names them to the run, which checks
their fingerprint: `sft_examples_file.py`).

Not covered: building the examples (`sft_data.py`), evaluating the model on kernels (`cudaperf optimize`
or `scripts/train_h200.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cudaperf.train.carried_state import lacks_optimizer, schedule_callback
from cudaperf.train.config import CONFIG_FILE, ConfigError, SftConfig, check_resume, load_config, save_config
from cudaperf.train.epoch_order import EpochOrderSampler
from cudaperf.train.finite_guard import gradient_guard
from cudaperf.train.models import load_policy, lora_config, resolve_device, save_model, start_adapter
from cudaperf.train.monitor import (
    MetricsWriter,
    RecordsBatches,
    checkpoint_step,
    last_checkpoint,
    make_callback,
)
from cudaperf.train.refine_data import build_refine_examples
from cudaperf.train.repair_data import build_repair_examples
from cudaperf.train.sft_data import (
    LengthStats,
    SftExample,
    as_dataset,
    build_examples,
    measured_rows,
    split_tasks,
    verified_from_rows,
)
from cudaperf.train.sft_examples_file import fingerprint_of, fingerprint_parts, read_examples, write_examples


@dataclass(frozen=True)
class SftReport:
    """What a finished (or resumed and finished) SFT run did."""

    output_dir: str
    final_dir: str
    train_examples: int
    val_examples: int
    train_lengths: LengthStats
    steps: int
    train_loss: float | None  # the last logged training loss
    eval_loss: float | None  # the last validation loss, when computed
    resumed_from: str | None
    seconds: float
    finished: bool  # False: stopped at max_minutes with a checkpoint (run it again to continue)


def prepare_run(config: SftConfig | Any) -> str | None:
    """Check `output_dir` against the configuration: the last checkpoint to resume from, or None for a
    fresh run. Raises `ConfigError` for a run that may not be resumed this way."""
    saved_path = Path(config.output_dir) / CONFIG_FILE
    checkpoint = last_checkpoint(config.output_dir)
    if saved_path.is_file():
        if not config.resume:
            raise ConfigError(f"{config.output_dir} already holds a run: pass resume=True to continue it or "
                              "choose another output_dir")
        check_resume(load_config(saved_path), config)
    save_config(config, config.output_dir)
    return checkpoint


def run_sft(config: SftConfig) -> SftReport:
    """Train as configured; see the module docstring."""
    started = time.perf_counter()
    checkpoint = prepare_run(config)
    model, tokenizer = load_policy(config)
    built = time.perf_counter()
    train, val, lengths, origin = _examples(config, tokenizer)
    built_s = time.perf_counter() - built
    print(f"SFT examples: {len(train)} train, {len(val)} val, {origin} in {built_s:.0f} s (the setup "
          f"before them: {built - started:.0f} s)", flush=True)
    final = Path(config.output_dir) / "final"
    done = checkpoint_step(checkpoint)
    if 0 < config.stop_at_step <= done:  # started again at its step stop: no trainer, no step
        print(f"SFT is at its step stop ({config.stop_at_step}) already: {checkpoint}", flush=True)
        return SftReport(config.output_dir, str(final), len(train), len(val), lengths, done, None, None,
                         checkpoint, time.perf_counter() - started, False)
    writer = MetricsWriter(config.output_dir)
    writer.write("data", 0, {"train_examples": len(train), "val_examples": len(val), "build_s": built_s,
                             **{f"tokens_{k}": v for k, v in vars(lengths).items()}})
    trainer = _trainer(config, model, tokenizer, train, val, writer, started)
    if lacks_optimizer(checkpoint):  # carried from another machine (`train.carried_state`)
        trainer.add_callback(schedule_callback(checkpoint))
        print(f"SFT resumes from {checkpoint}, carried without its optimiser state: the same data order and "
              "learning-rate schedule, a fresh optimiser", flush=True)
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
        finished = trainer.state.global_step >= trainer.state.max_steps
        if finished:
            save_model(trainer, tokenizer, final)
            save_config(config, final)
    finally:
        writer.close()
    logs = trainer.state.log_history
    return SftReport(config.output_dir, str(final), len(train), len(val), lengths, trainer.state.global_step,
                     _last(logs, "loss"), _last(logs, "eval_loss"), checkpoint,
                     time.perf_counter() - started, finished)


EXAMPLES_FILE = "examples.json.gz"


def _examples(config: SftConfig, tokenizer: Any
              ) -> tuple[list[SftExample], list[SftExample], LengthStats, str]:
    """The run's examples and where they came from: kept in the run directory (a resumed run reads them
    back, and its configuration matches, so they are the same), else `config.examples_file`'s, when built
    for this run's data and tokenizer (`sft_examples_file`), else built here (loading thousands of tasks
    takes minutes)."""
    path = Path(config.output_dir) / EXAMPLES_FILE
    if path.is_file():
        return *read_examples(path), "read back from the run directory"
    parts = fingerprint_parts(config, tokenizer)
    if config.examples_file:
        train, val, lengths = read_examples(Path(config.examples_file), parts)
        origin = f"read from {config.examples_file}"
    else:
        train, val, lengths = build_all_examples(config, tokenizer)
        origin = "built"
    write_examples(path, train, val, lengths, parts)
    return train, val, lengths, origin


@dataclass(frozen=True)
class SplitExamples:
    """One split's examples: how many tasks it has, its first turns (with their length statistics) and its
    second turns (refinement and repair)."""

    tasks: int
    first: list[SftExample]
    lengths: LengthStats
    second: list[SftExample]


def examples_by_split(config: SftConfig, tokenizer: Any) -> dict[str, SplitExamples]:
    """The train and validation splits' examples as configured."""
    tasks = split_tasks(config)
    rows = measured_rows(config.measurements) if config.measurements else None
    verified = verified_from_rows(rows) if rows is not None else None
    out = {}
    for split in ("train", "val"):
        first, lengths = build_examples(tasks[split], tokenizer, config, verified)
        second = second_turn_examples(tasks[split], tokenizer, config, verified, rows)
        out[split] = SplitExamples(len(tasks[split]), first, lengths, second)
    return out


def build_all_examples(config: SftConfig, tokenizer: Any
                       ) -> tuple[list[SftExample], list[SftExample], LengthStats]:
    """Train and validation examples as configured, each first turns then second turns, and the train
    first turns' length statistics."""
    splits = examples_by_split(config, tokenizer)
    train, val = splits["train"], splits["val"]
    if not (train.first or train.second):
        raise ConfigError("no training example: check kinds, families, strategies, measurements and "
                          f"max_length ({train.lengths.line()})")
    return train.first + train.second, val.first + val.second, train.lengths


@dataclass(frozen=True)
class BuiltExamples:
    """What `build_examples_file` wrote."""

    path: str
    train_examples: int
    val_examples: int
    fingerprint: str
    first_turn_lengths: LengthStats


def build_examples_file(config: SftConfig, path: Path) -> BuiltExamples:
    """The examples as `config` says, with its model's tokenizer (loaded on the CPU), into `path`, for a run
    elsewhere (`SftConfig.examples_file`)."""
    _, tokenizer = load_policy(replace(config, device="cpu"))
    train, val, lengths = build_all_examples(config, tokenizer)
    parts = fingerprint_parts(config, tokenizer)
    write_examples(path, train, val, lengths, parts)
    return BuiltExamples(str(path), len(train), len(val), fingerprint_of(parts), lengths)


def second_turn_examples(tasks: list, tokenizer: Any, config: SftConfig, verified: dict | None,
                         rows: dict | None) -> list[SftExample]:
    """The refinement (`refine_data`) and repair (`repair_data`) examples of `tasks` as configured, each
    kind with a line saying how many were kept."""
    examples: list[SftExample] = []
    if config.refine_per_task and rows is not None and verified is not None:
        refine, lengths = build_refine_examples(tasks, tokenizer, config, verified, rows)
        print(f"refinement examples: {len(refine)} of {len(lengths)} within max_length {config.max_length} "
              f"({len(tasks)} tasks)", flush=True)
        examples += refine
    if config.repair_per_task:
        repair, counts = build_repair_examples(tasks, tokenizer, config, verified)
        print(f"repair examples: {len(repair)} ({', '.join(f'{k} {n}' for k, n in sorted(counts.items()))}; "
              f"{len(tasks)} tasks)", flush=True)
        examples += repair
    return examples


def _last(logs: list[dict[str, Any]], key: str) -> float | None:
    values = [entry[key] for entry in logs if key in entry]
    return float(values[-1]) if values else None


def _trainer(config: SftConfig, model: Any, tokenizer: Any, train: list, val: list,
             writer: MetricsWriter, started_s: float) -> Any:
    from trl import SFTConfig as TrlSFTConfig
    from trl import SFTTrainer

    class RecordingSFTTrainer(RecordsBatches, SFTTrainer):
        """SFTTrainer that appends a fingerprint of each training batch to batches.jsonl, its examples in
        an order fixed by the seed and the epoch (`epoch_order`: a resumed run takes up the same order)."""

        def _get_train_sampler(self, train_dataset=None):
            return EpochOrderSampler([len(e.input_ids) for e in train],
                                     self.args.train_batch_size * self.args.gradient_accumulation_steps,
                                     config.seed, config.group_by_length)

    cuda = resolve_device(config.device) == "cuda"
    evaluate = bool(val) and config.eval_steps > 0
    args = TrlSFTConfig(
        output_dir=config.output_dir, seed=config.seed, data_seed=config.seed,
        learning_rate=config.learning_rate, num_train_epochs=config.epochs, max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size, per_device_eval_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accum, warmup_steps=config.warmup_ratio,
        weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm, lr_scheduler_type="linear",
        logging_steps=config.logging_steps, save_strategy="steps", save_steps=config.save_steps,
        save_total_limit=config.save_total_limit, eval_strategy="steps" if evaluate else "no",
        eval_steps=config.eval_steps if evaluate else None, report_to="none",
        max_length=None,  # examples are filtered to max_length already (never truncated)
        completion_only_loss=True, packing=False, bf16=cuda, use_cpu=not cuda,
        dataloader_num_workers=0, disable_tqdm=True, save_only_model=False,
        gradient_checkpointing=config.gradient_checkpointing,
    )
    peft_config = lora_config(config)
    if config.init_adapter:  # a second stage: the earlier adapter's weights, this run's optimiser
        model, peft_config = start_adapter(model, config, config.init_adapter), None
        print(f"SFT's adapter starts from {config.init_adapter} (its weights; a fresh optimiser and "
              "schedule)", flush=True)
    return RecordingSFTTrainer(model=model, args=args, train_dataset=as_dataset(train),
                               eval_dataset=as_dataset(val) if evaluate else None,
                               processing_class=tokenizer, peft_config=peft_config,
                               callbacks=[make_callback(config, writer, started_s),
                                          gradient_guard(writer)])


__all__ = ["SftReport", "prepare_run", "run_sft"]
