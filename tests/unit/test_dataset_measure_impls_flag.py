"""`cudaperf dataset measure --impls-per-task N` reaches `MeasureOptions.impls_per_task`."""

from __future__ import annotations

from cudaperf.cli import build_parser
from cudaperf.commands.dataset_cmd import measure_options


def _options(*flags: str):
    return measure_options(build_parser().parse_args(["dataset", "measure", "out", *flags]))


def test_the_impls_per_task_flag_sets_the_option():
    assert _options("--impls-per-task", "2").impls_per_task == 2


def test_without_the_flag_every_implementation_is_measured():
    assert _options().impls_per_task == 0
