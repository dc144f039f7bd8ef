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


def test_warnings_raised_as_errors_by_a_job_are_warnings_again_after_the_restore():
    saved = guards.process_registries()
    warnings.defaultaction = "error"
    guards.restore_process_registries(saved)
    assert warnings.defaultaction == saved["warnings.defaultaction"]


def test_numpy_error_handling_and_print_options_come_back():
    import numpy as np

    saved = guards.process_registries()
    np.seterr(all="raise")
    np.set_printoptions(precision=2)
    torch.set_printoptions(precision=1)
    guards.restore_process_registries(saved)
    assert np.geterr() == saved["numpy error state"]
    assert np.get_printoptions()["precision"] == saved["numpy print options"]["precision"]
    assert torch._tensor_str.PRINT_OPTS.precision == saved["torch print options"]["precision"]


def test_a_worker_holding_most_of_its_address_space_limit_is_to_be_replaced():
    with open("/proc/self/status") as status:
        size = next(int(line.split()[1]) for line in status if line.startswith("VmSize:")) * 1024
    assert "replaced" in guards.address_space_held(limit_bytes=size)
    assert guards.address_space_held(limit_bytes=4 * size) == ""


def test_a_harness_error_in_a_job_that_held_the_worker_s_memory_is_the_candidate_s():
    from cudaperf.execute.child import _blame_held_memory

    held = {"flags": [{"code": "worker_memory_held", "message": "", "severity": "warning"}]}
    blamed = _blame_held_memory({"outcome": "harness_error", "message": "can't allocate memory"}, held)
    assert blamed["outcome"] == "out_of_memory" and "can't allocate memory" in blamed["message"]
    assert _blame_held_memory({"outcome": "harness_error"}, {"flags": []})["outcome"] == "harness_error"
    assert _blame_held_memory({"outcome": None}, held)["outcome"] is None
