"""A training checkpoint carried to another machine without its optimiser state, and continued there.

One GPU lease is too short for an epoch of SFT, or for more than ~16 GRPO steps of RL, and a lease's
machine keeps nothing for the next one.
What can travel between them is small: a LoRA checkpoint's adapter (~20 MB), the trainer's state (the step,
the epoch), the learning-rate schedule and the random generators, but not Adam's moments (twice the
adapter's size, over what a device call brings back and carries beside a model part). So a run continued
from such a checkpoint takes up the same data order where it stopped (the trainer skips the batches
already seen), keeps its learning-rate schedule (`ScheduleFromCheckpoint`: transformers loads the schedule
only together with the optimiser), and starts its optimiser afresh: Adam's moments are rebuilt over the
first steps, the one difference from a run that never stopped. The examples do not travel with the state
(4.7 MB more than a device call holds beside it): the order is the same when the continued run's examples
are, which the same examples file, or the same code building them, gives.

Covers: placing a carried state as a run directory's checkpoint (`seed_run_directory`) and the schedule's
state, for SFT and RL alike. Not covered: copying the state off the machine (`scripts/model_day.sh`,
`export_sft_state`, `export_rl_state`), checking an RL state's base model (`train_h200.py`,
`--rl-from-state`) and the trainers' own resume (`train.sft.run_sft`, `train.rl.run_rl`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from cudaperf.train.config import CONFIG_FILE, ConfigError
from cudaperf.train.monitor import last_checkpoint

OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin")
SCHEDULER_FILE = "scheduler.pt"
TRAINER_STATE_FILE = "trainer_state.json"


def lacks_optimizer(checkpoint: str | Path | None) -> bool:
    """A checkpoint with a schedule but no optimiser state: one carried from another machine."""
    if checkpoint is None:
        return False
    folder = Path(checkpoint)
    return (folder / SCHEDULER_FILE).is_file() and not any((folder / f).is_file() for f in OPTIMIZER_FILES)


def carried_step(state: Path) -> int:
    """The global step a carried state was saved at (its trainer state says)."""
    path = Path(state) / TRAINER_STATE_FILE
    if not path.is_file():
        raise ConfigError(f"{state}: no {TRAINER_STATE_FILE}: not a training checkpoint")
    return int(json.loads(path.read_text())["global_step"])


def seed_run_directory(state: Path, output_dir: Path) -> Path:
    """Place the carried checkpoint `state` as `output_dir`/checkpoint-<step>, with its saved configuration
    as the run's, so that the run resumes from it. Refused over a run directory that already holds a
    checkpoint (that run continues from its own). Returns the checkpoint's folder."""
    state, output_dir = Path(state), Path(output_dir)
    if not (state / CONFIG_FILE).is_file():
        raise ConfigError(f"{state}: no {CONFIG_FILE}: the run's configuration must travel with its state")
    if output_dir.is_dir() and last_checkpoint(output_dir) is not None:
        raise ConfigError(f"{output_dir} already holds a checkpoint: it continues from its own, not from "
                          f"{state}")
    target = output_dir / f"checkpoint-{carried_step(state)}"
    shutil.copytree(state, target)
    shutil.copyfile(state / CONFIG_FILE, output_dir / CONFIG_FILE)
    return target


def schedule_callback(checkpoint: str | Path) -> Any:
    """A `TrainerCallback` that loads `checkpoint`'s learning-rate schedule at the start of training and
    sets the optimiser's rates to it (the trainer itself loads a schedule only with its optimiser)."""
    import torch
    from transformers import TrainerCallback

    path = Path(checkpoint) / SCHEDULER_FILE

    class ScheduleFromCheckpoint(TrainerCallback):
        def on_train_begin(self, args, state, control, lr_scheduler=None, optimizer=None, **kwargs):
            if lr_scheduler is None:
                return
            lr_scheduler.load_state_dict(torch.load(path, weights_only=True))
            for group, rate in zip(optimizer.param_groups, lr_scheduler.get_last_lr(), strict=True):
                group["lr"] = rate

    return ScheduleFromCheckpoint()


__all__ = ["OPTIMIZER_FILES", "SCHEDULER_FILE", "TRAINER_STATE_FILE", "carried_step", "lacks_optimizer",
           "schedule_callback", "seed_run_directory"]
