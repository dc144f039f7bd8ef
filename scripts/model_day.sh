#!/usr/bin/env bash
# The model day on the H200: every model run the project lacks, in four back-to-back device calls on one
# warm machine (/tmp survives between them; a fresh machine starts bare, so the calls must follow each other
# at once and finish inside the machine's 30-minute hold). Prepare once here:
#   bash scripts/fetch_model_carry.sh
#
#   call  carry              command                          what
#   A     .carry/model-1     bash scripts/model_day.sh A      wheels -> /tmp/site, GGUF part 0 -> /tmp/carry
#                                                             (+ A_EXTRA_S seconds of eval-modes, default 0)
#   B     .carry/model-2     bash scripts/model_day.sh B      join + convert SmolLM2; SFT (issue 23) with the
#                                                             LM ranker (issue 20) beside it on the same GPU
#   C     (none)             bash scripts/model_day.sh C      RL (GRPO, resumes SFT if unfinished), then the
#                                                             base/SFT/RL comparison (issue 23), resumable
#   D     (none)             bash scripts/model_day.sh D      the comparison's rest, the 20-task refinement
#                                                             run and the backends' throughput (issue 21)
# Every call: timeout_s 600; its outputs come back as $OUT/<call>.tgz (re-packed after every step, so a kill
# keeps what was done), $OUT/<call>-summary.txt (the RESULT lines) and stdout (the summary again). Each
# step runs under `timeout` within the call's budget (BUDGET_S, default 570 s from the script's start).
#
# Time arithmetic (H200 figures from shared/docs/rl.md and gpu-machine.md; CPU figures measured here on
# 2 loaded cores, 2026-12-04, with the real SmolLM2; see the report of session 15):
#   - SmolLM2 load + dequantise on the GPU 31 s (once, in B; later loads read the converted copy, ~2 s).
#   - decoding is bound by per-step overhead, not by rows: 256 new tokens at batch 64 = 1,044 tok/s (61 ms a
#     step), at batch 256 = 3,718 tok/s (69 ms a step); GRPO's 16 x 192 tokens 6-8 s (~40 ms a step). So a
#     round costs ~max_new_tokens x 40-70 ms whatever its rows: 1024 tokens ~ 40-70 s. Everything that
#     generates therefore puts all its rows in one call (128 rows a call, compare --batch-seeds).
#   - SFT: 74 s an epoch over 4.7 M tokens measured there (~63 k tok/s, batch 16). The measured examples of
#     the train families (holdout removed) are ~9.1 k x 1,744 tokens = 16 M tokens: ~255 s an epoch. B has
#     570 - 10 (join) - 31 (convert) - ~45 (load, examples, trainer) - 60 (margin: the step running at the
#     limit, checkpoint + final) = ~425 s of training: ~1.6 epochs alone, ~1.3 with the LM ranker beside it.
#     So --sft-epochs 2 with --final-on-limit: the model at the limit is final (stopped_early.json says so).
#   - LM ranker (beside SFT): the table of 47,127 rows and their sources ~70 s (69 s here), training stopped
#     after RANKER_TRAIN_MIN=4 min (1,000 steps of 16 pairs x 512 tokens at 0.1-0.2 s alone), scoring
#     11,094 test rows + 4 k calibration texts (~470 batches of 32) ~1 min: ~6.5 min, ends before SFT.
#   - RL step (4 tasks x 4 trajectories x 2 turns, 1024 new tokens): 2 rounds x (1024 x ~40 ms + ~10 s
#     evaluation) + ~3 s optimiser ~ 100 s; C: ~30 s start (tasks, policy, evaluator) + 3 steps = ~330 s.
#   - comparison (8 tasks of each of 2 sets x 3 seeds = 48 rows a round, 2 turns, 1024 tokens): per model
#     2 x (1024 x ~60 ms + ~15 s) ~ 150 s; 3 models ~ 450 s: ~200 s in C, the rest in D.
#   - refinement run (20 test tasks x 2 samples x 3 turns, 768 tokens, default evaluator): 3 rounds x
#     (768 x ~50 ms + ~20 s) ~ 180 s. Backends: 4 batches x 256 tokens x ~60 ms + loads ~ 80 s.
#   Total ~ A 30 + B 570 + C 570 + D 450 = 1,620 s of the session's 1,800 device-seconds, plus machine start
#   and transfers, all within the 30-minute hold: no room for more. What to cut, in this order, if the
#   lease is shorter: A's eval-modes (already off: A_EXTRA_S=0; it needs no model, so another session can
#   run it), the backends' throughput (gpu-machine.md already has batch 64/256 figures), the refinement
#   run's second sample (REFINE_SAMPLES=1), the comparison's third seed (COMPARE_SEEDS="0 1"); never SFT,
#   which everything after it needs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
CALL=${1:?usage: bash scripts/model_day.sh A|B|C|D}
BUDGET_S=${BUDGET_S:-570}
OUT=${OUT:-/tmp/model_day_out}
STAGE=/tmp/model_day/$CALL  # everything is written here and packed into $OUT/$CALL.tgz after each step
WORK=/tmp/cudaperf_train
GGUF=/tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$OUT" "$STAGE"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src
export CUDAPERF_CACHE_DIR=/tmp/cudaperf-cache  # evaluator builds and the converted SmolLM2, shared by all
[[ -f $GGUF ]] && export CUDAPERF_SMOLLM2_GGUF=$GGUF
SUMMARY=$STAGE/summary.txt
touch "$SUMMARY"

left() { echo $((BUDGET_S - SECONDS)); }

pack() {  # the stage folder as one archive (at most 8 files come back from a call), and the summary
  tar czf "$OUT/.$CALL.tgz" -C "$STAGE" . && mv "$OUT/.$CALL.tgz" "$OUT/$CALL.tgz"
  cp "$SUMMARY" "$OUT/$CALL-summary.txt"
}

# step NAME SECONDS COMMAND...: at most SECONDS (and never past the budget less 15 s for packing), log to
# $STAGE/NAME.log, its RESULT lines and exit status to the summary, then pack.
step() {
  local name=$1 want=$2; shift 2
  local limit=$(( want < $(left) - 15 ? want : $(left) - 15 )) t0=$SECONDS rc
  if (( $(left) - 15 < 10 )); then  # nothing useful fits
    echo "| $name | skipped: $(left) s left |" | tee -a "$SUMMARY"
    return 0
  fi
  echo "== $name (limit ${limit} s, $(left) s left)"
  timeout -k 10 "$limit" "$@" > "$STAGE/$name.log" 2>&1
  rc=$?
  [[ $rc -eq 124 || $rc -eq 137 ]] && rc="$rc (killed at ${limit} s)"
  { echo "| $name | rc=$rc | $((SECONDS - t0)) s |"; grep -a '^RESULT' "$STAGE/$name.log" || true; } \
    | tee -a "$SUMMARY"
  pack
}

cap() {  # $1 seconds, or what the budget leaves for a step (less 15 s for packing) when that is less
  local l=$(( $(left) - 15 ))
  echo $(( $1 < l ? $1 : l ))
}

mins() {  # a script's own --max-minutes inside a step of $1 seconds, keeping $2 seconds for what it does
  python3 -c "print(round(max(0.5, ($1 - $2) / 60), 2))"  # after its clock stops (a round, a save)
}

env_check() {
  python3 - <<'PY'
import importlib, json, platform
info = {"python": platform.python_version()}
for name in ("torch", "transformers", "trl", "datasets", "peft", "accelerate", "pyarrow", "gguf",
             "tree_sitter", "tree_sitter_cuda"):
    try:
        info[name] = getattr(importlib.import_module(name), "__version__", "present")
    except Exception as exc:  # noqa: BLE001 - report whatever is missing, do not stop
        info[name] = f"MISSING ({type(exc).__name__}: {exc})"[:160]
import torch
info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print("RESULT env " + json.dumps(info))
PY
}

call_A() {
  [[ -d .carry/model-1/wheels ]] || { echo "carry .carry/model-1 (fetch_model_carry.sh)" >&2; exit 2; }
  mkdir -p /tmp/carry
  cp .carry/model-1/*.part0 /tmp/carry/
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .carry/model-1/wheels/*.whl > "$STAGE/install.log" 2>&1 && touch /tmp/carry/done-A
  echo "| install | rc=$? | wheels into /tmp/site, part 0 in /tmp/carry |" | tee -a "$SUMMARY"
  step env 60 env_check
  if (( ${A_EXTRA_S:-0} > 0 )); then  # a GPU step that needs no model (issue 21's evaluation modes)
    step eval-modes "$A_EXTRA_S" env OUT="$STAGE/eval-modes" LIMIT_eval_modes=$((A_EXTRA_S - 20)) \
      bash scripts/gpu_check.sh eval-modes
  fi
  pack
}

call_B() {
  [[ -d .carry/model-2 ]] || { echo "carry .carry/model-2 (scripts/fetch_model_carry.sh)" >&2; exit 2; }
  local exports
  exports=$(bash scripts/join_model_carry.sh 2> "$STAGE/join.log") || { cat "$STAGE/join.log"; exit 1; }
  eval "$exports"
  echo "| join | $exports | $SECONDS s |" | tee -a "$SUMMARY"
  step env 60 env_check
  step convert 120 python3 -c "
import time; t = time.perf_counter()
from cudaperf.agent.backends.smollm2 import SmolLM2Options, convert, converted_dir, find_gguf
o = SmolLM2Options(); g = find_gguf(); d = converted_dir(g, o)
convert(g, d, o.cache_dtype) if not (d / 'config.json').is_file() else None
print(f'RESULT convert {{\"dir\": \"{d}\", \"seconds\": {time.perf_counter() - t:.1f}}}')"
  local model
  model=$(find "$CUDAPERF_CACHE_DIR/models" -maxdepth 1 -name 'smollm2-135m-instruct-bfloat16-*' | head -n 1)
  # The LM ranker beside SFT: both train, neither times kernels. Its own limit; training stops after
  # RANKER_TRAIN_MIN minutes, then it scores the test rows.
  ( timeout -k 10 "$(cap $(( $(left) - 30 )))" python3 scripts/ranker_lm_h200.py --out "$STAGE/ranker" \
      --model "$model" --device cuda --train-max-minutes "${RANKER_TRAIN_MIN:-4}" > "$STAGE/ranker.log" 2>&1
    echo "| ranker | rc=$? |" >> "$STAGE/ranker.log" ) &
  local ranker_pid=$! s
  s=$(cap 9999)
  step sft "$s" python3 scripts/train_h200.py --out "$STAGE/train" --work "$WORK" \
    --max-minutes "$(mins "$s" 20)" --margin-minutes 1.0 --sft-epochs "${SFT_EPOCHS:-2}" --final-on-limit
  wait "$ranker_pid"
  { tail -n 1 "$STAGE/ranker.log"; grep -a '^RESULT' "$STAGE/ranker.log" || true; } | tee -a "$SUMMARY"
}

compare() {  # the comparison for at most $1 seconds (no round starts in the last ROUND_S)
  local s seeds
  s=$(cap "$1")
  read -r -a seeds <<< "${COMPARE_SEEDS:-0 1 2}"
  step compare "$s" python3 scripts/train_compare_h200.py --work "$WORK" --out "$STAGE/compare" \
    --seeds "${seeds[@]}" --turns 2 --limit-tasks 8 --max-new-tokens 1024 \
    --max-minutes "$(mins "$s" "${ROUND_S:-120}")"
}

call_C() {
  [[ -f $GGUF ]] || { echo "no $GGUF: calls A and B must run first on this warm machine" >&2; exit 2; }
  step env 60 env_check
  local s
  s=$(cap "${RL_S:-330}")
  step train "$s" python3 scripts/train_h200.py --out "$STAGE/train" --work "$WORK" \
    --max-minutes "$(mins "$s" 10)" --margin-minutes 0.8 --sft-epochs "${SFT_EPOCHS:-2}" --final-on-limit \
    --rl-steps "${RL_STEPS:-3}" --rl-tasks-per-step 4 --rl-trajectories 4 --rl-turns 2 \
    --rl-max-new-tokens 1024
  step promote 60 python3 scripts/train_h200.py --work "$WORK" --promote-only  # after a kill, if any
  compare 9999
}

call_D() {
  [[ -f $GGUF ]] || { echo "no $GGUF: calls A and B must run first on this warm machine" >&2; exit 2; }
  compare $(( $(left) - ${REFINE_S:-200} - ${BACKENDS_S:-90} - 15 ))
  local s
  s=$(cap "${REFINE_S:-200}")
  step agent-refine "$s" python3 scripts/agent_refine_h200.py --out "$STAGE/agent_refine" --tasks split:test \
    --limit 20 --samples "${REFINE_SAMPLES:-2}" --turns 3 --max-new-tokens 768 --resume \
    --max-minutes "$(mins "$s" 70)"
  step backends "${BACKENDS_S:-90}" python3 scripts/backends_h200.py run --keep-cache \
    --cache-dir "$CUDAPERF_CACHE_DIR" --out "$STAGE/backends_h200.jsonl"
}

case $CALL in
  A) call_A ;;
  B) call_B ;;
  C) call_C ;;
  D) call_D ;;
  *) echo "usage: bash scripts/model_day.sh A|B|C|D" >&2; exit 2 ;;
esac
pack
echo
echo "== summary of call $CALL ($SECONDS s; $OUT/$CALL.tgz) =="
cat "$SUMMARY"
