"""`execute.session.Guards.put_back`: trusted functions a candidate replaced are flagged and put back at
once, inside a window too (an unseen input set drawn between timed rounds draws with the real ones)."""

from __future__ import annotations

import torch

from cudaperf.anticheat.policy import Policy
from cudaperf.execute.session import Guards


def _started() -> Guards:
    guards = Guards(Policy())
    guards.start()
    return guards


def test_a_replaced_trusted_function_is_flagged_and_put_back(monkeypatch):
    guards, real = _started(), torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, **k: torch.zeros(*a))
    flags = guards.put_back("large")
    assert [(f.code, f.config) for f in flags] == [("monkey_patch", "large")]
    assert torch.randn is real


def test_nothing_replaced_gives_no_flag():
    assert _started().put_back(None) == []
