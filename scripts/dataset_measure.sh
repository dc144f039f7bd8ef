#!/usr/bin/env bash
# One device command of the dataset measurement (issue 4, `cudaperf dataset measure`): measures what the
# committed shards ($SHARDS/measurements-*.jsonl.gz) and this machine's earlier calls ($KEEP, kept while the
# machine stays warm) have not, ends by itself within BUDGET_S, and leaves in $OUT:
#   measurements-<utc stamp>.jsonl.gz   this call's new rows only: commit it into $SHARDS before the next call
#                                       (`python3 scripts/collect_dataset_call.py FILES_AT/<out> RESULTS_DIR`)
#   clocks-<utc stamp>.csv.gz           the GPU's clocks, power and clock-event reasons, once a second
#   run/summary/                        stats.md, task_ratios.csv, measurements.parquet of everything so far
#   measure.log                         the run's output (its last lines are printed at the end)
# Tasks flagged in $SHARDS/validate*.jsonl.gz (the CPU filters, gzipped: `cudaperf dataset validate` and
# the rounding-sensitivity check, `python3 -m cudaperf.datasets.filters.rounding`) are not measured. After a
# generator or comparison fix, pass --retry-incorrect once.
#
#   OUT=... BUDGET_S=450 bash scripts/dataset_measure.sh [more `cudaperf dataset measure` flags]
#
# Exit code: 0 everything selected is measured, 3 the budget ended the call (run it again), else a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/cudaperf-measure-out}
BUDGET_S=${BUDGET_S:-450}        # measuring; startup, stragglers (<= 20 s grace), summary, gzip add <= ~60 s
HARD_S=${HARD_S:-520}            # a kill past this still leaves every fsynced row (whole call < 9 min)
SHARDS=${SHARDS:-benchmarks/dataset_measure}
KEEP=${KEEP:-/tmp/cudaperf-measure-keep}
mkdir -p "$OUT/run" "$KEEP"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export CUDAPERF_CACHE_DIR=${CUDAPERF_CACHE_DIR:-/tmp/cudaperf-cache}  # NVRTC and serial-C builds, reused while warm

python3 -m cudaperf.gpu_clocks --log "$OUT/clocks.csv" &  # the GPU's clocks beside the rows' timestamps
SMI_PID=$!
timeout -k 5 "$HARD_S" python3 -m cudaperf.cli dataset measure "$OUT/run" --resume-from "$SHARDS,$KEEP" \
  --time-budget-s "$BUDGET_S" --no-features "$@" > "$OUT/measure.log" 2>&1
rc=$?
kill "$SMI_PID" 2>/dev/null; wait "$SMI_PID" 2>/dev/null
stamp=$(date -u +%Y%m%dT%H%M%SZ)
[[ -s "$OUT/clocks.csv" ]] && gzip -9 -c "$OUT/clocks.csv" > "$OUT/clocks-$stamp.csv.gz" && rm -f "$OUT/clocks.csv"
if [[ -s "$OUT/run/measurements.jsonl" ]]; then
  cp "$OUT/run/measurements.jsonl" "$KEEP/measurements-$stamp.jsonl"
  gzip -9 -c "$OUT/run/measurements.jsonl" > "$OUT/measurements-$stamp.jsonl.gz"
  rm -f "$OUT/run/measurements.jsonl"  # the .gz holds it; do not hand the rows back twice
fi
rm -rf "$OUT/run/.locks"  # the GPU lock files: nothing to hand back (a device call returns at most 8 files)
tail -n 25 "$OUT/measure.log"
ls -la "$OUT" "$OUT/run/summary" 2>/dev/null
exit $rc
