#!/usr/bin/env bash
# The GPU check: the sync layer against the real CuPy, cuBLAS, cuFFT, cuSPARSE, cuDNN's frontend
# (and cuTENSOR where the machine has it) on a real device, with the figures in a log and a JSON.
#
#   bash scripts/gpu_check.sh              # on the GPU machine, offline, in this checkout
#   bash scripts/gpu_check.sh --dry-run    # on any machine: everything up to the first CUDA call
#
# It runs on the machine's own Python (python3, or GPU_CHECK_PYTHON) and the CuPy installed there:
# no virtual environment of its own and nothing from a package index. The CUDA major is the one
# that CuPy was built for (cupy.cuda.runtime.runtimeGetVersion() // 1000); the library folders
# (nvidia/*/lib: cuDNN, the CUDA libraries; cutensor/lib) are those of that interpreter's site
# directories, put on LD_LIBRARY_PATH. What the machine lacks comes from a folder of wheels that
# scripts/gpu_wheels.sh prepares where the index is reachable (GPU_WHEELS, default .gpu-wheels:
# pytest-asyncio, nvidia-cudnn-frontend 1.32.0 and 1.23.0, and a cutensor-cu<major> wheel if
# one is there), checked against its SHA256SUMS and installed with pip --no-index into a temporary
# --target folder put on PYTHONPATH (the newest frontend with the rest, each older one in a folder
# of its own for a run of its own). The project is used from this checkout through PYTHONPATH,
# with its C accelerator built in place first (setup.py build_ext --inplace: offline, with the
# machine's setuptools and C compiler; GPU_CHECK_BUILD=0 skips it); where that build fails, the
# pure-Python engine runs, and the report says so.
#
# pytest runs with the repository's configuration (--strict-config, filterwarnings = error, the
# asyncio option) and only the plugins named here (PYTEST_DISABLE_PLUGIN_AUTOLOAD=1:
# pytest_asyncio and pytest_timeout, where they import), so the machine's other pytest plugins
# play no part. Without pytest-asyncio that configuration does not load: then -o addopts= and
# -W ignore::pytest.PytestConfigWarning, said in the log. Runs, each under `timeout`, within
# GPU_CHECK_BUDGET seconds in all (480: a cold kernel cache, inside the 600 s a command gets on the project's GPU machine):
#   main               tests/gpu with the newest frontend (every test_*.py there: a new file, a
#                      torch check say, runs with no change here);
#   frontend-<version> tests/gpu/test_gpu_cudnn_frontend.py with each older frontend;
#   pure               tests/gpu again on the pure-Python engine (BACKENDS_PURE_PYTHON=1, the
#                      frontend file left out), when the main run was compiled and time is left.
# A frontend the wheel folder holds must load (its test fails, never skips); every skip is listed
# with its reason at the end (pytest -ra, and "SKIPPED (script)" for what the script left out).
#
# Output: $OUT when it is set (the folder the project's GPU machine sends back), else .gpu-check/:
# gpu_check.log (everything printed), gpu_check.json (environment, device, runs, skips,
# failures, figures), figures.jsonl (each test's figures: tests/gpu/harness.py) and
# junit-<run>.xml. Exit status 0 when everything ran and passed, 1 on a failure, 3 when the wheel
# folder was missing (the rest ran).
#
# --dry-run: the same steps on a CPU machine, in an environment set up like the GPU machine's
# (CI: a Python 3.12 venv with cupy-cuda13x and the CUDA 13 library wheels): the folder installs
# offline, CuPy, both frontends and pytest-asyncio import, the CUDA major is derived, the
# accelerator builds, tests/gpu is collected and run with every test skipped before its first
# CUDA call (GPU_CHECK_DRY_RUN=1), and the log and the JSON are written. It fails unless every run
# collected tests and skipped all of them for that reason.
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
dry_run=0
for argument in "$@"; do
    case $argument in
        --dry-run) dry_run=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "gpu_check: unknown argument '$argument' (--dry-run, --help)" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
PY=${GPU_CHECK_PYTHON:-python3}
WHEELS=${GPU_WHEELS:-$ROOT/.gpu-wheels}
OUT_DIR=${OUT:-$ROOT/.gpu-check}
BUDGET=${GPU_CHECK_BUDGET:-480}
mkdir -p "$OUT_DIR" || exit 2
OUT_DIR=$(cd "$OUT_DIR" && pwd)
rm -f "$OUT_DIR"/gpu_check.log "$OUT_DIR"/gpu_check.json "$OUT_DIR"/figures.jsonl "$OUT_DIR"/junit-*.xml
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT

main() {
    local start=$SECONDS status=0 incomplete=0
    local -a left_out=() runs=() settings=()
    stage() {
        printf '\n== %s (%ds)\n' "$1" $((SECONDS - start))
        printf '%d\t%s\n' $((SECONDS - start)) "$1" >>"$WORK/stages.tsv"
    }
    fail() { printf 'gpu_check: FAILED: %s\n' "$1"; status=1; }
    die() { printf 'gpu_check: FAILED: %s\n' "$1"; status=1; report; exit 1; }
    remaining() { echo $((BUDGET - (SECONDS - start))); }
    # Only ever from the wheel folder: the GPU machine reaches no package index. --isolated: no
    # pip configuration of the machine's (an index, constraints) plays a part.
    pip_offline() {
        "$PY" -m pip install --isolated --disable-pip-version-check --quiet --no-index --find-links "$WHEELS" \
            --no-deps --no-compile --no-cache-dir "$@"
    }
    report() {
        stage "report"
        local -a arguments=()
        local item
        for item in ${runs[@]+"${runs[@]}"}; do arguments+=(--run "$item"); done
        for item in ${settings[@]+"${settings[@]}"}; do arguments+=(--set "$item"); done
        for item in ${left_out[@]+"${left_out[@]}"}; do arguments+=(--left-out "$item"); done
        [ $dry_run = 1 ] && arguments+=(--dry-run)
        [ -f "$WORK/device.json" ] && arguments+=(--device "$WORK/device.json")
        local outcome=passed
        [ $incomplete = 1 ] && outcome=incomplete
        [ $status = 1 ] && outcome=failed
        printf '%d\t%s\n' $((SECONDS - start)) "end" >>"$WORK/stages.tsv"
        "$PY" "$ROOT/scripts/gpu_check_report.py" report --out "$OUT_DIR/gpu_check.json" \
            --environment "$WORK/environment.json" --figures "$OUT_DIR/figures.jsonl" --junit-dir "$OUT_DIR" \
            --stages "$WORK/stages.tsv" --status "$outcome" ${arguments[@]+"${arguments[@]}"} || status=1
    }

    local mode="GPU run"
    [ $dry_run = 1 ] && mode="dry run: stops before the first CUDA call"
    stage "scripts/gpu_check.sh ($mode), $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -n) ($(uname -m)), output in $OUT_DIR"
    git -C "$ROOT" log -1 --format='checkout %h %s' 2>/dev/null | cut -c1-160
    if [ $dry_run = 0 ]; then
        if command -v nvidia-smi >/dev/null; then
            nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        else
            echo "(nvidia-smi not found)"
        fi
    fi

    stage "the interpreter: $PY"
    command -v "$PY" >/dev/null || die "$PY is not on PATH (GPU_CHECK_PYTHON names another interpreter)"
    "$PY" -c 'import sys; print(sys.version.split()[0], sys.executable, "(prefix", sys.prefix + ")")' ||
        die "$PY does not run"

    stage "CuPy, and the CUDA major it was built for"
    local cuda_major
    cuda_major=$("$PY" -c 'import cupy; print(cupy.cuda.runtime.runtimeGetVersion() // 1000)' | tail -1)
    case $cuda_major in
        '' | *[!0-9]*) die "CuPy does not import with $PY (or its runtime version is not a number): the check needs the machine's CuPy" ;;
    esac
    echo "CUDA $cuda_major (CuPy's runtime; it picks the cutensor-cu$cuda_major wheel and names nvidia-cudnn-cu$cuda_major)"
    settings+=("cuda_major=$cuda_major")

    stage "the wheel folder $WHEELS, installed offline"
    local site=$WORK/site
    mkdir -p "$site"
    local -a frontends=() wanted=()
    local wheel version cutensor_wheel=""
    if compgen -G "$WHEELS/*.whl" >/dev/null; then
        ls -l "$WHEELS"
        if [ -f "$WHEELS/SHA256SUMS" ]; then
            (cd "$WHEELS" && sha256sum --check --quiet SHA256SUMS) ||
                fail "the wheels do not match $WHEELS/SHA256SUMS (copied in part?)"
        fi
        for wheel in "$WHEELS"/nvidia_cudnn_frontend-*.whl; do
            [ -e "$wheel" ] || continue
            version=${wheel##*/nvidia_cudnn_frontend-}
            frontends+=("${version%%-*}")
        done
        if [ ${#frontends[@]} -gt 0 ]; then
            mapfile -t frontends < <(printf '%s\n' "${frontends[@]}" | sort -V -r -u)
            wanted+=("nvidia-cudnn-frontend==${frontends[0]}")
        fi
        compgen -G "$WHEELS/pytest_asyncio-*.whl" >/dev/null && wanted+=(pytest-asyncio)
        cutensor_wheel=$(compgen -G "$WHEELS/cutensor_cu${cuda_major}-*.whl" | head -1)
        [ -n "$cutensor_wheel" ] && wanted+=("cutensor-cu$cuda_major")
        if [ ${#wanted[@]} -gt 0 ]; then
            echo "into $site: ${wanted[*]}"
            pip_offline --target "$site" "${wanted[@]}" || fail "pip could not install ${wanted[*]} from $WHEELS"
        fi
        for version in "${frontends[@]:1}"; do
            echo "into $WORK/frontend-$version: nvidia-cudnn-frontend==$version"
            pip_offline --target "$WORK/frontend-$version" "nvidia-cudnn-frontend==$version" ||
                fail "pip could not install nvidia-cudnn-frontend==$version from $WHEELS"
        done
    else
        incomplete=1
        left_out+=("the wheel folder $WHEELS: not there, so no cuDNN frontend and no pytest-asyncio (prepare it with scripts/gpu_wheels.sh where the package index is reachable, and carry it)")
        echo "NOT THERE: ${left_out[-1]}"
    fi
    settings+=("frontends=${frontends[*]:-none}")

    stage "the environment this interpreter gives"
    export PYTHONPATH="$ROOT/src:$ROOT:$site${PYTHONPATH:+:$PYTHONPATH}"  # the package (src layout), the tests
    "$PY" "$ROOT/scripts/gpu_check_report.py" probe --site "$site" --json "$WORK/environment.json" \
        --shell "$WORK/environment.sh" || die "the environment probe failed"
    local library_path=""
    # shellcheck source=/dev/null
    . "$WORK/environment.sh"
    [ -n "$library_path" ] && export LD_LIBRARY_PATH="$library_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    # The flags start from their defaults: no CUPY_TF32, no TF32 override, CuPy's default
    # accelerators, no BACKENDS_* variable.
    unset CUPY_TF32 NVIDIA_TF32_OVERRIDE CUPY_ACCELERATORS
    local variable
    for variable in $(compgen -e | grep '^BACKENDS_' || true); do unset "$variable"; done
    export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

    stage "the project from this checkout, its C accelerator built in place (offline)"
    local engine build="GPU_CHECK_BUILD=0"
    if [ "${GPU_CHECK_BUILD:-1}" = 1 ]; then
        if timeout 120 "$PY" setup.py --quiet build_ext --inplace --build-temp "$WORK/build" >"$WORK/build.log" 2>&1; then
            build="built"
            grep -i 'accelerator\|error' "$WORK/build.log" | head -5
        else
            build="its build failed: $(grep -i 'error' "$WORK/build.log" | head -1 | cut -c1-200)"
            tail -15 "$WORK/build.log"
            echo "the build failed: the pure-Python engine runs"
        fi
    fi
    engine=$("$PY" -c 'import backends._engine.accelerator as a; print("compiled" if a.ACCELERATED else "pure: " + a.reason)') ||
        die "backends does not import from $ROOT/src"
    settings+=("engine=$engine")
    timeout 120 "$PY" -m backends || fail "python -m backends failed"

    stage "what the tests import"
    "$PY" -c 'import pytest_asyncio' 2>/dev/null && settings+=("pytest_asyncio=yes") || settings+=("pytest_asyncio=no")
    for version in "${frontends[@]}"; do
        local path=$PYTHONPATH
        [ "$version" != "${frontends[0]}" ] && path=$WORK/frontend-$version:$PYTHONPATH
        PYTHONPATH=$path "$PY" -c 'import sys, cudnn
print(f"cuDNN frontend {cudnn.__version__} ({cudnn.__file__}), cuDNN {cudnn.backend_version()}")
sys.exit(cudnn.__version__ != sys.argv[1])' "$version" || fail "cuDNN frontend $version does not import (its test will fail)"
    done
    local cutensor=""
    if cutensor=$("$PY" -c 'from cupy_backends.cuda.libs import cutensor; print(cutensor.get_version())' 2>/dev/null); then
        echo "cuTENSOR $cutensor ($([ -n "$cutensor_wheel" ] && echo "from ${cutensor_wheel##*/}" || echo "on the machine"))"
        export GPU_CHECK_CUTENSOR=$cutensor
    elif [ -n "$cutensor_wheel" ]; then
        fail "${cutensor_wheel##*/} was installed but cuTENSOR does not load (its test fails too)"
        export GPU_CHECK_CUTENSOR=${cutensor_wheel##*/}
    else
        export GPU_CHECK_CUTENSOR_MISSING="cuTENSOR is not on this machine and not in the wheel folder: cutensor-cu$cuda_major (2.8.1: a 210 MB wheel) does not fit the 64 MiB copied to the project's GPU machine"
        left_out+=("cuTENSOR: $GPU_CHECK_CUTENSOR_MISSING")
        echo "SKIPPED: ${left_out[-1]}"
    fi
    settings+=("cutensor=${cutensor:-none}")
    export GPU_CHECK_FIGURES=$OUT_DIR/figures.jsonl
    [ $dry_run = 1 ] && export GPU_CHECK_DRY_RUN=1

    if [ $dry_run = 0 ]; then
        stage "the device (the first CUDA call)"
        timeout 120 "$PY" "$ROOT/scripts/gpu_check_report.py" device --json "$WORK/device.json" ||
            die "CuPy sees no usable CUDA device: nothing to check here (every test would skip)"
    fi

    stage "pytest: the repository's configuration, with only the plugins named here"
    export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
    local -a pytest_options=(-p no:cacheprovider -v -s -ra) asyncio_plugin=()
    "$PY" -c 'import pytest_timeout' 2>/dev/null && pytest_options+=(-p pytest_timeout --timeout=240)
    "$PY" -c 'import pytest_asyncio' 2>/dev/null && asyncio_plugin=(-p pytest_asyncio.plugin)
    if timeout 120 "$PY" -m pytest "${pytest_options[@]}" ${asyncio_plugin[@]+"${asyncio_plugin[@]}"} \
        --collect-only -q tests/gpu >"$WORK/collect.log" 2>&1; then
        pytest_options+=(${asyncio_plugin[@]+"${asyncio_plugin[@]}"})
        settings+=("pytest_configuration=the repository's")
    else
        # pytest-asyncio missing, or not loading with this pytest: without it, and without the
        # configuration that needs it
        tail -5 "$WORK/collect.log"
        pytest_options+=(-o addopts= -W ignore::pytest.PytestConfigWarning --strict-markers)
        left_out+=("the repository's pytest configuration (it needs pytest-asyncio): pytest runs with -o addopts= -W ignore::pytest.PytestConfigWarning")
        echo "FALLING BACK: ${left_out[-1]}"
        settings+=("pytest_configuration=without addopts")
        timeout 120 "$PY" -m pytest "${pytest_options[@]}" --collect-only -q tests/gpu >"$WORK/collect.log" 2>&1 || {
            tail -20 "$WORK/collect.log"
            die "pytest cannot collect tests/gpu"
        }
    fi
    tail -1 "$WORK/collect.log"
    echo "pytest ${pytest_options[*]}"

    # run_pytest NAME SECONDS [VARIABLE=VALUE ...] -- PATHS...: one pytest run under `timeout`.
    run_pytest() {
        local name=$1 limit=$2 rc
        shift 2
        local -a assignments=()
        while [ "$1" != -- ]; do assignments+=("$1"); shift; done
        shift
        stage "run $name: pytest $* (at most ${limit}s)"
        env GPU_CHECK_RUN="$name" ${assignments[@]+"${assignments[@]}"} timeout --kill-after=15 "$limit" \
            "$PY" -m pytest "${pytest_options[@]}" --junitxml="$OUT_DIR/junit-$name.xml" "$@"
        rc=$?
        case $rc in
            0) ;;
            124 | 137) fail "run $name: stopped after ${limit}s" ;;
            *) fail "run $name: pytest exited with $rc" ;;
        esac
        runs+=("$name=$rc")
    }
    # torch: the GPU machine's python3 holds torch too. A torch check goes in
    # tests/gpu/test_gpu_torch*.py: the main run below takes every test file in tests/gpu (and the
    # pure run every one but the frontend's), and its figures reach the JSON through
    # tests/gpu/harness.py's say(). Nothing here needs to change for it.
    local older=$((${#frontends[@]} > 1 ? ${#frontends[@]} - 1 : 0)) limit
    limit=$(($(remaining) - 20 - 75 * older))
    [ "$limit" -lt 60 ] && limit=60
    run_pytest main "$limit" "GPU_CHECK_FRONTEND=${frontends[0]:-}" -- tests/gpu
    for version in "${frontends[@]:1}"; do
        limit=$(($(remaining) - 15))
        [ "$limit" -gt 120 ] && limit=120
        if [ "$limit" -lt 30 ]; then
            left_out+=("the run with cuDNN frontend $version: no time left in the ${BUDGET}s budget")
            fail "${left_out[-1]}"
            continue
        fi
        run_pytest "frontend-$version" "$limit" "GPU_CHECK_FRONTEND=$version" \
            "PYTHONPATH=$WORK/frontend-$version:$PYTHONPATH" -- tests/gpu/test_gpu_cudnn_frontend.py
    done
    if [ "$engine" = compiled ]; then
        limit=$(($(remaining) - 15))
        if [ "$limit" -ge 90 ]; then
            run_pytest pure "$limit" BACKENDS_PURE_PYTHON=1 -- tests/gpu --ignore=tests/gpu/test_gpu_cudnn_frontend.py
        else
            left_out+=("the run on the pure-Python engine: ${limit}s left in the ${BUDGET}s budget, 90 needed")
            echo "SKIPPED: ${left_out[-1]}"
        fi
    else
        left_out+=("the compiled engine (${build}; ${engine}): every run was on the pure-Python engine")
    fi

    report
    local verdict=passed code=0
    [ $incomplete = 1 ] && verdict="INCOMPLETE (see SKIPPED (script) above)" code=3
    [ $status = 1 ] && verdict=FAILED code=1
    stage "done: $verdict ($([ $dry_run = 1 ] && echo "dry run" || echo "GPU run")); log $OUT_DIR/gpu_check.log"
    return $code
}

main 2>&1 | tee "$OUT_DIR/gpu_check.log"
exit "${PIPESTATUS[0]}"
