"""The sync layer against the real CuPy's own host code, under the null CUDA.

Each case runs a CuPy operation (the real ``cupy``, ``cupyx``, ``cupy_backends``: their Cython
and Python code, their cuBLAS / cuSPARSE / cuFFT / cuSOLVER / cuTENSOR bindings, NVRTC compiling
their kernels) and checks what reached the CUDA libraries, from the null CUDA's record: the math
mode at each GEMM, the compute type, the cuSPARSE algorithm and workspace, the cuFFT plans made,
the cuTENSOR compute descriptor, the stream and thread of each call. Values are not computed (the
GPU check's part): kernels are launched as no-ops, so a kernel's output holds what its memory held
(allocations start zeroed), and CuPy's own code that reads such an output back to decide what to
do (building a sparse matrix from parts, ``nnz``) is stepped around below, saying where.

Started by ``tests/test_null_cuda.py`` on both engines (or ``python -m tests.nullcuda``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy
import pytest

import backends
from tests import nullcuda
from tests.nullcuda.conftest import ROUTING

if ROUTING is None:
    pytest.skip("runs under the null CUDA only: tests/test_null_cuda.py starts it", allow_module_level=True)

import cupy
import cupyx.scipy.linalg
import cupyx.scipy.sparse
from cupy_backends.cuda.api import runtime

CUPY_MAJOR = int(cupy.__version__.split(".")[0])

# CUDA data types (library_types.h) and cuBLAS's compute types and math modes
R_16F, R_32F, R_16BF = 2, 0, 14
COMPUTE_32F, COMPUTE_32F_FAST_TF32 = 68, 77
DEFAULT_MATH, TF32_TENSOR_OP_MATH, DISALLOW_REDUCED_PRECISION_REDUCTION = 0, 3, 16
GEMMS = ("cublasGemmEx", "cublasGemmStridedBatchedEx", "cublasSgemmEx")


Calls = list[dict[str, Any]]


def unanswered(calls: Calls) -> list[str]:
    return [call["function"] for call in calls if call["call"] == "unanswered"]


def run(operation: Callable[[], object]) -> Calls:
    """The library calls ``operation`` made (it synchronizes: nothing is left queued), none of
    them one the null CUDA does not answer."""
    with nullcuda.recording() as calls:
        operation()
        cupy.cuda.runtime.deviceSynchronize()
    assert unanswered(calls) == [], calls
    return calls


def gemms(calls: Calls) -> Calls:
    return [call for call in calls if call["call"] in GEMMS]


def kernels(calls: Calls) -> list[str]:
    return [c["kernel"] for c in calls if c["call"] == "cuLaunchKernel"]


def matrix(shape: tuple[int, ...], dtype: Any = numpy.float32) -> cupy.ndarray:
    """A device array copied from the host (a memcpy: no kernel)."""
    return cupy.asarray(numpy.ones(shape, dtype))


@pytest.fixture(autouse=True)
def _no_left_over_scope() -> Iterator[None]:
    yield
    assert backends.cuda.matmul.allow_tf32 is False


# ---------------------------------------------------------------- the null CUDA itself


def test_cupys_runtime_module_is_routed_and_keeps_its_own_names() -> None:
    assert ROUTING is not None
    for name in ("getDevice", "setDevice", "deviceGetAttribute", "malloc", "memcpy", "streamCreate", "eventRecord"):
        assert name in ROUTING.routed, ROUTING.left
    # routed in place: CuPy's own module, only names it has (the name the sync layer once
    # read, and that only the stand-in defined, is still missing)
    assert cupy.cuda.runtime.getDevice is runtime.getDevice
    assert not hasattr(runtime, "deviceAttributeComputeCapabilityMajor")
    assert cupy.cuda.Device(0).compute_capability == os.environ.get("NULLCUDA_COMPUTE_CAPABILITY", "9.0").replace(
        ".", ""
    )
    assert runtime.getDeviceCount() == int(os.environ.get("NULLCUDA_DEVICES", "1"))


def test_what_is_not_routed_raises_cupys_own_error() -> None:
    """The real module's statically linked CUDA runtime answers what is not routed: it finds no
    driver it accepts and raises, so no path passes here without the null CUDA answering it."""
    assert ROUTING is not None
    assert "deviceGetDefaultMemPool" in ROUTING.left
    with pytest.raises(runtime.CUDARuntimeError):
        runtime.deviceGetDefaultMemPool(0)


def test_host_memory_round_trips_and_kernels_launch_as_no_ops() -> None:
    data = numpy.arange(12, dtype=numpy.float32).reshape(3, 4)
    calls = run(lambda: numpy.testing.assert_array_equal(cupy.asarray(data).get(), data))
    assert [call for call in calls if call["call"] == "cuLaunchKernel"] == []
    calls = run(lambda: cupy.zeros(5) + 1)
    assert [kernel.split("__")[0] for kernel in kernels(calls)] == ["cupy_add"]


# ---------------------------------------------------------------- cuBLAS: math mode, compute type


def test_float32_matmul_gets_tf32_exactly_inside_the_scope() -> None:
    a = matrix((8, 8))
    before = gemms(run(lambda: a @ a))
    with backends.cuda.matmul.tf32(True):
        inside = gemms(run(lambda: a @ a))
    after = gemms(run(lambda: a @ a))
    assert [(c["call"], c["math_mode"], c["compute_type"]) for c in before + inside + after] == [
        ("cublasGemmEx", DEFAULT_MATH, COMPUTE_32F),
        ("cublasGemmEx", TF32_TENSOR_OP_MATH, COMPUTE_32F_FAST_TF32),
        ("cublasGemmEx", DEFAULT_MATH, COMPUTE_32F),
    ]
    assert before[0]["handle"] == inside[0]["handle"] == after[0]["handle"]  # CuPy's one handle per thread


def test_the_process_default_reaches_the_gemm_too() -> None:
    a = matrix((4, 4))
    backends.cuda.matmul.allow_tf32 = True
    try:
        (gemm,) = gemms(run(lambda: a @ a))
    finally:
        backends.cuda.matmul.allow_tf32 = False
    assert (gemm["math_mode"], gemm["compute_type"]) == (TF32_TENSOR_OP_MATH, COMPUTE_32F_FAST_TF32)


@pytest.mark.parametrize("allowed", [True, False])
def test_fp16_gemms_get_the_reduced_precision_bit_from_their_flag(allowed: bool) -> None:
    a = matrix((8, 8), numpy.float16)
    with backends.cuda.matmul.flags(allow_fp16_reduced_precision_reduction=allowed):
        (gemm,) = gemms(run(lambda: a @ a))
    assert gemm["atype"] == R_16F
    assert gemm["math_mode"] == (DEFAULT_MATH if allowed else DISALLOW_REDUCED_PRECISION_REDUCTION)
    with backends.cuda.matmul.flags(allow_tf32=True, allow_fp16_reduced_precision_reduction=allowed):
        (gemm,) = gemms(run(lambda: a @ a))
    assert gemm["math_mode"] == TF32_TENSOR_OP_MATH | (0 if allowed else DISALLOW_REDUCED_PRECISION_REDUCTION)


def test_bf16_gemms_follow_the_bf16_flag_not_the_fp16_one() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes (pip install ml-dtypes)")
    bfloat16 = numpy.dtype(ml_dtypes.bfloat16)
    try:
        a = cupy.asarray(numpy.ones((8, 8), bfloat16))
    except (TypeError, ValueError) as error:
        pytest.skip(f"CuPy {cupy.__version__} has no bfloat16 arrays: {error}")
    with backends.cuda.matmul.flags(
        allow_bf16_reduced_precision_reduction=False, allow_fp16_reduced_precision_reduction=True
    ):
        (gemm,) = gemms(run(lambda: a @ a))
    assert (gemm["atype"], gemm["math_mode"]) == (R_16BF, DISALLOW_REDUCED_PRECISION_REDUCTION)


def test_batched_matmul_gets_the_math_mode_and_keeps_cupys_compute_type() -> None:
    """CuPy passes a batched float32 GEMM its legacy compute type (``CUDA_R_32F``), which its
    binding turns into ``CUBLAS_COMPUTE_32F``: the sync layer leaves it, the math mode decides."""
    a = matrix((3, 4, 4))
    (outside,) = gemms(run(lambda: a @ a))
    with backends.cuda.matmul.tf32(True):
        (inside,) = gemms(run(lambda: a @ a))
    assert outside["call"] == inside["call"] == "cublasGemmStridedBatchedEx"
    assert (outside["batch"], outside["math_mode"], inside["math_mode"]) == (3, DEFAULT_MATH, TF32_TENSOR_OP_MATH)
    assert outside["compute_type"] == inside["compute_type"] == COMPUTE_32F


def test_einsum_without_cutensor_takes_the_gemm_and_the_scopes_math_mode() -> None:
    a, b = matrix((2, 4, 8)), matrix((2, 8, 4))
    with backends.cuda.matmul.tf32(True):
        inside = gemms(run(lambda: cupy.einsum("bij,bjk->bik", a, b)))
    outside = gemms(run(lambda: cupy.einsum("bij,bjk->bik", a, b)))
    assert [c["math_mode"] for c in inside] == [TF32_TENSOR_OP_MATH]
    assert [c["math_mode"] for c in outside] == [DEFAULT_MATH]


def test_einsum_through_cutensor_gets_the_tf32_descriptor_only_inside_the_scope() -> None:
    from cupy._core import _accelerator

    try:
        import cupyx.cutensor  # noqa: F401
    except ImportError as error:  # pragma: no cover - the null CUDA stands in for libcutensor
        pytest.fail(f"cuTENSOR does not import under the null CUDA: {error}")
    saved = _accelerator.get_routine_accelerators()
    _accelerator.set_routine_accelerators(["cutensor"])
    try:
        a, b = matrix((4, 8)), matrix((8, 4))

        def contract() -> object:
            return cupy.einsum("ij,jk->ik", a, b)

        with backends.cuda.matmul.tf32(True):
            inside = run(contract)
        outside = run(contract)
    finally:
        _accelerator.set_routine_accelerators(saved)
    descriptors = [[c["compute_desc"] for c in calls if c["call"] == "cutensorContract"] for calls in (inside, outside)]
    assert descriptors == [["TF32"], ["32F"]]


def test_solve_triangular_right_after_a_tf32_gemm_runs_in_ieee_mode() -> None:
    a, b = matrix((8, 8)), matrix((8,))
    with backends.cuda.matmul.tf32(True):
        inside = run(lambda: (a @ a, cupyx.scipy.linalg.solve_triangular(a, b)))
    after = run(lambda: cupyx.scipy.linalg.solve_triangular(a, b))
    assert [(c["call"], c["math_mode"]) for c in inside if c["call"].startswith("cublas") and "math_mode" in c] == [
        ("cublasGemmEx", TF32_TENSOR_OP_MATH),
        ("cublasStrsm_v2", TF32_TENSOR_OP_MATH),
    ]
    assert [(c["call"], c["math_mode"]) for c in after if "math_mode" in c] == [("cublasStrsm_v2", DEFAULT_MATH)]


def test_sync_pushes_the_scopes_math_mode_into_the_threads_handle() -> None:
    run(lambda: matrix((2, 2)) @ matrix((2, 2)))  # this thread has a handle
    with backends.cuda.matmul.tf32(True):
        inside = run(backends.sync)
    outside = run(backends.sync)
    assert [c["value"] for c in inside if c["call"] == "cublasSetMathMode"] == [TF32_TENSOR_OP_MATH]
    assert [c["value"] for c in outside if c["call"] == "cublasSetMathMode"] == [DEFAULT_MATH]


def test_threads_each_launch_with_their_own_scope_on_their_own_handle() -> None:
    barrier = threading.Barrier(2)
    native: dict[str, int] = {}
    errors: list[BaseException] = []

    def work(name: str, tf32: bool) -> None:
        try:
            native[name] = threading.get_native_id()
            a = matrix((4, 4))
            with backends.cuda.matmul.tf32(tf32):
                a @ a
                barrier.wait(timeout=60)  # both first GEMMs are made before either second one
                a @ a
            cupy.cuda.runtime.deviceSynchronize()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    with nullcuda.recording() as calls:
        threads = [threading.Thread(target=work, args=(name, name == "tf32")) for name in ("tf32", "ieee")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    by_thread = {name: gemms([c for c in calls if c["tid"] == tid]) for name, tid in native.items()}
    assert [c["math_mode"] for c in by_thread["tf32"]] == [TF32_TENSOR_OP_MATH] * 2
    assert [c["math_mode"] for c in by_thread["ieee"]] == [DEFAULT_MATH] * 2
    assert [c["compute_type"] for c in by_thread["tf32"] + by_thread["ieee"]] == [COMPUTE_32F_FAST_TF32] * 2 + [
        COMPUTE_32F
    ] * 2
    assert by_thread["tf32"][0]["handle"] != by_thread["ieee"][0]["handle"]  # CuPy: one handle per thread


def test_interleaved_asyncio_tasks_share_the_handle_and_keep_their_own_mode() -> None:
    a = matrix((4, 4))

    async def main() -> Calls:
        first_done, second_done = asyncio.Event(), asyncio.Event()

        async def tf32_task() -> None:
            with backends.cuda.matmul.tf32(True):
                a @ a
                first_done.set()
                await second_done.wait()
                a @ a

        async def ieee_task() -> None:
            await first_done.wait()
            a @ a
            second_done.set()

        with nullcuda.recording() as calls:
            await asyncio.gather(tf32_task(), ieee_task())
        return calls

    calls = gemms(asyncio.run(main()))
    assert [c["math_mode"] for c in calls] == [TF32_TENSOR_OP_MATH, DEFAULT_MATH, TF32_TENSOR_OP_MATH]
    assert len({c["handle"] for c in calls}) == 1 and len({c["tid"] for c in calls}) == 1


def test_a_second_device_gets_its_own_handle_and_the_same_flags() -> None:
    if runtime.getDeviceCount() < 2:
        pytest.skip("one device (NULLCUDA_DEVICES=2 gives two)")
    with cupy.cuda.Device(1), backends.cuda.matmul.tf32(True):
        a = matrix((4, 4))
        calls = run(lambda: a @ a)
    created = [c for c in calls if c["call"] == "cublasCreate_v2"]
    assert [c["device"] for c in created] == [1]
    assert [(c["handle"], c["math_mode"]) for c in gemms(calls)] == [(created[0]["handle"], TF32_TENSOR_OP_MATH)]


def gemms_in_a_process(body: str, **env: str) -> list[Calls]:
    """The GEMMs of each block a fresh process under the null CUDA records: ``body`` (indented
    by four) runs with ``a``, a float32 matrix, and ``block(label)``, a context that records."""
    script = (
        "from tests import nullcuda\n"
        "nullcuda.activate()\n"
        "import backends, contextlib, cupy, numpy, json\n"
        "a = cupy.asarray(numpy.ones((4, 4), numpy.float32))\n"
        "blocks = []\n"
        "@contextlib.contextmanager\n"
        "def block():\n"
        "    with nullcuda.recording() as calls:\n"
        "        yield\n"
        "    blocks.append([c for c in calls if c['call'] == 'cublasGemmEx'])\n"
        "if True:\n" + body + "print(json.dumps(blocks))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ, **env}, timeout=300
    )
    assert done.returncode == 0, done.stderr
    import json

    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_device_below_compute_capability_8_gets_no_tf32() -> None:
    """CuPy 13.6 / 14.2 and the sync layer ask the device's compute capability through CuPy's
    runtime module (attribute 75): on a 7.0 device no TF32 math mode or compute type."""
    body = "    with block(), backends.cuda.matmul.tf32(True):\n        a @ a\n"
    ((gemm,),) = gemms_in_a_process(body, NULLCUDA_COMPUTE_CAPABILITY="7.0")
    assert (gemm["math_mode"], gemm["compute_type"]) == (DEFAULT_MATH, COMPUTE_32F)


def test_cupy_tf32_is_the_default_and_a_scope_without_tf32_still_gets_none() -> None:
    """With ``CUPY_TF32=1`` CuPy passes the TF32 compute type to every float32 GEMM, and
    backends reads the variable as ``allow_tf32``'s default: in a ``tf32(False)`` scope the
    sync layer exchanges CuPy's compute type for plain 32F and sets the IEEE math mode."""
    body = (
        "    with block():\n        a @ a\n"
        "    with block(), backends.cuda.matmul.tf32(False):\n        a @ a\n"
        "    with block():\n        a @ a\n"
    )
    calls = gemms_in_a_process(body, CUPY_TF32="1")
    assert [[(c["math_mode"], c["compute_type"]) for c in block] for block in calls] == [
        [(TF32_TENSOR_OP_MATH, COMPUTE_32F_FAST_TF32)],
        [(DEFAULT_MATH, COMPUTE_32F)],
        [(TF32_TENSOR_OP_MATH, COMPUTE_32F_FAST_TF32)],
    ]


def test_cupy_destroys_its_handles_at_exit_through_the_wrapper_quietly() -> None:
    """At interpreter exit CuPy frees its thread-local handles, after the modules' globals are
    cleared, and calls ``cublas.destroy`` (the sync layer's wrapper) for each: the handle is
    destroyed and nothing is printed."""
    script = (
        "from tests import nullcuda\n"
        "nullcuda.activate()\n"
        "import backends, cupy, numpy, threading\n"
        "a = cupy.asarray(numpy.ones((4, 4), numpy.float32))\n"
        "a @ a\n"
        "thread = threading.Thread(target=lambda: a @ a)\n"
        "thread.start()\n"
        "thread.join()\n"
    )
    with nullcuda.recording() as calls:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    created = [c["handle"] for c in calls if c["call"] == "cublasCreate_v2"]
    destroyed = [c["handle"] for c in calls if c["call"] == "cublasDestroy_v2"]
    assert len(created) == 2 and sorted(destroyed) == sorted(created)  # the thread's as it ended, the main one at exit


# ---------------------------------------------------------------- streams (algorithms.deterministic)


def test_a_float_gemm_on_a_handles_second_stream_is_refused_in_the_deterministic_scope() -> None:
    def in_a_thread() -> tuple[Calls, BaseException | None]:
        a = matrix((4, 4))
        stream = cupy.cuda.Stream(non_blocking=True)
        with nullcuda.recording() as calls:
            with stream:
                a @ a  # first use: this stream
            try:
                with backends.algorithms.flags(deterministic=True):
                    a @ a  # the null stream: a second one
                refused = None
            except RuntimeError as error:
                refused = error
        calls.append({"call": "stream", "ptr": stream.ptr})
        return calls, refused

    done: list[tuple[Calls, BaseException | None]] = []
    thread = threading.Thread(target=lambda: done.append(in_a_thread()))  # a fresh handle
    thread.start()
    thread.join()
    calls, refused = done[0]
    assert refused is not None and "more than one CUDA stream" in str(refused)
    stream = calls[-1]["ptr"]
    assert stream != 0
    assert [c["stream"] for c in gemms(calls)] == [stream]  # the refused GEMM never reached cuBLAS


# ---------------------------------------------------------------- cuFFT: the plan cache


def plans_made(calls: Calls) -> list[list[int]]:
    return [c["shape"] for c in calls if c["call"].startswith(("cufftMakePlan", "cufftXtMakePlan"))]


def test_the_plan_cache_capacity_follows_the_flag_where_it_is_set() -> None:
    from cupy.fft.config import get_plan_cache

    get_plan_cache().clear()
    x = matrix((16,), numpy.complex64)
    with backends.flags({"cuda.cufft_plan_cache.max_size": 0}):
        uncached = run(lambda: (cupy.fft.fft(x), cupy.fft.fft(x)))
        size_inside = get_plan_cache().get_size()
    with backends.flags({"cuda.cufft_plan_cache.max_size": 4}):
        cached = run(lambda: (cupy.fft.fft(x), cupy.fft.fft(x)))
    default = run(lambda: cupy.fft.fft(x))
    assert size_inside == 0
    assert len(plans_made(uncached)) == 2  # nothing kept: a plan per transform
    assert len(plans_made(cached)) == 1
    assert plans_made(default) == []  # CuPy's own cache (16) kept the plan made in the 4-plan scope
    assert get_plan_cache().get_size() == 16
    assert [c["call"] for c in uncached if c["call"].startswith("cufftExec")] == ["cufftExecC2C"] * 2


def test_an_fft_runs_on_the_current_stream_with_the_plan_the_scope_kept() -> None:
    x = matrix((32,), numpy.complex64)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream, backends.flags({"cuda.cufft_plan_cache.max_size": 2}):
        calls = run(lambda: (cupy.fft.fft(x), cupy.fft.ifft(x)))
    executed = [(c["call"], c["stream"], c["direction"]) for c in calls if c["call"].startswith("cufftExec")]
    assert executed == [("cufftExecC2C", stream.ptr, -1), ("cufftExecC2C", stream.ptr, 1)]
    assert len({c["plan"] for c in calls if c["call"].startswith("cufftExec")}) == 1  # one plan, cached


def test_each_thread_sizes_its_own_plan_cache() -> None:
    from cupy.fft.config import get_plan_cache

    sizes: dict[str, int] = {}

    def work(name: str, size: int) -> None:
        with backends.flags({"cuda.cufft_plan_cache.max_size": size}):
            cupy.fft.fft(matrix((8,), numpy.complex64))
            sizes[name] = get_plan_cache().get_size()

    threads = [threading.Thread(target=work, args=(name, size)) for name, size in (("a", 2), ("b", 5))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sizes == {"a": 2, "b": 5}


# ---------------------------------------------------------------- cuSPARSE


def csr(rows: int, cols: int, per_row: int = 2, dtype: Any = numpy.float32) -> Any:
    """A canonical CSR matrix, its parts copied in from the host. Not ``csr_matrix((data,
    indices, indptr))``: CuPy reads ``indptr``'s ends back through a kernel (``cupy.stack``),
    which does not run here, and would trim the matrix to what it read (nothing)."""
    m = cupyx.scipy.sparse.csr_matrix((rows, cols), dtype=dtype)
    m.data = cupy.asarray(numpy.ones(rows * per_row, dtype))
    m.indices = cupy.asarray((numpy.arange(rows * per_row) % cols).astype(numpy.int32))
    m.indptr = cupy.asarray(numpy.arange(rows + 1, dtype=numpy.int32) * per_row)
    m._has_canonical_format = True
    m._has_sorted_indices = True
    return m


def sparse_calls(calls: Calls) -> list[tuple[str, int]]:
    return [(c["call"], c["alg"]) for c in calls if c["call"].startswith(("cusparseSpMV", "cusparseSpMM"))]


@pytest.mark.parametrize(("name", "default", "deterministic"), [("SpMV", 0, 3), ("SpMM", 0, 12)])
def test_sparse_products_take_the_deterministic_algorithm_in_the_scope(
    name: str, default: int, deterministic: int
) -> None:
    m = csr(16, 16)
    operand = matrix((16,)) if name == "SpMV" else cupy.asfortranarray(matrix((16, 3)))
    with cupy.cuda.using_allocator(None):  # no pool: each buffer is an allocation of its own size
        outside = run(lambda: m @ operand)
        with backends.algorithms.flags(deterministic=True):
            inside = run(lambda: m @ operand)
    query, launch = f"cusparse{name}_bufferSize", f"cusparse{name}"
    # In every context the size query answers for CuPy's algorithm and the deterministic one, so
    # the buffer fits whichever the launch takes (no second query, no workspace of its own).
    sizes = [(query, default), (query, deterministic)]
    assert sparse_calls(outside) == [*sizes, (launch, default)]
    assert sparse_calls(inside) == [*sizes, (launch, deterministic)]
    for calls in (outside, inside):
        (launched,) = [c for c in calls if c["call"] == launch]
        assert launched["format"] == 1 and launched["op_a"] == 0  # CSR, not transposed
        largest = max(c["size"] for c in calls if c["call"] == query)
        assert launched["available"] >= largest >= launched["needed"]  # fits either algorithm


def test_a_transposed_sparse_product_is_refused_before_it_launches() -> None:
    m = csr(8, 8)
    x = matrix((8,))
    with (
        backends.algorithms.flags(deterministic=True),
        nullcuda.recording() as calls,
        pytest.raises(RuntimeError, match="transposed"),
    ):
        m.T @ x  # a CSC matrix: CuPy multiplies its transpose, a CSR, transposed
    assert [c for c in sparse_calls(calls) if c[0] == "cusparseSpMV"] == []
    with nullcuda.recording() as allowed:
        m.T @ x
    assert ("cusparseSpMV", 0) in sparse_calls(allowed)


def test_sparse_products_in_threads_follow_each_threads_scope() -> None:
    m = csr(8, 8)
    x = matrix((8,))
    native: dict[bool, int] = {}
    barrier = threading.Barrier(2)

    def work(deterministic: bool) -> None:
        native[deterministic] = threading.get_native_id()
        with backends.algorithms.flags(deterministic=deterministic):
            barrier.wait(timeout=60)
            m @ x

    with nullcuda.recording() as calls:
        threads = [threading.Thread(target=work, args=(flag,)) for flag in (True, False)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for flag, alg in ((True, 3), (False, 0)):
        assert sparse_calls([c for c in calls if c["tid"] == native[flag]]) == [
            ("cusparseSpMV_bufferSize", 0),  # CuPy's algorithm, then the deterministic one
            ("cusparseSpMV_bufferSize", 3),
            ("cusparseSpMV", alg),
        ]


# ---------------------------------------------------------------- cuSOLVER


def test_a_magma_preference_warns_once_and_cusolver_runs() -> None:
    from backends.sync import wrapping

    wrapping.warned.discard("magma")
    a = matrix((4, 4))
    with (
        backends.flags({"cuda.preferred_linalg_library": "magma"}),
        pytest.warns(UserWarning, match="CuPy ships only cuSOLVER") as caught,
    ):
        calls = run(lambda: cupy.linalg.cholesky(a))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cupy.linalg.cholesky(a)  # once per process
    assert len(caught) == 1
    assert [c["call"] for c in calls if c["call"].endswith("potrf")] == ["cusolverDnSpotrf"]


# ---------------------------------------------------------------- algorithms.deterministic elsewhere


def test_a_float_scatter_add_is_refused_before_it_launches() -> None:
    a, index, values = matrix((4,)), cupy.asarray(numpy.array([0, 1, 1])), matrix((3,))
    launched = kernels(run(lambda: cupy.add.at(a, index, values)))
    assert launched  # CuPy's scatter kernel, outside the scope
    with (
        backends.algorithms.flags(deterministic=True),
        nullcuda.recording() as calls,
        pytest.raises(RuntimeError, match=r"cupy\.add\.at"),
    ):
        cupy.add.at(a, index, values)
    assert kernels(calls) == []


def test_a_float_weighted_histogram_is_refused_at_its_kernel() -> None:
    """(Not ``bincount``: its bin count is read back from a kernel that does not run here.)"""
    x, weights = matrix((6,)), matrix((6,))

    def histogram() -> object:
        return cupy.histogram(x, bins=4, range=(0.0, 4.0), weights=weights)

    outside = kernels(run(histogram))
    assert any("histogram" in kernel for kernel in outside), outside
    with (
        backends.algorithms.flags(deterministic=True),
        nullcuda.recording() as calls,
        pytest.raises(RuntimeError, match="histogram"),
    ):
        histogram()
    assert not any("histogram" in kernel for kernel in kernels(calls))


def test_float_cumsum_takes_cupys_own_scan_instead_of_cub_in_the_scope() -> None:
    """With CUB as CuPy's accelerator a float cumsum goes to CUB's device scan, which launches
    through NVIDIA's CUDA runtime linked into CuPy's CUB module: the null CUDA does not see it
    (and it launches nothing: that runtime finds no driver it accepts). In the scope the sync
    layer sends the cumsum to CuPy's own scan, a kernel launched through CuPy's driver calls."""
    from cupy._core import _accelerator

    saved = _accelerator.get_routine_accelerators()
    _accelerator.set_routine_accelerators(["cub"])
    try:
        x = matrix((64,))
        through_cub = kernels(run(lambda: cupy.cumsum(x)))
        with backends.algorithms.flags(deterministic=True):
            own = kernels(run(lambda: cupy.cumsum(x)))
    finally:
        _accelerator.set_routine_accelerators(saved)
    assert not any("scan" in kernel for kernel in through_cub), through_cub
    assert any("scan" in kernel for kernel in own), own


# ---------------------------------------------------------------- what the null CUDA does not reach

STATIC_RUNTIME = (
    "CuPy calls CUB / Thrust here, which launch through NVIDIA's CUDA runtime linked into CuPy's own "
    "modules: the null CUDA does not reach it (that runtime finds no driver and fails)"
)


@pytest.mark.xfail(raises=RuntimeError, strict=True, reason=STATIC_RUNTIME)
def test_minor_axis_fancy_indexing_in_the_scope() -> None:
    """CuPy 14.2's ``csr[:, index]`` (which the sync layer sends to CuPy's sorted path in the
    scope) calls CUB from its sparse module, with or without the accelerator."""
    if CUPY_MAJOR < 14:
        pytest.skip("CuPy 13 indexes the minor axis through a transpose: the sync layer leaves it alone")
    m = csr(8, 8)
    index = cupy.asarray(numpy.array([0, 2, 2], numpy.int32))
    with backends.algorithms.flags(deterministic=True):
        m[:, index]
