#!/usr/bin/env bash
# Prepare, on the CPU machine, Ray for the GPU machine's Python 3.12 (docs/scale.md, "On the GPU machine"):
# the Ray wheel cut in three parts, one ignored folder per device call, Ray's dependencies and SHA256SUMS
# beside the parts:
#   .cache/ray-wheels/a/  part 1 + Ray's dependencies      (call 1)
#   .cache/ray-wheels/b/  part 2                           (call 2)
#   .cache/ray-wheels/c/  part 3 + SHA256SUMS              (call 3, which runs scripts/ray_pool_gpu.py)
# What travels in a call is the working tree and its carry, 64 MiB in all: the script refuses folders that
# would not fit beside the tree as it is now (untracked files count too). `ray_pool_gpu.py --wheels`
# joins the parts, checks the sums and installs what does not import there.
#
#   bash scripts/fetch_ray_carry.sh [RAY_VERSION]      (default 2.60.0, the version tested)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-2.60.0}
root=.cache/ray-wheels
rm -rf "$root" && mkdir -p "$root/a" "$root/b" "$root/c" "$root/whole"
source scripts/carry.sh
"${GPU_PIP_DOWNLOAD[@]}" -d "$root/whole" "ray==$version"
# Ray's runtime dependencies (its METADATA, less extras); the GPU image has some already, the script
# installs only what does not import there.
"${GPU_PIP_DOWNLOAD[@]}" -d "$root/a" attrs certifi charset_normalizer click filelock idna jsonschema \
  jsonschema_specifications msgpack packaging protobuf pyyaml referencing requests rpds_py \
  typing_extensions urllib3
wheel=$(ls "$root"/whole/ray-*.whl)
name=$(basename "$wheel")
(cd "$root/whole" && sha256sum "$name") > "$root/c/SHA256SUMS"
size=$(stat -c %s "$wheel")
third=$(( (size + 2) / 3 ))
split -b "$third" -d -a 1 --numeric-suffixes=1 "$wheel" "$root/whole/$name.part"
mv "$root/whole/$name.part1" "$root/a/" && mv "$root/whole/$name.part2" "$root/b/"
mv "$root/whole/$name.part3" "$root/c/" && rm -rf "$root/whole"
check_carry_folders "$root/a" "$root/b" "$root/c"
