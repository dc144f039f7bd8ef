#!/usr/bin/env bash
# The one entry point for GPU work: runs the GPU test suite and the benchmarks on a machine with an NVIDIA
# GPU, writes logs and JSON under $OUT (default benchmarks/results/<date>), and prints a short table last.
#
#   bash scripts/gpu_check.sh [STEP ...]      (default: every step)
#   steps: tests adversarial example-tests dataset-tests throughput repeatability faults analysis
#
# Each step has its own time limit (seconds, overridable as LIMIT_<step>=...), and writes its log straight
# to a file (no pipes that buffer), so a step that is killed still leaves what it printed, and the steps
# after it still run. On the lent H200 machine Python packages missing there travel as wheels in .whl/
# (see ../shared/docs/gpu-machine.md); they are installed into /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-benchmarks/results/$(date -u +%Y-%m-%d)}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export CUDAPERF_CACHE_DIR=${CUDAPERF_CACHE_DIR:-/tmp/cudaperf-cache}
STEPS=${*:-tests adversarial example-tests dataset-tests throughput repeatability faults analysis}
SUMMARY="$OUT/summary.md"
: > "$SUMMARY"
python3 scripts/env_info.py > "$OUT/env.json"
cat "$OUT/env.json"

# step NAME DEFAULT_LIMIT_S COMMAND...: run with a limit, log to $OUT/NAME.log, one summary row.
step() {
  local name=$1 limit_var="LIMIT_${1//-/_}" default=$2; shift 2
  [[ " $STEPS " == *" $name "* ]] || return 0
  local limit=${!limit_var:-$default} t0=$SECONDS
  echo "== $name (limit ${limit} s)"
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$? last
  last=$(grep -aE '(passed|failed|error|skipped)' "$OUT/$name.log" | tail -n 1 | sed 's/\x1b\[[0-9;]*m//g')
  [[ $rc -eq 124 || $rc -eq 137 ]] && last="KILLED at the ${limit} s limit; ${last}"
  echo "| $name | rc=$rc | ${last:-see log} | $((SECONDS - t0)) s |" | tee -a "$SUMMARY"
  grep -a '^|' "$OUT/$name.log" | grep -v '^| *---' >> "$SUMMARY" || true
}

PYTEST=(python3 -m pytest -q -m gpu -p no:cacheprovider -rfE --durations=15)
# A per-test limit where pytest-timeout is installed (it is on the H200 image), so one hang costs one test.
python3 -c "import pytest_timeout" 2>/dev/null && PYTEST+=(--timeout 300)
DATASET_TESTS=(tests/gpu/test_datasets_gpu.py tests/gpu/test_datasets_more_gpu.py tests/gpu/test_dataset_measure_gpu.py)
step tests 420 "${PYTEST[@]}" tests/gpu --ignore=tests/gpu/test_examples_gpu.py \
  "${DATASET_TESTS[@]/#/--ignore=}"
step adversarial 360 "${PYTEST[@]}" tests/adversarial
step example-tests 360 "${PYTEST[@]}" -s tests/gpu/test_examples_gpu.py
step dataset-tests 540 "${PYTEST[@]}" "${DATASET_TESTS[@]}"
step throughput 560 python3 benchmarks/throughput.py --out "$OUT/throughput.json"
step repeatability 240 python3 benchmarks/repeatability.py --out "$OUT/repeatability.json"
step faults 420 python3 benchmarks/faults.py --out "$OUT/faults.json"
step analysis 300 python3 scripts/validate_static_vs_ncu.py --out "$OUT"

echo
echo "== summary ($OUT) =="
cat "$SUMMARY"
