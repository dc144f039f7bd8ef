#!/usr/bin/env bash
# Logs the GPU's clocks, power, temperature, utilisation and clock-event reasons once a second as CSV into
# FILE until killed (SIGTERM), so timings taken meanwhile can be set beside the clock they ran at; the
# fields are those cudaperf.gpu_clocks reads. Exits 0 at once, writing nothing, without nvidia-smi.
#   bash scripts/log_gpu_clocks.sh FILE &  ...  kill $!
set -u
command -v nvidia-smi >/dev/null || exit 0
reason=clocks_event_reasons.active  # drivers before the rename call it clocks_throttle_reasons.active
nvidia-smi --help-query-gpu 2>/dev/null | grep -q "$reason" || reason=clocks_throttle_reasons.active
# line-buffered (stdbuf, where present) so a terminated nvidia-smi leaves no lines in its buffer
exec $(command -v stdbuf >/dev/null && echo stdbuf -oL) nvidia-smi \
  --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,$reason \
  --format=csv,nounits -lms "${INTERVAL_MS:-1000}" > "$1" 2>&1
