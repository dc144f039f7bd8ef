"""Replies generated for a round of the refine loop but not yet evaluated, kept on disk so that a run
stopped during the round's evaluation (a kill at a time limit, a crash) resumes without generating them
again: on a small model a round is ~100 s of generation (dev/LOG.md, session 28), paid twice otherwise.

`PendingReplies` keeps one JSON file beside the trajectory file: the model's name and each reply keyed by
(task_id, sample, turn), written atomically (a temporary file fsynced, then renamed) as soon as the round's
replies are in. A later round takes the reply of a trajectory's next turn from it when the model and the
key match, and the loop removes the file once the round's turns are synced to the trajectory file.

Covers: saving, taking (only matching model and keys; a torn or foreign file is ignored), clearing.
Not covered: replies that failed (never kept, so a resume asks the model again), and whether the
conversation behind a key is the one the reply answered: the turns before it come from the trajectory
file, so a resumed run rebuilds the same conversation, and the callers refuse runs with other settings
(`train.compare.check_runs`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from cudaperf.agent.backends.base import Generation

Key = tuple[str, int, int]  # (task_id, sample, turn)


class PendingReplies:
    """The file of one trajectory file's pending replies (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def beside(cls, trajectory_file: str | Path) -> "PendingReplies":
        path = Path(trajectory_file)
        return cls(path.with_name(path.name + ".pending.json"))

    def save(self, model: str, keys: Sequence[Key], replies: Sequence[Generation]) -> None:
        rows = [{"key": list(k), "reply": asdict(r)} for k, r in zip(keys, replies, strict=True)
                if r.error is None and r.finish_reason != "error"]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"model": model, "replies": rows}, f, allow_nan=False)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(self.path)

    def take(self, model: str, keys: Sequence[Key]) -> dict[Key, Generation]:
        """The kept replies among `keys` that `model` generated (none when the file is missing or torn)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("model") != model:
                return {}
            kept = {tuple(row["key"]): Generation(**row["reply"]) for row in data["replies"]}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return {}
        return {k: kept[k] for k in keys if k in kept}

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


__all__ = ["Key", "PendingReplies"]
