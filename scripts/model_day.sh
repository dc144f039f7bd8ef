#!/usr/bin/env bash
# The model day on the H200: every model run the project lacks, in five back-to-back device calls on one
# warm machine (/tmp survives between them; a fresh machine starts bare, so the calls must follow each other
# at once and finish inside the machine's 30-minute hold). Prepare once here:
#   bash scripts/fetch_model_carry.sh
#
#   call  carry              command                          what
#   A     .carry/model-1     bash scripts/model_day.sh A      wheels -> /tmp/site, GGUF part 0 -> /tmp/carry
#                                                             (+ A_EXTRA_S s of eval-modes, default 0; it
#                                                             needs .carry/model-3 carried too; + the GPU
#                                                             tests named in A_TESTS)
#         (a call's 64 MiB are counted in disk blocks: the tree's 1,873 files take ~33 MB, a GGUF part
#         ~18.5 MB, so a call carries one part: A, then one A2 a part)
#   A2    .carry/model-1b    bash scripts/model_day.sh A2     GGUF part 1 -> /tmp/carry (seconds: the GGUF
#                                                             travels in parts so that every call fits the
#                                                             64 MiB carry limit; A2 again with
#                                                             .carry/model-1c and -1d: parts 2 and 3,
#                                                             PARTS=5 being the default of
#                                                             fetch_model_carry.sh)
#   K     .carry/*-adapter   bash scripts/model_day.sh K      carried LoRA adapters -> /tmp/adapters (when C's
#         .carry/sft-examples                                 carry cannot hold them; C looks there first);
#                                                             SFT's prebuilt examples -> /tmp/carry (for B)
#   examples (here, no GPU)  bash scripts/model_day.sh examples   SFT's examples with B's settings ->
#                                                             .carry/sft-examples/ (minutes; before the lease)
#   B     .carry/model-2     bash scripts/model_day.sh B      join + convert SmolLM2; SFT (issue 23) with the
#                                                             LM ranker (issue 20) beside it on the same GPU
#   C     .carry/model-3     bash scripts/model_day.sh C      the evaluator's wheels + bubblewrap; RL (GRPO),
#                                                             then the base/SFT/RL comparison (issue 23)
#   D     (none)             bash scripts/model_day.sh D      the comparison's rest, the 20-task refinement
#                                                             run (issue 21; backends' throughput if
#                                                             BACKENDS_S > 0)
# Every call: timeout_s 600; its outputs come back as $OUT/<call>.tgz (re-packed after every step, so a kill
# keeps what was done), $OUT/<call>-summary.txt (the RESULT lines) and stdout (the summary again). Each
# step runs under `timeout` within the call's budget (BUDGET_S: default A 570, B 540, C 540, D 480 s from
# the script's start; the device call's timeout_s stays 600).
#
# Measured on the first model day (session 16, results/2026-12-04-s16/README.md): convert 51 s; SFT 509
# steps (0.89 epoch) in 348 s of training beside the LM ranker; one GRPO step (4 x 4 trajectories, 2 turns,
# 1,024 tokens) did not end within 150 s: a 1,024-token round of the SFT model takes 22-76 s to generate,
# so a step with its evaluation needs ~150-200 s; the comparison's rounds 50-75 s of generation (base) and
# 22-76 s (SFT). The second day, with base's comparison runs and the LM ranker and refinement figures from
# the first (same tasks, seeds and settings):
#   A (with its ~150 s generation profile), A2 as below; RL_STEPS=2 bash scripts/model_day.sh B;
#   COMPARE_BASE=none RL_STEPS=2 RL_S=430 bash scripts/model_day.sh C;
#   COMPARE_BASE=none REFINE_S=0 bash scripts/model_day.sh D
# (A's profile replaces D's PROFILE_S; with a static cache chosen, RL_STEPS can rise in B and C alike.)
# Measured since (session 27, H100, results/2026-12-05-s27-h100/call2-generation-profile/): the rollout's
# decoding step on a bfloat16 copy of the policy 21.0 ms against 97.7 ms for the autocast form, the static
# cache in the rollout's form no faster (382 ms as measured). So skip A's profile and name the forms:
#   RL_GEN_WEIGHTS=bfloat16 RL_GEN_CACHE=dynamic A_PROFILE_S=0 in every call (B and C read them), and
#   a step (4 x 4 trajectories, 2 turns, 1,024 tokens) is ~2 x (1,024 x ~21 ms + ~12 s of evaluation at the
#   RL mode's 83 evaluations/min) + ~3 s ~ 70 s: RL_STEPS=5 with RL_S=430 in C.
# Measured on the second model day (session 28, H200, results/2026-12-05-s28-h200/): the real rollouts
# decoded at 80-103 ms a step on the bfloat16 copy, not ~21, so one RL step took 283 s (168 s generating,
# 112 s evaluating) and one step fitted RL_S=430; a comparison round took ~95-105 s of generation plus
# 60-120 s of evaluation, and the machine's start ~200 s of the 1,800. The day that fits: A and A2 as above;
# B as above; C with RL_S=430 COMPARE_BASE=none COMPARE_TURNS=1; D with COMPARE_BASE=none COMPARE_TURNS=1
# REFINE_S=0 (the first turns of SFT and RL; base's are session 16's). C writes the first rollout's decoding
# probe (train/rl_decoding_probe.txt: every step's time, a profile of a few steps; --rl-profile-decoding),
# and the comparison each model's (compare/<model>-decoding_probe.txt; --profile-decoding).
# A lease with ~1,450 s left (a refused start costs 90-180 s): B with BUDGET_S=420, C with RL_S=380 (one
# GRPO step, then SFT's comparison round, whose evaluation D resumes from the kept replies), D as above:
# ~1,435 s with the start (dev/LOG.md, GPU machine practice, session 31). With SFT_LORA=16 in B and C, the
# SFT adapter comes back, and later leases skip SFT (SFT_LORA below): ~1,000 s.
# (RL_STEPS and RL_TASKS must be the same in B and C: a resumed run must match its saved configuration).
# Measured on session 34's lease (H100, results/2026-12-06-s34-h100/): B's 7,985 SFT examples (first turns,
# refinement, repair) took 234 s to build and left 117 s of training (0.6 s a step, LoRA rank 16, batch 16:
# an epoch ~300 s): build them here first (`examples`, carried in K). C's RL finished no step in 420 s
# (cause not established; a slow batch's log now names the candidates still out), and a candidate that
# spun to the 300-s deadline held a comparison round: the RL mode stops such a stage at 60 s since.
# Measured on session 37's lease (H100, results/2026-12-06-s37-h100/): with the examples carried, B's
# BUDGET_S=500 gave 477 SFT steps (0.95 epoch) in 342 s; C's RL from that model ended no step in 440 s, its
# first turn evaluated in 153 s (answers run to the correctness deadline, 15 s on a GPU since) and its
# second held by a correct candidate's minute-long timing stage. Its train/rl_evaluations.jsonl now says
# what each candidate was and where its time went.
# Measured on session 38's lease (H100, results/2026-12-06-s38-h100/): K the SFT adapter, B with
# SFT_FROM_ADAPTER=1 (58 s), C with RL_S=450 BUDGET_S=580 (3 RL steps in 293 s: evaluation 80% of them) and
# D with BUDGET_S=570 (the SFT/RL comparison's 12 runs in 512 s): RL and a whole comparison fit one lease.
# Measured on session 39's lease (H200, results/2026-12-06-s39-h200/): two C calls with RL_STEPS=16
# RL_ITERATIONS=2 RL_FROM_ADAPTER=1 C_COMPARE=0 (RL_S=500, then 270) took 16 GRPO steps at 28 s a step.
# The next: the SFT/RL comparison, C with RL_FROM_ADAPTER=1 RL_S=0, then D (dev/LOG.md).
# SFT_FASTEST=k: SFT on each task's k fastest measured implementations (default 0: all of them).
# SEED=k: the training seed of SFT and RL (default 0; the same in B and C). With SFT_FROM_ADAPTER=1 only
# RL trains, so each lease with another SEED adds one RL seed from the same SFT model (the seed spread).
# SFT_REFINE=k: besides, k second-turn examples a task (the conversation after a slower measured
# implementation, answered by the fastest; SftConfig.refine_per_task; default 0: first turns only). B then
# carries [".carry/model-3", ".carry/model-2"] (tree-sitter for the feedback's structural analysis; ~63 MB
# with the tree). Building them took 27 s for k=1 on the 2-core CPU (1,221 pairs, 1,123 within 4,096 tokens).
# SFT_INIT_ADAPTER=1: B's SFT starts its LoRA adapter from the carried .carry/sft-adapter (K) and trains it
# on B's examples (SftConfig.init_adapter): a second SFT stage, e.g. with SFT_REFINE_FROM and SFT_EPOCHS=0.25;
# its adapter comes back as sft-adapter.tgz, one adapter over the base as before.
# SFT_REFINE_FROM="naive ...": those pairs' first replies from these strategies first (SftConfig.refine_from;
# default: the slowest first). "naive" starts them from the C tasks' speedup baseline, the answer the
# policy gives most often at turn 1 (dev/LOG.md, refinement from what the policy writes).
# SFT_REFINE_MIN=x: a pair's answer at least x times faster than its first reply (default 1.2; 1.1, the
# headroom threshold, gives map's headroom tasks 282 naive -> vectorized pairs instead of 21).
# RL_LORA=r: RL trains LoRA adapters of rank r (default 0: full weights); call C then returns the RL
# adapter as $OUT/rl-adapter.tgz (parts as for SFT), with rl_lineage.json (the RL steps behind it over every
# lease); kept in .carry/rl-adapter, a later lease continues RL from it with RL_FROM_ADAPTER=1 (C merges it
# into SFT's model and trains a new adapter on top, a fresh optimiser; carry it in call K when C's carry is
# full: the tree ~33 MB in disk blocks, model-3 1.3 MB, each rank-16 adapter ~20 MB, 64 MiB in all). RL_FROM_ADAPTER=1
# with RL_S=0: no RL step; rl/final is the carried adapter merged into SFT's model, and C compares (a lease
# that compares what an earlier one trained, with SFT_FROM_ADAPTER=1 and both adapters carried in K).
# RL's training seeds (issue 23: three seeds): a lease with SEED=k, SFT_FROM_ADAPTER=1 and no
# RL_FROM_ADAPTER trains seed k from the same SFT model; keep its returned adapter as .carry/rl-adapter-seedk
# (K carries every .carry/rl-adapter-seed*, one a call). FINAL_FROM_ADAPTERS="rl@seed0=rl-adapter
# rl@seed1=rl-adapter-seed1" makes each NAME's model in call C (SFT's model merged with that adapter) and,
# with RL_S=0, C compares: COMPARE_MODELS="sft rl@seed0 rl@seed1" reports RL over its training seeds
# (cudaperf.train.training_seeds; compare_partial.py does the same across leases' trajectories).
# RL_FROM_STATE=1 (call C): RL continues an earlier lease's run itself, from its last checkpoint that call C
# returned without its optimiser state ($OUT/rl-state.tgz, ~20 MB; restore it into .carry/rl-state and carry
# it in a K call of its own): the same adapter and data order (the tasks after those it trained on), a fresh
# optimiser (train.carried_state); RL_STEPS above its step, the same SEED, and the SFT adapter it trained on
# (refused otherwise: rl_base.json). Unlike RL_FROM_ADAPTER, one adapter and one task order span the leases.
# C_COMPARE=0: call C trains and promotes only (a first of two C calls: the second resumes its RL, and
# the comparison must see the last RL model).
# COMPARE_TASKS: tasks a set in the comparison (default 8; the same in C and D: D resumes C's runs).
# COMPARE_NAME: the comparison's folder (default compare: $WORK/compare, $STAGE/compare): a comparison of
# other sets or settings for a model already compared on this machine needs its own (settings are checked).
# COMPARE_SETS: its task sets (default "heldout test": held-out tasks of the training families, held-out
# families; the same in C and D). COMPARE_KINDS, COMPARE_FAMILIES (space-separated; default all): only
# those tasks in every set, e.g. COMPARE_KINDS=c COMPARE_FAMILIES="$RL_FAMILIES" COMPARE_SETS=heldout for
# the held-out tasks of the families RL trained on (a set round-robin over all families holds few of them).
# RL_TURN_SCORE=best_so_far (B and C): a turn's score in RL's returns is the best of the turns up to it, so
# a failed refinement after a correct turn keeps that turn's score (RlConfig.turn_score; default own).
# RL_KINDS, RL_FAMILIES (space-separated), RL_LR: the RL tasks' kinds and families (default: all of both)
# and learning rate (default 2e-6); the same in B and C. RL_ITERATIONS=mu: optimiser steps per rollout batch
# (RlConfig.num_iterations, default 1; RL_STEPS a multiple of it; the same in B and C): each evaluated batch
# serves mu steps, evaluation being ~80% of a step's time (session 38). RL_EVAL_WORKERS: sandboxed
# evaluation workers per GPU in RL (RlConfig.eval_workers_per_gpu, default 8). RL_BASELINES: what RL's
# candidates are timed against (RlConfig.timing_baselines: reward, the default, or all; the same in B and C).
# RL_MIN_HEADROOM=x: RL only on tasks whose fastest measured implementation is x times their baseline or
# more (RlConfig.min_headroom; the same in B and C; `cudaperf dataset stats benchmarks/dataset_measure`
# shows each family's headroom); COMPARE_MIN_HEADROOM=x: the comparison's tasks alike (C and D alike).
# RL_SHARE=0: every RL answer evaluated, repeats too (RlConfig.share_repeated_answers; default 1: each
# distinct answer once, its repeats given its result; the same in B and C).
# RL_COPIES=0: every RL answer that copies its C task's naive port is timed (RlConfig.anchor_copies; default
# 1: such a copy takes the port's timings from the task's last timed pass; the same in B and C).
# RL_OVERLAP=0: a turn's RL answers are evaluated after its generation (RlConfig.evaluate_while_generating;
# default 1: each answer as its reply ends, the GPU gate lent to the generation so timing waits for its end).
# SFT_CONTINUE=1 (call B again): an SFT stopped by B's limit trains on from its last checkpoint (same data
# order, its optimiser state), so SFT can span two calls. With SFT_LORA, B also returns the last checkpoint
# without its optimiser state ($OUT/sft-state.tgz, ~18 MB; restore it into .carry/sft-state), and a later
# lease's B with SFT_FROM_STATE=1 (.carry/sft-state carried in a K call of its own) trains on from it: the
# same data order and learning-rate schedule, a fresh optimiser (train.carried_state), so SFT spans leases.
# SFT_STOP_AT=n: B's SFT stops after n optimiser steps, its schedule still the one SFT_EPOCHS gives
# (SftConfig.stop_at_step): session 44's 782 steps of a 2-epoch schedule, cut there by the time limit, are
# trained again in one call with SFT_STOP_AT=782.
# SFT's examples: built in the run unless call K carried `bash scripts/model_day.sh examples`' file (made
# here with the same settings; session 34's B spent 234 s building them and 117 s training).
# SFT_REPAIR=k: besides, k repair examples a task (the conversation after a broken copy of a verified
# implementation, judged by the evaluator without a GPU, answered by the intact one; SftConfig.repair_per_task;
# default 0). SFT's budget counts building the examples (session 33's B, before it did, ran past its call).
# SFT_LORA=r: SFT trains LoRA adapters of rank r (default 0: full fine-tuning); call B then returns the adapter
# as $OUT/sft-adapter.tgz (in 15 MiB parts when larger; rank 16 of SmolLM2-135M: ~20 MB in float32), to be
# kept in .carry/sft-adapter (export_adapter below says how). A later lease skips SFT: B with
# SFT_FROM_ADAPTER=1 (join and convert only), C with .carry/sft-adapter carried beside .carry/model-3 (it
# merges the adapter into the base as sft/final first; SFT_ADAPTER_DIR names another folder); the same SFT
# model every lease, so each lease's RL run is one more seed from it.
# COMPARE_MODELS="sft rl" (default: base unless COMPARE_BASE=none, sft, rl): the trained models compared,
# by name (their final checkpoints under the run's work folder).
# COMPARE_TURNS (default 2): the comparison's turns per trajectory (a call with other turns than the runs it
# would continue is refused; a round cut by a call's end resumes with the replies it had generated).
# RL_GEN_ATTENTION=no_cudnn|any (default no_cudnn): the attention kernels the rollouts and the comparison
# decode with (RlConfig.generation_attention; session 32's probes: cuDNN's attention built a plan every
# decoding step, about half of a step's host time).
# RL_GEN_CACHE=graph: the rollouts and the comparison decode with a captured CUDA graph a step
# (RlConfig.generation_cache, agent.backends.step_decoder). Not yet run on a GPU.
# RL_GEN_CACHE=static|dynamic: the KV cache the rollouts and the comparison generate with (static: a
# compiled decoding step). Unset, call A profiles a SmolLM2-shaped model (A_PROFILE_S=150 s, nothing
# carried) and the later calls on the same machine take what it found (`gen_cache`).
# RL_TASKS (tasks per GRPO step, default 4): rows are nearly free in a round (decoding is per-step
# overhead), so 8 tasks give twice the groups per step for more evaluation and a longer optimiser step.
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
#     540 - 10 (join) - 31 (convert) - ~45 (load, examples, trainer) - 60 (margin: the step running at the
#     limit, checkpoint + final) = ~395 s of training: ~1.5 epochs alone, ~1.2 with the LM ranker beside it.
#     So --sft-epochs 2 with --final-on-limit: the model at the limit is final (stopped_early.json says so).
#   - LM ranker (beside SFT): the table of 47,127 rows and their sources ~70 s (69 s here), training stopped
#     after RANKER_TRAIN_MIN=4 min (1,000 steps of 16 pairs x 512 tokens at 0.1-0.2 s alone), scoring
#     11,094 test rows + 4 k calibration texts (~470 batches of 32) ~1 min: ~6.5 min, ends before SFT.
#   - RL step (4 tasks x 4 trajectories x 2 turns, 1024 new tokens): 2 rounds x (1024 x ~40 ms + ~10 s
#     evaluation) + ~3 s optimiser ~ 100 s; C: RL_S=270 s = ~30 s start (tasks, policy, evaluator) +
#     RL_STEPS=2 steps + the final save; a step that would end past the budget is not started. At this
#     size RL is the pipeline's check on the H200, not a training run: 2 GRPO steps at lr 2e-6 will not
#     move the comparison; a third step would cost the comparison a round it needs.
#   - comparison (8 tasks of each of 2 sets x 3 seeds = 48 rows a round, 2 turns, 1024 tokens): a round
#     ~1024 x ~60 ms + ~15 s evaluation ~ 75 s, 6 rounds (3 models x 2 turns) ~ 450 s + loads: 2-3 rounds
#     in C (~240 s; no round starts in its last ROUND_S=120 s), 3 in D (~295 s). Models in the order base,
#     SFT, RL: what a short day loses is RL's row, the one least changed by 2 steps.
#   - refinement run (20 test tasks x 2 samples x 3 turns, 512 tokens, default evaluator): 3 rounds x
#     (512 x ~50 ms + ~20 s) + load ~ 150 s (REFINE_S=170). Backends: 4 batches x 256 tokens x ~60 ms +
#     loads ~ 80 s (BACKENDS_S=90; off by default, see below).
#   Total: A ~30 + A2 ~5 + B 540 + C 540 + D 480 = ~1,595 s, plus the machine's start (1-2 min) and ~15 s of
#   transfer a call: ~1,770 s of the 1,800 device-seconds and of the 30-minute hold, so the calls must follow
#   each other at once. Rows are nearly free (decoding is per-step overhead), rounds and tokens are not: so
#   the comparison keeps 3 seeds and 2 sets, the refinement run 2 samples. Already cut, and why: A's
#   eval-modes (A_EXTRA_S=0: it needs no model, any later call can run it), the backends' throughput
#   (BACKENDS_S=0: gpu-machine.md has batch 64/256 figures and the refinement run's rounds give tokens/s
#   at its batch), RL's third step. Next to cut if the lease is shorter: RL_STEPS=1 (~100 s), then the
#   refinement run's third turn; never SFT, which everything after it needs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
CALL=${1:?usage: bash scripts/model_day.sh A|A2|K|B|C|D|examples}
# A ends when its copy and install are done
declare -A BUDGETS=([A]=570 [A2]=60 [K]=60 [B]=540 [C]=540 [D]=480 [examples]=3600)
BUDGET_S=${BUDGET_S:-${BUDGETS[$CALL]:-570}}
# SMOKE=1: the same command lines at smoke scale on a CPU machine (small sizes appended: argparse keeps
# the last value), with MODEL_DAY_TMP moving every /tmp path (join_model_carry.sh follows it): checks the
# commands and the plumbing, not the H200's times. The wheels are not installed then (this machine has
# them; they are built for the H200's Python 3.12). SMOKE_RL_STEPS: RL's steps there (default
# RL_ITERATIONS; more to try a run continued across two smoke leases with RL_FROM_STATE).
SMOKE=${SMOKE:-0}
export MODEL_DAY_TMP=${MODEL_DAY_TMP:-/tmp}
T=$MODEL_DAY_TMP
OUT=${OUT:-$T/model_day_out}
STAGE=$T/model_day/$CALL  # everything is written here and packed into $OUT/$CALL.tgz after each step
WORK=$T/cudaperf_train
GGUF=$T/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$OUT" "$STAGE"
export PYTHONUNBUFFERED=1 PYTHONPATH=$T/site:$PWD/src
export CUDAPERF_CACHE_DIR=$T/cudaperf-cache  # evaluator builds and the converted SmolLM2, shared by all
# The evaluator's sandbox boundary: bubblewrap unpacked by call A where the machine has none.
if ! command -v bwrap > /dev/null && [[ -z ${CUDAPERF_BWRAP:-} && -x $T/bwrap-pkg/usr/bin/bwrap ]]; then
  export CUDAPERF_BWRAP=$T/bwrap-pkg/usr/bin/bwrap
fi
X_SFT=() X_RL=() X_COMPARE=() X_REFINE=() X_BACKENDS=() X_RANKER=() X_PROFILE=() X_PARTIAL=()
if [[ $SMOKE == 1 ]]; then
  X_SFT=(--cpu-smoke --sft-limit-tasks 3 --sft-batch 1 --sft-max-length 2300 --sft-max-steps 2
         --sft-val-limit-tasks 1 --sft-save-steps 1)
  X_RL=(--cpu-smoke --rl-steps "${SMOKE_RL_STEPS:-${RL_ITERATIONS:-1}}" --rl-limit-tasks 2
        --rl-tasks-per-step 1 --rl-trajectories 2 --rl-max-new-tokens 16)
  X_COMPARE=(--cpu-smoke --limit-tasks 1 --max-new-tokens 16)
  X_PARTIAL=(--tasks 1)
  X_REFINE=(--device cpu --limit 2 --samples 1 --turns 2 --max-new-tokens 16)
  X_BACKENDS=(--device cpu --batches "1,2" --max-new-tokens 8)
  X_PROFILE=(--device cpu --batch 2 --prompt-tokens 64 --new-tokens 8 --profile-steps 2)
  X_RANKER=(--device cpu --steps 2 --batch-pairs 2 --max-tokens 128 --families elementwise sort
            --max-train-pairs 200)
fi
[[ -f $GGUF ]] && export CUDAPERF_SMOLLM2_GGUF=$GGUF
SUMMARY=$STAGE/summary.txt
touch "$SUMMARY"

left() { echo $((BUDGET_S - SECONDS)); }

pack() {  # the stage folder as one archive (at most 8 files come back from a call), and the summary
  local rc=0
  tar czf "$OUT/.$CALL.tgz" --warning=no-file-changed -C "$STAGE" . || rc=$?
  (( rc <= 1 )) && mv "$OUT/.$CALL.tgz" "$OUT/$CALL.tgz"  # 1: a file grew while read (the ranker, in B)
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

# The versions a call runs with, and what is missing (a function cannot run under `timeout`: a string).
ENV_PY='
import importlib, json, platform
info = {"python": platform.python_version()}
for name in ("torch", "transformers", "trl", "datasets", "peft", "accelerate", "pyarrow", "gguf",
             "tree_sitter", "tree_sitter_cuda", "pyseccomp"):
    try:
        info[name] = getattr(importlib.import_module(name), "__version__", "present")
    except Exception as exc:  # report whatever is missing, do not stop
        info[name] = f"MISSING ({type(exc).__name__}: {exc})"[:160]
import torch
info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
import subprocess
try:
    info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=20).stdout.strip() or "unknown"
except (OSError, subprocess.SubprocessError) as exc:
    info["driver"] = f"unknown ({type(exc).__name__})"
import os
info["bwrap"] = os.environ.get("CUDAPERF_BWRAP", "on PATH or none")
print("RESULT env " + json.dumps(info))
'

install() {  # the wheels of carry folder $1 into $T/site (not under SMOKE: this machine has its own)
  local rc=0
  if [[ $SMOKE == 1 ]]; then
    echo "install of $1 skipped (SMOKE)" >> "$STAGE/install.log"
  else
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$T/site" \
      "$1"/wheels/*.whl >> "$STAGE/install.log" 2>&1 || rc=$?
  fi
  echo "| install $1 | rc=$rc | wheels into $T/site |" | tee -a "$SUMMARY"
  return "$rc"
}

eval_deps() {  # .carry/model-3 when carried: the evaluator's tree-sitter, pyseccomp and bubblewrap
  [[ -d .carry/model-3 ]] || return 0
  install .carry/model-3
  if ! command -v bwrap > /dev/null && compgen -G ".carry/model-3/bubblewrap_*.deb" > /dev/null; then
    dpkg -x .carry/model-3/bubblewrap_*.deb "$T/bwrap-pkg" && export CUDAPERF_BWRAP=$T/bwrap-pkg/usr/bin/bwrap
  fi
}

call_A() {
  [[ -d .carry/model-1/wheels ]] || { echo "carry .carry/model-1 (fetch_model_carry.sh)" >&2; exit 2; }
  mkdir -p "$T/carry"
  cp .carry/model-1/*.part0 "$T/carry/"
  install .carry/model-1 && touch "$T/carry/done-A"
  eval_deps
  step env 60 python3 -c "$ENV_PY"
  local profile_s=${A_PROFILE_S:-150}
  if (( profile_s > 0 )); then  # decides RL_GEN_CACHE for the later calls (gen_cache below)
    step generation-profile "$profile_s" python3 scripts/generation_profile.py --model smollm2-shape \
      --out "$T/generation_profile.json" "${X_PROFILE[@]}"
    cp "$T/generation_profile.json" "$STAGE/" 2> /dev/null
    echo "| generation cache for the later calls | $(gen_cache) |" | tee -a "$SUMMARY"
    echo "| rollout weights for the later calls | $(gen_weights) |" | tee -a "$SUMMARY"
  fi
  if [[ -n ${A_TESTS:-} ]]; then  # GPU tests that need no model, e.g. the decoding forms the later calls use
    # (A_TESTS="tests/gpu/test_step_decoder_gpu.py"), within A_TESTS_S seconds (default 120)
    read -r -a tests <<< "$A_TESTS"
    step gpu-tests "${A_TESTS_S:-120}" python3 -m pytest -q -s -p no:cacheprovider -rfE "${tests[@]}"
  fi
  if (( ${A_EXTRA_S:-0} > 0 )); then  # a GPU step that needs no model (issue 21's evaluation modes; it
    # needs .carry/model-3 in this call's carry too)
    step eval-modes "$A_EXTRA_S" env OUT="$STAGE/eval-modes" LIMIT_eval_modes=$((A_EXTRA_S - 20)) \
      bash scripts/gpu_check.sh eval-modes
  fi
}

call_A2() {  # the middle part(s) of the carried folder (.carry/model-1b, or -1c ... with PARTS >= 4)
  local parts
  parts=$(compgen -G ".carry/model-1[b-h]/*.xz.part*") || {
    echo "carry .carry/model-1b (or the next middle folder; fetch_model_carry.sh)" >&2; exit 2; }
  [[ -f $T/carry/done-A ]] || { echo "no $T/carry from call A: a fresh machine? run A first" >&2; exit 2; }
  # shellcheck disable=SC2086  # one path a line, none with spaces
  cp $parts "$T/carry/"
  local rc=$? names
  names=$(basename -a $parts | sed 's/.*\.//' | tr '\n' ' ')
  echo "| A2 | rc=$rc | GGUF ${names}into $T/carry |" | tee -a "$SUMMARY"
}

call_K() {  # carried adapters onto the machine (.carry/sft-adapter, .carry/rl-adapter: those present), for
  # a call C whose carry cannot hold them beside its own; SFT's carried state (.carry/sft-state) and its
  # prebuilt examples (.carry/sft-examples, made here by `bash scripts/model_day.sh examples`), for call
  # B (one K call an adapter: the tree and two ~20-MB adapters are more than a call carries)
  local path name n=0
  for path in .carry/sft-adapter .carry/rl-adapter .carry/rl-adapter-seed* .carry/sft-state \
      .carry/rl-state; do
    [[ -f $path/adapter_config.json ]] || continue
    name=${path#.carry/}
    mkdir -p "$T/adapters" && rm -rf "$T/adapters/$name" && cp -r "$path" "$T/adapters/$name"
    n=$((n + 1))
    echo "| K | $name into $T/adapters |" | tee -a "$SUMMARY"
  done
  if [[ -f .carry/sft-examples/$SFT_EXAMPLES_FILE ]]; then
    mkdir -p "$T/carry" && cp ".carry/sft-examples/$SFT_EXAMPLES_FILE" "$T/carry/"
    n=$((n + 1))
    echo "| K | sft-examples into $T/carry |" | tee -a "$SUMMARY"
  fi
  (( n )) || { echo "carry .carry/sft-adapter, .carry/rl-adapter(-seedk) and/or .carry/sft-examples" >&2
    exit 2; }
}

call_examples() {  # here, not on the GPU machine: SFT's examples with the settings B trains with, into
  # .carry/sft-examples/ (carried in call K); B then trains on them instead of building them (234 s of
  # session 34's B). A file built for other settings or another tokenizer is refused there, and B builds.
  mkdir -p .carry/sft-examples
  python3 scripts/train_h200.py --out "$STAGE/train" "${TRAIN_ARGS[@]}" \
    --build-sft-examples ".carry/sft-examples/$SFT_EXAMPLES_FILE" 2>&1 | tee "$STAGE/examples.log" \
    | grep -a '^RESULT' | tee -a "$SUMMARY"
  du -b ".carry/sft-examples/$SFT_EXAMPLES_FILE"
}

call_B() {
  [[ -d .carry/model-2 ]] || { echo "carry .carry/model-2 (scripts/fetch_model_carry.sh)" >&2; exit 2; }
  local exports
  if (( ${SFT_REFINE:-0} )) && [[ ! -d .carry/model-3 && $SMOKE != 1 ]]; then  # the examples' feedback
    echo "SFT_REFINE needs .carry/model-3 carried beside .carry/model-2 (tree-sitter: the structural" \
      "analysis the rollouts' feedback holds)" >&2; exit 2
  fi
  exports=$(bash scripts/join_model_carry.sh 2> "$STAGE/join.log") || { cat "$STAGE/join.log"; exit 1; }
  eval "$exports"
  echo "| join | $exports | $SECONDS s |" | tee -a "$SUMMARY"
  eval_deps
  step env 60 python3 -c "$ENV_PY"
  step convert 120 python3 -c "
import time; t = time.perf_counter()
from cudaperf.agent.backends.smollm2 import SmolLM2Options, convert, converted_dir, find_gguf
o = SmolLM2Options(); g = find_gguf(); d = converted_dir(g, o)
convert(g, d, o.cache_dtype) if not (d / 'config.json').is_file() else None
print(f'RESULT convert {{\"dir\": \"{d}\", \"seconds\": {time.perf_counter() - t:.1f}}}')"
  local model
  # the converted SmolLM2 (not the scratch copy of a conversion cut short, whose name has a dot)
  model=$(find "$CUDAPERF_CACHE_DIR/models" -maxdepth 1 -name 'smollm2-135m-instruct-*' ! -name '*.*' \
    | head -n 1)
  # The LM ranker beside SFT: both train, neither times kernels. Its own limit; training stops after
  # RANKER_TRAIN_MIN minutes, then it scores the test rows. RANKER=1 runs it (off by default: measured in
  # session 16, results/2026-12-04-s16/model-day-B/ranker/, and SFT runs faster alone).
  local ranker_pid="" s
  if (( ${RANKER:-0} )); then
    ( timeout -k 10 "$(cap $(( $(left) - 30 )))" python3 scripts/ranker_lm_h200.py --out "$STAGE/ranker" \
        --model "$model" --device cuda --train-max-minutes "${RANKER_TRAIN_MIN:-4}" "${X_RANKER[@]}" \
        > "$STAGE/ranker.log" 2>&1
      echo "| ranker | rc=$? |" >> "$STAGE/ranker.log" ) &
    ranker_pid=$!
  fi
  s=$(cap 9999)
  local more=()
  (( ${SFT_CONTINUE:-0} )) && more=(--sft-continue)  # B again: SFT stopped by B's limit trains on
  (( ${SFT_STOP_AT:-0} )) && more+=(--sft-stop-at-step "$SFT_STOP_AT")  # the schedule's steps, cut at n
  if (( ${SFT_FROM_STATE:-0} )); then  # SFT continues an earlier lease's run (its state carried in K)
    [[ -f $(adapter_dir sft-state)/trainer_state.json ]] || {
      echo "SFT_FROM_STATE=1 but no $(adapter_dir sft-state)/trainer_state.json (carry .carry/sft-state" \
        "in call K)" >&2; exit 2; }
    more+=(--sft-from-state "$(adapter_dir sft-state)")
  fi
  if (( ${SFT_INIT_ADAPTER:-0} )); then  # a second SFT stage on the carried SFT adapter (K carries it)
    [[ -f $(adapter_dir sft-adapter)/adapter_config.json ]] || {
      echo "SFT_INIT_ADAPTER=1 but no $(adapter_dir sft-adapter)/adapter_config.json (carry" \
        ".carry/sft-adapter in call K)" >&2; exit 2; }
    more+=(--sft-init-adapter "$(adapter_dir sft-adapter)")
  fi
  if (( ${SFT_FROM_ADAPTER:-0} )); then  # SFT comes from a carried adapter, merged in call C
    echo "| sft | skipped: SFT_FROM_ADAPTER=1 (call C merges the carried adapter) |" | tee -a "$SUMMARY"
  else
    # margin 0.5 min: SFT's steps take ~0.7 s and its final save is inside its own budget (session 43's
    # B: SFT ended 12 s inside its budget, the step 76 s inside its limit with a 1.0-min margin)
    step sft "$s" python3 scripts/train_h200.py --out "$STAGE/train" "${TRAIN_ARGS[@]}" --sft-only \
      "${more[@]}" --max-minutes "$(mins "$s" 20)" --margin-minutes 0.5
    export_adapter sft
    export_sft_state
  fi
  if [[ -n $ranker_pid ]]; then
    wait "$ranker_pid"
    { tail -n 1 "$STAGE/ranker.log"; grep -a '^RESULT' "$STAGE/ranker.log" || true; } | tee -a "$SUMMARY"
  fi
}

# A folder back through $OUT as NAME.tgz, in parts of 15 MiB when larger (a file that comes back holds
# 16 MiB at most), with a summary line: LABEL, the archive's sha256 and bytes. ship NAME LABEL DIR ENTRY
# [tar options...] packs DIR/ENTRY.
ship() {
  local name=$1 label=$2 dir=$3 entry=$4
  shift 4
  rm -f "$OUT/$name.tgz"*
  tar czf "$OUT/$name.tgz" "$@" -C "$dir" "$entry"
  if (( $(stat -c %s "$OUT/$name.tgz") > 15 * 1024 * 1024 )); then
    split -b 15M -d "$OUT/$name.tgz" "$OUT/$name.tgz.part" && rm "$OUT/$name.tgz"
  fi
  echo "| $label | $(cat "$OUT/$name".tgz* | sha256sum | cut -c1-16) | $(du -cb "$OUT/$name".tgz* \
    | tail -n 1 | cut -f1) bytes in $OUT/$name.tgz* |" | tee -a "$SUMMARY"
}

# A LoRA stage's adapter (SFT_LORA=rank: sft, RL_LORA=rank: rl) back through $OUT: <stage>-adapter.tgz
# (`ship`). Here, keep it for later leases (ignored; carried in call K, or in C when it fits), e.g. for sft:
#   mkdir -p .carry/sft-adapter && cat DIR/sft-adapter.tgz* | tar xz -C .carry/sft-adapter --strip-components=1
export_adapter() {
  [[ -f $WORK/$1/final/adapter/adapter_config.json ]] || return 0
  ship "$1-adapter" "$1 adapter" "$WORK/$1/final" adapter
}

# SFT's last checkpoint with finite weights (`finite_checkpoint`) without its optimiser state (an adapter,
# the trainer's state, the schedule, the random generators, the configuration: ~18 MB) back through $OUT as
# sft-state.tgz (`ship`; a LoRA run stopped at its limit saves one there): kept in .carry/sft-state
# (restored as the adapter is), a later lease's B continues the run from it with SFT_FROM_STATE=1 (same
# data order and schedule, a fresh optimiser: train.carried_state).
export_sft_state() {
  local checkpoint
  checkpoint=$(finite_checkpoint "$WORK/sft")
  [[ -f $checkpoint/adapter_config.json ]] || return 0
  ship sft-state "sft state $(basename "$checkpoint")" "$(dirname "$checkpoint")" "$(basename "$checkpoint")" \
    --exclude='optimizer.*'
}

# The newest checkpoint under DIR whose weights are finite (`train.monitor.last_checkpoint`; its notes, a
# non-finite one passed over, shown), or nothing: finite_checkpoint DIR.
finite_checkpoint() {
  python3 -c "import sys; from cudaperf.train.monitor import last_checkpoint
print(last_checkpoint(sys.argv[1]) or '')" "$1"
}

# RL's last checkpoint with finite weights (`finite_checkpoint`) without its optimiser state (the adapter,
# the trainer's state, the random generators, the configuration, and rl_base.json: the SFT adapter it trains
# on; ~20 MB) back through $OUT as rl-state.tgz (`ship`): kept in .carry/rl-state, a later lease's C
# continues the run from it with RL_FROM_STATE=1.
export_rl_state() {
  local checkpoint
  checkpoint=$(finite_checkpoint "$WORK/rl")
  [[ -f $checkpoint/adapter_config.json && -f $WORK/rl/rl_base.json ]] || return 0
  cp "$WORK/rl/rl_base.json" "$checkpoint/"
  ship rl-state "rl state $(basename "$checkpoint")" "$(dirname "$checkpoint")" "$(basename "$checkpoint")" \
    --exclude='optimizer.*'
}

# A carried adapter folder: where call K put it on this machine, else the carried one (K: C's carry did not
# hold it with the rest).
adapter_dir() { [[ -f $T/adapters/$1/adapter_config.json ]] && echo "$T/adapters/$1" || echo ".carry/$1"; }

# The generation KV cache of the rollouts and the comparison: RL_GEN_CACHE when set; otherwise what call
# A's profile of a SmolLM2-shaped model found (static when its decoding step is under 0.7x the dynamic one,
# its first call, compile included, under 120 s, and its first call at a new length under 10 s: the rollouts'
# lengths vary from call to call); dynamic without a profile.
gen_cache() {
  if [[ -n ${RL_GEN_CACHE:-} ]]; then echo "$RL_GEN_CACHE"; return; fi
  python3 - "$T/generation_profile.json" << 'PY' 2> /dev/null || echo dynamic
import json, sys
f = json.load(open(sys.argv[1]))
static, dynamic = f.get("rollout_static_ms_per_step"), f.get("rollout_ms_per_step")
again = f.get("rollout_static_new_length_first_call_s", 0.0)  # a compile per new length: lengths vary
fast = (static is not None and dynamic and static < 0.7 * dynamic and f["rollout_static_first_call_s"] < 120
        and again < 10)
print("static" if fast else "dynamic")
PY
}
GEN_CACHE=$(gen_cache)
# How the rollouts' sampler holds the weights: RL_GEN_WEIGHTS when set; otherwise bfloat16 when call A's
# profile found its decoding step under 0.8x the autocast one's; autocast without a profile.
gen_weights() {
  if [[ -n ${RL_GEN_WEIGHTS:-} ]]; then echo "$RL_GEN_WEIGHTS"; return; fi
  python3 - "$T/generation_profile.json" << 'PY' 2> /dev/null || echo autocast
import json, sys
f = json.load(open(sys.argv[1]))
bf16, autocast = f.get("rollout_bf16_ms_per_step"), f.get("rollout_ms_per_step")
print("bfloat16" if bf16 is not None and autocast and bf16 < 0.8 * autocast else "autocast")
PY
}
GEN_WEIGHTS=$(gen_weights)

SHARE_FLAG=--rl-share-repeated-answers  # RL_SHARE=0: every answer evaluated, repeats too
(( ${RL_SHARE:-1} )) || SHARE_FLAG=--no-rl-share-repeated-answers
COPIES_FLAG=--rl-anchor-copies  # RL_COPIES=0: every copy of a naive port timed
(( ${RL_COPIES:-1} )) || COPIES_FLAG=--no-rl-anchor-copies
OVERLAP_FLAG=--rl-evaluate-while-generating  # RL_OVERLAP=0: a turn's answers evaluated after its generation
(( ${RL_OVERLAP:-1} )) || OVERLAP_FLAG=--no-rl-evaluate-while-generating
SFT_EXAMPLES_FILE=sft-examples.json.gz  # call_examples builds it here, K carries it, B trains on it
# train_h200.py's settings, the same in B and C (a resumed run must match the saved configuration)
# shellcheck disable=SC2206  # RL_KINDS, RL_FAMILIES and SFT_REFINE_FROM are word lists
TRAIN_ARGS=(--work "$WORK" --sft-epochs "${SFT_EPOCHS:-2}" --sft-fastest-per-task "${SFT_FASTEST:-0}"
            --sft-refine-per-task "${SFT_REFINE:-0}" --sft-refine-from ${SFT_REFINE_FROM:-}
            --sft-refine-min-speedup "${SFT_REFINE_MIN:-1.2}"
            --sft-repair-per-task "${SFT_REPAIR:-0}"
            --seed "${SEED:-0}"
            --sft-lora-rank "${SFT_LORA:-0}" --rl-lora-rank "${RL_LORA:-0}"
            --final-on-limit --rl-steps "${RL_STEPS:-2}" --rl-tasks-per-step "${RL_TASKS:-4}"
            --rl-lr "${RL_LR:-2e-6}" --rl-iterations "${RL_ITERATIONS:-1}"
            --rl-turn-score "${RL_TURN_SCORE:-own}"
            --rl-eval-workers-per-gpu "${RL_EVAL_WORKERS:-8}"
            --rl-timing-baselines "${RL_BASELINES:-reward}"
            "$SHARE_FLAG" "$COPIES_FLAG" "$OVERLAP_FLAG"
            --rl-kinds ${RL_KINDS:-pytorch c} --rl-families ${RL_FAMILIES:-}
            --rl-min-headroom "${RL_MIN_HEADROOM:-0}"
            --rl-trajectories 4 --rl-turns 2 --rl-max-new-tokens 1024
            --rl-generation-cache "$GEN_CACHE" --rl-generation-weights "$GEN_WEIGHTS" --rl-profile-decoding
            --rl-generation-attention "${RL_GEN_ATTENTION:-no_cudnn}"
            --sft-examples "$T/carry/$SFT_EXAMPLES_FILE" "${X_SFT[@]}" "${X_RL[@]}")

compare() {  # the comparison for at most $1 seconds (no round starts in the last ROUND_S)
  local s seeds sets models=() m kinds fams name=${COMPARE_NAME:-compare}
  s=$(cap "$1")
  read -r -a seeds <<< "${COMPARE_SEEDS:-0 1 2}"
  read -r -a sets <<< "${COMPARE_SETS:-heldout test}"
  local narrow=()  # only these kinds and families, in the comparison and its partial table alike
  [[ -n ${COMPARE_KINDS:-} ]] && { read -r -a kinds <<< "$COMPARE_KINDS"; narrow+=(--kinds "${kinds[@]}"); }
  [[ -n ${COMPARE_FAMILIES:-} ]] && {
    read -r -a fams <<< "$COMPARE_FAMILIES"; narrow+=(--families "${fams[@]}"); }
  [[ -n ${COMPARE_MIN_HEADROOM:-} ]] && narrow+=(--min-headroom "$COMPARE_MIN_HEADROOM")
  for m in ${COMPARE_MODELS:-}; do models+=("$m=$WORK/$m/final"); done  # e.g. "rl": only the RL model
  step compare "$s" python3 scripts/train_compare_h200.py --work "$WORK" --name "$name" --out "$STAGE/$name" \
    --seeds "${seeds[@]}" --sets "${sets[@]}" --turns "${COMPARE_TURNS:-2}" \
    --limit-tasks "${COMPARE_TASKS:-8}" "${narrow[@]}" \
    --max-new-tokens 1024 \
    --base "${COMPARE_BASE:-smollm2}" --generation-cache "$GEN_CACHE" --profile-decoding \
    --generation-attention "${RL_GEN_ATTENTION:-no_cudnn}" \
    --max-minutes "$(mins "$s" "${ROUND_S:-120}")" ${COMPARE_MODELS:+--models "${models[@]}"} \
    "${X_COMPARE[@]}"
  local f  # every turn of every model (the runs' own copies stay under $WORK)
  mkdir -p "$STAGE/$name"
  for f in "$WORK/$name"/*/batched_trajectories.jsonl "$WORK/$name"/*/decoding_probe.txt; do
    local file=${f##*/} model=${f%/*}
    [[ -f $f ]] && cp "$f" "$STAGE/$name/${model##*/}-${file#batched_}"
  done
  pack
  # the table so far, from the trajectories above (a cut comparison writes none of its own)
  local entries=()
  for f in "$STAGE/$name"/*-trajectories.jsonl; do
    [[ -f $f ]] && { m=${f##*/}; entries+=("${m%-trajectories.jsonl}=$f"); }
  done
  if (( ${#entries[@]} )); then
    step compare-partial 60 python3 scripts/compare_partial.py "${entries[@]}" --tasks "${COMPARE_TASKS:-8}" \
      --seeds "${#seeds[@]}" --sets "${sets[@]}" --turns "${COMPARE_TURNS:-2}" "${narrow[@]}" \
      "${X_PARTIAL[@]}"
    # which strategies the answers name, per turn (scripts/answer_strategies.py; in compare-strategies.log)
    step compare-strategies 30 python3 scripts/answer_strategies.py "${entries[@]}"
  fi
}

call_C() {
  [[ -f $GGUF ]] || { echo "no $GGUF: calls A and B must run first on this warm machine" >&2; exit 2; }
  [[ -d .carry/model-3 || -f $T/site/tree_sitter/__init__.py || $SMOKE == 1 ]] \
    || { echo "carry .carry/model-3 (the evaluator's tree-sitter, pyseccomp, bubblewrap)" >&2; exit 2; }
  eval_deps
  step env 60 python3 -c "$ENV_PY"
  local carried=${SFT_ADAPTER_DIR:-$(adapter_dir sft-adapter)} rl_from=()
  if [[ -f $carried/adapter_config.json && ! -f $WORK/sft/final/config.json ]]; then
    step sft-from-adapter 120 python3 scripts/train_h200.py --out "$STAGE/train" "${TRAIN_ARGS[@]}" --sft-only \
      --sft-from-adapter "$carried"
  fi
  if (( ${RL_FROM_ADAPTER:-0} )); then  # RL continues from an earlier lease's RL adapter (RL_LORA there)
    carried=${RL_ADAPTER_DIR:-$(adapter_dir rl-adapter)}
    [[ -f $carried/adapter_config.json ]] || { echo "RL_FROM_ADAPTER=1 but no $carried" >&2; exit 2; }
    rl_from=(--rl-from-adapter "$carried")
  fi
  if (( ${RL_FROM_STATE:-0} )); then  # RL continues an earlier lease's run (its state carried in K)
    carried=$(adapter_dir rl-state)
    [[ -f $carried/trainer_state.json ]] || {
      echo "RL_FROM_STATE=1 but no $carried/trainer_state.json (carry .carry/rl-state in a K call)" >&2
      exit 2; }
    rl_from=(--rl-from-state "$carried")
  fi
  local s
  local named
  for named in ${FINAL_FROM_ADAPTERS:-}; do  # NAME=ADAPTER: $WORK/NAME/final, SFT's model merged with a
    # carried RL adapter (RL's training seeds compared as one: NAME rl@seedK, COMPARE_MODELS naming them)
    step "final-${named%%=*}" 120 python3 scripts/train_h200.py --out "$STAGE/train" "${TRAIN_ARGS[@]}" \
      --rl-final-from-adapter "$(adapter_dir "${named#*=}")" --rl-final-name "${named%%=*}"
  done
  if [[ ${RL_S:-270} == 0 ]] && { (( ${RL_FROM_ADAPTER:-0} )) || [[ -n ${FINAL_FROM_ADAPTERS:-} ]]; }; then
    # compare only, no RL step (a lease that compares what earlier ones trained): rl/final is the carried
    # RL adapter merged into SFT's model, and/or the FINAL_FROM_ADAPTERS models above
    if (( ${RL_FROM_ADAPTER:-0} )); then
      step rl-from-adapter 120 python3 scripts/train_h200.py --out "$STAGE/train" "${TRAIN_ARGS[@]}" \
        --rl-final-from-adapter "${rl_from[1]}"
    fi
    if (( ${C_COMPARE:-1} )); then compare 9999; fi
    return
  fi
  s=$(cap "${RL_S:-270}")
  step train "$s" python3 scripts/train_h200.py --out "$STAGE/train" "${TRAIN_ARGS[@]}" "${rl_from[@]}" \
    --max-minutes "$(mins "$s" 10)" --margin-minutes 0.8
  # after a kill: the last checkpoint promoted, RL's records copied (the killed call never copied them)
  step promote 60 python3 scripts/train_h200.py --work "$WORK" --out "$STAGE/train" --promote-only \
    --seed "${SEED:-0}" "${rl_from[@]}"
  export_adapter rl
  export_rl_state
  if [[ -f $STAGE/train/rl_evaluations.jsonl ]]; then  # which strategies RL wrote and its groups favoured
    step rl-strategies 30 python3 scripts/answer_strategies.py "rl=$STAGE/train/rl_evaluations.jsonl"
  fi
  if (( ${C_COMPARE:-1} )); then compare 9999; fi  # C_COMPARE=0: a C whose RL the next C call resumes
}

call_D() {
  [[ -f $GGUF ]] || { echo "no $GGUF: calls A and B must run first on this warm machine" >&2; exit 2; }
  compare $(( $(left) - ${REFINE_S:-170} - ${PROFILE_S:-0} - ${BACKENDS_S:-0} - 15 ))
  local s
  if (( ${REFINE_S:-170} > 0 )); then  # REFINE_S=0: no refinement run (session 16 has the base model's)
    s=$(cap "${REFINE_S:-170}")
    step agent-refine "$s" python3 scripts/agent_refine_h200.py --out "$STAGE/agent_refine" \
      --tasks split:test --limit 20 --samples "${REFINE_SAMPLES:-2}" --turns 3 --max-new-tokens 512 \
      --resume --max-minutes "$(mins "$s" 70)" "${X_REFINE[@]}"
  fi
  if (( ${PROFILE_S:-0} > 0 )); then  # where a decoding step goes (dev/LOG.md, open questions)
    step generation-profile "$PROFILE_S" python3 scripts/generation_profile.py \
      --model "${PROFILE_MODEL:-smollm2}" \
      --out "$STAGE/generation_profile.json" "${X_PROFILE[@]}"
  fi
  if (( ${BACKENDS_S:-0} > 0 )); then
    step backends "$BACKENDS_S" python3 scripts/backends_h200.py run --keep-cache \
      --cache-dir "$CUDAPERF_CACHE_DIR" --out "$STAGE/backends_h200.jsonl" "${X_BACKENDS[@]}"
  fi
}

case $CALL in
  A) call_A ;;
  A2) call_A2 ;;
  K) call_K ;;
  examples) call_examples ;;
  B) call_B ;;
  C) call_C ;;
  D) call_D ;;
  *) echo "usage: bash scripts/model_day.sh A|A2|K|B|C|D|examples" >&2; exit 2 ;;
esac
pack
echo
echo "== summary of call $CALL ($SECONDS s; $OUT/$CALL.tgz) =="
cat "$SUMMARY"
