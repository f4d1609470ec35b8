#!/usr/bin/env bash
# The GPU check: the sync layer against real CuPy, cuBLAS, cuFFT and the cuDNN frontend on a
# real CUDA 12 device, with the figures printed. Under 5 minutes on an H200, installs included: on a
# bare machine they fetch about 2.5 GB of wheels and take most of that time; the tests about a minute.
#
#   bash scripts/gpu_check.sh
#
# What it installs, into a fresh virtual environment (.venv-gpu, removed first; GPU_VENV=path):
#   - CuPy: cupy-cuda12x (CuPy 14), with its [ctk] extra (the CUDA 12 library wheels: cuBLAS,
#     cuFFT, cuRAND, cuSOLVER, cuSPARSE, NVRTC, the runtime; about 1.5 GB) unless this machine's
#     loader already finds those libraries. CUPY_PACKAGE=... overrides (e.g. cupy-cuda13x[ctk]);
#   - pytest and pytest-asyncio, and the project from this checkout (pip install -e .);
#   - unless FRONTEND=0, with --no-deps (its DSL kernels' stack is not needed for graphs):
#     nvidia-cudnn-frontend (newest), with nvidia-cudnn-cu12 (cuDNN 9, about 1 GB) unless a
#     cuDNN 9 loads already and cuda-bindings 12.x unless it imports, into the venv; and
#     nvidia-cudnn-frontend==1.23.0 into a folder of its own for a second run. If one of them
#     cannot be installed, the frontend test is skipped, saying why; once installed, it must run.
# Offline: WHEELS=dir installs from a folder of wheels (pip --no-index --find-links dir).
# SYSTEM_SITE=1: the venv sees the system's site-packages, and whatever imports there already
# (CuPy, pytest, cuDNN) is used instead of installed: for a machine with CuPy preinstalled and
# no network, with WHEELS holding what is missing (pytest-asyncio, nvidia-cudnn-frontend).
#
# Then it prints the GPU and `python -m backends`, and runs tests/gpu with -s. Lines starting
# with [gpu] are the figures; they are repeated at the end:
#   - float32 error (against float64) with TF32 off and on, and the ratio, for 2-D `@`, batched
#     cupy.matmul (ndim 3) and cupy.einsum, with the math mode read back from cuBLAS;
#   - CUPY_TF32=1: the 2-D and batched errors with CuPy alone and with backends (child processes);
#   - solve_triangular: error IEEE, inside tf32(True), and right after such a scope, with the
#     handle's math mode in and after the scope;
#   - an fp16 GEMM under allow_fp16_reduced_precision_reduction True and False: math mode (bit 16)
#     and error of each, and whether the two results are bitwise equal;
#   - per thread: the math mode a new handle starts in, and the plan cache capacity and size;
#   - a cuDNN frontend conv_wgrad under deterministic True and False: runs bitwise equal or not,
#     error against float64 (newest frontend, then 1.23);
#   - the sync layer's added time on a 64x64 cupy.matmul (wrapped against unwrapped, medians).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
stage() { printf '\n== %s (%ds)\n' "$1" $((SECONDS - start)); }
die() { printf 'gpu_check: %s\n' "$1" >&2; exit 1; }

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ||
    echo "(nvidia-smi not found)"

VENV=${GPU_VENV:-.venv-gpu}
LOG=$VENV/gpu_check.log
pip_source=()
if [ -n "${WHEELS:-}" ]; then pip_source=(--no-index --find-links "$WHEELS"); fi

stage "fresh virtual environment $VENV"
rm -rf "$VENV"
venv_options=()
if [ "${SYSTEM_SITE:-0}" = 1 ]; then venv_options=(--system-site-packages); fi
python3 -m venv ${venv_options[@]+"${venv_options[@]}"} "$VENV" || die "python3 -m venv failed"
. "$VENV/bin/activate"
pip() { python -m pip --disable-pip-version-check --quiet "$@"; }
has() { python -c "import $1" 2>/dev/null; }

if [ -z "${CUPY_PACKAGE:-}" ]; then
    CUPY_PACKAGE="cupy-cuda12x[ctk]"
    have_libs=1
    for lib in libcublas.so.12 libcufft.so.11 libcurand.so.10 libcusolver.so.11 libcusparse.so.12 libnvrtc.so.12; do
        ldconfig -p 2>/dev/null | grep -q "$lib" || have_libs=0
    done
    if [ $have_libs = 1 ]; then CUPY_PACKAGE=cupy-cuda12x; fi
fi
needed=()
if [ "${SYSTEM_SITE:-0}" = 1 ] && has cupy; then echo "using the CuPy already installed"; else needed+=("$CUPY_PACKAGE"); fi
has pytest || needed+=(pytest)
has pytest_asyncio || needed+=(pytest-asyncio)
stage "installing ${needed[*]:-nothing more} and this checkout"
if [ ${#needed[@]} -gt 0 ]; then
    pip install ${pip_source[@]+"${pip_source[@]}"} "${needed[@]}" || die "could not install ${needed[*]}"
fi
pip install ${pip_source[@]+"${pip_source[@]}"} --no-deps -e . || die "could not install the project"

frontend_newest="" frontend_oldest=""
if [ "${FRONTEND:-1}" != 0 ]; then
    stage "installing nvidia-cudnn-frontend (newest and 1.23.0), and cuDNN 9 if absent, with --no-deps"
    wanted=(nvidia-cudnn-frontend)
    python - <<'EOF' || wanted+=(nvidia-cudnn-cu12)
import ctypes, glob, site, sys, sysconfig
folders = {sysconfig.get_path("purelib"), *site.getsitepackages()}
found = [f for d in folders for f in glob.glob(d + "/nvidia/cudnn/lib/libcudnn.so.9*")]
try:
    ctypes.CDLL(found[0] if found else "libcudnn.so.9")
except OSError:
    sys.exit(1)
EOF
    # The newest frontend drives the GPU through cuda-python's driver bindings (its 1.23 does not).
    cuda_major=12
    case $CUPY_PACKAGE in *cuda13*) cuda_major=13 ;; esac
    has cuda.bindings.driver || wanted+=("cuda-bindings==$cuda_major.*")
    if pip install ${pip_source[@]+"${pip_source[@]}"} --no-deps "${wanted[@]}"; then
        frontend_newest=$(python -c 'import importlib.metadata as m; print(m.version("nvidia-cudnn-frontend"))')
        if pip install ${pip_source[@]+"${pip_source[@]}"} --no-deps --target "$VENV/frontend-1.23.0" \
            nvidia-cudnn-frontend==1.23.0; then
            frontend_oldest=1.23.0
        else
            echo "nvidia-cudnn-frontend 1.23.0 could not be installed: its run is left out"
        fi
    else
        echo "${wanted[*]} could not be installed: the cuDNN frontend test will skip"
    fi
fi

# The CUDA library wheels' folders on the loader's path, for cuDNN and its sublibraries (CuPy 14
# finds its own through cuda-pathfinder). The flags start from their defaults: no CUPY_TF32,
# no TF32 override, no BACKENDS_* variable, no cuTENSOR routing of einsum.
libs=$(python -c '
import glob, site, sysconfig
folders = [sysconfig.get_path("purelib"), *site.getsitepackages()]
print(":".join(dict.fromkeys(lib for d in folders for lib in sorted(glob.glob(d + "/nvidia/*/lib")))))')
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset CUPY_TF32 NVIDIA_TF32_OVERRIDE CUPY_ACCELERATORS
for variable in $(compgen -e | grep '^BACKENDS_' || true); do unset "$variable"; done
export PYTHONUNBUFFERED=1

stage "the device"
python - <<'EOF' || die "CuPy sees no usable CUDA device: nothing to check here (the tests would only skip)"
import cupy
assert cupy.cuda.is_available()
device = cupy.cuda.Device()
name = cupy.cuda.runtime.getDeviceProperties(device.id)["name"]
name = name.decode() if isinstance(name, bytes) else name
print(f"CuPy {cupy.__version__}, device {device.id}: {name}, compute capability {device.compute_capability}, "
      f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, driver {cupy.cuda.runtime.driverGetVersion()}")
EOF
python -m backends || die "python -m backends failed"

status=0
stage "tests/gpu (cuDNN frontend ${frontend_newest:-not installed})"
GPU_CHECK_FRONTEND=$frontend_newest timeout 180 \
    python -m pytest -p no:cacheprovider -v -s -ra tests/gpu 2>&1 | tee "$LOG" || status=1
if [ -n "$frontend_oldest" ]; then
    stage "tests/gpu/test_gpu_cudnn_frontend.py with cuDNN frontend $frontend_oldest (pybind pygraph)"
    PYTHONPATH="$VENV/frontend-$frontend_oldest" GPU_CHECK_FRONTEND=$frontend_oldest timeout 60 \
        python -m pytest -p no:cacheprovider -v -s -ra tests/gpu/test_gpu_cudnn_frontend.py 2>&1 |
        tee -a "$LOG" || status=1
fi

stage "the figures"
grep -o '\[gpu\].*' "$LOG" || echo "(none: see the output above)"
stage "done: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
