#!/usr/bin/env bash
# The one entry point for GPU work: runs the GPU test suite and the benchmarks on a machine with an NVIDIA
# GPU, writes logs and JSON under $OUT (default benchmarks/results/<date>; clocks.csv: the GPU clock once a
# second, `python3 -m cudaperf.gpu_clocks --log`), and prints a short table last.
#
#   bash scripts/gpu_check.sh [GROUP ...]     (default: functional+faults timing-tests analysis repeatability throughput)
#   a GROUP is a STEP or STEPs joined by '+', run at the same time; steps: functional (GPU tests and the
#   adversarial suite on pytest-xdist workers, all but the `timing` ones; its halves: gpu-tests and
#   adversarial) timing-tests (those, alone)
#   tests adversarial example-tests (the same suites, split and serial) dataset-tests throughput
#   repeatability flush-state lead-probe faults analysis diagnose (a one-off probe of the machine, scripts/diagnose_gpu_env.py)
#   verdicts (every adversarial fixture's verdict as JSONL) boundary (the sandbox boundary's cost, the eager
#   baseline; boundary-default: with eager and torch.compile, the evaluator's default) hostile
#   (a batch of NaN/inf/crashing candidates) self-check (KernelBench levels 1-3, the reference as candidate)
#   build-saving (build-pool CPU with rejected candidates) prepared-references (a refereed C worker's host
#   references before timing, one thread against `prepare_threads`; no GPU used) baselines (cross-run agreement of the baselines)
#   full-size (KernelBench-format problems of many GB) sandbox (the boundary and the referee, verbose)
#   eval-modes (the default and RL evaluation modes side by side, 5 PyTorch and 3 C tasks, the RL mode with 8
#   workers (EVAL_MODES_ARMS, default 8; e.g. 4,8,8/5 for more arms, 8,8r for the gate left at the worker's
#   result, RlSettings.release_at_result): about 120 s an arm on the H100, s26;
#   EVAL_MODES_ARGS=--append for a 2nd call, with the first call's JSON in /tmp/eval_modes.json)
#   probe-memo (scripts/probe_memo_gpu.py) probe-unseen-cost
#   (scripts/probe_unseen_cost_gpu.py) rerun (the GPU test files in RERUN_PATHS, but their `timing` tests)
#   eval-profile (one such run with every worker's jobs profiled: $OUT/profiles/, $OUT/profile_summary.md)
#   eval-modes-long (the RL arms alone, 4 and 8 workers, each candidate three times: longer streams per task)
#   anchor-probe (eager timed under the RL mode's carrier and ranking protocols and two halfway ones)
#   eval-modes-tests (their GPU tests) generation-profile (a decoding step of a SmolLM2-135M-shaped model in the
#   RL rollout's forms, dynamic and static KV cache; nothing carried) decoding-conditions (the rollout's step
#   with and without cuDNN's attention, on key lengths new to its plan cache and seen, and beside the open RL
#   evaluator; scripts/decoding_conditions_gpu.py) baseline-memory (what the baselines'
#   private pool and its scrub do to their timed samples, and the scrub's cost) fresh-measure (the ranker's fresh
#   held-out families, held out of the dataset: their GPU tests, then `cudaperf dataset measure` of them
#   into $OUT/fresh-measure/measurements-*.jsonl.gz; commit that shard into benchmarks/fresh_measure/ with
#   `scripts/collect_dataset_call.py DIR RESULTS --shards benchmarks/fresh_measure`; FRESH_BUDGET_S, default
#   300, bounds the measuring, FRESH_LIMIT, default 16, the tasks per family (96 tasks: 66 in 269 s on the
#   H200, session 20); a later call resumes from the committed shards; FRESH_TESTS=0 skips the GPU tests)
#
# Each step has its own time limit (seconds, overridable as LIMIT_<step>=...), and writes its log straight
# to a file (no pipes that buffer), so a step that is killed still leaves what it printed, and the steps
# after it still run. On the lent H200 machine Python packages missing there travel as wheels in .whl/
# (see docs/gpu-machine.md); they are installed into /tmp/site first. On the lent machine use
# `B=$OUT/run.tgz; OUT=$OUT/run BUNDLE=$B bash scripts/gpu_check.sh ...`: only 8 files come back from a call
# (bash expands `BUNDLE=$OUT/...` after the `OUT=` beside it, so set the bundle's path first).
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
# The sandbox boundary needs bubblewrap: where the machine has none, a Debian package carried in .probe/
# (ignored by git; `apt-get download bubblewrap` on the CPU machine) is unpacked and named to the evaluator.
if ! command -v bwrap >/dev/null && [[ -z ${CUDAPERF_BWRAP:-} ]] && compgen -G ".probe/bubblewrap_*.deb" >/dev/null; then
  dpkg -x .probe/bubblewrap_*.deb /tmp/bwrap-pkg && export CUDAPERF_BWRAP=/tmp/bwrap-pkg/usr/bin/bwrap
fi
# KernelBench levels 1-3 for the self-check: carried in .kb/ (ignored; never committed; extracted from the
# fetched upstream repository with `git archive HEAD KernelBench`).
KERNELBENCH=${KERNELBENCH:-.kb/KernelBench}
GROUPS_=${*:-functional+faults timing-tests analysis repeatability throughput}
SUMMARY="$OUT/summary.md"
: > "$SUMMARY"
python3 scripts/env_info.py > "$OUT/env.json"
cat "$OUT/env.json"
# The GPU's clocks, power and clock-event reasons once a second for the whole call ($OUT/clocks.csv).
python3 -m cudaperf.gpu_clocks --log "$OUT/clocks.csv" &
SMI_PID=$!

# step NAME DEFAULT_LIMIT_S COMMAND...: run with a limit, log to $OUT/NAME.log, one summary row.
step() {
  local name=$1 limit_var="LIMIT_${1//-/_}" default=$2; shift 2
  local limit=${!limit_var:-$default} t0=$SECONDS
  echo "== $name (limit ${limit} s)"
  # pytest gets SIGINT at the limit: it then still prints its failures, errors and slowest durations so far
  local sig=TERM; [[ "${1:-} ${2:-} ${3:-}" == "python3 -m pytest" ]] && sig=INT
  timeout -s "$sig" -k 30 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$? last
  last=$(grep -aE '(passed|failed|error|skipped)' "$OUT/$name.log" | tail -n 1 | sed 's/\x1b\[[0-9;]*m//g')
  [[ $rc -eq 124 || $rc -eq 137 ]] && last="KILLED at the ${limit} s limit; ${last}"
  { echo "| $name | rc=$rc | ${last:-see log} | $((SECONDS - t0)) s |"
    grep -a '^|' "$OUT/$name.log" | grep -v '^| *---' || true
    grep -a -E '^(FAILED|ERROR) ' "$OUT/$name.log" | cut -c1-240 | sed 's/^/    /' || true; } >> "$SUMMARY"
  echo "-- $name done: rc=$rc, $((SECONDS - t0)) s"
}

PYTEST=(python3 -m pytest -q -p no:cacheprovider -rfE --durations=15)
# PYTEST_K narrows every pytest step to matching tests (e.g. a rerun of what failed last time).
[[ -n ${PYTEST_K:-} ]] && PYTEST+=(-k "$PYTEST_K")
# PYTEST_ARGS adds pytest options to every pytest step (e.g. -v, so a step killed at its limit has named
# what passed and failed so far).
[[ -n ${PYTEST_ARGS:-} ]] && read -ra _extra <<< "$PYTEST_ARGS" && PYTEST+=("${_extra[@]}")
# A per-test limit where pytest-timeout is installed (it is on the H200 image), so one hang costs one test.
python3 -c "import pytest_timeout" 2>/dev/null && PYTEST+=(--timeout 300)
# Functional GPU tests run on several pytest-xdist workers at once (they share the GPU; nothing they assert
# depends on its speed); tests marked `timing` run alone. Without xdist everything runs serially. Six by
# default: with twelve on an H100, module fixtures passed pytest's 300 s limit (dev/LOG.md, session 25).
XDIST=()
python3 -c "import xdist" 2>/dev/null && XDIST=(-n "${XDIST_WORKERS:-6}" --dist loadgroup)
DATASET_TESTS=(tests/gpu/test_datasets_gpu.py tests/gpu/test_datasets_more_gpu.py tests/gpu/test_dataset_measure_gpu.py)
NO_DATASET=("${DATASET_TESTS[@]/#/--ignore=}")
# The full-size problems (17, 8.6 and 6.4 GB tensors) size their plans to the whole GPU's free memory and
# the host's: never beside other xdist workers (session 17's functional call, with them inside, lost the
# machine: the likeliest cause; session 14 had run them apart). They run alone in the `full-size` step.
FULL_SIZE=tests/gpu/test_full_size_gpu.py
# The fresh families' GPU tests (180 cases) run in the `fresh-measure` step, before their measurement.
# What `functional` and its halves select: GPU tests but the timed ones, the dataset, full-size and fresh files.
FUNCTIONAL=(-m "gpu and not timing" "${NO_DATASET[@]}" --ignore="$FULL_SIZE" --ignore-glob='tests/gpu/test_fresh_*')

run_step() {
  case $1 in
    tests) step tests 420 "${PYTEST[@]}" -m gpu tests/gpu --ignore=tests/gpu/test_examples_gpu.py "${NO_DATASET[@]}" ;;
    # functional's two halves, each within one 10-minute device call (the whole no longer is: session 19)
    gpu-tests) step gpu-tests 540 "${PYTEST[@]}" "${XDIST[@]}" "${FUNCTIONAL[@]}" tests/gpu ;;
    functional) step functional 480 "${PYTEST[@]}" "${XDIST[@]}" "${FUNCTIONAL[@]}" tests/gpu tests/adversarial ;;
    timing-tests) step timing-tests 300 "${PYTEST[@]}" -s -m "gpu and timing" tests/gpu "${NO_DATASET[@]}" ;;
    adversarial) step adversarial 360 "${PYTEST[@]}" "${XDIST[@]}" -m gpu tests/adversarial ;;
    example-tests) step example-tests 360 "${PYTEST[@]}" -s -m gpu tests/gpu/test_examples_gpu.py ;;
    dataset-tests) step dataset-tests 540 "${PYTEST[@]}" "${XDIST[@]}" -m gpu "${DATASET_TESTS[@]}" ;;
    throughput) step throughput 420 python3 benchmarks/throughput.py --out "$OUT/throughput.json" ${THROUGHPUT_ARGS:-} ;;
    repeatability) step repeatability 240 python3 benchmarks/repeatability.py --out "$OUT/repeatability.json" ;;
    flush-state) step flush-state 120 python3 benchmarks/flush_state.py --out "$OUT/flush_state.json" ;;
    lead-probe) step lead-probe 120 python3 benchmarks/lead_probe.py --out "$OUT/lead_probe.json" ;;
    # why the RL mode's live anchor differs from its carrier's (eager under four protocols, ~120 s)
    anchor-probe) step anchor-probe 240 python3 benchmarks/anchor_protocol_probe.py --out "$OUT/anchor_probe.json" ;;
    faults) step faults 420 python3 benchmarks/faults.py --out "$OUT/faults.json" --store "$OUT/faults.jsonl" ;;
    diagnose) step diagnose 200 python3 scripts/diagnose_gpu_env.py ;;
    analysis) step analysis 300 python3 scripts/validate_static_vs_ncu.py --out "$OUT" ;;
    verdicts) step verdicts 240 python3 scripts/adversarial_verdicts.py --out "$OUT/verdicts.jsonl" ${VERDICTS_ARGS:-} ;;
    # five repeats: with six candidates per arm, three left the arms' spread near the effect (session 20)
    boundary) step boundary 300 python3 benchmarks/boundary_throughput.py --repeats 5 --out "$OUT/boundary.json" ;;
    # the same with the evaluator's default baselines (eager and torch.compile: two baselines a round, whose
    # disposals settle once before the candidate's call)
    boundary-default) step boundary-default 360 python3 benchmarks/boundary_throughput.py --repeats 5 \
      --baselines eager,compile --out "$OUT/boundary_default.json" ;;
    hostile) step hostile 180 python3 benchmarks/hostile_batch.py --out-dir "$OUT/hostile" ;;
    self-check) step self-check 420 python3 scripts/kernelbench_self_check.py --kernelbench "$KERNELBENCH" \
      --out "$OUT/kb-self-check" --budget-s "${SELF_CHECK_BUDGET_S:-110}" ;;
    build-saving) step build-saving 300 python3 benchmarks/build_saving.py --out "$OUT/build_saving.json" ;;
    prepared-references) step prepared-references 180 bash -c \
      "python3 benchmarks/prepared_references.py --rounds 5 > \"$OUT/prepared_references.md\"" ;;
    full-size) step full-size 240 "${PYTEST[@]}" -s -m gpu "$FULL_SIZE" ;;
    sandbox) step sandbox 420 "${PYTEST[@]}" -v -s -m gpu tests/gpu/test_sandbox_gpu.py ;;
    # its JSON lives in /tmp (kept between back-to-back calls on a warm machine, for --append) and is copied out
    # (copied on any exit, a kill at the limit too: the benchmark writes it after every mode's run)
    eval-modes) step eval-modes 480 bash -c "trap 'cp /tmp/eval_modes.json \"$OUT/\" 2>/dev/null' EXIT; \
      trap 'exit 143' TERM; python3 benchmarks/eval_modes.py --repeats 1 --torch-tasks 5 --c-tasks 3 \
      --rl-workers ${EVAL_MODES_ARMS:-8} --cache-dir /tmp/em-cache --out /tmp/eval_modes.json ${EVAL_MODES_ARGS:-}" ;;
    # the RL arms alone over longer streams per task (each candidate 3 times): carriers and drift at a
    # steadier state than the short runs show
    eval-modes-long) step eval-modes-long 480 python3 benchmarks/eval_modes.py --repeats 1 --torch-tasks 5 \
      --c-tasks 3 --rl-only --copies 3 --rl-workers 4,8 --cache-dir /tmp/em-cache --out "$OUT/eval_modes_long.json" ;;
    # the same run with every worker's jobs profiled (cProfile: slower, so never beside the measured run)
    eval-profile) step eval-profile 420 bash -c "python3 benchmarks/eval_modes.py --repeats 1 --torch-tasks 5 \
      --c-tasks 3 --cache-dir /tmp/em-cache --profile-dir \"$OUT/profiles\" --out \"$OUT/eval_profile.json\"; \
      python3 benchmarks/profile_summary.py \"$OUT/profiles\" --top 40 > \"$OUT/profile_summary.md\"" ;;
    generation-profile) step generation-profile 240 python3 scripts/generation_profile.py --model smollm2-shape \
      --out "$OUT/generation_profile.json" ;;
    decoding-conditions) step decoding-conditions 480 python3 scripts/decoding_conditions_gpu.py \
      --out "$OUT/decoding/conditions.json" ;;
    eval-modes-tests) step eval-modes-tests 240 "${PYTEST[@]}" -s -m gpu tests/gpu/test_eval_modes_gpu.py ;;
    baselines) step baselines 480 env OUT="$OUT/baselines" N="${BASELINES_N:-60}" BUDGET_S="${BASELINES_BUDGET_S:-70}" \
      IMPLS="${BASELINES_IMPLS:-2}" bash scripts/baseline_repeatability.sh ;;
    baseline-memory) step baseline-memory 240 python3 benchmarks/baseline_memory.py --device cuda --runs 7 --compile \
      --out "$OUT/baseline_memory.json" ;;
    # the GPU tests bounded (150 s, on the xdist workers) so the measurement keeps its budget in the step
    fresh-measure) step fresh-measure 480 bash -c "[[ ${FRESH_TESTS:-1} == 0 ]] || timeout -k 5 150 ${PYTEST[*]} \
      ${XDIST[*]} -m gpu tests/gpu/test_fresh_*_gpu.py; \
      OUT=$OUT/fresh-measure SHARDS=benchmarks/fresh_measure BUDGET_S=${FRESH_BUDGET_S:-300} \
      HARD_S=$(( ${FRESH_BUDGET_S:-300} + 70 )) bash scripts/dataset_measure.sh --per-gpu 6 \
      --limit ${FRESH_LIMIT:-16} --families \
      \$(python3 -c 'from cudaperf.datasets import registry; print(\",\".join(f.name for f in registry.fresh_families()))')" ;;
    # hack 15's content memo per matmul configuration: the bench alone and through the evaluator
    probe-memo) step probe-memo 150 python3 scripts/probe_memo_gpu.py ;;
    # what the unseen rounds cost the timing stage (three example tasks, unseen sets 5 against 0)
    probe-unseen-cost) step probe-unseen-cost 150 python3 scripts/probe_unseen_cost_gpu.py ;;
    # a few GPU test files apart from the rest (RERUN_PATHS, space-separated; on the xdist workers)
    # (its tests marked `timing` left out: beside xdist workers their medians mean nothing)
    rerun) step rerun 300 "${PYTEST[@]}" "${XDIST[@]}" -m "gpu and not timing" \
      ${RERUN_PATHS:-tests/gpu/test_sandbox_gpu.py} ;;
    *) echo "unknown step: $1" >&2; return 2 ;;
  esac
}

# Each argument is a group; steps joined by '+' in one group run at the same time (only steps whose
# results do not depend on an idle GPU should share it: functional tests, the fault batch; not the dataset
# tests: beside them two sandbox tests failed with CUDA out-of-memory on the H200, most likely from their
# large configurations on 8 workers, and passed alone).
for group in $GROUPS_; do
  IFS=+ read -r -a members <<< "$group"
  if (( ${#members[@]} == 1 )); then run_step "$group"; continue; fi
  pids=()
  for m in "${members[@]}"; do run_step "$m" & pids+=($!); done
  wait "${pids[@]}"  # these steps only: a bare `wait` would also wait for the clock logger, which never ends
done

kill "$SMI_PID" 2>/dev/null; wait "$SMI_PID" 2>/dev/null  # SIGTERM: a script's background job ignores SIGINT
echo
echo "== summary ($OUT) =="
cat "$SUMMARY"
# The device tool returns at most 8 files from $OUT: BUNDLE=FILE.tgz packs the whole folder into one
# archive (the summary is printed above, so it is in the call's output too).
if [[ -n ${BUNDLE:-} ]]; then
  name=$(basename "$BUNDLE")
  if tar czf "$BUNDLE" --exclude="./$name" -C "$OUT" .; then
    # a bundle inside $OUT stays, with nothing else beside it; one outside replaces $OUT
    if [[ $(realpath -m "$(dirname "$BUNDLE")") == "$(realpath -m "$OUT")" ]]; then
      find "$OUT" -mindepth 1 ! -name "$name" -delete
    else
      rm -rf "$OUT"
    fi
    echo "bundled into $BUNDLE"
  fi
fi
