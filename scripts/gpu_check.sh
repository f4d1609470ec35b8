#!/usr/bin/env bash
# Run the GPU tests on a machine with a CUDA device, in under 5 minutes.
#   bash scripts/gpu_check.sh            (CUDA 12; CUPY_PACKAGE=cupy-cuda13x for CUDA 13)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-gpu
. .venv-gpu/bin/activate
python -m pip install --quiet -e '.[test]' "${CUPY_PACKAGE:-cupy-cuda12x}"
python -m backends
pytest -p no:cacheprovider -v -s tests/gpu
