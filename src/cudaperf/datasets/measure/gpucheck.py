"""A first GPU check of generated implementations (for the lead's GPU batch, not the measurement):
run one implementation on one configuration and seed, compare it with the reference, and time it
with CUDA events (median of a few calls). Generated implementations are our own trusted code, so they
run in this process; model candidates never do (they go through the evaluator's sandboxed workers).

C tasks: inputs from `ctask.make_inputs`, reference from the serial C (`cref`), `out` arrays pre-filled
with a sentinel. PyTorch tasks: `Model` and `ModelNew` built after the same seed, inputs on the GPU.

Not covered: the resumable measurement with L2 flushes, interleaving and baselines (`dataset measure`,
a later GPU session), anti-cheat.
"""

from __future__ import annotations

import statistics
import types
from dataclasses import dataclass

import numpy as np

from cudaperf.datasets.records import GeneratedTask, Implementation
from cudaperf.types import TaskKind


@dataclass(frozen=True)
class ImplCheck:
    impl_id: str
    config: str
    correct: bool
    max_abs_error: float | None = None
    median_ms: float | None = None
    message: str = ""


def load_generated(source: str, name: str) -> types.ModuleType:
    """A generated implementation's source run as module `name` in this process (trusted code only)."""
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - our own generated, trusted code
    return module


def _time_ms(fn, reps: int = 5) -> float:
    import torch

    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def check_c(task: GeneratedTask, impl: Implementation, config: str, seed: int = 0) -> ImplCheck:
    import torch

    from cudaperf.tasks import cref
    from cudaperf.tasks.ctask import from_json, make_inputs

    ctask = from_json(task.text)
    cfg = ctask.config(config)
    values = make_inputs(ctask, cfg, seed)
    ref = cref.run_reference(ctask, cfg, seed, values=cref.copy_values(values))
    if not ref.ok:
        return ImplCheck(impl.impl_id, config, False, message=ref.message)
    dev = {}
    for p in ctask.params:
        v = values[p.name]
        if p.is_array:
            t = torch.from_numpy(v).cuda()
            if p.kind.value == "out":
                t.fill_(float("nan") if t.is_floating_point() else 0xAB)  # a sentinel, not zeros
            dev[p.name] = t
        else:
            dev[p.name] = v
    fn = getattr(load_generated(impl.source, impl.impl_id.replace("/", "_")), ctask.entry)
    fn(**dev)
    torch.cuda.synchronize()
    tol = ctask.tolerance_for(cfg)
    worst = 0.0
    for p in ctask.outputs:
        got, want = dev[p.name].cpu().numpy().astype(np.float64), ref.outputs[p.name].astype(np.float64)
        if not np.allclose(got, want, atol=tol.atol, rtol=tol.rtol, equal_nan=False):
            return ImplCheck(impl.impl_id, config, False, float(np.nanmax(np.abs(got - want))),
                             message=f"{p.name} differs")
        worst = max(worst, float(np.max(np.abs(got - want))) if got.size else 0.0)
    # inout arrays are overwritten by each call: the timing uses the state after the check (same work)
    return ImplCheck(impl.impl_id, config, True, worst, _time_ms(lambda: fn(**dev)))


def check_torch(task: GeneratedTask, impl: Implementation, config: str, seed: int = 0) -> ImplCheck:
    import torch

    from cudaperf.tasks import runtime, task_from_source

    record = task_from_source(task.text, task.task_id)
    # TF32 off in the reference unless the task allows it (cuDNN enables it by default: docs/evaluation.md).
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = record.allow_tf32
    module = runtime.load_module(record)
    cfg = next(c for c in record.configs if c.name == config)
    init = runtime.make_init_inputs(module, cfg)
    torch.manual_seed(seed)
    model = module.Model(*init).cuda().eval()
    torch.manual_seed(seed)
    new = load_generated(impl.source, impl.impl_id.replace("/", "_")).ModelNew(*init).cuda().eval()
    inputs = runtime.make_inputs(module, cfg, seed, "cuda")
    with torch.no_grad():
        want, got = model(*inputs), new(*inputs)
    torch.cuda.synchronize()
    tol = record.tolerances.get("float32")
    atol, rtol = (tol.atol, tol.rtol) if tol else (1e-4, 1e-4)
    err = float((got.double() - want.double()).abs().max()) if want.numel() else 0.0
    if got.shape != want.shape or not torch.allclose(got, want, atol=atol, rtol=rtol):
        return ImplCheck(impl.impl_id, config, False, err, message=f"shape {tuple(got.shape)} "
                                                                   f"vs {tuple(want.shape)}")
    with torch.no_grad():
        return ImplCheck(impl.impl_id, config, True, err, _time_ms(lambda: new(*inputs)))


def check(task: GeneratedTask, impl: Implementation, config: str, seed: int = 0) -> ImplCheck:
    try:
        return (check_c if task.kind is TaskKind.C else check_torch)(task, impl, config, seed)
    except Exception as exc:  # noqa: BLE001 - a broken implementation is a finding, reported as a value
        return ImplCheck(impl.impl_id, config, False, message=f"{type(exc).__name__}: {exc}"[:800])
