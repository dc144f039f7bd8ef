#!/usr/bin/env bash
# verl + cudaperf on a Ray cluster (docs/training.md, "verl"). Run on the head node after `ray start` on
# every node (all nodes: this checkout installed in verl's environment, scripts/test_verl.sh shows how).
#   head:    ray start --head --port 6379
#   others:  ray start --address HEAD:6379
# Layout of examples/verl/cudaperf_refine_grpo.yaml: 3 nodes x 8 GPUs for verl, 8 GPUs for the evaluation pool.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CUDAPERF_ROOT="$PWD"
export CUDAPERF_POLICY="${CUDAPERF_POLICY:?the SFT model directory, e.g. runs/sft/final}"
export CUDAPERF_VERL_DATA="${CUDAPERF_VERL_DATA:-$PWD/data/verl}"
# Every verl process (trainer, agent-loop workers) imports this: the agent loop and the estimator register.
export VERL_USE_EXTERNAL_MODULES=cudaperf.train.verl_adapter.plugin
[ -f "$CUDAPERF_VERL_DATA/train.parquet" ] || python examples/verl/prepare_data.py --out "$CUDAPERF_VERL_DATA"
python -m verl.trainer.main_ppo --config-path "$PWD/examples/verl" --config-name cudaperf_refine_grpo \
  +ray_kwargs.ray_init.address=auto \
  +ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=cudaperf.train.verl_adapter.plugin "$@"
