"""scripts/generation_profile.py: a step's time is the long run less the short one, per extra token."""

from __future__ import annotations

import pytest
from script_module import load_script

gp = load_script("generation_profile")


def test_prefill_cancels_out_of_the_time_a_step():
    assert gp.per_step_ms(lambda n: 2.0 + 0.01 * n, 16, 128) == pytest.approx(10.0)
