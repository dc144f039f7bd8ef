"""Training that survives a non-finite gradient, and checkpoints that are never resumed or promoted with
non-finite weights.

In bfloat16 mixed precision nothing skips an optimiser step whose gradient holds an infinity or a NaN
(float16's loss scaler does; bfloat16 runs without one). Gradient clipping then multiplies every gradient
by a NaN coefficient and the optimiser writes NaN into every trainable weight: the policy samples from NaN
probabilities at its next rollout and the run dies (a device-side assert), and its later checkpoints are
NaN too. Covers:
- `gradient_guard`: a `transformers.TrainerCallback` that, before each optimiser step (after clipping),
  drops the gradients when any trainable parameter's is not finite, so the optimiser leaves the weights
  as they were (its per-parameter step counters too); each skip is a metrics record `guard` and a line on
  stderr, naming the micro-batch that made the gradients non-finite (checked after each micro-batch but
  the last, before clipping; the last when none before it did) and, when found before clipping, the
  tensors (`batches.jsonl` names the micro-batch's tasks). The batch's data is still consumed: a skipped
  step is a lost step, not a retried one.
- `weights_finite`: whether every floating tensor of a checkpoint's safetensors files is finite.

Not covered: why a gradient was not finite; which tensors, when it was the step's last micro-batch
(clipping has spread the NaN to every gradient by then); float16 runs (their loss scaler already skips);
weights stored other than as safetensors (checked as finite).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

GUARD_RECORD = "guard"


def gradients_finite(parameters: Any) -> bool:
    """Whether every gradient of `parameters` that exists is finite (one device sync)."""
    import torch

    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return True
    return bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())


def gradient_guard(writer: Any) -> Any:
    """The callback of the module docstring; `writer`: the run's `MetricsWriter`."""
    from transformers import TrainerCallback

    class GradientGuard(TrainerCallback):
        def __init__(self) -> None:
            self.skipped = 0
            self.substeps = 0  # micro-batches of the current step ended so far
            self.first_bad: tuple[int, list[str]] | None = None  # (micro-batch, tensors) before clipping

        def on_step_begin(self, args, state, control, **kwargs):
            self.substeps, self.first_bad = 0, None

        def on_substep_end(self, args, state, control, model=None, **kwargs):
            # a micro-batch but the step's last has ended: its accumulated gradients, not yet clipped, say
            # which micro-batch first made them non-finite and in which tensors
            self.substeps += 1
            if self.first_bad is None:
                bad = _nonfinite_names(model)
                if bad:
                    self.first_bad = (self.substeps, bad)

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            trainable = [p for p in model.parameters() if p.requires_grad]
            if gradients_finite(trainable):
                return
            for p in trainable:
                p.grad = None  # torch optimisers leave a parameter without a gradient untouched
            self.skipped += 1
            step = state.global_step + 1
            # none before the last micro-batch: the last began it (its tensors unknown: clipped since)
            micro, bad = self.first_bad or (self.substeps + 1, [])
            writer.write(GUARD_RECORD, step, {"nonfinite_gradient_skipped": 1,
                                              "nonfinite_gradient_skips": self.skipped,
                                              "nonfinite_microbatch": micro,
                                              "nonfinite_tensors": len(bad) if bad else None})
            where = (f"{len(bad)} tensors, first {', '.join(bad[:3])}" if bad else "tensors unknown")
            print(f"step {step}: a non-finite gradient from micro-batch {micro} ({where}; batches.jsonl "
                  f"names its tasks); the optimiser step is skipped (weights kept), {self.skipped} so far",
                  file=sys.stderr, flush=True)

    return GradientGuard()


def _nonfinite_names(model: Any) -> list[str]:
    """The trainable parameters of `model` whose gradient exists and is not finite."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p.grad is not None]
    if gradients_finite([p for _, p in named]):
        return []
    return [n for n, p in named if not gradients_finite([p])]


def weights_finite(checkpoint: str | Path) -> bool:
    """Whether every floating tensor in the `*.safetensors` files of `checkpoint` is finite (a folder
    without any: True)."""
    import torch
    from safetensors import safe_open

    for path in sorted(Path(checkpoint).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                tensor = f.get_tensor(name)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    return False
    return True


__all__ = ["GUARD_RECORD", "gradient_guard", "gradients_finite", "weights_finite"]
