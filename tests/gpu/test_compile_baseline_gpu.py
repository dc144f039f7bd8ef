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


def _model() -> torch.nn.Module:
    # a matmul, a reduction (Triton may autotune it at its first launch) and elementwise ops
    return torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.LayerNorm(512)).cuda().eval()


def test_every_kernel_of_the_compile_and_first_run_falls_inside_the_hold():
    """Profiles the compile and the first run: every GPU kernel, copy and memset starts and ends inside the
    `hold` range (prints the counts)."""
    model, x = _model(), torch.randn(1000, 512, device="cuda")
    torch.cuda.synchronize()
    entered = []

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
    events = prof.events()
    spans = [e.time_range for e in events if e.name == "first_run_hold" and
             not str(getattr(e, "device_type", "")).endswith("CUDA")]
    gpu = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")
           and not getattr(e, "is_user_annotation", False)]
    outside = [e.name for e in gpu if not any(s.start <= e.time_range.start and e.time_range.end <= s.end
                                               for s in spans)]
    print(f"{len(gpu)} GPU activities, {len(spans)} hold span(s), {len(outside)} outside")
    assert entered == [True] and spans and gpu
    assert outside == [], outside[:10]
    torch.testing.assert_close(out, model(x), rtol=1e-3, atol=1e-3)


def test_later_calls_do_not_enter_the_hold():
    model, x = _model(), torch.randn(64, 512, device="cuda")
    entered = []
    compiled = compile_baseline(model, first_run_hold=lambda: _counting(entered), dynamic=False)
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
    assert entered == [True]


@contextlib.contextmanager
def _counting(entered: list):
    entered.append(True)
    yield
