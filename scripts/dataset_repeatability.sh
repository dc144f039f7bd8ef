#!/usr/bin/env bash
# Cross-run repeatability of the dataset measurement, as an A/B of the timing protocol on this machine: the
# same first N tasks (the stable round-robin order over families, both kinds; the CPU filter's flagged tasks
# left out) measured from scratch four times, interleaved: base, alt, base, alt. "base" is the default
# protocol; "alt" adds $ALT_FLAGS (default: the timing threads at a raised priority and torch.compile's
# first run holding the GPU lock alone). Then `scripts/compare_dataset_runs.py` compares base with base and
# alt with alt on the keys all four runs timed (median |B/A - 1| of the implementations' medians and of
# each baseline), and the neighbouring base/alt pairs as a yardstick for drift over the call; printed and
# written to $OUT/compare.md. Nothing committed is resumed from, so no two runs share rows. The four runs'
# folders are packed into $OUT/runs.tgz (a device call returns at most 8 files).
#
#   OUT=... N=40 bash scripts/dataset_repeatability.sh [more `cudaperf dataset measure` flags]
#
# Session 12 ran it (then named new/old, with the alt flags as the default): base/base agreed better than
# alt/alt (benchmarks/results/2026-12-04-session12/call2-repeatability), so the defaults were turned round.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cudaperf-repeatability}
N=${N:-40}
BUDGET_S=${BUDGET_S:-120}  # per run; 40 tasks took ~50 s at 50 tasks/min on the H200
ALT_FLAGS=${ALT_FLAGS:---raised-priority --exclusive-compile-first-run}
mkdir -p "$OUT"
FILTER=$(mktemp -d)  # the CPU filter's verdicts only, no measurements
cp benchmarks/dataset_measure/validate*.jsonl.gz "$FILTER"/ 2>/dev/null
for run in base1 alt1 base2 alt2; do
  flags=()
  [[ $run == alt* ]] && read -r -a flags <<< "$ALT_FLAGS"
  OUT=$OUT/$run SHARDS=$FILTER KEEP=$(mktemp -d) BUDGET_S=$BUDGET_S HARD_S=$((BUDGET_S + 60)) \
    bash scripts/dataset_measure.sh --max-tasks "$N" "${flags[@]}" "$@" > "$OUT/$run.out" 2>&1
  echo "$run: $(grep -a '^measured' "$OUT/$run.out" || echo 'no summary line, see its measure.log')"
done
shard() { ls "$OUT/$1"/measurements-*.jsonl.gz 2>/dev/null | head -n 1; }
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
rc=0
: > "$OUT/compare.md"
compare() {  # title, run A, run B
  local a b
  a=$(shard "$2") b=$(shard "$3")
  if [[ -z $a || -z $b ]]; then
    echo "$2 or $3 left no measurements" | tee -a "$OUT/compare.md"
    rc=1
    return
  fi
  { echo "## $1"; echo; python3 scripts/compare_dataset_runs.py "$a" "$b" --only-keys-in $all; echo; } \
    | tee -a "$OUT/compare.md"
}
all=$(for r in base1 alt1 base2 alt2; do shard $r; done)
compare "base protocol, run 1 vs 3" base1 base2
compare "alt protocol ($ALT_FLAGS), run 2 vs 4" alt1 alt2
compare "neighbours: base run 1 vs alt run 2" base1 alt1
compare "neighbours: base run 3 vs alt run 4" base2 alt2
runs=(base1 alt1 base2 alt2 base1.out alt1.out base2.out alt2.out)
tar czf "$OUT/runs.tgz" -C "$OUT" "${runs[@]}" && (cd "$OUT" && rm -rf "${runs[@]}")
exit $rc
