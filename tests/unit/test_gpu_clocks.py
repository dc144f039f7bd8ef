"""gpu_clocks: parsing nvidia-smi's csv, summarising a window, and the monitor's process handling.

The monitor tests put a stand-in `nvidia-smi` script first on PATH (no GPU or driver on the CPU machine);
the real tool is exercised by benchmarks/repeatability.py on the GPU machine.
"""

from __future__ import annotations

import os
import stat
import time
from datetime import datetime

import pytest

from cudaperf import gpu_clocks
from cudaperf.gpu_clocks import ClockMonitor, decode_reasons, parse_line, parse_samples, summarise


def _line(t: str, sm: str = "1980", reasons: str = "0x0000000000000000", power: str = "350.5") -> str:
    return f"{t}, {sm}, 2619, {power}, 41, 100, {reasons}\n"


def test_a_line_gives_every_field_and_the_time():
    sample = parse_line(_line("2026/12/03 06:59:56.250", reasons="0x0000000000000004"))
    assert sample is not None
    assert (sample.sm_mhz, sample.mem_mhz, sample.power_w, sample.temperature_c, sample.utilization_pct,
            sample.reasons) == (1980.0, 2619.0, 350.5, 41.0, 100.0, 4)
    assert sample.t_s == pytest.approx(datetime(2026, 12, 3, 6, 59, 56, 250000).timestamp())


def test_not_available_values_become_none():
    sample = parse_line(_line("2026/12/03 06:59:56.250", power="[N/A]"))
    assert sample is not None and sample.power_w is None


def test_headers_and_error_lines_are_dropped():
    lines = ["timestamp, clocks.sm [MHz], ...\n", "Failed to initialize NVML: Unknown Error\n",
             _line("2026/12/03 06:59:56.250")]
    assert len(parse_samples(lines)) == 1


def test_reasons_decode_to_nvml_names():
    assert decode_reasons(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")


def test_unknown_reason_bits_are_kept_as_hex():
    assert decode_reasons(0x1000) == ("0x1000",)


def test_a_summary_covers_only_its_window():
    samples = parse_samples([_line("2026/12/03 07:00:00.000", sm="1980"),
                             _line("2026/12/03 07:00:01.000", sm="1755"),
                             _line("2026/12/03 07:00:02.000", sm="1600")])
    t1 = datetime(2026, 12, 3, 7, 0, 1).timestamp()
    summary = summarise(samples, t1 - 0.5, t1 + 1.5)
    assert (summary.n_samples, summary.sm_mhz_min, summary.sm_mhz_max) == (2, 1600.0, 1755.0)


def test_a_summary_leaves_out_the_idle_reason():
    samples = parse_samples([_line("2026/12/03 07:00:00.000", reasons="0x1"),
                             _line("2026/12/03 07:00:01.000", reasons="0x4")])
    assert summarise(samples).reasons == ("sw_power_cap",)


def test_an_empty_window_says_so():
    assert summarise([]).describe() == "no clock samples"


def _fake_smi(tmp_path, body: str) -> None:
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_the_monitor_collects_samples_from_a_running_tool(fake_path):
    _fake_smi(fake_path, 'case "$1" in --help-query-gpu) echo "clocks_event_reasons.active"; exit 0;; esac\n'
                         'while true; do echo "$(date "+%Y/%m/%d %H:%M:%S.%N" | cut -c1-23), '
                         '1980, 2619, 300, 40, 99, 0x4"; sleep 0.05; done\n')
    with ClockMonitor(interval_ms=50) as monitor:
        start = time.time()
        time.sleep(0.5)
        end = time.time()
    summary = monitor.summary(start, end)
    assert monitor.available and summary.n_samples >= 3 and summary.reasons == ("sw_power_cap",)


def test_without_the_tool_the_monitor_is_unavailable_and_summaries_are_empty(monkeypatch):
    monkeypatch.setattr(gpu_clocks.shutil, "which", lambda name: None)
    with ClockMonitor() as monitor:
        pass
    assert not monitor.available and "not found" in monitor.error and monitor.summary().n_samples == 0


def test_a_tool_that_fails_at_once_leaves_an_error_not_an_exception(fake_path):
    _fake_smi(fake_path, 'echo "NVIDIA-SMI has failed"; exit 9\n')
    with ClockMonitor() as monitor:
        time.sleep(0.2)
    assert monitor.summary().n_samples == 0 and "no samples" in monitor.error


def test_the_command_summarises_a_gzipped_log(tmp_path, capsys):
    import gzip

    log = tmp_path / "clocks.csv.gz"
    with gzip.open(log, "wt") as f:
        f.write("timestamp, clocks.sm [MHz], clocks.mem [MHz], power.draw [W], ...\n")
        f.writelines(_line(f"2026/12/03 07:00:0{i}.000", sm=str(1900 + 10 * i)) for i in range(3))
    gpu_clocks.main([str(log)])
    assert "SM 1910 MHz (1900-1920)" in capsys.readouterr().out


def test_the_log_command_leaves_a_file_the_summary_reads(fake_path, tmp_path):
    import subprocess
    import sys

    _fake_smi(fake_path, 'case "$1" in --help-query-gpu) echo "clocks_event_reasons.active"; exit 0;; esac\n'
                         'while true; do echo "$(date "+%Y/%m/%d %H:%M:%S.%N" | cut -c1-23), '
                         '1755, 2619, 300, 40, 99, 0x0"; sleep 0.05; done\n')
    log = tmp_path / "clocks.csv"
    proc = subprocess.Popen([sys.executable, "-m", "cudaperf.gpu_clocks", "--log", str(log),
                             "--interval-ms", "50"])
    time.sleep(1.0)
    proc.terminate()
    proc.wait(timeout=10)
    assert summarise(parse_samples(log.read_text().splitlines())).sm_mhz_median == 1755.0


def test_the_log_command_without_the_tool_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_clocks.shutil, "which", lambda name: None)
    assert gpu_clocks.main(["--log", str(tmp_path / "clocks.csv")]) == 0
    assert not (tmp_path / "clocks.csv").exists()
