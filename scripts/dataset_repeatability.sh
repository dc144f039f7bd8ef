#!/usr/bin/env bash
# Cross-run repeatability of the dataset measurement, as an A/B of the timing protocol on this machine: the
# same first N tasks (the stable round-robin order over families, both kinds; the CPU filter's flagged tasks
# left out) measured from scratch four times, interleaved: new, old, new, old. "new" is the current protocol;
# "old" adds $OLD_FLAGS (default: the timing threads at the normal priority, torch.compile's first run under
# the shared lock). Then `scripts/compare_dataset_runs.py` compares new with new and old with old (median
# |B/A - 1| of the implementations' medians and of each baseline), printed and written to
# $OUT/compare.md. Nothing committed is resumed from, so no two runs share rows. The four runs' folders are
# packed into $OUT/runs.tgz (a device call returns at most 8 files).
#
#   OUT=... N=40 bash scripts/dataset_repeatability.sh [more `cudaperf dataset measure` flags]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cudaperf-repeatability}
N=${N:-40}
BUDGET_S=${BUDGET_S:-120}  # per run; 40 tasks took ~50 s at 50 tasks/min on the H200
OLD_FLAGS=${OLD_FLAGS:---no-raised-priority --shared-compile-first-run}
mkdir -p "$OUT"
FILTER=$(mktemp -d)  # the CPU filter's verdicts only, no measurements
cp benchmarks/dataset_measure/validate*.jsonl.gz "$FILTER"/ 2>/dev/null
for run in new1 old1 new2 old2; do
  flags=()
  [[ $run == old* ]] && read -r -a flags <<< "$OLD_FLAGS"
  OUT=$OUT/$run SHARDS=$FILTER KEEP=$(mktemp -d) BUDGET_S=$BUDGET_S HARD_S=$((BUDGET_S + 60)) \
    bash scripts/dataset_measure.sh --max-tasks "$N" "${flags[@]}" "$@" > "$OUT/$run.out" 2>&1
  echo "$run: $(grep -a '^measured' "$OUT/$run.out" || echo 'no summary line, see its measure.log')"
done
shard() { ls "$OUT/$1"/measurements-*.jsonl.gz 2>/dev/null | head -n 1; }
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
rc=0
: > "$OUT/compare.md"
for protocol in new old; do
  a=$(shard ${protocol}1) b=$(shard ${protocol}2)
  if [[ -z $a || -z $b ]]; then
    echo "$protocol: a run left no measurements" | tee -a "$OUT/compare.md"
    rc=1
    continue
  fi
  title="new protocol"
  [[ $protocol == old ]] && title="old protocol ($OLD_FLAGS)"
  { echo "## $title"; echo; python3 scripts/compare_dataset_runs.py "$a" "$b"; echo; } | tee -a "$OUT/compare.md"
done
runs=(new1 old1 new2 old2 new1.out old1.out new2.out old2.out)
tar czf "$OUT/runs.tgz" -C "$OUT" "${runs[@]}" && (cd "$OUT" && rm -rf "${runs[@]}")
exit $rc
