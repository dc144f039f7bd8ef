#!/usr/bin/env bash
# The one entry point for GPU work: runs the GPU test suite and the benchmarks on a machine with an NVIDIA
# GPU, writes logs and JSON under $OUT (default benchmarks/results/<date>), and prints a short table last.
#
#   bash scripts/gpu_check.sh [tests] [example-tests] [dataset-tests] [throughput] [repeatability] [faults]
#                             [analysis]     (default: all; each step must fit the 10-minute device call)
#
# On the lent H200 machine Python packages missing there travel as wheels in .whl/ (see
# ../shared/docs/gpu-machine.md); they are installed into /tmp/site first.
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
STEPS=${*:-tests example-tests dataset-tests throughput repeatability faults analysis}
SUMMARY="$OUT/summary.md"
: > "$SUMMARY"

python3 scripts/env_info.py | tee "$OUT/env.json"

want() { [[ " $STEPS " == *" $1 "* ]]; }

gpu_tests() {  # name, pytest arguments...
  local name=$1; shift
  local t0=$SECONDS
  python3 -m pytest -q -m gpu -p no:cacheprovider -rfE "$@" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' | tee "$OUT/$name.log"
  echo "| $name | $(tail -n 1 "$OUT/$name.log") | $((SECONDS - t0)) s |" >> "$SUMMARY"
}
# The examples (inline builds, ~3 min) and the dataset implementations (~1.5 min) are steps of their own.
want tests && gpu_tests gpu_tests tests/ --ignore=tests/gpu/test_examples_gpu.py --ignore=tests/gpu/test_datasets_gpu.py
want example-tests && gpu_tests gpu_example_tests -s tests/gpu/test_examples_gpu.py
want dataset-tests && gpu_tests gpu_dataset_tests tests/gpu/test_datasets_gpu.py
if want throughput; then
  python3 benchmarks/throughput.py --out "$OUT/throughput.json" 2>&1 | tee "$OUT/throughput.log"
  tail -n 12 "$OUT/throughput.log" | grep '^|' >> "$SUMMARY"
fi
if want repeatability; then
  python3 benchmarks/repeatability.py --out "$OUT/repeatability.json" 2>&1 | tee "$OUT/repeatability.log"
  grep '^|' "$OUT/repeatability.log" >> "$SUMMARY"
fi
if want faults; then
  python3 benchmarks/faults.py --out "$OUT/faults.json" 2>&1 | tee "$OUT/faults.log"
  grep '^|' "$OUT/faults.log" >> "$SUMMARY"
fi
if want analysis; then
  python3 scripts/validate_static_vs_ncu.py --out "$OUT/static_vs_ncu.md" 2>&1 | tee "$OUT/static_vs_ncu.log"
  grep -E '^\| (overall|TOTAL)' "$OUT/static_vs_ncu.log" >> "$SUMMARY"
fi
echo
echo "== summary ($OUT) =="
cat "$SUMMARY"
