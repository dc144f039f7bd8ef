"""Static verdicts of the labelled validation suite vs Nsight Compute measurements, on one GPU.

    python3 scripts/validate_static_vs_ncu.py [--out DIR] [--cases a,b,...] [--budget-s 170]

What it does (one GPU, well under 3 minutes):
1. static side: each kernel's verdicts from `cudaperf.analysis.analyze_source` (tree-sitter needed), else
   the suite's labels, which tests/unit/test_analysis_validation.py pins to the analyser's output on
   the CPU machine; theoretical occupancy always from NVRTC registers + `analysis.occupancy`;
2. preflight: a child process compiles and launches every runnable kernel once (cudaperf.cuda on torch
   tensors); a kernel that fails or hangs is reported and left out, so one failure cannot sink the run;
3. one ncu invocation over one child process that launches all surviving kernels inside a profiler
   range, filtered by kernel name;
4. per feature, static verdict vs measured: coalescing (sectors/request vs the access width), bank
   conflicts (conflicts per shared instruction), barrier divergence (divergent branch targets), theoretical
   occupancy (ncu's sm__maximum_warps_per_active_cycle_pct, else its per-resource block limits),
   vectorisation (global bytes per load instruction), atomics, local memory, FLOPs (within 1.5x),
   roofline regime (measured FLOP per DRAM byte vs the FP32 ridge). Writes `validate_static_vs_ncu.md`
   and `.json` under --out (default $OUT or ./benchmarks/results) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaperf.analysis import ncu as ncu_mod  # after the path setup: bare checkouts work
from cudaperf.analysis.roofline import regime
from cudaperf.analysis.validation import Case, all_cases, evaluate_spec

RESULT_NAME = "validate_static_vs_ncu"


# --------------------------------------------------------------------------------------------------
# Child: compile and launch kernels (runs on the GPU, under ncu for the profile pass)


def _arguments(case: Case):
    import torch

    out = []
    for spec in case.args:
        kind, _, rest = spec.partition(":")
        if kind in ("in", "out"):
            out.append(torch.rand(int(evaluate_spec(rest, case.sizes)), device="cuda"))
        elif kind == "idx":
            count, _, bound = rest.partition(":")
            n, hi = int(evaluate_spec(count, case.sizes)), int(evaluate_spec(bound, case.sizes))
            out.append(torch.randint(0, hi, (n,), device="cuda", dtype=torch.int32))
        elif kind == "i32":
            out.append(int(evaluate_spec(rest, case.sizes)))
        elif kind == "f32":
            out.append(float(evaluate_spec(rest, case.sizes)))
        else:
            raise ValueError(f"{case.name}: unknown argument spec {spec!r}")
    return out


def child(mode: str, names: list[str]) -> int:
    import torch

    from cudaperf import cuda

    cases = {c.name: c for c in all_cases()}
    ready = []
    for name in names:
        case = cases[name]
        print(f"start {name}", flush=True)
        try:
            kernel = cuda.compile(case.source, case.name)
            args = _arguments(case)
            kernel(case.grid, case.block, *args, smem_bytes=case.smem_bytes)  # warm-up, outside the range
            torch.cuda.synchronize()
            ready.append((case, kernel, args))
            print(f"ok {name}", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on: one kernel must not sink the run
            print(f"fail {name} {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            if "CUDA" in str(exc) or "illegal" in str(exc).lower():
                return 3  # the context is gone; the parent restarts after this kernel
    if mode == "profile":
        torch.cuda.profiler.start()
        for case, kernel, args in ready:
            kernel(case.grid, case.block, *args, smem_bytes=case.smem_bytes)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    return 0


# --------------------------------------------------------------------------------------------------
# Parent


def _tree_sitter_from_wheels() -> None:
    """GPU machines lack tree-sitter; if the checkout carries its wheels (ignored folder .whl/), install them
    into a private directory for this process."""
    try:
        import tree_sitter_cuda  # noqa: F401 - probing only
        return
    except ImportError:
        pass
    wheels = sorted(str(p) for p in (ROOT / ".whl").glob("tree_sitter*.whl"))
    if len(wheels) < 2:
        return
    target = Path(os.environ.get("TMPDIR", "/tmp")) / "cudaperf-tree-sitter"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
                    str(target), *wheels], capture_output=True, timeout=120, check=False)
    sys.path.insert(0, str(target))


def static_side(cases: list[Case]) -> tuple[dict[str, dict], str]:
    """Per case: verdicts, theoretical occupancy, ptxas facts, static FLOPs. Source of the verdicts."""
    _tree_sitter_from_wheels()
    try:
        import tree_sitter_cuda  # noqa: F401 - only to know whether the full analyser can run here

        from cudaperf.analysis import analyze_source
        from cudaperf.analysis.validation import verdicts

        mode = "analyser"
    except ImportError:
        mode = "labels"
    out = {}
    for case in cases:
        entry = {"verdicts": dict(case.expected), "flops": None}
        try:
            if mode == "analyser":
                report = analyze_source(case.source, kind="cuda", launch=case.launch, sizes=case.sizes,
                                        sass=False)
                f = report.kernels[0]
                entry["verdicts"] = verdicts(f, report.details[0])
                entry["flops"] = f.flops_estimate
                entry.update(_occupancy_facts(f.resources, f.occupancy))
                entry["diagnostics"] = list(report.diagnostics)[:5]  # e.g. why no registers (no NVRTC)
            else:
                entry.update(_compiled_occupancy(case))
                if entry.get("occupancy") is not None:
                    entry["verdicts"]["occupancy"] = "high" if entry["occupancy"] >= 0.5 else "low"
        except Exception as exc:  # noqa: BLE001 - a case that cannot be analysed is reported, not fatal
            entry["error"] = f"{type(exc).__name__}: {exc}"
        out[case.name] = entry
    return out, mode


def _compiled_occupancy(case: Case) -> dict:
    from cudaperf.analysis.compiler import compile_unit
    from cudaperf.analysis.occupancy import theoretical_occupancy

    unit = compile_unit(case.source, arch="sm_90", sass=False)
    r = unit.resources[0] if unit.resources else None
    occ = None
    if r is not None:
        threads = case.block[0] * case.block[1] * case.block[2]
        occ = theoretical_occupancy("sm_90", threads, r.registers, r.smem_static_bytes, case.smem_bytes)
    return _occupancy_facts(r, occ)


def _occupancy_facts(r, occ) -> dict:
    return {
        "registers": r.registers if r is not None else None,
        "smem_static_bytes": r.smem_static_bytes if r is not None else None,
        "occupancy": occ.occupancy if occ is not None else None,
        "active_blocks": occ.active_blocks_per_sm if occ is not None else None,
        "limiting_factors": list(occ.limiting_factors) if occ is not None else [],
    }


def _pump(stream, sink) -> None:
    for line in stream:
        sink.put(line)
    sink.put(None)


def preflight(names: list[str], budget_s: float, stall_s: float = 20.0) -> tuple[list[str], dict[str, str]]:
    """Launch each kernel once in child processes; (kernels that ran, failures by name). A child that makes
    no progress for `stall_s` (a hung kernel) is killed, the kernel it was on is blamed, and the rest
    rerun."""
    import queue
    import threading

    ok, failed = [], {}
    pending = list(names)
    deadline = time.monotonic() + budget_s
    while pending and time.monotonic() < deadline:
        cmd = [sys.executable, __file__, "--child", "run", "--names", ",".join(pending)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        current, stalled = None, False
        while True:
            try:
                line = lines.get(timeout=max(1.0, min(stall_s * (3 if current is None else 1),
                                                      deadline - time.monotonic())))
            except queue.Empty:
                stalled = True
                break
            if line is None:
                break
            word, _, rest = line.strip().partition(" ")
            name, _, message = rest.partition(" ")
            if word == "start":
                current = name
            elif word == "ok":
                ok.append(name)
            elif word == "fail":
                failed[name] = message
        if stalled:
            proc.kill()
        proc.wait()
        done = set(ok) | set(failed)
        if stalled or proc.returncode not in (0, 3):
            blame = current if current is not None and current not in done else next(
                (n for n in pending if n not in done), None)
            if blame is not None:
                failed[blame] = ("hung (killed)" if stalled
                                 else f"crashed the process (exit {proc.returncode})")
                done.add(blame)
        pending = [n for n in pending if n not in done]
        if proc.returncode == 0 and not stalled:
            break
    for name in pending:
        failed.setdefault(name, "not run: preflight budget exhausted")
    return ok, failed


def measure(names: list[str], budget_s: float) -> tuple[dict[str, dict], list[str]]:
    program = [sys.executable, __file__, "--child", "profile", "--names", ",".join(names)]
    result = ncu_mod.profile(program, kernels=names, timeout_s=budget_s)
    measured = {}
    for k in result.kernels:
        measured.setdefault(k.kernel, k.metrics)  # one launch per kernel in the range
    notes = list(result.diagnostics)
    if result.dropped_metrics:
        notes.append("metrics this ncu does not offer (dropped): " + ", ".join(result.dropped_metrics))
    return measured, notes


# --------------------------------------------------------------------------------------------------
# Comparison rules: each returns (static shown, measured shown, agree or None when not scored)


def _coalescing(kind: str):
    metric = ("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_"
              f"{'ld' if kind == 'load' else 'st'}.ratio")

    def rule(case: Case, st: dict, m: dict):
        verdict = st["verdicts"].get(kind)
        if verdict in (None, "unknown") or metric not in m:
            return verdict, m.get(metric), None
        ratio, ideal = m[metric], case.access_bytes  # a warp of 4-byte lanes needs 4 sectors, float4 16
        measured = "broadcast" if ratio <= 1.5 else ("coalesced" if ratio <= 1.25 * ideal + 0.5 else "poor")
        expected = {"broadcast": "broadcast", "coalesced": "coalesced"}.get(verdict, "poor")
        return verdict, f"{ratio:.1f} sectors/req ({measured})", measured == expected

    return rule


def _bank(case: Case, st: dict, m: dict):
    degree = st["verdicts"].get("bank_conflict")
    conflicts = sum(m.get(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{k}.sum", 0.0)
                    for k in ("ld", "st"))
    if degree is None or not any(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{k}.sum" in m
                                 for k in ("ld", "st")):
        return degree, None, None
    instructions = sum(m.get(f"smsp__sass_inst_executed_op_shared_{k}.sum", 0.0) for k in ("ld", "st"))
    if not instructions:  # fall back to warps launched
        instructions = (case.grid[0] * case.grid[1] * case.grid[2]
                        * (case.block[0] * case.block[1] * case.block[2]) / 32)
    per_instruction = conflicts / max(1.0, instructions)
    return f"{degree}-way", f"{per_instruction:.2f} conflicts/instr", (per_instruction >= 0.5) == (degree > 1)


def _divergence(case: Case, st: dict, m: dict):
    """Divergent barrier <=> the hardware saw divergence. Scored on kernels with barriers whose only possible
    divergence is around them: a divergent barrier, or no thread-dependent condition at all."""
    v = st["verdicts"]
    targets = m.get("smsp__sass_branch_targets_threads_divergent.sum")
    threads = m.get("smsp__average_thread_inst_executed_per_inst_executed.ratio")
    if not v.get("barriers") or (targets is None and threads is None):
        return v.get("divergent_barrier"), None, None
    if not v["divergent_barrier"] and v.get("divergent_branches"):
        return False, "n/a: other thread-dependent branches", None
    # an early exit compiles to a predicated EXIT, not a branch: the active-thread average shows it
    diverged = (targets or 0) > 0 or (threads is not None and threads < 0.98 * 32)
    shown = f"{targets or 0:.0f} divergent targets, {threads or 0:.2f} threads/instr"
    return v["divergent_barrier"], shown, diverged == v["divergent_barrier"]


def _occupancy(case: Case, st: dict, m: dict):
    ours = st.get("occupancy")
    if ours is None:
        return None, None, None
    if "sm__maximum_warps_per_active_cycle_pct" in m:
        theirs = m["sm__maximum_warps_per_active_cycle_pct"]
        return f"{100 * ours:.1f}%", f"{theirs:.1f}% (ncu theoretical)", abs(100 * ours - theirs) <= 1.0
    limits = [m[k] for k in m if k.startswith("launch__occupancy_limit_")]
    if not limits:
        return f"{100 * ours:.1f}%", None, None
    return (f"{st['active_blocks']} blocks", f"{min(limits):.0f} blocks (ncu limits)",
            min(limits) == st["active_blocks"])


def _vectorized(case: Case, st: dict, m: dict):
    """Useful bytes per global load request = 32 B x sectors/request x used share of each sector: 128 for
    scalar floats however they stride, 256 for float2, 512 for float4."""
    pct = m.get("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct")
    sectors = m.get("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio")
    if pct is None or sectors is None or st["verdicts"].get("load") is None:
        return st["verdicts"].get("vectorized"), None, None
    useful = 32 * sectors * pct / 100
    return (st["verdicts"]["vectorized"], f"{useful:.0f} useful B/request",
            (useful >= 200) == st["verdicts"]["vectorized"])


def _counted(metric_keys: tuple[str, ...], feature: str):
    def rule(case: Case, st: dict, m: dict):
        present = [k for k in metric_keys if k in m]
        if not present:
            return st["verdicts"].get(feature), None, None
        total = sum(m[k] for k in present)
        return st["verdicts"].get(feature), f"{total:.0f}", (total > 0) == bool(st["verdicts"].get(feature))

    return rule


def _flops(case: Case, st: dict, m: dict):
    d = ncu_mod.to_dynamic(m)
    if st.get("flops") is None or "flops" not in d:
        return st.get("flops"), d.get("flops"), None
    a, b = st["flops"], d["flops"]
    agree = (a == b == 0) or (min(a, b) > 0 and max(a, b) / min(a, b) <= 1.5)
    return f"{a:.3g}", f"{b:.3g}", agree


def _regime(case: Case, st: dict, m: dict):
    d = ncu_mod.to_dynamic(m)
    verdict = st["verdicts"].get("regime")
    if verdict is None or "measured_intensity" not in d:
        return verdict, None, None
    measured = regime(d["measured_intensity"])
    return verdict, f"{d['measured_intensity']:.2f} FLOP/B ({measured})", measured == verdict


RULES = {
    "coalescing (loads)": _coalescing("load"),
    "coalescing (stores)": _coalescing("store"),
    "bank conflicts": _bank,
    "barrier divergence": _divergence,
    "theoretical occupancy": _occupancy,
    "vectorised loads": _vectorized,
    "atomics": _counted(("smsp__sass_inst_executed_op_global_atom.sum",
                         "smsp__sass_inst_executed_op_global_red.sum",
                         "smsp__sass_inst_executed_op_shared_atom.sum"), "atomics"),
    "local memory": _counted(("smsp__sass_inst_executed_op_local_ld.sum",
                              "smsp__sass_inst_executed_op_local_st.sum"), "local_memory"),
    "FLOPs (within 1.5x)": _flops,
    "roofline regime": _regime,
}


def compare(cases: list[Case], static: dict, measured: dict) -> tuple[list[dict], dict[str, tuple[int, int]]]:
    rows, totals = [], {f: [0, 0] for f in RULES}
    for case in cases:
        m = measured.get(case.name)
        if m is None:
            continue
        for feature, rule in RULES.items():
            try:
                shown_static, shown_measured, agree = rule(case, static[case.name], m)
            except Exception as exc:  # noqa: BLE001 - one rule's surprise is a row, not a crash
                shown_static, shown_measured, agree = "error", f"{type(exc).__name__}: {exc}", None
            rows.append({"case": case.name, "feature": feature, "static": shown_static,
                         "measured": shown_measured, "agree": agree})
            if agree is not None:
                totals[feature][0] += int(agree)
                totals[feature][1] += 1
    return rows, {k: (v[0], v[1]) for k, v in totals.items()}


def render(totals, rows, header: list[str]) -> str:
    lines = [*header, "", "| feature | agree | scored | % |", "|---|---|---|---|"]
    agreed = scored = 0
    for feature, (a, n) in totals.items():
        lines.append(f"| {feature} | {a} | {n} | {100 * a / n:.0f}% |" if n else f"| {feature} | - | 0 | - |")
        agreed, scored = agreed + a, scored + n
    lines.append(f"| **overall** | **{agreed}** | **{scored}** | **{100 * agreed / max(1, scored):.1f}%** |")
    lines += ["", "Disagreements:", ""]
    lines += [f"- {r['case']} / {r['feature']}: static {r['static']}, measured {r['measured']}"
              for r in rows if r["agree"] is False] or ["- none"]
    return "\n".join(lines)


def environment() -> list[str]:
    info = [f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"]
    try:
        import torch

        info += [f"gpu: {torch.cuda.get_device_name(0)}", f"torch: {torch.__version__}",
                 f"cuda (torch): {torch.version.cuda}"]
    except Exception as exc:  # noqa: BLE001 - the header is informative only
        import traceback

        tb = traceback.format_exc().strip().splitlines()
        info.append(f"torch: unavailable ({type(exc).__name__}: {exc}; "
                    f"raised at {' | '.join(tb[-6:-1])[:600]})")
    for cmd, label in ((["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], "driver"),
                       (["ncu", "--version"], "ncu")):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False).stdout.strip()
            info.append(f"{label}: {out.splitlines()[-1] if out else 'unknown'}")
        except (OSError, subprocess.SubprocessError):
            info.append(f"{label}: unavailable")
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=("run", "profile"), help=argparse.SUPPRESS)
    parser.add_argument("--names", default="", help=argparse.SUPPRESS)
    parser.add_argument("--cases", default="", help="comma-separated subset of the suite")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--budget-s", type=float, default=170.0, help="wall-clock budget for the whole run")
    args = parser.parse_args()
    if args.child:
        return child(args.child, [n for n in args.names.split(",") if n])
    t0 = time.monotonic()
    wanted = {n for n in args.cases.split(",") if n}
    cases = [c for c in all_cases() if c.run and (not wanted or c.name in wanted)]
    static, mode = static_side(cases)
    ran, failed = preflight([c.name for c in cases], budget_s=min(60.0, args.budget_s / 3))
    remaining = args.budget_s - (time.monotonic() - t0)
    measured, notes = measure(ran, budget_s=max(30.0, remaining - 5)) if ran else ({}, ["no kernel ran"])
    rows, totals = compare(cases, static, measured)
    header = [f"# Static analysis vs Nsight Compute ({len(measured)} of {len(cases)} kernels measured)", "",
              *[f"- {line}" for line in environment()], f"- static verdicts from: {mode}",
              f"- wall time: {time.monotonic() - t0:.0f} s"]
    header += [f"- not measured: {name} ({why})" for name, why in failed.items()]
    header += [f"- ncu: {n}" for n in notes]
    text = render(totals, rows, header)
    print(text)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{RESULT_NAME}.md").write_text(text + "\n")
    (out_dir / f"{RESULT_NAME}.json").write_text(json.dumps(
        {"totals": totals, "rows": rows, "static": static, "measured": measured, "failed": failed,
         "notes": notes, "static_mode": mode}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
