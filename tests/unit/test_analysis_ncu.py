"""Nsight Compute: the command line, the raw CSV (hand-written from the documented format), the mapping
to dynamic features, and diagnostics when ncu is absent."""

from __future__ import annotations

import pytest

from cudaperf.analysis import ncu
from cudaperf.types import KernelFeatures

CSV = ('''==PROF== Connected to process 4242 (/usr/bin/python3.12)
some output the profiled script printed
==PROF== Profiling "v_copy": 0%....50%....100% - 13 passes
'''
       '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
       '"Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum",'
       '"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",'
       '"sm__warps_active.avg.pct_of_peak_sustained_active",'
       '"smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",'
       '"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",'
       '"smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",'
       '"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",'
       '"smsp__average_thread_inst_executed_per_inst_executed.ratio"\n'
       '"","","","","","","","","","","","byte","Kbyte","nsecond","sector","%","inst","inst","inst","",'
       '"thread"\n'
       '"0","4242","python3.12","h200","v_copy","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","16,777,216",'
       '"16,384","7,890","4","87.5","0","0","0","0","32"\n'
       '"1","4242","python3.12","h200","v_fma","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","16,777,216",'
       '"16,777.216","100,000","4.01","91.2","1,000","2,000,000","500","n/a","24"\n')


def test_rows_after_the_header_are_parsed_with_units_and_separators():
    rows = ncu.parse_csv(CSV)
    assert [r.kernel for r in rows] == ["v_copy", "v_fma"]
    assert rows[0].metrics["dram__bytes_read.sum"] == 16_777_216
    assert rows[0].metrics["dram__bytes_write.sum"] == 16_384_000  # Kbyte scaled to bytes


def test_not_available_values_are_left_out():
    assert "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum" not in ncu.parse_csv(CSV)[1].metrics


def test_flops_count_fma_twice_and_intensity_divides_by_dram_bytes():
    d = ncu.to_dynamic(ncu.parse_csv(CSV)[1].metrics)
    assert d["flops"] == 1_000 + 500 + 2 * 2_000_000
    assert d["measured_intensity"] == pytest.approx(d["flops"] / (16_777_216 + 16_777_216))


def test_dynamic_features_cover_occupancy_sectors_divergence_and_roofline():
    d = ncu.to_dynamic(ncu.parse_csv(CSV)[0].metrics)
    assert d["achieved_occupancy"] == pytest.approx(0.875)
    assert d["sectors_per_request_ld"] == 4 and d["thread_efficiency"] == 1.0 and d["divergence_ratio"] == 0.0
    assert d["duration_ms"] == pytest.approx(0.00789)
    assert 0 < d["roofline_pct"] < 100  # 16.8 MB in 7.9 us is ~50 % of 4.27 TB/s


def test_with_dynamic_fills_kernel_features():
    f = ncu.with_dynamic(KernelFeatures(kernel="v_fma"), ncu.parse_csv(CSV)[1].metrics)
    assert f.dynamic["thread_efficiency"] == 0.75


def test_reward_keys_are_provided_and_launches_add_up():
    m = ncu.parse_csv(CSV)[1].metrics
    f = ncu.with_dynamic(KernelFeatures(kernel="v_fma"), [m, m])
    assert f.dynamic["launches"] == 2 and f.dynamic["gpu_time_ms"] == pytest.approx(0.2)
    assert 0 <= f.dynamic["roofline_fraction"] <= 1


def test_no_header_means_no_rows():
    assert ncu.parse_csv("==PROF== nothing profiled\n") == []


def test_command_turns_clock_control_off_and_filters_kernels():
    cmd = ncu.ncu_command(["python3", "run.py"], kernels=["a", "b.c"], metrics=["dram__bytes_read.sum"])
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert "regex:^(a|b\\.c)$" in cmd and cmd[-2:] == ["python3", "run.py"]
    assert cmd[cmd.index("--profile-from-start") + 1] == "off"


def test_unverified_metrics_are_dropped_when_the_query_does_not_list_them():
    kept, dropped = ncu.usable_metrics(["dram__bytes_read.sum", "made__up_metric.sum"], {"dram__bytes_read"})
    assert kept == ["dram__bytes_read.sum"] and dropped == ["made__up_metric.sum"]


def test_launch_and_occupancy_metrics_are_kept_though_the_query_omits_them():
    kept, dropped = ncu.usable_metrics(["launch__registers_per_thread",
                                        "sm__maximum_warps_per_active_cycle_pct"], {"dram__bytes_read"})
    assert dropped == [] and len(kept) == 2


def test_a_program_that_fails_under_ncu_shows_its_own_last_lines():
    output = "==PROF== Connected to process 1\nTraceback (most recent call last):\nRuntimeError: boom\n" \
             "==ERROR== The application returned an error code (1)."
    msgs = ncu._diagnose(output, 1, [])
    assert any(m.startswith("program output:") and "RuntimeError: boom" in m for m in msgs)


def test_missing_ncu_is_a_diagnostic(monkeypatch):
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    result = ncu.profile(["python3", "-c", "pass"])
    assert not result.ok and "ncu not found" in result.diagnostics[0]


def test_counter_permission_error_is_explained():
    msgs = ncu._diagnose("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", 1, [])
    assert "cannot read performance counters" in msgs[0]


def test_profile_runs_ncu_through_the_launcher(tmp_path, monkeypatch):
    """A stand-in ncu (it writes the CSV above to --log-file) started by the network-namespace launcher:
    the launcher execs it, and the kernels come back parsed."""
    import stat
    import sys

    (tmp_path / "report.csv").write_text(CSV)
    fake = tmp_path / "ncu"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--log-file" ]; do shift; done\n'
                    f'cp {tmp_path / "report.csv"} "$2"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(ncu, "find_ncu", lambda: str(fake))
    result = ncu.profile(["true"], check_metrics=False, timeout_s=60,
                         launcher=(sys.executable, "-m", "cudaperf.execute.netns_exec"))
    assert result.ok, result.diagnostics
    assert [k.kernel for k in result.kernels] == ["v_copy", "v_fma"]
    assert result.command[:3] == (sys.executable, "-m", "cudaperf.execute.netns_exec")
