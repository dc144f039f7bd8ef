#!/usr/bin/env bash
# On the GPU machine, in the last of the back-to-back calls that carry the GGUF (scripts/fetch_model_carry.sh,
# scripts/model_day.sh B): call A installed .carry/model-1/wheels into /tmp/site and copied the compressed
# GGUF's part 0 to /tmp/carry, each call A2 a middle part; this one carries .carry/model-2 (the last part
# and PARTS, the count). Joins and decompresses the SmolLM2 GGUF into /tmp/smollm2/ (sha256 checked) and
# prints the exports for the model scripts.
# MODEL_DAY_TMP (default /tmp) moves every path, for a dry run on a machine whose /tmp is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${MODEL_DAY_TMP:-/tmp}
C=$T/carry G=$T/smollm2
[[ -f $C/done-A ]] || { echo "no $C from call A: a fresh machine? run A first" >&2; exit 1; }
cp .carry/model-2/* "$C/"
parts=$(cat "$C/PARTS" 2>/dev/null || echo 3)
mkdir -p "$G"
name=$(awk '{print $2}' "$C/SHA256SUMS")
files=()
for ((k = 0; k < parts; k++)); do
  [[ -f $C/$name.xz.part$k ]] || {
    echo "no part $k in $C: run call A2 with the folder that has it" >&2; exit 1; }
  files+=("$C/$name.xz.part$k")
done
if ! (cd "$G" && sha256sum -c --status "$C/SHA256SUMS" 2>/dev/null); then
  # python's lzma: xz-utils may be missing on the image
  cat "${files[@]}" | python3 -c \
    "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)" \
    > "$G/$name"
  (cd "$G" && sha256sum -c "$C/SHA256SUMS") >&2
fi
echo "export PYTHONPATH=$T/site:\$PWD/src CUDAPERF_SMOLLM2_GGUF=$T/smollm2/$name"
