"""The stand-in CuPy (``tests/standin``) behaves as CuPy 14 does where the sync layer looks.

In-process tests use the ``standin_cupy`` fixture and hold whether or not the sync
layer has wrapped the stand-in's functions. Checks of the exact compute types and
math modes that CuPy itself passes run in a fresh interpreter that has not imported
``backends``, so nothing rewrites them.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from tests.standin_fixture import STANDIN, standin_cupy, use_standin  # noqa: F401

pytestmark = pytest.mark.usefixtures("standin_cupy")


def run_alone(code: str, **env: str) -> Any:
    """Run ``code`` with only the stand-in CuPy imported; return what it prints as JSON."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("STANDIN_CUPY_", "CUPY_"))}
    prelude = f"import json, sys\nsys.path.insert(0, {str(STANDIN)!r})\n"
    epilogue = "\nassert 'backends' not in sys.modules\n"
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code) + epilogue],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def in_thread(function: Any) -> Any:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(function()))
    thread.start()
    thread.join()
    return box[0]


def test_fixture_imports_the_standin_and_cleans_up() -> None:
    import cupy

    assert cupy.__version__ == "14.0.0+standin"
    assert cupy.__file__.startswith(str(STANDIN))
    import cupy_backends.cuda.libs.cublas  # noqa: F401

    with use_standin() as inner:  # nested: a fresh set of modules, then the outer ones back
        assert inner is not cupy
    assert sys.modules["cupy"] is cupy
    assert "cupy_backends.cuda.libs.cublas" in sys.modules

    with use_standin():
        pass


def test_use_standin_leaves_nothing_behind() -> None:
    code = f"""
    sys.path.insert(0, {str(STANDIN.parent.parent)!r})
    from tests.standin_fixture import use_standin

    path = list(sys.path)
    with use_standin() as cupy:
        import cupyx.scipy.fft
        cupy.matmul(cupy.ndarray((2, 2), "float32"), cupy.ndarray((2, 2), "float32"))
        inside = sorted(name.split(".")[0] for name in sys.modules if name.startswith("cupy"))
    left = [name for name in sys.modules if name.split(".")[0] in ("cupy", "cupy_backends", "cupyx")]
    print(json.dumps([sorted(set(inside)), left, sys.path == path]))
    """
    assert run_alone(code) == [["cupy", "cupy_backends", "cupyx"], [], True]


def test_import_cupy_does_not_load_cublas_and_the_gemm_does() -> None:
    import cupy

    assert "cupy_backends.cuda.libs.cublas" not in sys.modules
    cupy.ndarray((2, 3), "float32") @ cupy.ndarray((3, 4), "float32")
    assert "cupy_backends.cuda.libs.cublas" in sys.modules


def test_handles_are_per_thread_and_device() -> None:
    import cupy
    from cupy.cuda import device
    from cupy_backends.cuda.libs import cublas, cusolver

    main = device.get_cublas_handle()
    assert device.get_cublas_handle() == main == cupy.cuda.Device(0).cublas_handle
    with cupy.cuda.Device(1):
        assert device.get_device_id() == 1
        on_1 = device.get_cublas_handle()
        assert cupy.cuda.runtime.getDevice() == 1
    assert device.get_device_id() == 0
    assert on_1 != main and cupy.cuda.Device(1).cublas_handle == on_1

    cupy.cuda.Device(1).use()
    assert in_thread(device.get_device_id) == 0  # the current device is per thread
    cupy.cuda.Device(0).use()

    def both() -> tuple[int, int]:
        with cupy.cuda.Device(1):
            return device.get_cublas_handle(), cupy.cuda.Device(0).cublas_handle

    other_1, other_0 = in_thread(both)
    assert len({main, on_1, other_0, other_1}) == 4
    devices = {created.handle: created.device for created in cublas.RECORDER.created}
    assert devices[main] == devices[other_0] == 0 and devices[on_1] == devices[other_1] == 1
    assert {other_0, other_1} <= set(cublas.RECORDER.destroyed)  # dropped with their thread

    solver = device.get_cusolver_handle()
    assert solver == cupy.cuda.Device().cusolver_handle
    assert [c.handle for c in cusolver.RECORDER.created] == [solver]


def test_handles_never_repeat_even_after_reimport() -> None:
    from cupy_backends.cuda.libs import cublas

    seen = [cublas.create() for _ in range(3)]
    with use_standin():
        from cupy_backends.cuda.libs import cublas as again

        assert again is not cublas
        seen += [again.create() for _ in range(3)]
    assert len(set(seen)) == 6


def test_math_mode_starts_default_is_recorded_and_dead_handles_raise() -> None:
    from cupy_backends.cuda.libs import cublas

    handle = cublas.create()
    assert cublas.getMathMode(handle) == cublas.CUBLAS_DEFAULT_MATH
    cublas.setMathMode(handle, 3)
    assert cublas.getMathMode(handle) == 3
    assert (handle, 3, threading.get_ident()) in cublas.RECORDER.math_mode_calls
    cublas.destroy(handle)
    with pytest.raises(ValueError):
        cublas.getMathMode(handle)
    with pytest.raises(ValueError):
        cublas.setMathMode(handle, 0)
    with pytest.raises(ValueError):
        cublas.sgemm(handle, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1)
    cublas.RECORDER.reset()
    assert cublas.RECORDER.launches == cublas.RECORDER.math_mode_calls == cublas.RECORDER.created == []


# Parameter names of CuPy 14's cublas.pyx, in order.
_SIGNATURES = {
    "gemmEx": "handle transa transb m n k alpha A Atype lda B Btype ldb beta C Ctype ldc computeType algo",
    "sgemmEx": "handle transa transb m n k alpha A Atype lda B Btype ldb beta C Ctype ldc",
    "gemmStridedBatchedEx": "handle transa transb m n k alpha A Atype lda strideA B Btype ldb strideB beta "
    "C Ctype ldc strideC batchCount computeType algo",
    "sgemm": "handle transa transb m n k alpha A lda B ldb beta C ldc",
    "zgemmBatched": "handle transa transb m n k alpha Aarray lda Barray ldb beta Carray ldc batchCount",
    "dgeam": "handle transa transb m n alpha A lda beta B ldb C ldc",
    "setMathMode": "handle mode",
    "strsm": "handle side uplo trans diag m n alpha Aarray lda Barray ldb",
    "strsmBatched": "handle side uplo trans diag m n alpha Aarray lda Barray ldb batchCount",
    "ssyrk": "handle uplo trans n k alpha A lda beta C ldc",
    "sgemv": "handle trans m n alpha A lda x incx beta y incy",
    "sgetrfBatched": "handle n Aarray lda PivotArray infoArray batchSize",
    "sgetrsBatched": "handle trans n nrhs Aarray lda devIpiv Barray ldb info batchSize",
    "cgeam": "handle transa transb m n alpha A lda beta B ldb C ldc",
    "zgeam": "handle transa transb m n alpha A lda beta B ldb C ldc",
    "sdot": "handle n x incx y incy result",
    "snrm2": "handle n x incx result",
    "sgemmStridedBatched": "handle transa transb m n k alpha A lda strideA B ldb strideB beta C ldc strideC "
    "batchCount",
}


@pytest.mark.parametrize("name", sorted(_SIGNATURES))
def test_cublas_functions_have_cupys_signatures(name: str) -> None:
    from cupy_backends.cuda.libs import cublas

    assert " ".join(inspect.signature(getattr(cublas, name)).parameters) == _SIGNATURES[name]


def test_cublas_functions_carry_cythons_embedded_signature_and_record_launches() -> None:
    from cupy_backends.cuda.libs import cublas

    assert cublas.strsm.__doc__ == (
        "strsm(intptr_t handle, int side, int uplo, int trans, int diag, int m, int n, size_t alpha, "
        "size_t Aarray, int lda, size_t Barray, int ldb)"
    )
    assert cublas.create.__doc__ == "create() -> intptr_t"
    assert cublas.check_status.__doc__ == "check_status(int status)"
    assert cublas.sgetrsBatched.__doc__.endswith(") -> int")
    handle = cublas.create()
    assert cublas.sgetrsBatched(handle, 0, 4, 1, 0, 4, 0, 0, 4, 0, 2) == 0  # a cpdef int: 0, as in CuPy
    assert cublas.snrm2(handle=handle, n=4, x=0, incx=1, result=0) is None
    cublas.gemmStridedBatchedEx(handle, *([0] * 20), 69, -1)
    assert [(launch.function, launch.handle, launch.compute_type) for launch in cublas.RECORDER.launches] == [
        ("sgetrsBatched", handle, None), ("snrm2", handle, None), ("gemmStridedBatchedEx", handle, 69),
    ]  # fmt: skip
    with pytest.raises(TypeError):
        cublas.snrm2(handle, 4, 0, 1)  # a missing argument, as Cython refuses it
    with pytest.raises(cublas.CUBLASError, match="CUBLAS_STATUS_NOT_SUPPORTED"):
        cublas.check_status(15)


def test_hip_build() -> None:
    code = """
    import cupy
    from cupy_backends.cuda.libs import cublas

    handle = cupy.cuda.device.get_cublas_handle()
    errors = []
    for call in (lambda: cublas.setMathMode(handle, 3), lambda: cublas.getMathMode(handle)):
        try:
            call()
        except cublas.CUBLASError as error:
            errors.append([error.status, str(error)])
    cupy.ndarray((4, 3), "float32") @ cupy.ndarray((3, 5), "float32")
    cupy.ndarray((4, 3), "float16") @ cupy.ndarray((3, 5), "float16")
    cupy.matmul(cupy.ndarray((2, 4, 3), "float32"), cupy.ndarray((2, 3, 5), "float32"))
    R = cublas.RECORDER
    print(json.dumps({
        "is_hip": [cupy.cuda.runtime.is_hip, cupy.cuda.runtime._is_hip_environment],
        "errors": errors,
        "launches": [[l.function, l.compute_type] for l in R.launches],
        "modes": len(R.math_mode_calls),
    }))
    """
    out = run_alone(code, STANDIN_CUPY_HIP="1")
    assert out == {
        "is_hip": [True, True],
        "errors": [[7, "HIPBLAS_STATUS_NOT_SUPPORTED"]] * 2,  # cupy_hipblas.h: no math mode on hipBLAS
        "launches": [["sgemmEx", None], ["gemmEx", 0], ["gemmStridedBatchedEx", 0]],  # the pre-CUDA-11 path
        "modes": 0,  # and CuPy never opts fp16 into tensor cores there
    }
    assert run_alone("import cupy\nprint(json.dumps(cupy.cuda.runtime.is_hip))") is False


def test_tf32_compute_type_is_refused_below_compute_capability_8() -> None:
    code = """
    import warnings
    import cupy
    from cupy._core import _routines_linalg as linalg
    from cupy_backends.cuda.libs import cublas

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cupy.ndarray((4, 3), "float32") @ cupy.ndarray((3, 5), "float32")  # CUPY_TF32=1 resolves here
        linalg.set_compute_type("float64", linalg.COMPUTE_TYPE_BF16)
    print(json.dumps([cupy._core.get_compute_type("float32"), cupy._core.get_compute_type("float64"),
                      cublas.RECORDER.launches[-1].compute_type, len(caught)]))
    """
    assert run_alone(code, CUPY_TF32="1", STANDIN_CUPY_CC="75") == [1, 1, 68, 2]  # DEFAULT, with CuPy's warning
    assert run_alone(code, CUPY_TF32="1", STANDIN_CUPY_CC="80") == [7, 6, 77, 0]


def test_solve_triangular_and_batched_solve_call_cublas_as_cupy_does(monkeypatch: pytest.MonkeyPatch) -> None:
    import cupy

    assert "cupy_backends.cuda.libs.cublas" not in sys.modules
    import cupyx.scipy.linalg

    assert "cupy_backends.cuda.libs.cublas" in sys.modules  # ``from cupy.cuda import cublas`` at its top
    from cupy_backends.cuda.libs import cublas

    handle = cupy.cuda.device.get_cublas_handle()
    fetched: list[int] = []
    original = cupy.cuda.device.get_cublas_handle
    # Python code in CuPy: the handle comes through the module attribute (unlike the GEMMs)
    monkeypatch.setattr(cupy.cuda.device, "get_cublas_handle", lambda: fetched.append(original()) or fetched[-1])
    calls: list[tuple[str, tuple[Any, ...]]] = []
    for name in ("strsm", "strsmBatched", "dgetrfBatched", "dgetrsBatched"):
        function = getattr(cublas, name)
        monkeypatch.setattr(cublas, name, lambda *args, f=function: calls.append((f.__name__, args)) or f(*args))

    cupyx.scipy.linalg.solve_triangular(cupy.ndarray((5, 5), "float32"), cupy.ndarray((5, 2), "float32"))
    cupyx.scipy.linalg.solve_triangular(cupy.ndarray((3, 5, 5), "float32"), cupy.ndarray((3, 5), "float32"),
                                        lower=True)  # fmt: skip
    cupy.linalg.solve(cupy.ndarray((3, 4, 4), "float64"), cupy.ndarray((3, 4, 2), "float64"))
    assert fetched == [handle] * 3
    assert [(name, args[0], len(args)) for name, args in calls] == [
        ("strsm", handle, 12), ("strsmBatched", handle, 13),
        ("dgetrfBatched", handle, 7), ("dgetrsBatched", handle, 11),
    ]  # fmt: skip
    # side, uplo, trans, diag, m, n: C-ordered batches are solved as transposed Fortran ones
    assert calls[0][1][1:7] == (cublas.CUBLAS_SIDE_LEFT, cublas.CUBLAS_FILL_MODE_UPPER, cublas.CUBLAS_OP_N, 0, 5, 2)
    assert calls[1][1][1:7] == (cublas.CUBLAS_SIDE_LEFT, cublas.CUBLAS_FILL_MODE_UPPER, cublas.CUBLAS_OP_T, 0, 5, 1)
    assert calls[1][1][-1] == 3  # batchCount
    assert calls[2][1][1] == 4 and calls[2][1][-1] == 3  # n, batchSize
    assert calls[3][1][1:4] == (cublas.CUBLAS_OP_N, 4, 2)  # trans, n, nrhs
    with pytest.raises(NotImplementedError):
        cupy.linalg.solve(cupy.ndarray((4, 4), "float64"), cupy.ndarray((4,), "float64"))  # cuSOLVER: not modelled


def test_gemm_functions_are_looked_up_by_name_and_the_handle_at_c_level(monkeypatch: pytest.MonkeyPatch) -> None:
    import cupy
    from cupy_backends.cuda.libs import cublas

    calls: list[tuple[Any, ...]] = []
    original = cublas.gemmEx
    monkeypatch.setattr(cublas, "gemmEx", lambda *args: calls.append(args) or original(*args))
    monkeypatch.setattr(cupy.cuda.device, "get_cublas_handle", lambda: pytest.fail("reached a Python name"))
    cupy.dot(cupy.ndarray((4, 3), "float32"), cupy.ndarray((3, 5), "float32"))
    assert len(calls) == 1 and len(calls[0]) == 19
    assert calls[0][3:6] == (5, 4, 3)  # C^T = B^T A^T: m, n, k


def test_device_is_a_closed_type() -> None:
    import cupy

    with pytest.raises(TypeError):
        cupy.cuda.Device.cublas_handle = property(lambda self: 0)  # type: ignore[assignment]


def test_create_is_looked_up_by_name_for_each_new_handle(monkeypatch: pytest.MonkeyPatch) -> None:
    import cupy
    from cupy_backends.cuda.libs import cublas

    made: list[int] = []
    original = cublas.create
    monkeypatch.setattr(cublas, "create", lambda: made.append(original()) or made[-1])
    handle = cupy.cuda.Device(1).cublas_handle
    assert made == [handle]
    assert cupy.cuda.Device(1).cublas_handle == handle and made == [handle]


def test_plan_cache_is_per_thread_and_device_and_lru() -> None:
    import cupy
    from cupy.fft import config
    from cupy.fft._cache import RECORDER, get_plan_cache

    cache = get_plan_cache()
    assert config.get_plan_cache() is cache
    assert (cache.get_size(), cache.get_curr_size(), cache.get_memsize()) == (16, 0, -1)
    with cupy.cuda.Device(1):
        assert get_plan_cache() is not cache and get_plan_cache().dev == 1
    assert in_thread(get_plan_cache) is not cache

    for key in range(3):
        cache[(key,)] = f"plan {key}"
    assert cache.get((0,)) == "plan 0"  # 0 is now the most recently used
    cache.set_size(2)
    assert [key for key, _ in cache] == [(0,), (2,)] and cache.get_curr_size() == 2
    cache[(3,)] = "plan 3"
    assert [key for key, _ in cache] == [(3,), (0,)]
    assert cache.get((2,)) is None
    assert RECORDER.lookups[-1][:4] == ((2,), False, 2, 2)
    cache.clear()
    assert cache.get_curr_size() == 0 and cache.get_size() == 2


def test_transforms_fetch_the_cache_through_the_fft_module_global(monkeypatch: pytest.MonkeyPatch) -> None:
    import cupy
    import cupyx.scipy.fft
    from cupy.fft import _fft
    from cupy.fft._cache import RECORDER

    fetched: list[object] = []
    original = _fft.get_plan_cache
    monkeypatch.setattr(_fft, "get_plan_cache", lambda: fetched.append(original()) or fetched[-1])
    x = cupy.ndarray((8, 16), "complex64")
    assert cupy.fft.fft(x).shape == (8, 16)
    cupyx.scipy.fft.fft(x)
    cupy.fft.fftn(x)
    cupy.fft.ifft(cupy.ndarray((16,), "float32"))
    assert len(fetched) == 4 and len(set(map(id, fetched))) == 1
    assert [lookup.hit for lookup in RECORDER.lookups] == [False, True, False, False]
    assert len(RECORDER.executions) == 4


def test_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_CUPY_NO_GPU", "1")
    with use_standin() as cupy:
        import cupyx.scipy.fft  # noqa: F401

        assert not cupy.cuda.is_available()
        for call in (
            cupy.cuda.runtime.getDevice,
            cupy.cuda.runtime.getDeviceCount,
            cupy.cuda.Device,
            cupy.cuda.device.get_cublas_handle,
            lambda: cupy.ndarray((2, 2), "float32"),
        ):
            with pytest.raises(cupy.cuda.runtime.CUDARuntimeError) as error:
                call()
            assert error.value.status == 35
        assert cupy.cuda.runtime.driverGetVersion() == 0
        assert cupy.cuda.runtime.runtimeGetVersion() > 0
    monkeypatch.delenv("STANDIN_CUPY_NO_GPU")


def test_device_count_and_missing_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    import cupy

    assert cupy.cuda.runtime.getDeviceCount() == 2
    with pytest.raises(cupy.cuda.runtime.CUDARuntimeError):
        cupy.cuda.Device(2).use()
    monkeypatch.setenv("STANDIN_CUPY_DEVICES", "4")
    cupy.cuda.Device(3).use()
    cupy.cuda.Device(0).use()

    a = cupy.ndarray((2, 2), "float32")
    monkeypatch.setenv("STANDIN_CUPY_MISSING_LIBS", "cusolver,cufft")
    with pytest.raises(ImportError):
        cupy.fft.fft(a)
    with pytest.raises(ImportError):
        cupy.linalg.cholesky(a)
    assert cupy.matmul(a, a).shape == (2, 2)
    monkeypatch.setenv("STANDIN_CUPY_MISSING_LIBS", "cublas")
    with use_standin() as fresh, pytest.raises(ImportError):
        fresh.matmul(fresh.ndarray((2, 2), "float32"), fresh.ndarray((2, 2), "float32"))


def test_cupy_tf32_rule_and_compute_types() -> None:
    code = """
    import cupy
    from cupy._core import _routines_linalg as linalg
    from cupy_backends.cuda.libs import cublas

    def gemm(dtype):
        cupy.matmul(cupy.ndarray((4, 3), dtype), cupy.ndarray((3, 5), dtype))
        return cublas.RECORDER.launches[-1].compute_type

    out = {d: [cupy._core.get_compute_type(d), gemm(d)] for d in ("float32", "complex64", "float16", "float64")}
    cupy._core.set_compute_type("float32", linalg.COMPUTE_TYPE_PEDANTIC)
    out["pedantic"] = [gemm("complex64"), gemm("float64")]
    print(json.dumps(out))
    """
    for env, tf32 in (({}, False), ({"CUPY_TF32": "0"}, False), ({"CUPY_TF32": "1"}, True)):
        out = run_alone(code, **env)
        assert out["float32"] == out["complex64"] == ([7, 77] if tf32 else [1, 68])
        assert out["float16"] == [1, 68] and out["float64"] == [1, 70]
        assert out["pedantic"] == [69, 70]


def test_gemm_paths_and_recorded_math_modes() -> None:
    code = """
    import cupy
    from cupy_backends.cuda.libs import cublas

    R = cublas.RECORDER
    a, b = cupy.ndarray((4, 3), "float32"), cupy.ndarray((3, 5), "float32")
    a @ b
    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setMathMode(handle, 3)
    cupy.matmul(cupy.ndarray((2, 4, 3), "float32"), cupy.ndarray((2, 3, 5), "float32"))
    cupy.matmul(cupy.ndarray((2, 4, 3), "float64"), cupy.ndarray((3, 5), "float64"))
    cupy.matmul(cupy.ndarray((4, 3), "float16"), cupy.ndarray((3, 5), "float16"))
    cupy.dot(cupy.ndarray((3,), "float32"), cupy.ndarray((3,), "float32"))  # no GEMM
    cupy.matmul(cupy.ndarray((4, 3), "int32"), cupy.ndarray((3, 5), "int32"))  # no cuBLAS
    cupy.asfortranarray(cupy.ndarray((4, 3), "float64"))
    print(json.dumps({
        "launches": [[l.function, l.handle == handle, l.math_mode, l.compute_type] for l in R.launches],
        "modes": [[m.handle == handle, m.mode] for m in R.math_mode_calls],
    }))
    """
    out = run_alone(code)
    assert out["launches"] == [
        ["gemmEx", True, 0, 68],
        ["gemmStridedBatchedEx", True, 3, 0],  # compute type = CUDA_R_32F: the math mode decides
        ["dgemmBatched", True, 3, None],  # a broadcast batch dimension
        ["gemmEx", True, 3, 68],  # fp16: CuPy 14 does not touch the math mode
        ["dgeam", True, 3, None],
    ]
    assert out["modes"] == [[True, 3]]

    fp16 = run_alone(code, STANDIN_CUPY_FP16_MATH_MODE="1")
    assert fp16["launches"][3] == ["gemmEx", True, 1, 0]
    assert fp16["modes"] == [[True, 3], [True, 1], [True, 0]]

    old = run_alone(code, STANDIN_CUPY_CC="35")
    assert [launch[0] for launch in old["launches"]] == [
        "sgemmEx", "gemmStridedBatchedEx", "dgemmBatched", "sgemmEx", "dgeam",
    ]  # fmt: skip


def test_handles_per_thread_in_a_fresh_interpreter() -> None:
    code = """
    import threading
    import cupy
    from cupy_backends.cuda.libs import cublas

    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait()
        for d in (0, 1):
            with cupy.cuda.Device(d):
                h = cupy.cuda.device.get_cublas_handle()
                cublas.setMathMode(h, i % 4)
                cupy.ndarray((2, 2), "float32") @ cupy.ndarray((2, 2), "float32")
                assert cublas.getMathMode(h) == i % 4

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    R = cublas.RECORDER
    print(json.dumps({
        "handles": len({c.handle for c in R.created}),
        "pairs": len({(c.thread, c.device) for c in R.created}),
        "launch_modes_match": all(
            any(m.handle == l.handle and m.mode == l.math_mode for m in R.math_mode_calls) for l in R.launches
        ),
        "launches": len(R.launches),
    }))
    """
    assert run_alone(code) == {"handles": 16, "pairs": 16, "launch_modes_match": True, "launches": 16}


def test_cholesky_uses_the_cusolver_handle() -> None:
    import cupy
    from cupy_backends.cuda.libs import cusolver

    cupy.linalg.cholesky(cupy.ndarray((3, 3), "float32"))
    cupy.linalg.cholesky(cupy.ndarray((3, 3), "float64"))
    handle = cupy.cuda.device.get_cusolver_handle()
    assert [(c.function, c.handle) for c in cusolver.RECORDER.calls] == [
        ("spotrf_bufferSize", handle),
        ("spotrf", handle),
        ("dpotrf_bufferSize", handle),
        ("dpotrf", handle),
    ]
