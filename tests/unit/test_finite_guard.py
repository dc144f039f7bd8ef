"""A non-finite gradient never reaches the weights (`cudaperf.train.finite_guard`): the guard drops it
before the optimiser step, in a real `transformers.Trainer`; checkpoints with non-finite weights are
never resumed or promoted (`monitor.last_checkpoint`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import save_file  # noqa: E402

from cudaperf.train.finite_guard import GUARD_RECORD, gradient_guard, gradients_finite, weights_finite  # noqa: E402
from cudaperf.train.monitor import MetricsWriter, last_checkpoint  # noqa: E402


def _records(directory: Path) -> list[dict]:
    return [json.loads(x) for x in (directory / "metrics.jsonl").read_text().splitlines()]


def test_an_infinite_gradient_element_makes_the_gradients_non_finite():
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    a.grad, b.grad = torch.zeros(3), torch.tensor([0.0, float("inf")])
    assert not gradients_finite([a, b]) and gradients_finite([a])


def test_the_guard_drops_every_gradient_of_a_non_finite_step_and_records_it(tmp_path):
    model = torch.nn.Linear(2, 2)
    model.weight.grad, model.bias.grad = torch.full((2, 2), float("nan")), torch.ones(2)
    writer = MetricsWriter(tmp_path, tensorboard=False)
    guard = gradient_guard(writer)
    guard.on_pre_optimizer_step(None, type("S", (), {"global_step": 8})(), None, model=model)
    writer.close()
    assert model.weight.grad is None and model.bias.grad is None
    [record] = _records(tmp_path)
    assert (record["kind"], record["step"], record["nonfinite_gradient_skips"]) == (GUARD_RECORD, 9, 1)


STATE = type("S", (), {"global_step": 4})()


def _guard_after_a_finite_micro_batch(directory: Path):
    """A linear model, its guard (writing to `directory`) and a step whose first micro-batch ended finite."""
    model = torch.nn.Linear(2, 2)
    writer = MetricsWriter(directory, tensorboard=False)
    guard = gradient_guard(writer)
    guard.on_step_begin(None, STATE, None)
    model.weight.grad, model.bias.grad = torch.ones(2, 2), torch.ones(2)
    guard.on_substep_end(None, STATE, None, model=model)
    return model, writer, guard


def test_the_guard_names_the_micro_batch_that_made_the_gradients_non_finite(tmp_path):
    model, writer, guard = _guard_after_a_finite_micro_batch(tmp_path)
    model.weight.grad[0, 0] = float("inf")
    guard.on_substep_end(None, STATE, None, model=model)  # micro-batch 2 began it
    model.bias.grad[:] = float("nan")  # as clipping leaves every gradient
    guard.on_pre_optimizer_step(None, STATE, None, model=model)
    writer.close()
    [record] = _records(tmp_path)
    assert (record["nonfinite_microbatch"], record["nonfinite_tensors"]) == (2, 1)


def test_a_non_finite_gradient_seen_only_after_the_last_micro_batch_is_blamed_on_it(tmp_path):
    model, writer, guard = _guard_after_a_finite_micro_batch(tmp_path)
    model.weight.grad[:] = float("nan")
    guard.on_pre_optimizer_step(None, STATE, None, model=model)
    writer.close()
    [record] = _records(tmp_path)
    assert (record["nonfinite_microbatch"], record["nonfinite_tensors"]) == (2, None)


def test_the_guard_leaves_a_finite_step_alone(tmp_path):
    model = torch.nn.Linear(2, 2)
    model.weight.grad, model.bias.grad = torch.ones(2, 2), torch.ones(2)
    guard = gradient_guard(MetricsWriter(tmp_path, tensorboard=False))
    guard.on_pre_optimizer_step(None, type("S", (), {"global_step": 0})(), None, model=model)
    assert model.weight.grad is not None and guard.skipped == 0


class _Regression(torch.nn.Module):
    """A model whose first backward pass gets a NaN gradient (as a bfloat16 overflow would give)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
        self.backwards = 0
        self.linear.weight.register_hook(self._poison_first)

    def _poison_first(self, grad):
        self.backwards += 1
        return grad * float("nan") if self.backwards == 1 else grad

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), labels)}


def test_a_real_trainer_keeps_finite_weights_past_a_nan_gradient_and_trains_on(tmp_path):
    from transformers import Trainer, TrainingArguments

    data = [{"x": torch.randn(4), "labels": torch.tensor(1.0)} for _ in range(8)]
    model = _Regression()
    before = model.linear.weight.detach().clone()
    writer = MetricsWriter(tmp_path, tensorboard=False)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=1,
                             gradient_accumulation_steps=2, learning_rate=0.1, max_grad_norm=1.0,
                             report_to="none", use_cpu=True, save_strategy="no", logging_steps=1,
                             disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[gradient_guard(writer)]).train()
    writer.close()
    assert torch.isfinite(model.linear.weight).all() and not torch.equal(model.linear.weight, before)
    [record] = [r for r in _records(tmp_path) if r["kind"] == GUARD_RECORD]  # found before clipping
    assert (record["step"], record["nonfinite_microbatch"], record["nonfinite_tensors"]) == (1, 1, 1)


def _checkpoint(directory: Path, step: int, value: float) -> Path:
    folder = directory / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    save_file({"lora_A": torch.full((2, 2), value), "steps": torch.tensor([step])},
              str(folder / "adapter_model.safetensors"))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def test_a_checkpoint_with_a_nan_weight_is_not_finite_and_one_without_weights_is(tmp_path):
    assert not weights_finite(_checkpoint(tmp_path, 10, float("nan")))
    assert weights_finite(_checkpoint(tmp_path, 8, 0.5))
    (tmp_path / "checkpoint-2").mkdir()
    assert weights_finite(tmp_path / "checkpoint-2")


def test_the_last_checkpoint_is_the_newest_with_finite_weights(tmp_path, capsys):
    for step, value in ((2, 0.1), (8, 0.5), (10, float("nan"))):
        _checkpoint(tmp_path, step, value)
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-8")
    assert "checkpoint-10 holds non-finite weights" in capsys.readouterr().err


def test_no_checkpoint_is_left_when_every_one_is_non_finite(tmp_path):
    _checkpoint(tmp_path, 10, float("inf"))
    assert last_checkpoint(tmp_path) is None
