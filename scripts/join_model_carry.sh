#!/usr/bin/env bash
# On the GPU machine, in the third of three back-to-back calls (scripts/fetch_model_carry.sh,
# scripts/model_day.sh B): call A installed .carry/model-1/wheels into /tmp/site and copied the compressed
# GGUF's part 0 to /tmp/carry, call A2 part 1; this one carries .carry/model-2 (part 2). Joins and
# decompresses the SmolLM2 GGUF into /tmp/smollm2/ (sha256 checked) and prints the exports for the model
# scripts.
# MODEL_DAY_TMP (default /tmp) moves every path, for a dry run on a machine whose /tmp is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${MODEL_DAY_TMP:-/tmp}
C=$T/carry G=$T/smollm2
[[ -f $C/done-A ]] || { echo "no $C from call A: a fresh machine? run A first" >&2; exit 1; }
[[ -f $C/done-A2 ]] || { echo "no part 1 in $C: run call A2 first" >&2; exit 1; }
cp .carry/model-2/* "$C/"
mkdir -p "$G"
name=$(awk '{print $2}' "$C/SHA256SUMS")
if ! (cd "$G" && sha256sum -c --status "$C/SHA256SUMS" 2>/dev/null); then
  # python's lzma: xz-utils may be missing on the image
  cat "$C/$name.xz.part0" "$C/$name.xz.part1" "$C/$name.xz.part2" | python3 -c \
    "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)" \
    > "$G/$name"
  (cd "$G" && sha256sum -c "$C/SHA256SUMS") >&2
fi
echo "export PYTHONPATH=$T/site:\$PWD/src CUDAPERF_SMOLLM2_GGUF=$T/smollm2/$name"
