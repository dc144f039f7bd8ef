"""`cudaperf eval` turns its options into the Evaluator's config (no evaluation runs here)."""

from __future__ import annotations

import argparse

import pytest

from cudaperf.commands import eval_cmd


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    eval_cmd.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_timing_protocol_reaches_the_evaluator_config():
    assert eval_cmd._config(_parse("t.py", "s.py", "--timing-protocol", "stream_end")).timing.protocol == "stream_end"


def test_the_default_timing_protocol_is_device_sync():
    assert eval_cmd._config(_parse("t.py", "s.py")).timing.protocol == "device_sync"


def test_an_unknown_timing_protocol_is_a_usage_error():
    with pytest.raises(SystemExit):
        _parse("t.py", "s.py", "--timing-protocol", "fastest")
