#!/usr/bin/env bash
# Download, on the CPU machine, the wheels the GPU machine lacks (it has no network), into .whl/ (ignored
# by git; name it in the device call's `carry`). scripts/gpu_check.sh installs them into /tmp/site.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
source scripts/carry.sh
"${GPU_PIP_DOWNLOAD[@]}" -d .whl tree-sitter==0.26.1 tree-sitter-cuda==0.21.2
# pytest-xdist runs the functional GPU tests on several workers (gpu_check.sh); pure Python.
python3 -m pip download -q --no-deps -d .whl pytest-xdist==3.8.0 execnet==2.1.1
# The sandbox boundary's seccomp filter (a ctypes binding of the machine's libseccomp.so.2; without it the
# boundary says "seccomp: no libseccomp binding" and runs without the filter: session 24's H100 run).
python3 -m pip download -q --no-deps -d .whl pyseccomp==0.1.2
ls -la .whl
