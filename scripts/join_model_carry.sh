#!/usr/bin/env bash
# On the GPU machine, in the second of two back-to-back calls (scripts/fetch_model_carry.sh,
# scripts/model_day.sh B): the first call installed .carry/model-1/wheels into /tmp/site and copied the
# compressed GGUF's part 0 to /tmp/carry; this one carries .carry/model-2. Joins and decompresses the SmolLM2
# GGUF into /tmp/smollm2/ (sha256 checked) and prints the exports for the model scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f /tmp/carry/done-A ]] || { echo "no /tmp/carry from call A: a fresh machine? run A first" >&2; exit 1; }
cp .carry/model-2/* /tmp/carry/
mkdir -p /tmp/smollm2
name=$(awk '{print $2}' /tmp/carry/SHA256SUMS)
if ! (cd /tmp/smollm2 && sha256sum -c --status /tmp/carry/SHA256SUMS 2>/dev/null); then
  # python's lzma: xz-utils may be missing on the image
  cat /tmp/carry/"$name".xz.part0 /tmp/carry/"$name".xz.part1 | python3 -c \
    "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)" \
    > /tmp/smollm2/"$name"
  (cd /tmp/smollm2 && sha256sum -c /tmp/carry/SHA256SUMS) >&2
fi
echo "export PYTHONPATH=/tmp/site:\$PWD/src CUDAPERF_SMOLLM2_GGUF=/tmp/smollm2/$name"
