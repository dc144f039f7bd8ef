"""A cached reference model changed by candidate code (a hook, a method on the instance, its mode) is
noticed (`torch_session.module_structure`) and never reused."""

from __future__ import annotations

import torch
from torch import nn

from cudaperf.execute.torch_session import Reference, ReferenceCache, module_structure, structure_intact


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()


def _entry(model: nn.Module) -> Reference:
    return Reference(inputs=[torch.randn(2, 4)], init_inputs=[], model=model, outputs=None, inputs_after=None)


def test_a_forward_pre_hook_changes_the_structure():
    model = _model()
    before = module_structure(model)
    model[0].register_forward_pre_hook(lambda m, args: None)
    assert module_structure(model) != before


def test_a_method_set_on_the_instance_changes_the_structure():
    model = _model()
    before = module_structure(model)
    model[1].forward = lambda x: x
    assert module_structure(model) != before


def test_switching_to_training_mode_changes_the_structure():
    model = _model()
    before = module_structure(model)
    model.train()
    assert module_structure(model) != before


def test_a_forward_leaves_the_structure_as_it_was():
    model = _model()
    before = module_structure(model)
    model(torch.randn(2, 4))
    assert module_structure(model) == before


def test_the_cache_drops_a_reference_whose_model_was_hooked():
    cache, entry = ReferenceCache(), _entry(_model())
    cache.put(("k",), entry, budget_bytes=1 << 30)
    entry.model.register_forward_hook(lambda m, args, out: out)
    assert not structure_intact(entry) and cache.get(("k",)) is None
