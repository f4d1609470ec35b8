#!/usr/bin/env bash
# The wheel folder scripts/gpu_check.sh installs from, offline, on a GPU machine whose Python has
# CuPy and the CUDA libraries but not the rest (the project's GPU machine, an H200: Python 3.12, cupy-cuda13x 14.2,
# CUDA 13 library wheels, cuDNN 9; no pytest-asyncio, no cuDNN frontend, no cuTENSOR, no network).
#
#   bash scripts/gpu_wheels.sh [FOLDER]        # FOLDER: .gpu-wheels (git-ignored) by default
#
# Run it here, where the package index is reachable; the folder then travels with the checkout
# (name .gpu-wheels among the paths copied to the GPU machine). It downloads, for CPython $GPU_WHEELS_PYTHON (3.12) on
# manylinux x86-64, with --only-binary=:all: --no-deps (each dependency named here, or already on
# that machine):
#   - pytest-asyncio: the repository's pytest configuration (asyncio_default_fixture_loop_scope,
#     --strict-config) needs it; its own needs, pytest >= 8.4 and typing-extensions >= 4.12, are
#     on the machine (gpu_check.sh falls back to running pytest without the configuration if not);
#   - nvidia-cudnn-frontend 1.32.0 (newest) and 1.23.0 (the oldest the sync layer supports, a
#     pybind pygraph): `import cudnn` needs neither its CuTe DSL stack (imported lazily) nor
#     cuda-python (cuda-bindings is on the machine, for 1.32's driver calls).
# Not cuTENSOR: cutensor-cu13 2.8.1 is a 210 MB wheel (2.3.0, the smallest for CUDA 13: 167 MB),
# over the 64 MiB copied to the GPU machine in all; tests/gpu/test_gpu_cutensor.py skips there,
# saying so. The folder gets SHA256SUMS, which gpu_check.sh checks before installing.
# Then it measures what would travel (the checkout's tracked and untracked, not ignored, files
# and this folder) and fails above GPU_WHEELS_LIMIT_MIB (64).
set -euo pipefail
cd "$(dirname "$0")/.."

FOLDER=${1:-.gpu-wheels}
PYTHON_VERSION=${GPU_WHEELS_PYTHON:-3.12}
LIMIT_MIB=${GPU_WHEELS_LIMIT_MIB:-64}
WANTED=(
    pytest-asyncio==1.5.0
    nvidia-cudnn-frontend==1.32.0
    nvidia-cudnn-frontend==1.23.0
)
# pip matches a manylinux tag exactly: every glibc level these wheels are published for
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)

case $FOLDER in -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
rm -rf "$FOLDER"
mkdir -p "$FOLDER"
platform_options=()
for platform in "${PLATFORMS[@]}"; do platform_options+=(--platform "$platform"); done
for wheel in "${WANTED[@]}"; do  # one at a time: two versions of one project in one call conflict
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version "$PYTHON_VERSION" --implementation cp "${platform_options[@]}" -d "$FOLDER" "$wheel"
done
(cd "$FOLDER" && sha256sum -- *.whl >SHA256SUMS)

folder_bytes=$(du -cb "$FOLDER" | tail -1 | cut -f1)
# what travels besides: git's tracked and untracked, not ignored, files (0 outside a git checkout)
tree_bytes=$({ git ls-files -z --cached --others --exclude-standard 2>/dev/null || true; } |
    du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
tree_bytes=${tree_bytes:-0}
ls -l "$FOLDER"
awk -v f="$folder_bytes" -v t="$tree_bytes" -v limit="$LIMIT_MIB" -v name="$FOLDER" 'BEGIN {
    printf "wheel folder %s: %.1f MiB; with the checkout that travels: %.1f MiB (limit %d MiB)\n",
        name, f / 1048576, (f + t) / 1048576, limit }'
if [ $((folder_bytes + tree_bytes)) -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "gpu_wheels: over the $LIMIT_MIB MiB copied to the GPU machine" >&2
    exit 1
fi
echo "cuTENSOR: not carried (cutensor-cu13 2.8.1 is a 210 MB wheel; $LIMIT_MIB MiB are copied to the GPU machine)"
