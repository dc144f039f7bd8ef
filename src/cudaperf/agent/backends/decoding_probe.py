"""Where the decoding steps of one real `generate` call go: every step's wall time and a profile of a few
steps, measured inside the run that pays for them (the RL rollouts, the comparison), not in a replica.

`DecodingProbe` is a logits processor, so `generate` calls it once per decoding step, after the step's
forward pass and before sampling: it records the host clock there and advances a `torch.profiler`
schedule that profiles `active_steps` steps after `skip_steps`. On a GPU it waits for the device first
(`generate` does so every step anyway; `step_decoder`'s graph loop only every few, so without the wait its
clocks read the host's launches: 1.4-2.3 ms "steps" of 9.5 ms ones in session 33), so consecutive host
clocks are the steps' real durations; the steps around the profiled ones (the profiler's start and stop)
are left out of them.
`DecodingReport` (pure) holds what one call measured and renders it as text: the conditions (rows, prompt
widths, padding, new tokens), the step times at the start, middle and end of the call, and the profiled
steps' operators with the most host and device time.

`write_report` writes a probe's report and prints one line; it never raises into the generation it
measured. `probing` puts the two around one `generate` call (or nothing, without a path). Used by the RL
rollouts' sampler (`train.rollout.ModelGenerator`, `RlConfig.profile_decoding`) and the local backend
(`hf_local.HFLocalBackend.probe_to`, `CompareConfig.profile_decoding`).

Covers: one `generate` call, CPU or CUDA (device times only where the profiler sees a device); a profiler
that fails to start or step ends the profile (the report says why) and never the generation.
Not covered: several calls (the rollout probes its first only), the prefill (before the first step),
anything outside `generate`.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DECODING_PROBE_FILE = "decoding_probe.txt"  # its name in a run's output folder
# The profiler's own row per profiled step: its "device time" is the span of the step's kernels' stream
# activity, not kernel time, so the per-step sums leave it out (the table still shows it).
STEP_MARKER = "ProfilerStep"


@dataclass(frozen=True)
class DecodingReport:
    """What one probed `generate` call measured."""

    device: str
    rows: int
    prompt_tokens: tuple[int, ...]  # each row's prompt length, before left padding
    new_tokens: int  # decoding steps taken (the longest row)
    step_ms: tuple[float, ...]  # host clock between consecutive steps, those near the profiled ones left out
    profiled_steps: int
    host_ms_per_profiled_step: float | None
    device_ms_per_profiled_step: float | None
    table: str  # the profiler's operator table, or why there is none

    @property
    def padding_fraction(self) -> float:
        width = max(self.prompt_tokens, default=0)
        return 1.0 - sum(self.prompt_tokens) / (width * self.rows) if width and self.rows else 0.0

    def text(self) -> str:
        lines = [f"device: {self.device}",
                 f"rows: {self.rows}; prompt tokens min {min(self.prompt_tokens, default=0)}, "
                 f"max {max(self.prompt_tokens, default=0)}; left padding {self.padding_fraction:.1%} of "
                 f"the prompt batch; new tokens: {self.new_tokens}"]
        for name, part in _thirds(self.step_ms):
            if part:
                lines.append(f"decoding step, {name} ({len(part)} steps): median "
                             f"{statistics.median(part):.2f} ms, min {min(part):.2f}, max {max(part):.2f}")
        lines.append(f"profiled steps: {self.profiled_steps}; per step: host "
                     f"{_ms(self.host_ms_per_profiled_step)}, device {_ms(self.device_ms_per_profiled_step)}")
        return "\n".join(lines) + "\n\n" + self.table + "\n"


def _thirds(values: Sequence[float]) -> list[tuple[str, Sequence[float]]]:
    """The steps after the first in three equal parts (the first step still holds one-off work)."""
    rest = list(values[1:])
    third = len(rest) // 3
    if third == 0:
        return [("all", rest)]
    return [("first third", rest[:third]), ("middle third", rest[third:2 * third]),
            ("last third", rest[2 * third:])]


def _ms(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.2f} ms"


@dataclass
class DecodingProbe:
    """A logits processor that times every decoding step and profiles `active_steps` of them after
    `skip_steps` (use as a context manager around the `generate` call; `report()` after it)."""

    device: str
    prompt_tokens: Sequence[int]
    skip_steps: int = 16
    active_steps: int = 8
    _clock: list[float] = field(default_factory=list)
    _profiler: Any = None
    _events: Any = None
    _failed: str = ""  # why the profiler stopped, when it did: the call it watches goes on regardless

    def __enter__(self) -> "DecodingProbe":
        import torch

        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.startswith("cuda"):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        # One warm-up step between the skipped and the recorded ones (the profiler's own start-up cost).
        schedule = torch.profiler.schedule(wait=max(0, self.skip_steps - 1), warmup=1,
                                           active=self.active_steps, repeat=1)
        self._guard(lambda: self._start(activities, schedule))
        return self

    def _start(self, activities: list[Any], schedule: Any) -> None:
        import torch

        self._profiler = torch.profiler.profile(activities=activities, schedule=schedule,
                                                on_trace_ready=self._keep)
        self._profiler.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._profiler is not None:
            self._guard(lambda: self._profiler.__exit__(None, None, None))

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if getattr(scores, "is_cuda", False):
            # `generate` waits for the device every step, the graph loop (`step_decoder`) every few: wait
            # here, so that the clock reads each step's real duration in both
            import torch

            torch.cuda.synchronize(scores.device)
        self._clock.append(time.perf_counter())
        if self._profiler is not None and not self._failed:
            self._guard(self._profiler.step)
        return scores

    def _guard(self, action: Any) -> None:
        """Run a profiler action; a failure stops the profile, never the generation (a probe rides along
        a training run's real rollout)."""
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - whatever the profiler raises, generation must go on
            self._failed = self._failed or f"{type(exc).__name__}: {exc}"[:300]
            self._events = None

    def _keep(self, profiler: Any) -> None:
        self._events = profiler.key_averages()

    def report(self) -> DecodingReport:
        window = range(self.skip_steps - 2, self.skip_steps + self.active_steps + 2)  # under the profiler
        steps = tuple((b - a) * 1e3 for i, (a, b) in enumerate(zip(self._clock, self._clock[1:]))
                      if i not in window)
        if self._failed or self._events is None or len(self._clock) < self.skip_steps + self.active_steps:
            # (a call that ends inside the profiled window hands the profiler a part of it at its exit)
            why = (f"the profiler failed: {self._failed}" if self._failed else
                   f"the call ended after {len(self._clock)} steps, before the "
                   f"{self.skip_steps + self.active_steps} the profile needs")
            return DecodingReport(self.device, len(self.prompt_tokens), tuple(self.prompt_tokens),
                                  len(self._clock), steps, 0, None, None, f"(no profile: {why})")
        operators = [e for e in self._events if not str(e.key).startswith(STEP_MARKER)]
        host_us = sum(e.self_cpu_time_total for e in operators)
        device_us = sum(_device_us(e) for e in operators)
        sort = "self_device_time_total" if device_us else "self_cpu_time_total"
        return DecodingReport(self.device, len(self.prompt_tokens), tuple(self.prompt_tokens),
                              len(self._clock), steps, self.active_steps, host_us / 1e3 / self.active_steps,
                              device_us / 1e3 / self.active_steps if device_us else None,
                              self._events.table(sort_by=sort, row_limit=25))


def write_report(probe: DecodingProbe, path: str | Path) -> None:
    """The probe's report to `path` and a line on stdout; a failure is printed, never raised (a
    measurement riding along a run must not cost it)."""
    path = Path(path)
    try:
        report = probe.report()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report.text())
    except Exception as exc:  # noqa: BLE001 - see the docstring
        print(f"decoding probe failed: {type(exc).__name__}: {exc}", flush=True)
        return
    steps = report.step_ms[1:]
    median = f"{statistics.median(steps):.1f} ms" if steps else "no steps"
    print(f"decoding probe: {report.rows} rows, {report.new_tokens} steps, median step {median} ({path})",
          flush=True)


@contextlib.contextmanager
def probing(path: str | None, device: str, prompt_tokens: Sequence[int],
            generate_kwargs: dict[str, Any]) -> Iterator[None]:
    """Around one `generate` call: with `path`, a `DecodingProbe` among the call's logits processors
    (`generate_kwargs["logits_processor"]`, made when absent) and its report written to `path` once the
    call has returned; without, nothing."""
    if path is None:
        yield
        return
    from transformers import LogitsProcessorList

    probe = DecodingProbe(device, list(prompt_tokens))
    generate_kwargs.setdefault("logits_processor", LogitsProcessorList()).append(probe)
    with probe:
        yield
    write_report(probe, path)


def _device_us(event: Any) -> float:
    """An operator's own device time (the attribute's name changed across torch versions)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


__all__ = ["DECODING_PROBE_FILE", "DecodingProbe", "DecodingReport", "probing", "write_report"]
