#!/usr/bin/env bash
# Do the baselines hold still? (issue 18, item 6) The same first N dataset tasks (the measurement's
# round-robin order over families, PyTorch and C mixed; the CPU filter's flagged tasks left out) measured
# from scratch four times in one call, interleaved: stable, legacy, stable, legacy. "stable" is the default
# baseline protocol (timing: each function's lead outlasts its host path, no garbage collection inside the
# timed rounds; timing.compile_baseline: static shapes, Inductor without on-device autotuning; host_timing
# and datasets/measure/serial.py: serial C on a CPU the other children keep off, one serial timing at a
# time, in three rounds spread over each configuration); "legacy" is the protocol before it
# (CUDAPERF_BASELINE_PROTOCOL=legacy: one lead launch, one serial round). Both record the diagnostics
# (host paths, host-bound samples, the serial-C calibration). Every run starts from scratch: no committed
# rows, and fresh cudaperf and Inductor caches (Inductor caches its autotuning choices on the machine, so a
# shared cache would hide across-lease differences). Then scripts/compare_dataset_runs.py compares stable
# with stable and legacy with legacy on the keys all four runs timed (printed and written to
# $OUT/compare.md, with the diagnostics: host-bound shares, lead launches, the serial-C calibration ratio),
# and the summary below prints, per protocol, each baseline's cross-run median |B/A - 1| beside eager's
# (the target: torch.compile and serial C within 2x of eager's) and the same diagnostics, also in
# $OUT/summary.md. The four runs' folders are packed into $OUT/runs.tgz (a device call returns at most 8
# files).
#
#   OUT=... N=60 BUDGET_S=75 IMPLS=2 bash scripts/baseline_repeatability.sh [more `dataset measure` flags]
#
# IMPLS: implementations per task (the naive port and the next one; 0: all): only the baselines matter
# here, so fewer implementations give more tasks in the same minutes. It needs `dataset measure
# --impls-per-task` (MeasureOptions.impls_per_task); without that flag every implementation is measured.
# Four runs take about 6 minutes on one H200 (each ends when its N tasks are measured, at the latest
# BUDGET_S after its start, plus ~30 s of start-up and summary). PROTOCOLS="stable" measures only the
# default protocol's pair (stable1, stable2: half the time, for a short lease; the legacy figures of an
# earlier call stand for "before"). BUDGET_S below 60 s starts no PyTorch task (a measuring process's
# start, 30 s, and a first task's expected 30 s): `dataset measure` refuses it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cudaperf-baseline-repeatability}
N=${N:-60}
BUDGET_S=${BUDGET_S:-75}
IMPLS=${IMPLS:-2}
read -ra PROTOCOL_LIST <<< "${PROTOCOLS:-stable legacy}"
RUNS=()
for n in 1 2; do for p in "${PROTOCOL_LIST[@]}"; do RUNS+=("$p$n"); done; done
mkdir -p "$OUT"
FILTER=$(mktemp -d)  # the CPU filter's verdicts only, no measurements
cp benchmarks/dataset_measure/validate*.jsonl.gz "$FILTER"/ 2>/dev/null
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
MORE=()
if [[ $IMPLS != 0 ]]; then
  if python3 -m cudaperf.cli dataset measure --help 2>/dev/null | grep -q -- --impls-per-task; then
    MORE=(--impls-per-task "$IMPLS")
  else
    echo "note: this cudaperf has no 'dataset measure --impls-per-task': every implementation is measured"
  fi
fi
echo "host: $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); steal so far:" \
  "$(awk '/^cpu /{print $9}' /proc/stat) ticks"
for run in "${RUNS[@]}"; do
  OUT=$OUT/$run SHARDS=$FILTER KEEP=$(mktemp -d) BUDGET_S=$BUDGET_S HARD_S=$((BUDGET_S + 40)) \
    CUDAPERF_BASELINE_PROTOCOL=${run%[0-9]} CUDAPERF_CACHE_DIR=$(mktemp -d) \
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) \
    bash scripts/dataset_measure.sh --max-tasks "$N" "${MORE[@]}" "$@" > "$OUT/$run.out" 2>&1
  echo "$run: $(grep -a '^measured' "$OUT/$run.out" || echo 'no summary line, see its measure.log')"
done
shard() { ls "$OUT/$1"/measurements-*.jsonl.gz 2>/dev/null | head -n 1; }
all=$(for r in "${RUNS[@]}"; do shard "$r"; done)
rc=0
: > "$OUT/compare.md"
for p in "${PROTOCOL_LIST[@]}"; do
  a=${p}1 b=${p}2
  if [[ -z $(shard "$a") || -z $(shard "$b") ]]; then
    echo "$a or $b left no measurements" | tee -a "$OUT/compare.md"
    rc=1
    continue
  fi
  { echo "## ${a%[0-9]} protocol, $a vs $b"; echo
    python3 scripts/compare_dataset_runs.py "$(shard "$a")" "$(shard "$b")" --only-keys-in $all; echo; } \
    | tee -a "$OUT/compare.md"
done
python3 - "$OUT" "${PROTOCOL_LIST[*]}" $all <<'EOF' | tee "$OUT/summary.md"
"""Per protocol: each baseline's cross-run median |B/A - 1| beside eager's, on the keys every run timed;
then the diagnostics of each protocol (compare_dataset_runs.diagnostics)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd() / "scripts"))
from compare_dataset_runs import _quantile, diagnostics, differences, only_keys_in, timed_rows

out = Path(sys.argv[1])
protocols = sys.argv[2].split()
shards = {Path(p).parent.name: Path(p) for p in sys.argv[3:]}
if len(shards) < 2 * len(protocols):
    sys.exit("a run left no measurements: no summary")
rows = {name: timed_rows(path) for name, path in shards.items()}
rows = {name: only_keys_in(r, [o for n, o in rows.items() if n != name]) for name, r in rows.items()}
print("| protocol | field | keys | median abs diff | x eager's | target (<= 2x eager's) |")
print("|---|---|---|---|---|---|")
for protocol in protocols:
    a, b = rows[f"{protocol}1"], rows[f"{protocol}2"]
    figures = {f: differences(a, b, f) for f in ("eager_ms", "compile_ms", "serial_c_ms", "naive_ms",
                                                   "median_ms")}
    eager = _quantile(figures["eager_ms"], 0.5) if figures["eager_ms"] else None
    for field, d in figures.items():
        if not d:
            continue
        median = _quantile(d, 0.5)
        ratio = f"{median / eager:.2f}" if eager else "-"
        target = ("yes" if eager and median <= 2 * eager else "no") if field in ("compile_ms",
                                                                               "serial_c_ms") else ""
        print(f"| {protocol} | {field} | {len(d)} | {median:.1%} | {ratio} | {target} |")
for protocol in protocols:
    print(f"\n### {protocol}: diagnostics ({protocol}1 = A, {protocol}2 = B)\n")
    print("\n".join(diagnostics(rows[f"{protocol}1"], rows[f"{protocol}2"])))
EOF
runs=("${RUNS[@]}" "${RUNS[@]/%/.out}")
tar czf "$OUT/runs.tgz" -C "$OUT" "${runs[@]}" && (cd "$OUT" && rm -rf "${runs[@]}")
exit $rc
