#!/usr/bin/env bash
# The verl adapter's tests (tests/verl) in verl's own environment: verl 0.9.1 pins transformers <5.11,
# which cudaperf's environment does not have. Builds the environment if missing, then runs the tests.
#   scripts/test_verl.sh                 # VERL_VENV=/work/venvs/verl by default; extra args go to pytest
# Lean on purpose: verl without its GPU extras (no vLLM, flash-attn, wandb); CPU torch 2.13.0 as in .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VERL_VENV:-/work/venvs/verl}"
PY="$VENV/bin/python"
if ! "$PY" -c "import verl.experimental.agent_loop.agent_loop, verl.trainer.ppo.ray_trainer" 2>/dev/null; then
  echo "building verl's environment in $VENV"
  python3 -m venv "$VENV"
  PIP=("$VENV/bin/pip" install -q)
  "${PIP[@]}" torch==2.13.0
  "${PIP[@]}" --no-deps verl==0.9.1
  # What importing verl's agent loop, trainer and core_algos needs on CPU (verl's own requirements, minus
  # wandb, tensorboard, accelerate, pybind11, pylatexenc and the GPU extras).
  "${PIP[@]}" "transformers>=5.5.3,<5.11,!=5.6.0" ray hydra-core "tensordict>=0.8.0,<=0.10.0,!=0.9.0" \
    datasets pandas pyarrow pillow pydantic codetiming dill packaging numpy cachetools uvicorn fastapi \
    torchdata peft "TransferQueue>=0.1.10" pytest
  # cudaperf itself without its extras (their transformers pin would fight verl's), plus its runtime deps.
  "${PIP[@]}" --no-deps -e .
  "${PIP[@]}" rich "tree-sitter>=0.25,<0.27" tree-sitter-cuda==0.21.2 "cuda-core>=1.2,<2" \
    "cuda-bindings>=13.0,<14" "nvidia-cuda-nvrtc>=13.0,<14" pyseccomp
fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "$PY" -m pytest -q -p no:cacheprovider tests/verl "$@"
