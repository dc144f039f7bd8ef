"""Process-wide lists a job could keep state in are put back after it (`restore_process_registries`)."""

from __future__ import annotations

import warnings

import torch

from cudaperf.execute import guards


class _Box:
    pass


def test_a_filter_added_by_a_job_is_gone_after_the_restore():
    saved = guards.process_registries()
    warnings.filters.append(("kept", None, int, {}, 0))
    guards.restore_process_registries(saved)
    assert not any(f[0] == "kept" for f in warnings.filters)


def test_a_safe_global_added_by_a_job_is_gone_after_the_restore():
    saved = guards.process_registries()
    torch.serialization.add_safe_globals([(_Box, "kept")])
    guards.restore_process_registries(saved)
    assert (_Box, "kept") not in torch.serialization.get_safe_globals()


def test_the_worker_s_own_entries_stay():
    warnings.filterwarnings("ignore", message="the worker's own")
    saved = guards.process_registries()
    guards.restore_process_registries(saved)
    assert any(f[1] is not None and f[1].pattern == "the worker's own" for f in warnings.filters)
