"""The cuBLAS target and the core of ``backends.sync()`` (contract section 9), proved with
the stand-in CuPy: no math mode outlives its scope, on any cuBLAS routine; nothing is pushed
on ROCm; no TF32 below compute capability 8.0; ``sync()`` never trusts a stale record,
never creates a handle, and never raises into a task.

What is checked is what CuPy and cuBLAS would see: the math mode and compute type each
routine ran with (the stand-in's ``RECORDER``), the handles created, the plan cache's size.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import trio

import backends
from tests._helpers import run_threads
from tests.standin_fixture import STANDIN, use_standin
from tests.test_sync import (
    BF16_FLAG,
    COMPUTE_32F,
    COMPUTE_32F_FAST_TF32,
    COMPUTE_32F_PEDANTIC,
    CUDA_R_32F,
    DEFAULT_MATH,
    DISALLOW_REDUCED,
    FP16_FLAG,
    MAX_SIZE,
    REPO,
    TF32_FLAG,
    TF32_MATH,
    cublas,
    cublas_routines,
    launched,
    math_mode_calls,
    only_launch,
    run_python,
)

ROUTINES = cublas_routines()


def call(module: ModuleType, name: str, handle: int, **arguments: int) -> Any:
    """``module.<name>(handle, 0, 0, ...)`` with every other parameter 0 (the stand-in's
    routines compute nothing), except ``arguments``."""
    names = list(inspect.signature(getattr(module, name)).parameters)
    assert names[0] == "handle", (name, names)
    return getattr(module, name)(handle, *(arguments.get(p, 0) for p in names[1:]))


def gemm_ex(module: ModuleType, handle: int, compute_type: int, atype: int = CUDA_R_32F,
            function: str = "gemmEx") -> Any:  # fmt: skip
    """A direct call of ``gemmEx`` (or ``gemmStridedBatchedEx``) with CuPy's handle, as a
    library calling CuPy's cuBLAS module makes it."""
    return call(module, function, handle, Atype=atype, computeType=compute_type)


def tf32_gemm(cupy: ModuleType) -> int:
    """Launch a float32 GEMM inside ``tf32(True)``; return the handle, left in TF32 mode."""
    a = cupy.ndarray((8, 8), "float32")
    with backends.cuda.matmul.tf32(True):
        assert only_launch(lambda: a @ a).math_mode == TF32_MATH
    handle: int = cupy.cuda.device.get_cublas_handle()
    assert cublas().getMathMode(handle) == TF32_MATH
    return handle


# -- 1. no math mode outlives its scope, on any cuBLAS routine --------------------------------------


def test_the_stand_in_models_every_handle_routine_of_cupy_14_2() -> None:
    assert len(ROUTINES) == 95
    assert {"strsm", "strsmBatched", "ssyrk", "sgemv", "sgetrfBatched", "cgeam", "zgeam", "sdot", "snrm2",
            "gemmEx", "gemmStridedBatchedEx"} <= set(ROUTINES)  # fmt: skip


def test_every_cublas_function_that_takes_a_handle_is_wrapped(standin_cupy: ModuleType) -> None:
    module = cublas()
    wrapped = {name for name in dir(module) if hasattr(getattr(module, name), "__backends_wrapped__")}
    assert wrapped == {*ROUTINES, "create", "destroy", "setMathMode"}
    for name in wrapped:  # each wrapper keeps CuPy's name and docstring (Cython's embedded signature)
        function = getattr(module, name)
        assert (function.__name__, function.__doc__) == (name, function.__backends_wrapped__.__doc__)
        assert function.__doc__.startswith(f"{name}(")


@pytest.mark.parametrize("name", ROUTINES)
def test_no_routine_runs_under_a_mode_left_by_another_scope(standin_cupy: ModuleType, name: str) -> None:
    module = cublas()
    handle = tf32_gemm(standin_cupy)
    assert only_launch(lambda: call(module, name, handle)).math_mode == DEFAULT_MATH
    with backends.cuda.matmul.tf32(True):
        assert only_launch(lambda: call(module, name, handle)).math_mode == TF32_MATH
    with backends.flags({FP16_FLAG: False}):  # the fp16 flag decides the bit where no input type is known
        launch = only_launch(lambda: call(module, name, handle))
        assert launch.math_mode & ~DISALLOW_REDUCED == DEFAULT_MATH


def test_routines_take_the_handle_by_keyword_too(standin_cupy: ModuleType) -> None:
    module = cublas()
    handle = tf32_gemm(standin_cupy)
    launch = only_launch(lambda: module.snrm2(handle=handle, n=4, x=0, incx=1, result=0))
    assert (launch.function, launch.math_mode) == ("snrm2", DEFAULT_MATH)
    with pytest.raises(TypeError):  # a call CuPy would refuse is refused, and launches nothing
        module.snrm2(n=4, x=0, incx=1, result=0)


def test_solve_triangular_right_after_a_tf32_scope_runs_in_ieee_mode(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    import cupyx.scipy.linalg

    tf32_gemm(cupy)
    a, b = cupy.ndarray((8, 8), "float32"), cupy.ndarray((8, 3), "float32")
    stack, rhs = cupy.ndarray((5, 8, 8), "float32"), cupy.ndarray((5, 8), "float32")
    solves = launched(lambda: (cupyx.scipy.linalg.solve_triangular(a, b),
                               cupyx.scipy.linalg.solve_triangular(stack, rhs)))  # fmt: skip
    assert [(launch.function, launch.math_mode) for launch in solves] == [
        ("strsm", DEFAULT_MATH),
        ("strsmBatched", DEFAULT_MATH),
    ]
    with backends.cuda.matmul.tf32(True):  # and the flag does reach them
        assert only_launch(lambda: cupyx.scipy.linalg.solve_triangular(a, b)).math_mode == TF32_MATH


def test_batched_solve_right_after_a_tf32_scope_runs_in_ieee_mode(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    tf32_gemm(cupy)
    a, b = cupy.ndarray((4, 6, 6), "float32"), cupy.ndarray((4, 6, 2), "float32")
    solves = launched(lambda: cupy.linalg.solve(a, b))
    assert [(launch.function, launch.math_mode) for launch in solves] == [
        ("sgetrfBatched", DEFAULT_MATH),
        ("sgetrsBatched", DEFAULT_MATH),
    ]


# -- 2. ROCm: the cuBLAS flags push nothing ------------------------------------------------------------


def test_hip_build_pushes_no_math_mode_and_rewrites_no_compute_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_CUPY_HIP", "1")
    with use_standin() as cupy:
        import cupyx.scipy.linalg

        module = cublas()
        assert cupy.cuda.runtime.is_hip
        with pytest.raises(module.CUBLASError, match="HIPBLAS_STATUS_NOT_SUPPORTED"):
            module.setMathMode(module.create(), TF32_MATH)  # CuPy's hipBLAS shim, as modelled

        single, half = cupy.ndarray((8, 8), "float32"), cupy.ndarray((8, 8), "float16")
        batch = cupy.ndarray((3, 8, 8), "float32")
        handle = cupy.cuda.device.get_cublas_handle()

        def everything() -> None:
            single @ single
            half @ half
            cupy.matmul(batch, batch)
            cupyx.scipy.linalg.solve_triangular(single, single)
            gemm_ex(module, handle, COMPUTE_32F)
            backends.sync()

        for flags in ({TF32_FLAG: True, FP16_FLAG: False, BF16_FLAG: False}, {TF32_FLAG: False}, {}):
            with backends.flags(flags):
                ran = [(launch.function, launch.math_mode, launch.compute_type) for launch in launched(everything)]
                assert ran == [
                    ("sgemmEx", DEFAULT_MATH, None),  # HIP takes CuPy's pre-CUDA-11 path
                    ("gemmEx", DEFAULT_MATH, CUDA_R_32F),  # fp16: no tensor-core opt-in on HIP
                    ("gemmStridedBatchedEx", DEFAULT_MATH, CUDA_R_32F),
                    ("strsm", DEFAULT_MATH, None),
                    ("gemmEx", DEFAULT_MATH, COMPUTE_32F),  # passed as given
                ]
        assert math_mode_calls() == 0


def report(**env: str) -> str:
    """``python -m backends``'s output with the stand-in CuPy."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("STANDIN_CUPY_", "CUPY_"))}
    environ["PYTHONPATH"] = os.pathsep.join([str(STANDIN), str(REPO)])
    done = subprocess.run([sys.executable, "-m", "backends"], env={**environ, **env}, capture_output=True,
                          text=True, timeout=60, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_report_says_the_cublas_flags_do_nothing_on_a_hip_build() -> None:
    [row] = [line for line in report(STANDIN_CUPY_HIP="1").splitlines() if "HIP" in line]
    assert "cuda.matmul" in row and "no effect" in row
    assert "HIP" not in report()


# -- 3. no TF32 below compute capability 8.0 ------------------------------------------------------------


@pytest.mark.parametrize("capability", ["70", "75", "80", "90"])
def test_tf32_is_requested_only_where_the_gpu_has_it(monkeypatch: pytest.MonkeyPatch, capability: str) -> None:
    monkeypatch.setenv("STANDIN_CUPY_CC", capability)
    has_tf32 = int(capability) >= 80  # CuPy's own test (set_compute_type)
    with use_standin() as cupy:
        module = cublas()
        single, batch = cupy.ndarray((8, 8), "float32"), cupy.ndarray((2, 8, 8), "float32")
        with backends.cuda.matmul.tf32(True):
            gemm = only_launch(lambda: single @ single)
            assert (gemm.math_mode, gemm.compute_type) == ((TF32_MATH, COMPUTE_32F_FAST_TF32) if has_tf32
                                                           else (DEFAULT_MATH, COMPUTE_32F))  # fmt: skip
            assert only_launch(lambda: cupy.matmul(batch, batch)).math_mode == (TF32_MATH if has_tf32 else DEFAULT_MATH)
            handle = cupy.cuda.device.get_cublas_handle()
            for asked in (COMPUTE_32F, COMPUTE_32F_FAST_TF32):  # a caller of CuPy's cuBLAS asking for TF32
                direct = only_launch(lambda asked=asked: gemm_ex(module, handle, asked))
                assert direct.compute_type == (COMPUTE_32F_FAST_TF32 if has_tf32 else COMPUTE_32F)
            backends.sync()
            assert module.getMathMode(handle) == (TF32_MATH if has_tf32 else DEFAULT_MATH)


def test_cupy_tf32_env_below_compute_capability_8_gives_no_tf32() -> None:
    code = """
    import json, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import backends, cupy
        from cupy_backends.cuda.libs import cublas

        a = cupy.ndarray((8, 8), "float32")
        a @ a
        launch = cublas.RECORDER.launches[-1]
    print(json.dumps([backends.cuda.matmul.allow_tf32, launch.math_mode, launch.compute_type,
                      [str(w.message) for w in caught]]))
    """
    allow_tf32, mode, compute_type, caught = run_python(code, CUPY_TF32="1", STANDIN_CUPY_CC="75")
    assert allow_tf32 is True  # CUPY_TF32=1 is the flag's default, as before
    assert (mode, compute_type) == (DEFAULT_MATH, COMPUTE_32F)  # but this GPU has no TF32: none asked for
    [warning] = caught  # CuPy's own warning, nothing of ours
    assert warning.startswith("COMPUTE_TYPE_BF16 and COMPUTE_TYPE_TF32 are only available on GPUs")


@pytest.mark.parametrize("function", ["gemmEx", "gemmStridedBatchedEx"])
@pytest.mark.parametrize(
    "compute_type",
    [64, 65, COMPUTE_32F_PEDANTIC, 74, 75, 70, 71, 72, CUDA_R_32F],
    ids=["16F", "16F_PEDANTIC", "32F_PEDANTIC", "32F_FAST_16F", "32F_FAST_16BF", "64F", "64F_PEDANTIC", "32I",
         "legacy-CUDA_R_32F"],
)  # fmt: skip
def test_only_32f_and_fast_tf32_are_ever_rewritten(standin_cupy: ModuleType, function: str, compute_type: int) -> None:
    module = cublas()
    handle = standin_cupy.cuda.device.get_cublas_handle()
    for tf32 in (True, False):
        with backends.cuda.matmul.tf32(tf32):
            for atype in (0, 2, 4, 14):  # CUDA_R_32F, CUDA_R_16F, CUDA_C_32F, CUDA_R_16BF
                launch = only_launch(lambda atype=atype: gemm_ex(module, handle, compute_type, atype, function))
                assert launch.compute_type == compute_type
            wanted = COMPUTE_32F_FAST_TF32 if tf32 else COMPUTE_32F
            for asked in (COMPUTE_32F, COMPUTE_32F_FAST_TF32):
                launch = only_launch(lambda asked=asked: gemm_ex(module, handle, asked, CUDA_R_32F, function))
                assert launch.compute_type == wanted


# -- 4. backends.sync(): a fresh record, no handle created, no exception into a task --------------------


def test_sync_after_an_fft_in_a_smaller_cache_scope_restores_the_default_size(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    from cupy.fft import _cache

    x = cupy.ndarray((16,), "complex64")
    cupy.fft.fft(x)
    backends.sync()
    with backends.flags({MAX_SIZE: 4}):
        cupy.fft.fft(x)
        assert _cache.get_plan_cache().get_size() == 4
    backends.sync()
    assert _cache.get_plan_cache().get_size() == 16


def test_sync_after_a_gemm_in_another_scope_restores_the_mode(standin_cupy: ModuleType) -> None:
    backends.sync()
    handle = tf32_gemm(standin_cupy)
    backends.sync()
    assert cublas().getMathMode(handle) == DEFAULT_MATH


def asyncio_steps() -> None:
    async def task(tf32: bool) -> None:
        with backends.cuda.matmul.tf32(tf32):
            for _ in range(3):
                await asyncio.sleep(0)

    async def main() -> None:
        backends.asyncio.install()
        await asyncio.gather(*(asyncio.create_task(task(i % 2 == 0)) for i in range(4)))

    asyncio.run(main())


def trio_steps() -> None:
    async def task(tf32: bool) -> None:
        with backends.cuda.matmul.tf32(tf32):
            for _ in range(3):
                await trio.sleep(0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(task, i % 2 == 0)

    trio.run(main, instruments=[backends.trio.Instrument()])


def explicit_sync() -> None:
    for tf32 in (True, False):
        with backends.cuda.matmul.tf32(tf32):
            backends.sync()


STEPS: dict[str, Callable[[], None]] = {"asyncio": asyncio_steps, "trio": trio_steps, "backends.sync()": explicit_sync}


@pytest.mark.parametrize("how", STEPS)
def test_sync_creates_no_cublas_handle_on_a_thread_without_one(standin_cupy: ModuleType, how: str) -> None:
    module = cublas()
    tf32_gemm(standin_cupy)  # the main thread has a handle; the new thread has none
    threads: list[int] = []
    run_threads(lambda: (threads.append(threading.get_ident()), STEPS[how]()))
    assert [created for created in module.RECORDER.created if created.thread in threads] == []


def test_a_handle_cupy_creates_starts_with_the_creating_contexts_mode(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    module = cublas()
    modes: dict[str, int] = {}

    def worker() -> None:
        with backends.flags({TF32_FLAG: True, FP16_FLAG: False}):
            backends.sync()  # nothing to push into yet
            modes["device 0"] = module.getMathMode(cupy.cuda.device.get_cublas_handle())
            with cupy.cuda.Device(1):
                modes["device 1"] = module.getMathMode(cupy.cuda.device.get_cublas_handle())
        modes["default"] = module.getMathMode(cupy.cuda.Device(0).cublas_handle)  # not a new handle: as left

    run_threads(worker)
    assert modes == {"device 0": TF32_MATH | DISALLOW_REDUCED, "device 1": TF32_MATH | DISALLOW_REDUCED,
                     "default": TF32_MATH | DISALLOW_REDUCED}  # fmt: skip
    calls = math_mode_calls()
    cupy.cuda.device.get_cublas_handle()  # the default context wants the default mode: no call needed
    assert math_mode_calls() == calls


def across_a_breakdown(how: str, broken: list[bool], read_mode: Callable[[], int]) -> list[int]:
    """Run tasks that step in alternating scopes while ``broken[0]`` (every push fails), then,
    repaired, one task inside ``tf32(True)``: the math modes it reads right after its awaits."""
    modes: list[int] = []
    sleep: Callable[[float], Any] = asyncio.sleep if how == "asyncio" else trio.sleep

    async def stepping(tf32: bool) -> None:
        with backends.cuda.matmul.tf32(tf32):
            for _ in range(3):
                await sleep(0)

    async def reading() -> None:
        with backends.cuda.matmul.tf32(True):
            for _ in range(2):
                await sleep(0)
                modes.append(read_mode())  # as code calling cuBLAS its own way with CuPy's handle

    async def asyncio_main() -> None:
        backends.asyncio.install()
        await asyncio.gather(*(asyncio.create_task(stepping(i % 2 == 0)) for i in range(4)))
        broken[0] = False
        await asyncio.create_task(reading())

    async def trio_main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(stepping, i % 2 == 0)
        broken[0] = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reading)

    if how == "asyncio":
        asyncio.run(asyncio_main())
    else:
        trio.run(trio_main, instruments=[backends.trio.Instrument()])
    return modes


@pytest.mark.parametrize("how", ["asyncio", "trio"])
def test_task_step_sync_never_raises_into_a_task_and_sync_does(
    standin_cupy: ModuleType, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    module = cublas()
    handle = tf32_gemm(standin_cupy)
    backends.sync()
    broken = [True]
    live = module._live

    def failing(handle: int) -> int:  # every cuBLAS call fails, as after a device reset
        if broken[0]:
            raise module.CUBLASError(14)
        return int(live(handle))

    monkeypatch.setattr(module, "_live", failing)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor is the failure turned into a warning
        modes = across_a_breakdown(how, broken, lambda: module.getMathMode(handle))
    assert modes == [TF32_MATH, TF32_MATH]  # the tasks ran to their end, and the sync still works after
    assert caplog.records == []  # (trio logs, and drops, an instrument that raises)

    broken[0] = True
    with backends.cuda.matmul.tf32(True), pytest.raises(module.CUBLASError, match="INTERNAL_ERROR"):
        backends.sync()  # an explicit sync() says that the flags are not in force
    broken[0] = False
    with backends.cuda.matmul.tf32(True):
        backends.sync()  # the failed push was not recorded as done
        assert module.getMathMode(handle) == TF32_MATH


def test_sync_adopts_a_handle_made_before_backends_wrapped_cublas() -> None:
    code = """
    import json
    import cupy
    from cupy_backends.cuda.libs import cublas

    a = cupy.ndarray((8, 8), "float32")
    a @ a  # cuBLAS loaded and this thread's handle created before backends wrapped them
    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setMathMode(handle, 3)
    import backends

    out = [cublas.RECORDER.launches[-1].math_mode]
    a @ a  # its first launch through the wrappers: the default mode, and the handle is known now
    out.append(cublas.RECORDER.launches[-1].math_mode)
    with backends.cuda.matmul.tf32(True):
        backends.sync()
        out.append(cublas.getMathMode(handle))
    backends.sync()
    out.append(cublas.getMathMode(handle))
    print(json.dumps(out))
    """
    assert run_python(code) == [DEFAULT_MATH, DEFAULT_MATH, TF32_MATH, DEFAULT_MATH]


def test_sync_leaves_the_cuda_libraries_unloaded(standin_cupy: ModuleType) -> None:
    for tf32 in (True, False):
        with backends.cuda.matmul.tf32(tf32):
            backends.sync()
    assert "cupy_backends.cuda.libs.cublas" not in sys.modules  # imported by CuPy's first GEMM, not by us

