"""Runtime anti-cheat guards on the CPU: the aten-op monitor, the process watch, function identities and
the precision-flag guard, each exercised by a small pure-torch "candidate"."""

from __future__ import annotations

import sys
import threading
import time

import pytest
import torch
from torch import nn

from cudaperf.anticheat import runtime
from cudaperf.anticheat.policy import Policy
from cudaperf.types import Severity


class _Honest(nn.Module):
    """Allocation, views and shape queries only (what a kernel-launching forward does around its launch)."""

    def forward(self, x):
        x = x.contiguous().view(-1, x.shape[-1])
        out = torch.empty_like(x)
        acc = x.new_zeros(x.shape[0])
        assert out.numel() == x.numel() and acc.dim() == 1
        return out.view(x.shape)


class _Matmul(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


class _Operators(nn.Module):
    def forward(self, x):
        return (x + 1).relu()


def _monitored(model, *inputs, policy=None):
    with runtime.TorchOpMonitor(policy or Policy()) as monitor:
        model(*inputs)
    return monitor


def test_monitor_allows_allocation_views_and_queries():
    monitor = _monitored(_Honest(), torch.randn(4, 8))
    assert monitor.flags() == () and monitor.compute_ops == {}


def test_monitor_flags_matmul():
    (flag,) = _monitored(_Matmul(), torch.randn(4, 8), torch.randn(8, 3)).flags()
    assert flag.code == "torch_compute_op" and flag.severity is Severity.ERROR and "mm" in flag.message


def test_monitor_flags_operators_and_tensor_methods():
    monitor = _monitored(_Operators(), torch.randn(16))
    assert set(monitor.compute_ops) == {"add", "relu"}


def test_monitor_flags_copies():
    monitor = _monitored(lambda x: (x.clone(), x.half(), x.t().contiguous()), torch.randn(4, 4))
    assert {"clone", "_to_copy"} <= set(monitor.compute_ops)


def test_monitor_allows_upload_of_host_constants():
    monitor = _monitored(lambda: torch.tensor([1.0, 2.0]).to("meta"))
    assert monitor.compute_ops == {}


def test_monitor_flags_host_reads():
    monitor = _monitored(lambda x: x.sum().item(), torch.randn(4))
    assert "_local_scalar_dense" in monitor.compute_ops


def test_monitor_silent_when_torch_ops_allowed():
    assert _monitored(_Matmul(), torch.randn(2, 2), torch.randn(2, 2),
                      policy=Policy(allow_torch_ops=True)).flags() == ()


def test_monitor_counts_every_op():
    monitor = _monitored(_Operators(), torch.randn(3))
    assert monitor.ops["add"] == 1 and monitor.ops["relu"] == 1


# -- process watch ------------------------------------------------------------------------------------


def test_watch_flags_a_thread_left_running():
    stop = threading.Event()
    with runtime.ProcessWatch() as watch:
        threading.Thread(target=stop.wait, daemon=True).start()
    stop.set()
    assert [f.code for f in watch.flags()] == ["thread_created"]


def test_watch_ignores_harness_threads():
    stop = threading.Event()
    with runtime.ProcessWatch() as watch:
        threading.Thread(target=stop.wait, name="cudaperf-heartbeat", daemon=True).start()
    stop.set()
    assert watch.flags() == ()


def test_watch_quiet_without_threads():
    with runtime.ProcessWatch() as watch:
        _Honest()(torch.randn(2, 3))
    assert [f for f in watch.flags() if f.severity is Severity.ERROR] == []


def test_watch_accumulates_over_windows():
    stop = threading.Event()
    watch = runtime.ProcessWatch()
    with watch:
        pass
    with watch:
        threading.Thread(target=stop.wait, daemon=True).start()
    stop.set()
    assert [f.code for f in watch.flags()] == ["thread_created"]


# -- identities ---------------------------------------------------------------------------------------


@pytest.fixture
def snapshot():
    snap = runtime.identity_snapshot()
    yield snap
    runtime.restore_identities(snap)


def test_identity_unchanged_gives_no_flag(snapshot):
    assert runtime.identity_changed(snapshot) == ()


def test_identity_detects_patched_allclose(snapshot):
    torch.allclose = lambda *a, **k: True
    (flag,) = runtime.identity_changed(snapshot)
    assert flag.code == "monkey_patch" and "torch.allclose" in flag.message


def test_identity_detects_patched_event_timer_and_clock(snapshot):
    torch.cuda.Event.elapsed_time = lambda self, end: 0.001
    time.perf_counter = lambda: 0.0
    assert {"torch.cuda.Event.elapsed_time", "time.perf_counter"} <= set(runtime.changed_identities(snapshot))


def test_identity_detects_tensor_eq_patch(snapshot):
    torch.Tensor.__eq__ = lambda self, other: True
    assert "torch.Tensor.__eq__" in runtime.changed_identities(snapshot)


def test_identity_detects_replaced_module(snapshot):
    sys.modules["json"] = type(sys)("json")
    assert "sys.modules['json']" in runtime.changed_identities(snapshot)


def test_identity_detects_trace_hook(snapshot):
    before = sys.gettrace()  # pytest coverage tools may have one installed
    sys.settrace(lambda *a: None)
    try:
        assert "sys.gettrace()" in runtime.changed_identities(snapshot)
    finally:
        sys.settrace(before)


def test_module_imported_after_the_snapshot_is_not_a_patch(monkeypatch):
    name = "cudaperf_fake_late_module"
    monkeypatch.setattr(runtime, "_CRITICAL_MODULES", (*runtime._CRITICAL_MODULES, name))
    snap = runtime.identity_snapshot()
    monkeypatch.setitem(sys.modules, name, type(sys)(name))
    assert f"sys.modules[{name!r}]" not in runtime.changed_identities(snap)


def test_restore_puts_everything_back(snapshot):
    original = torch.allclose
    torch.allclose = lambda *a, **k: True
    torch.Tensor.__eq__ = lambda self, other: True
    assert runtime.restore_identities(snapshot) == ()
    assert torch.allclose is original and runtime.changed_identities(snapshot) == ()


def test_extra_paths_are_watched():
    snap = runtime.identity_snapshot(extra=("cudaperf.anticheat.static.check_source",))
    from cudaperf.anticheat import static

    original = static.check_source
    static.check_source = lambda *a, **k: ()
    try:
        assert "cudaperf.anticheat.static.check_source" in runtime.changed_identities(snap)
    finally:
        static.check_source = original


def _slow_others(module, args):
    """A global pre-hook: every module's call (a baseline's too) does extra work first."""
    torch.mm(torch.ones(4, 4), torch.ones(4, 4))


def test_a_global_module_hook_is_a_change(snapshot):
    from torch.nn.modules.module import register_module_forward_pre_hook

    register_module_forward_pre_hook(_slow_others)
    assert "torch.nn.modules.module._global_forward_pre_hooks" in runtime.changed_identities(snapshot)


def test_restore_removes_a_global_module_hook(snapshot):
    from torch.nn.modules import module as module_hooks

    calls = []
    module_hooks.register_module_forward_hook(lambda m, args, out: calls.append(m))
    runtime.restore_identities(snapshot)
    nn.Identity()(torch.ones(1))
    assert calls == [] and runtime.changed_identities(snapshot) == ()


def test_a_dispatch_mode_left_pushed_is_a_change_and_popped_by_restore(snapshot):
    from torch.utils._python_dispatch import TorchDispatchMode

    TorchDispatchMode().__enter__()  # entered, never left: it would see every later op of the harness
    assert "torch dispatch modes" in runtime.changed_identities(snapshot)
    assert runtime.restore_identities(snapshot) == ()


# -- precision flags ----------------------------------------------------------------------------------


@pytest.fixture
def precision_state():
    state = runtime.read_precision_state()
    yield state
    runtime.restore_precision_state(state)


def test_guard_quiet_when_nothing_changes(precision_state):
    with runtime.TF32Guard() as guard:
        torch.randn(3)
    assert guard.flags() == ()


def test_guard_flags_and_restores_legacy_tf32(precision_state):
    with runtime.TF32Guard() as guard:
        torch.backends.cuda.matmul.allow_tf32 = True
    (flag,) = guard.flags()
    assert flag.code == "precision_flags_changed" and "allow_tf32" in flag.message
    assert torch.backends.cuda.matmul.allow_tf32 is False and guard.not_restored == ()


def test_guard_restores_matmul_precision(precision_state):
    with runtime.TF32Guard() as guard:
        torch.set_float32_matmul_precision("medium")
    assert guard.flags() and torch.get_float32_matmul_precision() == precision_state[
        "torch.get_float32_matmul_precision()"]


def test_guard_restores_new_fp32_precision_api(precision_state):
    if not hasattr(torch.backends, "fp32_precision"):
        pytest.skip("this torch has no fp32_precision API")
    with runtime.TF32Guard() as guard:
        torch.backends.fp32_precision = "tf32"
    assert guard.flags() and guard.not_restored == ()
    assert runtime.read_precision_state() == precision_state


def test_guard_restores_default_dtype(precision_state):
    with runtime.TF32Guard() as guard:
        torch.set_default_dtype(torch.float64)
    assert guard.flags() and torch.get_default_dtype() is torch.float32


# -- process-wide runtime settings ---------------------------------------------------------------------


def test_guard_flags_and_restores_the_thread_count():
    before = torch.get_num_threads()
    with runtime.TF32Guard() as guard:
        torch.set_num_threads(before + 1)  # the baselines' CPU threads: their speed
    assert [f.code for f in guard.flags()] == ["global_torch_state"] and torch.get_num_threads() == before


def test_guard_flags_and_restores_an_attention_backend():
    before = torch.backends.cuda.flash_sdp_enabled()
    with runtime.TF32Guard() as guard:
        torch.backends.cuda.enable_flash_sdp(not before)
    assert "global_torch_state" in {f.code for f in guard.flags()}
    assert torch.backends.cuda.flash_sdp_enabled() == before


def test_guard_quiet_about_settings_left_alone():
    with runtime.TF32Guard() as guard:
        torch.get_num_threads()
    assert guard.flags() == ()


def test_a_setting_unread_before_the_window_is_not_a_change(monkeypatch):
    calls = iter([None, 0.5])  # unread (CUDA not initialised yet), then read: torch's default
    setting = runtime._Setting("probe", lambda: next(calls), lambda v: None)
    monkeypatch.setattr(runtime, "_global_settings", lambda: [setting])
    with runtime.TF32Guard() as guard:
        pass
    assert guard.flags() == ()


@pytest.mark.parametrize("name, value", [("torch.backends.mkldnn.enabled", False),
                                         ("torch.backends.mkldnn.conv.fp32_precision", "bf16"),
                                         ("torch.backends.cudnn.benchmark", True)])
def test_guard_flags_and_restores_backend_switches(name, value):
    owner_path, _, attr = name.rpartition(".")
    owner = torch
    for part in owner_path.split(".")[1:]:
        owner = getattr(owner, part)
    before = getattr(owner, attr)
    with runtime.TF32Guard() as guard:
        setattr(owner, attr, value)
    assert [f.code for f in guard.flags()] == ["global_torch_state"] and name in guard.flags()[0].message
    assert getattr(owner, attr) == before


def test_guard_flags_and_restores_anomaly_mode():
    with runtime.TF32Guard() as guard:
        torch.set_anomaly_enabled(True)
    assert [f.code for f in guard.flags()] == ["global_torch_state"] and not torch.is_anomaly_enabled()
