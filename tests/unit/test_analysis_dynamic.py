"""The dynamic stage's plumbing on the CPU machine: no ncu means diagnostics, never an exception."""

from __future__ import annotations

from cudaperf.analysis.dynamic import _base, largest_config, profile_features
from cudaperf.types import InputConfig, KernelFeatures, Solution, SolutionFormat, Task, TaskKind


def _task() -> Task:
    return Task("t", TaskKind.PYTORCH, "",
                (InputConfig("small", {"n": 10}), InputConfig("big", {"n": 10**6})))


def test_largest_config_is_the_one_with_the_largest_sizes():
    assert largest_config(_task()) == "big"


def test_kernel_names_from_ncu_and_nvrtc_meet_on_the_base_name():
    assert _base("void axpy<float, 256>(float*, int)") == "axpy"
    assert _base("ns::k") == "k" and _base("relu_forward") == "relu_forward"


def test_without_ncu_the_static_features_stand_with_a_reason(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    feats = (KernelFeatures(kernel="k"),)
    sol = Solution("s", "", SolutionFormat.FAST)
    out, notes = profile_features(_task(), sol, feats, timeout_s=5)
    assert out == feats and notes and "ncu" in notes[0]
