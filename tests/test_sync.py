"""The sync layer (contract sections 8 and 9), proved with the stand-in CuPy.

Every check is made from what a user (or CuPy) can observe: the math mode and compute
type each cuBLAS launch ran with, the plan cache each FFT looked up, the keyword
arguments each cuDNN convolution received, the warnings and exceptions raised. The
stand-in records all of it (``tests/standin/README.md``).

In-process tests use the ``standin_cupy`` fixture (fresh stand-in modules per test, so
the import hooks wrap them again). What depends on the order of imports, on per-process
state (a warn-once) or on environment variables read at import runs in a fresh
interpreter with the stand-in on ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import itertools
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import backends
from tests._helpers import run_threads
from tests.standin_fixture import STANDIN

REPO = Path(__file__).resolve().parent.parent

# cuBLAS values (cublas_api.h); the sync layer documents these numbers.
DEFAULT_MATH = 0
TF32_MATH = 3
DISALLOW_REDUCED = 16
COMPUTE_32F = 68
COMPUTE_32F_PEDANTIC = 69
COMPUTE_64F = 70
COMPUTE_32F_FAST_TF32 = 77
CUDA_R_32F = 0  # what CuPy's batched matmul passes as computeType for float32

FP16_FLAG = "cuda.matmul.allow_fp16_reduced_precision_reduction"
BF16_FLAG = "cuda.matmul.allow_bf16_reduced_precision_reduction"
TF32_FLAG = "cuda.matmul.allow_tf32"
MAX_SIZE = "cuda.cufft_plan_cache.max_size"


# -- helpers ----------------------------------------------------------------------------------------


def cublas() -> ModuleType:
    """CuPy's ``cupy_backends.cuda.libs.cublas`` (imported on first use, as CuPy does)."""
    from cupy_backends.cuda.libs import cublas as module

    return module


def launched(call: Callable[[], object]) -> list[Any]:
    """The cuBLAS launches that ``call()`` made (single-threaded callers only)."""
    recorder = cublas().RECORDER
    with recorder.lock:
        start = len(recorder.launches)
    call()
    with recorder.lock:
        return recorder.launches[start:]


def only_launch(call: Callable[[], object]) -> Any:
    launches = launched(call)
    assert len(launches) == 1, launches
    return launches[0]


def math_mode_calls() -> int:
    recorder = cublas().RECORDER
    with recorder.lock:
        return len(recorder.math_mode_calls)


def run_python(code: str, *, standin: bool = True, warnings_are_errors: bool = False, **env: str) -> Any:
    """Run ``code`` in a fresh interpreter (the repository, and the stand-in CuPy unless
    ``standin`` is False, on ``PYTHONPATH``); return the JSON it prints last."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("STANDIN_CUPY_", "CUPY_", "BACKENDS_", "PYTHON"))
    }
    paths = [str(STANDIN), str(REPO)] if standin else [str(REPO)]
    environ["PYTHONPATH"] = os.pathsep.join(paths)
    command = [sys.executable, *(["-W", "error"] if warnings_are_errors else []), "-c", textwrap.dedent(code)]
    done = subprocess.run(command, env={**environ, **env}, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_pristine(relative: str) -> ModuleType:
    """A private copy of a stand-in module, loaded from its file under another name, so
    the sync layer's import hooks never see (or wrap) it: the originals to compare with."""
    path = STANDIN / relative
    spec = importlib.util.spec_from_file_location(f"_pristine_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- 1. asyncio tasks on one thread -----------------------------------------------------------------


def test_interleaved_asyncio_tasks_each_launch_with_their_own_math_mode(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    a = cupy.ndarray((16, 16), "float32")
    batch = cupy.ndarray((3, 16, 16), "float32")
    seen: list[tuple[bool, str, Any]] = []  # (task's allow_tf32, how it multiplied, the launch)
    calls: dict[str, Callable[[], object]] = {
        "@": lambda: a @ a,
        "matmul": lambda: cupy.matmul(a, a),
        "dot": lambda: cupy.dot(a, a),
        "batched": lambda: cupy.matmul(batch, batch),
    }

    async def task(tf32: bool) -> None:
        with backends.cuda.matmul.tf32(tf32):
            for _ in range(4):
                for how, call in calls.items():
                    await asyncio.sleep(0)  # let every other task run in between
                    seen.append((tf32, how, only_launch(call)))

    async def main() -> None:
        await asyncio.gather(*(task(i % 2 == 0) for i in range(50)))

    asyncio.run(main())

    assert len(seen) == 50 * 4 * len(calls)
    switches = sum(1 for before, after in itertools.pairwise(seen) if before[0] != after[0])
    assert switches >= 50 * 4  # the tasks really interleaved, flipping the wanted mode each time
    for tf32, how, launch in seen:
        assert launch.math_mode == (TF32_MATH if tf32 else DEFAULT_MATH), (tf32, how, launch)
        if how == "batched":  # follows the handle's math mode; CuPy passes the data type
            assert (launch.function, launch.compute_type) == ("gemmStridedBatchedEx", CUDA_R_32F)
        else:
            wanted = COMPUTE_32F_FAST_TF32 if tf32 else COMPUTE_32F
            assert (launch.function, launch.compute_type) == ("gemmEx", wanted), (tf32, how, launch)
    assert len({launch.handle for _, _, launch in seen}) == 1  # one thread: one shared handle


# -- 2. threads x devices ---------------------------------------------------------------------------


def test_eight_threads_on_two_devices_each_keep_their_flags(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    module = cublas()
    threads = 8
    rounds = 5
    barrier = threading.Barrier(threads)
    idents: dict[int, int] = {}
    final_modes: dict[tuple[int, int], int] = {}
    handles_seen: dict[tuple[int, int], set[int]] = {}

    def flags_of(index: int) -> tuple[bool, bool]:
        return index % 2 == 0, index % 4 < 2  # (allow_tf32, allow_fp16_reduced_precision_reduction)

    def worker(index: int) -> None:
        tf32, fp16 = flags_of(index)
        idents[index] = threading.get_ident()
        with backends.flags({TF32_FLAG: tf32, FP16_FLAG: fp16}):
            for _ in range(rounds):
                barrier.wait(timeout=30)
                for device in (0, 1):
                    with cupy.cuda.Device(device):
                        single = cupy.ndarray((8, 8), "float32")
                        half = cupy.ndarray((8, 8), "float16")
                        single @ single
                        half @ half
                        handle = cupy.cuda.device.get_cublas_handle()
                        handles_seen.setdefault((index, device), set()).add(handle)
            barrier.wait(timeout=30)  # every thread has launched everything: nobody touches a handle now
            for device in (0, 1):
                with cupy.cuda.Device(device):
                    final_modes[index, device] = module.getMathMode(cupy.cuda.device.get_cublas_handle())
            barrier.wait(timeout=30)  # keep every thread (and its handles) alive until all have read

    run_threads(*(lambda i=i: worker(i) for i in range(threads)), unblock=[barrier])

    index_of = {ident: index for index, ident in idents.items()}
    assert len(index_of) == threads
    created = {record.handle: record for record in module.RECORDER.created}
    by_thread: dict[int, list[Any]] = {index: [] for index in range(threads)}
    for launch in module.RECORDER.launches:
        by_thread[index_of[launch.thread]].append(launch)

    handle_of: dict[tuple[int, int], int] = {}
    for index, launches in by_thread.items():
        tf32, fp16 = flags_of(index)
        base = TF32_MATH if tf32 else DEFAULT_MATH
        assert len(launches) == rounds * 2 * 2
        for position, launch in enumerate(launches):
            device = (position // 2) % 2
            record = created[launch.handle]
            assert (record.thread, record.device) == (launch.thread, device)
            assert handle_of.setdefault((index, device), launch.handle) == launch.handle
            if position % 2 == 0:  # float32: TF32 or not (the reduced-precision bit does not matter)
                assert launch.math_mode & ~DISALLOW_REDUCED == base, (index, launch)
                assert launch.compute_type == (COMPUTE_32F_FAST_TF32 if tf32 else COMPUTE_32F)
            else:  # float16: and the reduced-precision bit from this thread's fp16 flag
                assert launch.math_mode == base | (0 if fp16 else DISALLOW_REDUCED), (index, launch)
                assert launch.compute_type == COMPUTE_32F
        for device in (0, 1):  # the last launch on each handle was the fp16 one
            assert final_modes[index, device] == base | (0 if fp16 else DISALLOW_REDUCED)
    assert len(set(handle_of.values())) == threads * 2  # one handle per (thread, device)
    assert {key: {value} for key, value in handle_of.items()} == handles_seen


# -- 3. CUPY_TF32=1 cannot override a context that said no --------------------------------------------


def test_cupy_tf32_env_does_not_override_allow_tf32_false() -> None:
    code = """
    import json
    import backends, cupy
    from cupy_backends.cuda.libs import cublas

    single = cupy.ndarray((4, 4), "float32")
    double = cupy.ndarray((4, 4), "float64")

    def launch(a):
        a @ a
        last = cublas.RECORDER.launches[-1]
        return [last.math_mode, last.compute_type]

    out = {"default": backends.cuda.matmul.allow_tf32}
    for tf32 in (False, True):
        with backends.cuda.matmul.tf32(tf32):
            out[f"f32 {tf32}"] = launch(single)
            out[f"f64 {tf32}"] = launch(double)
    cupy._core.set_compute_type("float32", cupy._core._routines_linalg.COMPUTE_TYPE_PEDANTIC)
    for tf32 in (False, True):
        with backends.cuda.matmul.tf32(tf32):
            out[f"pedantic {tf32}"] = launch(single)
    print(json.dumps(out))
    """
    out = run_python(code, CUPY_TF32="1")
    assert out == {
        "default": True,  # CUPY_TF32=1 is read as the default of allow_tf32
        "f32 False": [DEFAULT_MATH, COMPUTE_32F],
        "f64 False": [DEFAULT_MATH, COMPUTE_64F],
        "f32 True": [TF32_MATH, COMPUTE_32F_FAST_TF32],
        "f64 True": [TF32_MATH, COMPUTE_64F],
        "pedantic False": [DEFAULT_MATH, COMPUTE_32F_PEDANTIC],
        "pedantic True": [TF32_MATH, COMPUTE_32F_PEDANTIC],
    }


# -- 4. an unchanged state costs no CUDA call ---------------------------------------------------------


def test_unchanged_state_makes_no_math_mode_call(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    a = cupy.ndarray((8, 8), "float32")
    batch = cupy.ndarray((2, 8, 8), "float32")
    with backends.cuda.matmul.tf32(True):
        assert only_launch(lambda: a @ a).math_mode == TF32_MATH
        before = math_mode_calls()
        for _ in range(20):
            a @ a
            cupy.dot(a, a)
            cupy.matmul(batch, batch)
        assert math_mode_calls() == before

        with backends.cudnn.flags(deterministic=True):  # a new scope, same cuBLAS mode
            a @ a
        backends.cudnn.benchmark = True  # inside a scope: the rest of this scope
        a @ a
        assert math_mode_calls() == before

        with backends.cuda.matmul.tf32(False):
            for _ in range(10):
                assert only_launch(lambda: a @ a).math_mode == DEFAULT_MATH
            assert math_mode_calls() == before + 1
        assert only_launch(lambda: a @ a).math_mode == TF32_MATH
        assert math_mode_calls() == before + 2
        assert cublas().RECORDER.math_mode_calls[-1].mode == TF32_MATH


# -- 5. fp16 / bf16 GEMMs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tf32", "fp16", "bf16"),
    [(False, True, True), (False, False, True), (False, True, False), (True, False, False), (True, True, False)],
)
def test_reduced_precision_bits_follow_their_own_flags(
    standin_cupy: ModuleType, tf32: bool, fp16: bool, bf16: bool
) -> None:
    cupy = standin_cupy
    half = cupy.ndarray((8, 8), "float16")
    brain = cupy.ndarray((8, 8), "bfloat16")
    single = cupy.ndarray((8, 8), "float32")
    base = TF32_MATH if tf32 else DEFAULT_MATH
    with backends.flags({TF32_FLAG: tf32, FP16_FLAG: fp16, BF16_FLAG: bf16}):
        for _ in range(2):  # and back again on the same handle
            assert only_launch(lambda: half @ half).math_mode == base | (0 if fp16 else DISALLOW_REDUCED)
            assert only_launch(lambda: brain @ brain).math_mode == base | (0 if bf16 else DISALLOW_REDUCED)
            assert only_launch(lambda: single @ single).math_mode & ~DISALLOW_REDUCED == base


def test_math_mode_changed_behind_our_back_is_put_right(
    standin_cupy: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_CUPY_FP16_MATH_MODE", "1")  # CuPy calls setMathMode around fp16 GEMMs
    cupy = standin_cupy
    half = cupy.ndarray((8, 8), "float16")
    single = cupy.ndarray((8, 8), "float32")
    module = cublas()
    with backends.flags({TF32_FLAG: True, FP16_FLAG: False}):
        first = only_launch(lambda: single @ single)
        assert first.math_mode & ~DISALLOW_REDUCED == TF32_MATH
        fp16 = only_launch(lambda: half @ half)
        assert fp16.math_mode == TF32_MATH | DISALLOW_REDUCED
        handle = cupy.cuda.device.get_cublas_handle()
        assert module.getMathMode(handle) == module.CUBLAS_DEFAULT_MATH  # CuPy reset it after its GEMM
        after = only_launch(lambda: single @ single)
        assert after.math_mode & ~DISALLOW_REDUCED == TF32_MATH
        assert after.compute_type == COMPUTE_32F_FAST_TF32
    with backends.flags({TF32_FLAG: False, FP16_FLAG: True}):
        half @ half
        assert only_launch(lambda: single @ single).math_mode == DEFAULT_MATH
        half @ half
        with backends.cuda.matmul.tf32(True):
            assert only_launch(lambda: single @ single).math_mode == TF32_MATH


# -- 6. backends.sync() -------------------------------------------------------------------------------


def test_sync_pushes_the_current_flags_once(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    module = cublas()
    handle = cupy.cuda.device.get_cublas_handle()

    def mode() -> int:
        return module.getMathMode(cupy.cuda.device.get_cublas_handle())

    with backends.cuda.matmul.tf32(True):
        assert backends.sync() is None
        assert mode() == TF32_MATH
        calls = math_mode_calls()
        for _ in range(5):
            backends.sync()
        assert math_mode_calls() == calls
        with backends.flags({FP16_FLAG: False}):
            backends.sync()
            assert mode() == TF32_MATH | DISALLOW_REDUCED
        with cupy.cuda.Device(1):
            backends.sync()
            assert mode() == TF32_MATH  # device 1's handle in this thread, made now: in this scope's mode
            assert cupy.cuda.device.get_cublas_handle() != handle
    backends.sync()
    assert mode() == DEFAULT_MATH

    backends.cuda.matmul.allow_tf32 = True  # a process default, outside any scope
    backends.sync()
    assert mode() == TF32_MATH
    calls = math_mode_calls()
    backends.sync()
    assert math_mode_calls() == calls
    backends.reset_defaults()
    backends.sync()
    assert mode() == DEFAULT_MATH


def test_sync_repairs_a_handle_that_another_task_changed(standin_cupy: ModuleType) -> None:
    """Tasks share the thread's handle: after task B's TF32 GEMM, task A's ``sync()``
    must put A's mode back before A calls cuBLAS itself with CuPy's handle (docs/sync.md)."""
    cupy = standin_cupy
    module = cublas()
    a = cupy.ndarray((8, 8), "float32")

    async def main() -> tuple[int, int]:
        synced, launched_b = asyncio.Event(), asyncio.Event()

        async def task_a() -> tuple[int, int]:
            with backends.cuda.matmul.tf32(False):
                backends.sync()
                first = module.getMathMode(cupy.cuda.device.get_cublas_handle())
                synced.set()
                await launched_b.wait()
                backends.sync()
                return first, module.getMathMode(cupy.cuda.device.get_cublas_handle())

        async def task_b() -> None:
            await synced.wait()
            with backends.cuda.matmul.tf32(True):
                assert only_launch(lambda: a @ a).math_mode == TF32_MATH
            launched_b.set()

        result, _ = await asyncio.gather(task_a(), task_b())
        return result

    assert asyncio.run(main()) == (DEFAULT_MATH, DEFAULT_MATH)


def test_sync_in_a_fresh_process_before_any_gemm() -> None:
    """``import cupy`` does not load cuBLAS, and ``sync()`` loads nothing; the handle CuPy
    creates afterwards, in the same scope, starts with the flags' math mode."""
    code = """
    import json
    import backends, cupy

    with backends.cuda.matmul.tf32(True):
        backends.sync()
        from cupy_backends.cuda.libs import cublas
        mode = cublas.getMathMode(cupy.cuda.device.get_cublas_handle())
    print(json.dumps(mode))
    """
    assert run_python(code) == TF32_MATH


def test_sync_is_a_no_op_without_a_gpu() -> None:
    code = """
    import json
    import backends, cupy

    results = [backends.sync()]
    try:
        cupy.matmul(cupy.ndarray((2, 2), "float32"), cupy.ndarray((2, 2), "float32"))
    except Exception as error:
        results.append(type(error).__name__)
    import cupy_backends.cuda.libs.cublas, cupy.fft, cupyx.scipy.fft  # every target module loaded
    with backends.cuda.matmul.tf32(True):
        results.append(backends.sync())
    results.append(backends.cuda.is_available())
    from backends.sync import hooks
    results.append([str(failure) for failure in hooks.failures])
    print(json.dumps(results))
    """
    assert run_python(code, warnings_are_errors=True, STANDIN_CUPY_NO_GPU="1") == [
        None, "CUDARuntimeError", None, False, []
    ]  # fmt: skip


def test_sync_is_a_no_op_without_cupy() -> None:
    code = """
    import json, sys
    for name in ("cupy", "cupy_backends", "cupyx"):
        sys.modules[name] = None  # not installed (whatever this interpreter has)
    import backends

    results = [backends.sync()]
    with backends.cuda.matmul.tf32(True), backends.flags({"cuda.cufft_plan_cache.max_size": 3}):
        results.append(backends.sync())
    results += [backends.cuda.is_built(), backends.cuda.is_available()]
    print(json.dumps(results))
    """
    assert run_python(code, standin=False, warnings_are_errors=True) == [None, None, False, False]


# -- 7. whichever is imported first -------------------------------------------------------------------

IMPORT_ORDERS = {
    "backends-first": "import backends\nimport cupy\n",
    "cupy-first": "import cupy\nimport backends\n",
    "cublas-first": "import cupy_backends.cuda.libs.cublas\nimport backends\nimport cupy\n",
    "fft-first": "import cupy.fft\nimport cupyx.scipy.fft\nimport backends\nimport cupy\n",
}


@pytest.mark.parametrize("order", IMPORT_ORDERS)
def test_launches_follow_the_flags_whichever_is_imported_first(order: str) -> None:
    code = IMPORT_ORDERS[order] + textwrap.dedent(
        """
        import json
        import cupyx.scipy.fft
        from backends.sync import hooks
        from cupy.fft import _cache
        from cupy_backends.cuda.libs import cublas

        a = cupy.ndarray((8, 8), "float32")
        out = []
        for tf32 in (True, False, True):
            with backends.cuda.matmul.tf32(tf32):
                a @ a
                launch = cublas.RECORDER.launches[-1]
                out.append([launch.math_mode, launch.compute_type])
        with backends.flags({"cuda.cufft_plan_cache.max_size": 3}):
            cupy.fft.fft(cupy.ndarray((16,), "complex64"))
            cupyx.scipy.fft.fft(cupy.ndarray((32,), "complex64"))
        out.append([lookup.max_size for lookup in _cache.RECORDER.lookups])
        out.append([str(failure) for failure in hooks.failures])
        print(json.dumps(out))
        """
    )
    assert run_python(code, warnings_are_errors=True) == [
        [TF32_MATH, COMPUTE_32F_FAST_TF32],
        [DEFAULT_MATH, COMPUTE_32F],
        [TF32_MATH, COMPUTE_32F_FAST_TF32],
        [3, 3],
        [],
    ]


# -- 8. never break CuPy ------------------------------------------------------------------------------

MISSING_LIBS_PROBE = """
import json, sys
if sys.argv[1] == "with backends":
    import backends
import cupy

def outcome(call):
    try:
        call()
    except BaseException as error:
        return [type(error).__module__, type(error).__qualname__, str(error)]
    return "no error"

a = cupy.ndarray((4, 4), "float32")
out = []
for _ in range(2):  # the failed import is retried, as without backends
    out.append(outcome(lambda: a @ a))
    out.append(outcome(lambda: cupy.linalg.cholesky(a)))
    out.append(outcome(lambda: cupy.fft.fft(cupy.ndarray((8,), "complex64"))))
if sys.argv[1] == "with backends":
    out.append(outcome(backends.sync))
    from backends.sync import hooks
    out.append([str(failure) for failure in hooks.failures])
print(json.dumps(out))
"""


@pytest.mark.parametrize("missing", ["cublas", "cublas,cusolver,cufft"])
def test_missing_cuda_libraries_fail_exactly_as_without_backends(missing: str) -> None:
    without = run_python(f"import sys; sys.argv[1:] = ['alone']\n{MISSING_LIBS_PROBE}", warnings_are_errors=True,
                         STANDIN_CUPY_MISSING_LIBS=missing)  # fmt: skip
    with_backends = run_python(f"import sys; sys.argv[1:] = ['with backends']\n{MISSING_LIBS_PROBE}",
                               warnings_are_errors=True, STANDIN_CUPY_MISSING_LIBS=missing)  # fmt: skip
    assert with_backends[:-2] == without
    assert with_backends[-2:] == ["no error", []]
    assert without[0][:2] == ["builtins", "ImportError"]  # the probe does reach the missing library


CUBLAS_SIGNATURES = STANDIN / "cupy_backends" / "cuda" / "libs" / "cublas_signatures.txt"
# cuBLAS's handle, stream, pointer-mode and math-mode management: takes a handle, launches nothing.
CUBLAS_MANAGEMENT = {"destroy", "getVersion", "getPointerMode", "setPointerMode", "setStream", "getStream",
                     "setMathMode", "getMathMode"}  # fmt: skip


def cublas_routines() -> list[str]:
    """Every function of CuPy 14.2's cuBLAS module that takes a handle and launches work,
    read from the wheel's embedded signatures (the stand-in is built from the same file)."""
    lines = [line for line in CUBLAS_SIGNATURES.read_text().splitlines() if "(intptr_t handle" in line]
    return sorted({line.split("(", 1)[0] for line in lines} - CUBLAS_MANAGEMENT)


CUBLAS_WRAPPED = (*cublas_routines(), "setMathMode", "create", "destroy")


def assert_same_face(wrapped: Any, original: Any) -> None:
    assert wrapped.__name__ == original.__name__
    assert wrapped.__qualname__ == original.__qualname__
    assert wrapped.__doc__ == original.__doc__
    assert inspect.signature(wrapped) == inspect.signature(original)


def test_wrappers_keep_name_doc_and_signature(standin_cupy: ModuleType) -> None:
    import cupy.fft._fft
    import cupyx.cudnn
    from cupy_backends.cuda.libs import cusolver

    module = cublas()
    pristine = load_pristine("cupy_backends/cuda/libs/cublas.py")
    for name in CUBLAS_WRAPPED:
        assert getattr(module, name) is not getattr(pristine, name)
        assert_same_face(getattr(module, name), getattr(pristine, name))
    assert getattr(module.gemmEx, "__wrapped__", None) is not None  # really wrapped (else this proves nothing)

    pristine_solver = load_pristine("cupy_backends/cuda/libs/cusolver.py")
    for name in ("spotrf", "dpotrf_bufferSize", "zpotrf"):
        assert_same_face(getattr(cusolver, name), getattr(pristine_solver, name))

    pristine_cudnn = load_pristine("cupyx/cudnn.py")
    for name in ("convolution_forward", "convolution_backward_filter", "convolution_backward_data"):
        assert_same_face(getattr(cupyx.cudnn, name), getattr(pristine_cudnn, name))

    from cupy.fft import _cache

    assert_same_face(cupy.fft._fft.get_plan_cache, _cache.get_plan_cache)


def test_wrappers_return_values_and_pass_exceptions_through(
    standin_cupy: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    cupy = standin_cupy
    import cupyx.cudnn
    from cupy.fft import _cache, _fft
    from cupy_backends.cuda.libs import cusolver

    module = cublas()
    pristine = load_pristine("cupy_backends/cuda/libs/cublas.py")

    handle = module.create()
    assert isinstance(handle, int)
    assert module.getMathMode(handle) == DEFAULT_MATH
    assert module.setMathMode(handle, TF32_MATH) is None
    assert module.getMathMode(handle) == TF32_MATH
    args = (0, 0, 4, 4, 4, 0x10, 1, 4, 2, 4, 0x20, 3, 4)
    assert module.sgemm(handle, *args) is None
    assert module.destroy(handle) is None

    recorder = module.RECORDER
    launches, mode_calls = len(recorder.launches), len(recorder.math_mode_calls)
    for call in (lambda m: m.sgemm(handle, *args), lambda m: m.destroy(handle)):
        with pytest.raises(ValueError) as ours:
            call(module)
        with pytest.raises(ValueError) as theirs:
            pristine.create()  # a handle the pristine module knows nothing of has the same fate
            call(pristine)
        assert str(ours.value) == str(theirs.value) == f"invalid cuBLAS handle {handle!r} (destroyed or never created)"
    assert (len(recorder.launches), len(recorder.math_mode_calls)) == (launches, mode_calls)

    with monkeypatch.context() as patch, pytest.raises(module.CUBLASError, match="NOT_INITIALIZED"):
        patch.setenv("STANDIN_CUPY_NO_GPU", "1")  # no driver: create() fails as CuPy's does
        module.create()

    solver = cusolver.create()
    assert cusolver.dpotrf_bufferSize(solver, 0, 5, 0, 5) == 25
    cusolver.destroy(solver)
    with pytest.raises(ValueError, match="invalid cuSOLVER handle"):
        cusolver.dpotrf(solver, 0, 5, 0, 5, 0, 25, 0)

    assert _fft.get_plan_cache() is _cache.get_plan_cache()

    x = cupy.ndarray((1, 1, 4, 4), "float32")
    y, gw = cupy.ndarray((1, 1, 4, 4), "float32"), cupy.ndarray((1, 1, 1, 1), "float32")
    conv = ((0, 0), (1, 1), (1, 1), 1)
    assert cupyx.cudnn.convolution_forward(x, gw, None, y, *conv, auto_tune=False, tensor_core="auto") is y
    assert cupyx.cudnn.convolution_backward_filter(
        x, y, gw, *conv, deterministic=False, auto_tune=False, tensor_core="auto"
    ) is gw  # fmt: skip
    pristine_cudnn = load_pristine("cupyx/cudnn.py")
    with pytest.raises(TypeError) as ours_type:
        cupyx.cudnn.convolution_forward(x, gw, None, y, *conv)
    with pytest.raises(TypeError) as theirs_type:
        pristine_cudnn.convolution_forward(x, gw, None, y, *conv)
    assert str(ours_type.value) == str(theirs_type.value)


# -- 9. cuFFT plan cache ------------------------------------------------------------------------------


def fft_lookups() -> list[Any]:
    from cupy.fft import _cache

    with _cache.RECORDER.lock:
        return list(_cache.RECORDER.lookups)


def test_fft_sees_max_size_and_never_holds_more(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    import cupyx.scipy.fft
    from cupy.fft import _cache

    cache = backends.cuda.cufft_plan_cache
    with backends.flags({MAX_SIZE: 2}):
        for n in (8, 16, 32, 64, 8, 128):
            cupy.fft.fft(cupy.ndarray((n,), "complex64"))
            cupyx.scipy.fft.fft(cupy.ndarray((n + 1,), "complex64"))
            cupy.fft.fft2(cupy.ndarray((n, 4), "complex64"))
        lookups = fft_lookups()
        assert len(lookups) == 18
        assert {lookup.max_size for lookup in lookups} == {2}
        assert max(lookup.curr_size for lookup in lookups) == 2
        assert cache.size == 2 == _cache.get_plan_cache().get_curr_size()
        assert cache.max_size == 2 == cache[1].max_size
    cupy.fft.fft(cupy.ndarray((8,), "complex64"))
    assert fft_lookups()[-1].max_size == 16  # the default, back outside the scope
    assert cache.size == 3  # a miss, and room for it now
    cache.clear()
    assert cache.size == 0 == _cache.get_plan_cache().get_curr_size()


def test_plan_cache_view_per_device(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    cache = backends.cuda.cufft_plan_cache
    with cupy.cuda.Device(1):
        for n in (8, 16, 32):
            cupy.fft.fft(cupy.ndarray((n,), "complex64"))
        assert cache.size == 3
    cupy.fft.fft(cupy.ndarray((8,), "complex64"))
    assert {lookup.device for lookup in fft_lookups()} == {0, 1}
    assert (cache.size, cache[0].size, cache[1].size) == (1, 1, 3)
    cache[1].clear()
    assert (cache[0].size, cache[1].size) == (1, 0)

    with backends.flags({MAX_SIZE: 7}):
        assert cache[1].max_size == 7 == cache[0].max_size == cache.max_size
    for device in (2, 5, -1):
        with pytest.raises(IndexError):
            cache[device]
    with pytest.raises(AttributeError):
        cache.size = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        cache[0].size = 3  # type: ignore[misc]

    sizes: list[int] = []
    run_threads(lambda: sizes.append(cache.size))  # another thread's caches are its own
    assert sizes == [0]


def test_two_threads_keep_their_own_max_size(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    barrier = threading.Barrier(2)
    idents: dict[int, int] = {}
    final: dict[int, int] = {}

    def worker(max_size: int) -> None:
        idents[threading.get_ident()] = max_size
        with backends.flags({MAX_SIZE: max_size}):
            for n in (8, 16, 32, 64, 128, 8, 256):
                barrier.wait(timeout=30)
                cupy.fft.fft(cupy.ndarray((n,), "complex64"))
            final[max_size] = backends.cuda.cufft_plan_cache.size
            barrier.wait(timeout=30)

    run_threads(lambda: worker(1), lambda: worker(3), unblock=[barrier])
    lookups = fft_lookups()
    assert len(lookups) == 14
    for lookup in lookups:
        wanted = idents[lookup.thread]
        assert lookup.max_size == wanted
        assert lookup.curr_size <= wanted
    assert final == {1: 1, 3: 3}


def test_plan_cache_without_cuda() -> None:
    code = """
    import json
    import backends, cupy

    cache = backends.cuda.cufft_plan_cache
    out = {}
    for what, call in {
        "size": lambda: cache.size,
        "clear": cache.clear,
        "[0]": lambda: cache[0],
    }.items():
        try:
            call()
            out[what] = "no error"
        except RuntimeError as error:
            out[what] = str(error)
    out["max_size"] = [cache.max_size]
    cache.max_size = 4
    out["max_size"].append(cache.max_size)
    with backends.flags({"cuda.cufft_plan_cache.max_size": 2}):
        out["max_size"].append(cache.max_size)
    print(json.dumps(out))
    """
    out = run_python(code, STANDIN_CUPY_NO_GPU="1")
    assert out.pop("max_size") == [16, 4, 2]
    for what, message in out.items():
        assert "CUDA is not available" in message, what


# -- 10. cuSOLVER --------------------------------------------------------------------------------------


def test_magma_warns_once_that_cusolver_is_used() -> None:
    code = """
    import json, warnings
    import backends, cupy

    a = cupy.ndarray((4, 4), "float32")
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for preference in ("default", "cusolver", "magma"):
            assert backends.cuda.preferred_linalg_library(preference) == preference
            start = len(caught)
            cupy.linalg.cholesky(a)
            cupy.linalg.cholesky(cupy.ndarray((3, 3), "float64"))
            out[preference] = [[w.category.__name__, str(w.message)] for w in caught[start:]]
        start = len(caught)
        cupy.linalg.cholesky(a)  # still magma: once per process
        with backends.flags({"cuda.preferred_linalg_library": "magma"}):
            cupy.linalg.cholesky(a)
        out["again"] = len(caught) - start
    from cupy_backends.cuda.libs import cusolver
    out["calls"] = len(cusolver.RECORDER.calls)
    print(json.dumps(out))
    """
    out = run_python(code)
    assert out["default"] == out["cusolver"] == []
    [(category, message)] = out["magma"]
    assert category == "UserWarning"
    assert "cuSOLVER" in message and "magma" in message
    assert out["again"] == 0
    assert out["calls"] == 8 * 2  # all 8 choleskys still ran (bufferSize + potrf each)


# cuDNN (CuPy 13's cupyx.cudnn and its cupy.cudnn alias): tests/test_sync_cudnn.py
