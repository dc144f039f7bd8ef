#!/usr/bin/env bash
# Prepare, on the CPU machine, Ray for the GPU machine's Python 3.12 (docs/scale.md, "On the GPU machine"):
# the Ray wheel cut in RAY_PARTS parts (default 5, ~16 MB each), one ignored folder per device call, Ray's
# dependencies and SHA256SUMS beside the parts:
#   .cache/ray-wheels/a/  part 1 + Ray's dependencies      (call 1)
#   .cache/ray-wheels/b/  part 2                           (call 2; c and d likewise)
#   .cache/ray-wheels/e/  part 5 + SHA256SUMS              (the last call, which runs scripts/ray_pool_gpu.py)
# What travels in a call is the working tree and its carry, 64 MiB in all: the script refuses folders that
# would not fit beside the tree as it is now (untracked files count too). `ray_pool_gpu.py --wheels`
# joins the parts, checks the sums and installs what does not import there.
#
#   bash scripts/fetch_ray_carry.sh [RAY_VERSION]      (default 2.60.0, the version tested)
# Five parts, not three: a third (26 MB) beside the tree (~42 MB) is over the limit.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-2.60.0}
root=.cache/ray-wheels
parts=${RAY_PARTS:-5}
(( parts >= 2 && parts <= 26 )) || { echo "RAY_PARTS must be 2-26 (one folder a-z each)" >&2; exit 2; }
letters=abcdefghijklmnopqrstuvwxyz folders=()
for (( i = 0; i < parts; i++ )); do folders+=("$root/${letters:i:1}"); done
rm -rf "$root" && mkdir -p "${folders[@]}" "$root/whole"
source scripts/carry.sh
"${GPU_PIP_DOWNLOAD[@]}" -d "$root/whole" "ray==$version"
# Ray's runtime dependencies (its METADATA, less extras); the GPU image has some already, the script
# installs only what does not import there.
"${GPU_PIP_DOWNLOAD[@]}" -d "$root/a" attrs certifi charset_normalizer click filelock idna jsonschema \
  jsonschema_specifications msgpack packaging protobuf pyyaml referencing requests rpds_py \
  typing_extensions urllib3
wheel=$(ls "$root"/whole/ray-*.whl)
name=$(basename "$wheel")
(cd "$root/whole" && sha256sum "$name") > "${folders[-1]}/SHA256SUMS"
split -n "$parts" -d -a 2 --numeric-suffixes=1 "$wheel" "$root/whole/$name.part"
for (( i = 0; i < parts; i++ )); do  # split names them part01, part02...; the join reads part1, part2...
  mv "$root/whole/$name.part$(printf %02d $((i + 1)))" "${folders[i]}/$name.part$((i + 1))"
done
rm -rf "$root/whole"
check_carry_folders "${folders[@]}"
