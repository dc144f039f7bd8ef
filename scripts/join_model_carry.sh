#!/usr/bin/env bash
# On the GPU machine, in the second of two back-to-back calls (scripts/fetch_model_carry.sh): the first call
# ran `mkdir -p /tmp/carry && cp -r .carry/model-1/. /tmp/carry/`; this one carries .carry/model-2. Joins the
# SmolLM2 GGUF into /tmp/smollm2/ (hash checked), installs the wheels into /tmp/site (datasets 5.2 where
# pyarrow >= 24, else 4.7), and prints the exports for the model scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
cp .carry/model-2/* /tmp/carry/
mkdir -p /tmp/smollm2
name=$(awk '{print $2}' /tmp/carry/SHA256SUMS)
cat /tmp/carry/"$name".part0 /tmp/carry/"$name".part1 > /tmp/smollm2/"$name"
(cd /tmp/smollm2 && sha256sum -c /tmp/carry/SHA256SUMS)
new=$(python3 -c "import pyarrow; print(int(pyarrow.__version__.split('.')[0]) >= 24)" 2>/dev/null || echo False)
ds=/tmp/carry/datasets-old; [[ $new == True ]] && ds=/tmp/carry/datasets-new
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/carry/*.whl "$ds"/*.whl
echo "export PYTHONPATH=/tmp/site:\$PWD/src CUDAPERF_SMOLLM2_GGUF=/tmp/smollm2/$name"
