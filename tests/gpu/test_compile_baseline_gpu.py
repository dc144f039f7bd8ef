"""GPU property of `cudaperf.timing.compile_baseline(first_run_hold=...)` (marker `gpu`): Inductor's compile
launches no kernel outside the hold, so the dataset measurement may compile without its GPU lock.

Run: `python3 -m pytest -q -s tests/gpu/test_compile_baseline_gpu.py`.
"""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from cudaperf.timing import compile_baseline

pytestmark = [pytest.mark.gpu]


def _model(width: int = 512) -> torch.nn.Module:
    # a matmul, a reduction (Triton may autotune it at its first launch) and elementwise ops
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(),
                               torch.nn.LayerNorm(width)).cuda().eval()


def _outside_the_hold(width: int) -> tuple[list, list[str], int]:
    """Profiles the compile and first run of a fresh model: (hold entries, GPU activities outside the hold,
    GPU activities in all); prints the counts."""
    model, x = _model(width), torch.randn(1000, width, device="cuda")
    torch.cuda.synchronize()
    entered: list = []

    @contextlib.contextmanager
    def hold():
        entered.append(True)
        with torch.profiler.record_function("first_run_hold"):
            yield

    compiled = compile_baseline(model, first_run_hold=hold, dynamic=False)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof, torch.no_grad():
        out = compiled(x)
        torch.cuda.synchronize()
    torch.testing.assert_close(out, model(x), rtol=1e-3, atol=1e-3)
    events = prof.events()
    spans = [e.time_range for e in events if e.name == "first_run_hold" and
             not str(getattr(e, "device_type", "")).endswith("CUDA")]
    gpu = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")
           and not getattr(e, "is_user_annotation", False)]
    outside = [e.name for e in gpu if not any(s.start <= e.time_range.start and e.time_range.end <= s.end
                                               for s in spans)]
    print(f"width {width}: {len(gpu)} GPU activities, {len(spans)} hold span(s), {len(outside)} outside")
    return entered, outside, len(gpu)


def test_every_kernel_copy_and_memset_of_two_compiles_falls_inside_the_hold():
    """Two models compiled in turn (the first may be this process's first compile, held whole for
    Inductor's one-time set-up): every GPU activity of each compile and first run is inside the hold."""
    for width in (512, 384):
        entered, outside, n_gpu = _outside_the_hold(width)
        assert entered and n_gpu and outside == [], (width, outside[:10])


def test_later_calls_do_not_enter_the_hold():
    model, x = _model(), torch.randn(64, 512, device="cuda")
    entered = []
    compiled = compile_baseline(model, first_run_hold=lambda: _counting(entered), dynamic=False)
    with torch.no_grad():
        compiled(x)
        first = len(entered)
        for _ in range(2):
            compiled(x)
    assert first in (1, 2) and len(entered) == first


@contextlib.contextmanager
def _counting(entered: list):
    entered.append(True)
    yield
