#!/usr/bin/env bash
# Sourced by the scripts that prepare what travels to the GPU machine (fetch_gpu_wheels.sh,
# fetch_model_carry.sh, fetch_ray_carry.sh):
# - GPU_PIP_DOWNLOAD: `pip download` of wheels for the GPU machine's Python 3.12 (manylinux, no deps;
#   append `-d DIR` and the requirements);
# - `check_carry_folders CARRY...`: each CARRY's bytes (one folder, or several that one call carries
#   together, space-separated in one argument: ".carry/model-2 .carry/model-3") beside the working tree
#   that travels with it (tracked files and untracked files git does not ignore), failing when one would
#   not fit a device call's 64 MiB, less CARRY_HEADROOM_MIB (default 3: in session 36 the device refused
#   a call that this count put at 62.7 MiB and took one at 61.5 MiB).
GPU_PIP_DOWNLOAD=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12
                  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
                  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

check_carry_folders() {
  local tree limit carry folder_bytes
  tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } \
    | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
  limit=$((64 * 1024 * 1024))
  for carry in "$@"; do
    # shellcheck disable=SC2086  # several folders in one argument: split on purpose
    folder_bytes=$(du -sbc $carry | tail -1 | cut -f1)
    echo "$carry: $folder_bytes bytes + working tree $tree = $((folder_bytes + tree)) of $limit"
    if (( folder_bytes + tree > limit - ${CARRY_HEADROOM_MIB:-3} * 1024 * 1024 )); then
      echo "too large for one call: shrink the working tree (untracked files count) or the carry" >&2
      return 1
    fi
  done
}
