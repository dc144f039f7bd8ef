#!/usr/bin/env bash
# Cross-run repeatability of the dataset measurement on this machine: the same first N tasks (the stable
# round-robin order over families, both kinds; the CPU filter's flagged tasks left out) measured twice from
# scratch, one after the other, then `scripts/compare_dataset_runs.py` on the two (median |B/A - 1| of the
# implementations' medians and of each baseline). Nothing committed is resumed from, so the two runs share
# no rows. Leaves $OUT/r1 and $OUT/r2 as scripts/dataset_measure.sh leaves its $OUT (3 files each).
#
#   OUT=... N=40 bash scripts/dataset_repeatability.sh [more `cudaperf dataset measure` flags]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cudaperf-repeatability}
N=${N:-40}
BUDGET_S=${BUDGET_S:-150}  # per run; 40 tasks took ~50 s at 50 tasks/min on the H200
FILTER=$(mktemp -d)  # the CPU filter's verdicts only, no measurements
cp benchmarks/dataset_measure/validate*.jsonl.gz "$FILTER"/ 2>/dev/null
for run in r1 r2; do
  OUT=$OUT/$run SHARDS=$FILTER KEEP=$(mktemp -d) BUDGET_S=$BUDGET_S HARD_S=$((BUDGET_S + 60)) \
    bash scripts/dataset_measure.sh --max-tasks "$N" "$@" | grep -a "^measured" || echo "$run: no summary line"
done
a=$(ls "$OUT"/r1/measurements-*.jsonl.gz 2>/dev/null | head -n 1)
b=$(ls "$OUT"/r2/measurements-*.jsonl.gz 2>/dev/null | head -n 1)
if [[ -z $a || -z $b ]]; then
  echo "a run left no measurements: see $OUT/r1/measure.log and $OUT/r2/measure.log" >&2
  exit 1
fi
PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} python3 scripts/compare_dataset_runs.py "$a" "$b"
