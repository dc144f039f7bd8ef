"""The GPU's clocks, power and clock-event reasons, sampled while something is timed.

A kernel's time on an unlocked GPU follows its SM clock, which the driver lowers for power, heat or idleness;
timings taken minutes apart can differ by several percent for that reason alone. This module records the
state beside the timings, so a report can say at what clock a median was measured instead of guessing.

Covers: `parse_samples` (pure: `nvidia-smi --query-gpu ... --format=csv,noheader,nounits` lines into
`ClockSample`s), `summarise` (pure: the samples inside a time window into a `ClockSummary`),
`decode_reasons` (NVML's clock-event bitmask into names), `smi_command` (the one nvidia-smi command line),
`main` (`--log FILE`: nvidia-smi's samples into a file until terminated, as the GPU scripts run it; else a
summary line per such log) and `ClockMonitor` (a thin adapter: a background `nvidia-smi -lms` process;
each line carries nvidia-smi's own timestamp, so output buffered in the pipe is still placed in time
correctly; windows are given in `time.time()` seconds).

Not covered: locking clocks (that changes the machine's settings, which the evaluator never does), other
vendors, per-SM clocks, and anything finer than the sampling interval (100 ms by default): a dip shorter
than that may be missed. nvidia-smi is used, not NVML through a Python binding, because it ships with the
driver on every machine that has one, so no extra dependency is needed.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

# NVML's clocksEventReasons bits (nvml.h), as nvidia-smi prints them in `clocks_event_reasons.active`.
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
FIELDS = ("timestamp", "clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "utilization.gpu")
# Drivers before the rename call the reasons field `clocks_throttle_reasons.active`.
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")


@dataclass(frozen=True)
class ClockSample:
    t_s: float  # nvidia-smi's timestamp, as `time.time()` seconds
    sm_mhz: float | None
    mem_mhz: float | None
    power_w: float | None
    temperature_c: float | None
    utilization_pct: float | None
    reasons: int  # NVML clock-event bitmask; 0 when unknown


@dataclass(frozen=True)
class ClockSummary:
    """The samples of one time window."""

    n_samples: int
    sm_mhz_median: float | None
    sm_mhz_min: float | None
    sm_mhz_max: float | None
    power_w_median: float | None
    temperature_c_max: float | None
    reasons: tuple[str, ...]  # every reason seen in the window except gpu_idle

    def describe(self) -> str:
        if not self.n_samples or self.sm_mhz_median is None:
            return "no clock samples"
        text = f"SM {self.sm_mhz_median:.0f} MHz ({self.sm_mhz_min:.0f}-{self.sm_mhz_max:.0f})"
        if self.power_w_median is not None:
            text += f", {self.power_w_median:.0f} W"
        if self.temperature_c_max is not None:
            text += f", ≤{self.temperature_c_max:.0f} °C"
        return text + (f", {'+'.join(self.reasons)}" if self.reasons else "")


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:  # "[N/A]", "[Not Supported]", empty
        return None


def _reasons(text: str) -> int:
    try:
        return int(text.strip(), 16)
    except ValueError:
        return 0


def _timestamp(text: str) -> float | None:
    """nvidia-smi's local-time stamp ("2026/12/03 06:59:56.123") as `time.time()` seconds."""
    try:
        return datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        return None


def parse_line(line: str) -> ClockSample | None:
    """One csv line (FIELDS then the reasons field, no header, no units) into a sample; None if malformed."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(FIELDS) + 1 or (t_s := _timestamp(parts[0])) is None:
        return None
    sm, mem, power, temp, util = (_number(p) for p in parts[1:6])
    return ClockSample(t_s, sm, mem, power, temp, util, _reasons(parts[6]))


def parse_samples(lines: Sequence[str]) -> list[ClockSample]:
    """nvidia-smi's lines into samples; malformed lines (a header, an error message) are dropped."""
    return [s for line in lines if (s := parse_line(line)) is not None]


def decode_reasons(mask: int) -> tuple[str, ...]:
    """Names of the set bits, lowest first; unknown bits as hex."""
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    unknown = mask & ~sum(REASON_BITS)
    return tuple(names + ([hex(unknown)] if unknown else []))


def summarise(samples: Sequence[ClockSample], start_s: float = float("-inf"),
              end_s: float = float("inf")) -> ClockSummary:
    """The samples with start_s <= t_s <= end_s."""
    window = [s for s in samples if start_s <= s.t_s <= end_s]
    sm = [s.sm_mhz for s in window if s.sm_mhz is not None]
    power = [s.power_w for s in window if s.power_w is not None]
    temps = [s.temperature_c for s in window if s.temperature_c is not None]
    mask = 0
    for s in window:
        mask |= s.reasons
    return ClockSummary(
        n_samples=len(window),
        sm_mhz_median=statistics.median(sm) if sm else None,
        sm_mhz_min=min(sm) if sm else None,
        sm_mhz_max=max(sm) if sm else None,
        power_w_median=statistics.median(power) if power else None,
        temperature_c_max=max(temps) if temps else None,
        reasons=tuple(r for r in decode_reasons(mask) if r != "gpu_idle"),
    )


class ClockMonitor:
    """`with ClockMonitor() as m: ...; m.summary(t0, t1)`. Without nvidia-smi, `available` is False and
    every summary is empty (the reason is in `error`); it never raises for a missing or failing tool."""

    def __init__(self, interval_ms: int = 100, gpu_index: int = 0):
        self.interval_ms, self.gpu_index = interval_ms, gpu_index
        self.lines: list[str] = []
        self.error = ""
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self._proc is not None

    def __enter__(self) -> ClockMonitor:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            self.error = "nvidia-smi not found"
            return self
        self._proc = subprocess.Popen(smi_command(smi, self.interval_ms, self.gpu_index),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, name="cudaperf-clock-monitor", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self.lines.append(line)

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        self._proc.terminate()  # its output is line-buffered where stdbuf exists (smi_command)
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        if not self.samples():
            last = self.lines[-1].strip()[:200] if self.lines else "no output"
            self.error = f"nvidia-smi gave no samples (exit code {self._proc.returncode}; {last})"

    def samples(self) -> list[ClockSample]:
        return parse_samples(list(self.lines))

    def summary(self, start_s: float = float("-inf"), end_s: float = float("inf")) -> ClockSummary:
        """Samples between two `time.time()` readings."""
        return summarise(self.samples(), start_s, end_s)


def smi_command(smi: str, interval_ms: int, gpu_index: int = 0, header: bool = False) -> list[str]:
    """nvidia-smi printing FIELDS and the reasons field every `interval_ms`, line-buffered where coreutils'
    stdbuf exists (so a terminated nvidia-smi leaves no lines stuck in its buffer)."""
    fields = ",".join(FIELDS + (_reason_field(smi),))
    line_buffered = [stdbuf, "-oL"] if (stdbuf := shutil.which("stdbuf")) else []
    return [*line_buffered, smi, f"--id={gpu_index}", f"--query-gpu={fields}",
            "--format=csv,nounits" if header else "--format=csv,noheader,nounits", "-lms", str(interval_ms)]


def log_to(path: str, interval_ms: int = 1000) -> int:
    """Replace this process with nvidia-smi writing a header and a line every `interval_ms` into `path`
    until it is terminated; 0 at once, writing nothing, where there is no nvidia-smi."""
    import os

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    command = smi_command(smi, interval_ms, header=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.execv(command[0], command)


def _reason_field(smi: str) -> str:
    """The clock-event reasons field this driver's nvidia-smi knows."""
    try:
        help_text = subprocess.run([smi, "--help-query-gpu"], capture_output=True, text=True, timeout=30,
                                   check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return REASON_FIELDS[0]
    return next((f for f in REASON_FIELDS if f in help_text), REASON_FIELDS[0])


def main(argv: Sequence[str] | None = None) -> int:
    """`python3 -m cudaperf.gpu_clocks --log FILE [--interval-ms N]`: log the GPU's clocks into FILE until
    terminated (SIGTERM; run it in the background). `python3 -m cudaperf.gpu_clocks FILE [FILE ...]`: one
    summary line per log (plain or gzipped)."""
    import argparse
    import gzip

    parser = argparse.ArgumentParser(description="Log the GPU's clocks (--log) or summarise such logs.")
    parser.add_argument("files", nargs="*")
    parser.add_argument("--log", metavar="FILE", help="write nvidia-smi's samples here until terminated")
    parser.add_argument("--interval-ms", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.log:
        return log_to(args.log, args.interval_ms)
    for name in args.files:
        opener = gzip.open if name.endswith(".gz") else open
        with opener(name, "rt") as f:
            print(f"{name}: {summarise(parse_samples(f.readlines())).describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
