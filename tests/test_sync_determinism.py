"""``algorithms.deterministic`` through the sync layer (contract section 10), proved with the
stand-in CuPy: each operation whose result can vary raises before it launches in the scope,
warns and runs under ``warn_only``, and runs untouched outside the scope and in a nested
``deterministic=False`` scope; order-independent variants never raise; float scans take
CuPy's own scan. What is checked is what CuPy would launch (the stand-in's recorders)."""

from __future__ import annotations

import asyncio
import contextvars
import re
import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy
import pytest

import backends
from tests._helpers import run_threads

DETERMINISTIC = backends.algorithms.flags(deterministic=True)
WARN_ONLY = backends.algorithms.flags(deterministic=True, warn_only=True)
ALLOWED = backends.algorithms.flags(deterministic=False)


def refused(operation: str) -> Any:
    """``pytest.raises`` for the error of a refused ``operation`` (a fragment of its name)."""
    return pytest.raises(RuntimeError, match=rf"^{re.escape(operation)}.* does not have a deterministic implementation")


def check_refused(launch: Callable[[], object], operation: str, launched: Callable[[], int]) -> None:
    """The behaviour every refused operation shares: raises in the scope with nothing launched
    and a message that says how to allow it; warns and runs with ``warn_only``; runs outside
    the scope and in a nested ``deterministic=False`` scope."""
    before = launched()
    with DETERMINISTIC, refused(operation) as raised:
        launch()
    assert launched() == before, "refused, yet launched"
    message = str(raised.value)
    assert "backends.algorithms.deterministic is True in this context" in message
    assert "with backends.algorithms.flags(deterministic=False):" in message
    assert "backends.algorithms.flags(warn_only=True)" in message

    with WARN_ONLY, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch()
    assert launched() > before
    # One warning per refused launch (variance launches two: its mean's, then its own).
    ours = [w for w in caught if not issubclass(w.category, DeprecationWarning)]  # CuPy's own: scatter_add
    assert {w.category for w in ours} == {backends.NondeterministicAlgorithmWarning}
    assert any(str(w.message).startswith(operation) for w in ours), [str(w.message) for w in ours]
    for scope in (backends.flags({}), ALLOWED):  # outside the scope, and nested inside it
        before = launched()
        with DETERMINISTIC if scope is ALLOWED else backends.flags({}), scope:
            launch()
        assert launched() > before


# -- scatter-add: every ufunc.at that adds ---------------------------------------------------------


def scatters(cupy: ModuleType) -> Callable[[], int]:
    return lambda: len(cupy._core.core.SCATTERS.calls)


def test_add_at_on_float_data_is_refused(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    a, index = cupy.zeros(4, "float32"), cupy.array([0, 0, 1])
    check_refused(lambda: cupy.add.at(a, index, 1.0), "cupy.add.at", scatters(cupy))


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_every_entry_point_of_scatter_add_is_refused(standin_cupy: ModuleType, dtype: str) -> None:
    import cupyx

    cupy = standin_cupy
    a, index = cupy.zeros(4, dtype), cupy.array([0, 0, 1])
    entry_points: list[Callable[[], object]] = [
        lambda: numpy.add.at(a, index, 1.0),  # NumPy sends it to cupy.add.at (__array_ufunc__)
        lambda: cupyx.scatter_add(a, index, 1.0),
        lambda: a.scatter_add(index, 1.0),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # CuPy 14 deprecates scatter_add
        for launch in entry_points:
            check_refused(launch, "cupy.add.at", scatters(cupy))


def test_order_independent_scatters_never_raise(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    floats, ints, index = cupy.zeros(4, "float32"), cupy.zeros(4, "int32"), cupy.array([0, 0, 1])
    with DETERMINISTIC:
        cupy.maximum.at(floats, index, 1.0)
        cupy.minimum.at(floats, index, 1.0)
        cupy.add.at(ints, index, 1)
        cupy.subtract.at(ints, index, 1)
        ints[index] = 5  # not reachable (a C-level scatter in CuPy): documented, and never refused
        cupy.add.at(floats, 0, 1.0)  # indices that cannot repeat: an int, a slice
        cupy.add.at(floats, slice(None), 1.0)
    ops = [call.op for call in cupy._core.core.SCATTERS.calls]
    assert ops == ["max", "min", "add", "sub", "update", "add", "add"]


# -- scans -------------------------------------------------------------------------------------


def scan_paths(cupy: ModuleType) -> list[str]:
    return [scan.path for scan in cupy._core._routines_math.SCANS.calls]


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
def test_float_cumsum_and_cumprod_take_cupys_own_scan_in_the_scope(standin_cupy: ModuleType, dtype: str) -> None:
    cupy = standin_cupy
    x = cupy.ones(1000, dtype)
    cupy.cumsum(x)
    with DETERMINISTIC:
        cupy.cumsum(x)
        cupy.cumprod(x)
        with ALLOWED:
            cupy.cumsum(x)
    with WARN_ONLY:  # a deterministic path exists: nothing to warn about
        cupy.cumsum(x)
    assert scan_paths(cupy) == ["cub", "native", "native", "cub", "native"]


def test_integer_scans_and_scans_along_an_axis_are_untouched(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    with DETERMINISTIC:
        cupy.cumsum(cupy.ones(1000, "int32"))
        cupy.cumsum(cupy.ones((10, 100), "float32"), axis=1)
    assert scan_paths(cupy) == ["cub", "batch"]


def test_the_cumsum_values_are_those_of_a_scan(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    with DETERMINISTIC:
        assert cupy.cumsum(cupy.array([1.0, 2.0, 3.0])).tolist() == [1.0, 3.0, 6.0]


# -- weighted histograms -------------------------------------------------------------------------


def kernels(cupy: ModuleType, name: str) -> Callable[[], int]:
    return lambda: sum(1 for launch in cupy._core._kernel.KERNELS.calls if launch.name == name)


def test_weighted_bincount_and_what_calls_it_are_refused(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    x, w = cupy.array([0, 1, 1, 3]), cupy.array([0.5, 1.0, 2.0, 1.0])
    count = kernels(cupy, "cupy_bincount_with_weight_kernel")
    check_refused(lambda: cupy.bincount(x, weights=w), "cupy.bincount(x, weights)", count)
    sample = cupy.array([0.1, 0.5, 0.9, 0.2])
    check_refused(lambda: cupy.histogramdd([sample], bins=4, weights=w), "cupy.bincount(x, weights)", count)
    check_refused(lambda: cupy.histogram2d(sample, sample, bins=4, weights=w), "cupy.bincount(x, weights)", count)


def test_64_bit_integer_weights_are_refused_they_round_in_float64(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    with DETERMINISTIC, refused("cupy.bincount(x, weights)"):
        cupy.bincount(cupy.array([0, 1]), weights=cupy.array([2**60, 1], dtype="int64"))


def test_an_early_bound_bincount_is_refused_too(standin_cupy: ModuleType) -> None:
    from cupy._statistics.histogram import bincount  # bound before anything was wrapped? the kernel is

    cupy = standin_cupy
    with DETERMINISTIC, refused("cupy.bincount(x, weights)"):
        bincount(cupy.array([0, 1]), weights=cupy.array([1.0, 2.0]))


def test_histogram_with_float_weights_is_refused_and_integer_weights_pass(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    x = cupy.array([0.1, 0.5, 0.9, 0.2])
    count = kernels(cupy, "cupy_weighted_histogram_kernel")
    check_refused(lambda: cupy.histogram(x, bins=4, weights=cupy.array([1.0, 2.0, 3.0, 4.0])), "cupy.histogram", count)
    with DETERMINISTIC:
        cupy.bincount(cupy.array([0, 1, 1]), weights=cupy.array([1, 2, 3], dtype="int32"))  # exact in float64
        cupy.histogram(x, bins=4, weights=cupy.array([1, 2, 3, 4]))  # summed in an int64 array
        cupy.histogram(x, bins=4)
        cupy.bincount(cupy.array([0, 1, 1]))
    with DETERMINISTIC, refused("cupy.histogram"):
        cupy.histogram(x, bins=4, weights=cupy.array([1j, 2, 3, 4]))  # complex: two float launches


# -- ndimage label statistics ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "kernel", "operation"),
    [
        ("sum_labels", "cupyx_scipy_ndimage_sum", "cupyx.scipy.ndimage.sum_labels"),
        ("sum", "cupyx_scipy_ndimage_sum", "cupyx.scipy.ndimage.sum_labels"),
        ("center_of_mass", "cupyx_scipy_ndimage_sum", "cupyx.scipy.ndimage.sum_labels"),
        ("mean", "cupyx_scipy_ndimage_mean", "cupyx.scipy.ndimage.mean"),
        ("variance", "cupyx_scipy_ndimage_mean", "cupyx.scipy.ndimage.mean (also variance"),
        ("standard_deviation", "cupyx_scipy_ndimage_mean", "cupyx.scipy.ndimage.mean (also variance"),
    ],
)
def test_label_statistics_with_an_array_index_are_refused(
    standin_cupy: ModuleType, function: str, kernel: str, operation: str
) -> None:
    import cupyx.scipy.ndimage as ndimage

    cupy = standin_cupy
    image, labels, index = cupy.ones((8, 8), "float32"), cupy.ones((8, 8), "int32"), cupy.array([1, 2])
    call = getattr(ndimage, function)
    check_refused(lambda: call(image, labels, index), operation, kernels(cupy, kernel))


def test_the_variance_of_integer_input_is_refused_at_its_own_kernel(standin_cupy: ModuleType) -> None:
    import cupyx.scipy.ndimage as ndimage

    cupy = standin_cupy
    image, labels, index = cupy.ones((8, 8), "int32"), cupy.ones((8, 8), "int32"), cupy.array([1, 2])
    launched = kernels(cupy, "cupyx_scipy_ndimage_variance")
    check_refused(lambda: ndimage.variance(image, labels, index), "cupyx.scipy.ndimage.variance", launched)


def test_label_statistics_off_the_atomics_branch_pass(standin_cupy: ModuleType) -> None:
    import cupyx.scipy.ndimage as ndimage

    cupy = standin_cupy
    with DETERMINISTIC:
        ndimage.sum_labels(cupy.ones((8, 8), "int32"), cupy.ones((8, 8), "int32"), cupy.array([1, 2]))  # exact
        ndimage.mean(cupy.ones((8, 8), "int32"), cupy.ones((8, 8), "int32"), cupy.array([1, 2]))
        big = cupy.ones((512, 512), "float32")  # 262,144 elements and <= 4 labels: a masked reduction
        ndimage.sum_labels(big, cupy.ones((512, 512), "int32"), cupy.array([1, 2]))
        ndimage.sum_labels(cupy.ones((8, 8), "float32"), cupy.ones((8, 8), "int32"), 1)  # a scalar index
    names = [launch.name for launch in cupy._core._kernel.KERNELS.calls]
    assert names.count("masked_sum") == 1
    assert names.count("cupyx_scipy_ndimage_sum") == 1 and names.count("cupyx_scipy_ndimage_mean") == 1


# -- sparse matrices -----------------------------------------------------------------------------------


def coo(cupy: ModuleType, dtype: str, rows: list[int], cols: list[int]) -> Any:
    from cupyx.scipy.sparse import coo_matrix

    data = cupy.array([1.0] * len(rows), dtype=dtype)
    return coo_matrix((data, (cupy.array(rows, dtype="int32"), cupy.array(cols, dtype="int32"))), shape=(3, 3))


DUPLICATES = ([0, 1, 1, 1], [0, 2, 2, 2])
NO_DUPLICATES = ([2, 0, 1], [0, 2, 1])


def test_summing_float_duplicates_is_refused_where_ever_it_is_reached(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    assigned = kernels(cupy, "cupyx_scipy_sparse_coo_sum_duplicates_assign")
    check_refused(lambda: coo(cupy, "float32", *DUPLICATES).sum_duplicates(), "cupyx.scipy.sparse", assigned)
    check_refused(lambda: coo(cupy, "float64", *DUPLICATES).tocsr(), "cupyx.scipy.sparse", assigned)
    check_refused(lambda: coo(cupy, "float64", *DUPLICATES).tocsc(), "cupyx.scipy.sparse", assigned)


def test_matrices_without_float_duplicates_pass(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    with DETERMINISTIC:
        coo(cupy, "float32", *NO_DUPLICATES).sum_duplicates()
        coo(cupy, "float32", *NO_DUPLICATES).tocsr()
        coo(cupy, "bool", *DUPLICATES).sum_duplicates()  # or-ed, not added
    assert kernels(cupy, "cupyx_scipy_sparse_coo_sum_duplicates_assign")() == 1  # the bool one


def test_scalar_indexing_with_duplicate_entries_is_refused(standin_cupy: ModuleType) -> None:
    from cupyx.scipy.sparse import csr_matrix

    cupy = standin_cupy
    data, indices, indptr = cupy.array([1.0, 2.0, 3.0]), cupy.array([1, 1, 0], "int32"), cupy.array([0, 3, 3], "int32")
    duplicated = csr_matrix((data, indices, indptr), shape=(2, 2))
    getitem = kernels(cupy, "cupyx_scipy_sparse_compress_getitem")
    check_refused(lambda: duplicated[0, 1], "cupyx.scipy.sparse.csr_matrix[i, j]", getitem)
    canonical = csr_matrix((data, cupy.array([0, 1, 0], "int32"), cupy.array([0, 2, 3], "int32")), shape=(2, 2))
    with DETERMINISTIC:
        canonical[0, 1]
        canonical.T[1, 0]  # CSC


def sparse_calls(cupy: ModuleType, function: str) -> Callable[[], int]:
    from cupy_backends.cuda.libs import cusparse

    return lambda: sum(1 for call in cusparse.RECORDER.calls if call.function == function)


def test_transposed_products_are_refused_and_csr_products_pass(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    csr = coo(cupy, "float32", *NO_DUPLICATES).tocsr()
    csc = csr.tocsc()
    vector, matrix = cupy.ones(3, "float32"), cupy.ones((3, 2), "float32")
    check_refused(lambda: csc @ vector, "cupyx.cusparse.spmv with a transposed matrix", sparse_calls(cupy, "spMV"))
    check_refused(lambda: csc @ matrix, "cupyx.cusparse.spmm with a transposed matrix", sparse_calls(cupy, "spMM"))
    import cupyx.cusparse

    check_refused(
        lambda: cupyx.cusparse.spmv(csr, vector, transa=True), "cupyx.cusparse.spmv", sparse_calls(cupy, "spMV")
    )
    with DETERMINISTIC:
        csr @ vector
        csr @ matrix
        cupyx.cusparse.spmv(csc, vector, transa=True)  # a CSC transposed is a CSR product


# -- cuBLAS across streams ---------------------------------------------------------------------------


def gemms(cupy: ModuleType) -> Callable[[], int]:
    from cupy_backends.cuda.libs import cublas

    return lambda: sum(1 for launch in cublas.RECORDER.launches if "gemm" in launch.function)


def test_a_float_gemm_on_a_second_stream_of_a_handle_needs_a_deterministic_workspace(
    standin_cupy: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    cupy = standin_cupy
    a = cupy.ones((64, 64), "float32")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    with DETERMINISTIC:
        a @ a  # the null stream: this thread's handle has one stream
        a @ a
    with cupy.cuda.Stream():
        check_refused(lambda: a @ a, "cuBLAS gemmEx", gemms(cupy))
    # the rule takes the variable as it was when the handle was made (when cuBLAS reads it is not
    # documented), and CuPy makes one per thread (so each case runs in a new thread, with a new handle).
    outcomes: dict[str, str] = {}

    def gemm_in_a_new_thread(value: str | None) -> None:
        def body() -> None:
            a @ a  # the default stream first
            with cupy.cuda.Stream(), DETERMINISTIC:
                try:
                    a @ a
                    outcomes[str(value)] = "ran"
                except RuntimeError as error:
                    outcomes[str(value)] = "raised" if "CUBLAS_WORKSPACE_CONFIG=:4096:8 or :16:8" in str(error) else ""

        if value is None:
            monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
        else:
            monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", value)
        run_threads(body)

    for value in (":4096:8", ":16:8", ":4096:2", None):
        gemm_in_a_new_thread(value)
    assert outcomes == {":4096:8": "ran", ":16:8": "ran", ":4096:2": "raised", "None": "raised"}
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # too late for this thread's handle
    with cupy.cuda.Stream(), DETERMINISTIC, refused("cuBLAS gemmEx"):
        a @ a


# -- warnings, threads and tasks ----------------------------------------------------------------------


def test_warn_only_warns_once_per_call_site_under_the_default_filter(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    a, index = cupy.zeros(4, "float32"), cupy.array([0, 0])
    with WARN_ONLY, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            cupy.add.at(a, index, 1.0)  # one call site: one warning
        cupy.add.at(a, index, 1.0)  # another line
    assert [w.category for w in caught] == [backends.NondeterministicAlgorithmWarning] * 2
    assert {w.filename for w in caught} == {__file__}  # it points at this file, not at CuPy's
    assert len({w.lineno for w in caught}) == 2
    assert len(cupy._core.core.SCATTERS.calls) == 4


def test_warning_filters_decide_always_and_error(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    a, index = cupy.zeros(4, "float32"), cupy.array([0, 0])
    with WARN_ONLY, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            cupy.add.at(a, index, 1.0)
    assert len(caught) == 3
    with WARN_ONLY, warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):  # raised each time, and nothing launched
            with pytest.raises(backends.NondeterministicAlgorithmWarning):
                cupy.add.at(a, index, 1.0)
    assert len(cupy._core.core.SCATTERS.calls) == 3


def test_interleaved_tasks_scan_and_scatter_with_their_own_settings(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy

    async def task(scope: backends.Scope, ready: asyncio.Event, go: asyncio.Event) -> str:
        with scope:
            ready.set()
            await go.wait()
            try:
                cupy.cumsum(cupy.ones(10, "float32"))
                cupy.add.at(cupy.zeros(2, "float32"), cupy.array([0, 0]), 1.0)
                return "ran"
            except RuntimeError:
                return "raised"

    async def main() -> list[str]:
        ready, go = asyncio.Event(), asyncio.Event()
        strict = asyncio.create_task(task(DETERMINISTIC, ready, go))
        free = asyncio.create_task(task(ALLOWED, asyncio.Event(), go))
        await ready.wait()
        go.set()
        return [await strict, await free]

    cupy._core._routines_math.SCANS.reset()
    assert asyncio.run(main()) == ["raised", "ran"]
    assert sorted(scan_paths(cupy)) == ["cub", "native"]


def every_refused_operation(cupy: ModuleType) -> dict[str, Callable[[], object]]:
    """One launch of each refused operation, with fresh inputs (so threads share nothing)."""
    import cupyx.scipy.ndimage as ndimage
    from cupyx.scipy.sparse import csr_matrix

    def gemm_on_a_stream() -> object:
        a = cupy.ones((8, 8), "float32")
        with ALLOWED:
            a @ a  # the thread's handle's first stream: the default one
        with cupy.cuda.Stream():
            return a @ a  # its second

    def csr_scalar() -> object:
        matrix = csr_matrix(
            (cupy.array([1.0, 2.0, 3.0]), cupy.array([1, 1, 0], "int32"), cupy.array([0, 3, 3], "int32")),
            shape=(2, 2),
        )
        return matrix[0, 1]

    return {
        "cupy.add.at": lambda: cupy.add.at(cupy.zeros(4, "float32"), cupy.array([0, 0]), 1.0),
        "numpy.add.at": lambda: numpy.add.at(cupy.zeros(4, "float64"), cupy.array([0, 0]), 1.0),
        "cupy.bincount": lambda: cupy.bincount(cupy.array([0, 1]), weights=cupy.array([1.0, 2.0])),
        "cupy.histogram": lambda: cupy.histogram(cupy.array([0.1, 0.2]), bins=2, weights=cupy.array([1.0, 2.0])),
        "ndimage.sum_labels": lambda: ndimage.sum_labels(
            cupy.ones((4, 4), "float32"), cupy.ones((4, 4), "int32"), cupy.array([1, 2])
        ),
        "coo.sum_duplicates": lambda: coo(cupy, "float32", *DUPLICATES).sum_duplicates(),
        "csr[i, j]": csr_scalar,
        "csc @ vector": lambda: coo(cupy, "float32", *NO_DUPLICATES).tocsc() @ cupy.ones(3, "float32"),
        "gemm on a stream": gemm_on_a_stream,
    }


@pytest.mark.parametrize(
    "name",
    [
        "cupy.add.at", "numpy.add.at", "cupy.bincount", "cupy.histogram", "ndimage.sum_labels",
        "coo.sum_duplicates", "csr[i, j]", "csc @ vector", "gemm on a stream",
    ],
)  # fmt: skip
def test_each_operation_in_threads_and_tasks_at_once_follows_its_own_context(
    standin_cupy: ModuleType, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    launch = every_refused_operation(standin_cupy)[name]
    barrier = threading.Barrier(3)
    outcomes: dict[str, str] = {}

    def outcome() -> str:
        try:
            launch()
        except RuntimeError:
            return "raised"
        return "ran"

    def worker(label: str, scope: backends.Scope) -> None:
        with scope:
            barrier.wait()  # all three are in their scopes before any launches
            outcomes[label] = outcome()

    # One recorder for every thread (catch_warnings swaps process-wide state: one at a time). Each
    # thread runs in a copy of this context, where the recorder is when warnings are context-local
    # (3.14's context_aware_warnings, on by default in free-threaded builds).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strict, warn, free = (contextvars.copy_context() for _ in range(3))
        run_threads(
            lambda: strict.run(worker, "strict", DETERMINISTIC),
            lambda: warn.run(worker, "warn", WARN_ONLY),
            lambda: free.run(worker, "free", ALLOWED),
            unblock=[barrier],
        )
    assert outcomes == {"strict": "raised", "warn": "ran", "free": "ran"}
    ours = [w for w in caught if w.category is backends.NondeterministicAlgorithmWarning]
    assert len(ours) == 1  # from the warn_only thread: the strict one raised, the free one is not checked

    async def task(scope: backends.Scope, entered: asyncio.Barrier) -> str:
        with scope:
            await entered.wait()  # every task is inside its scope before any launches
            return outcome()

    async def main() -> list[str]:
        entered = asyncio.Barrier(3)
        return list(await asyncio.gather(*(task(scope, entered) for scope in (DETERMINISTIC, WARN_ONLY, ALLOWED))))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert asyncio.run(main()) == ["raised", "ran", "ran"]
    assert [w.category for w in caught if w.category is backends.NondeterministicAlgorithmWarning] == [
        backends.NondeterministicAlgorithmWarning
    ]


def test_use_deterministic_algorithms_and_the_preset_reach_the_wrappers(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    a, index = cupy.zeros(4, "float32"), cupy.array([0, 0])
    with backends.deterministic(), refused("cupy.add.at"):
        cupy.add.at(a, index, 1.0)
    with backends.flags({}):
        backends.use_deterministic_algorithms(True, warn_only=True)
        with pytest.warns(backends.NondeterministicAlgorithmWarning):
            cupy.add.at(a, index, 1.0)
    backends.use_deterministic_algorithms(True)  # the process default: every thread
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            cupy.add.at(a, index, 1.0)
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1


def test_no_hook_failed_while_wrapping_the_stand_in(standin_cupy: ModuleType) -> None:
    import cupyx.cusparse
    import cupyx.scipy.ndimage
    import cupyx.scipy.sparse  # noqa: F401

    from backends.sync import hooks, installed

    assert hooks.failures == []
    assert {"scatter", "cub", "histogram", "ndimage", "sparse", "cusparse"} <= set(installed)


# -- cuSPARSE's deterministic algorithms (issue 22, item 1) -------------------------------------------

SPMV_DEFAULT, SPMV_CSR_ALG2, SPMV_COO_ALG2 = 0, 3, 4  # cusparseSpMVAlg_t (cusparse.h)
SPMM_DEFAULT, SPMM_CSR_ALG3, SPMM_COO_ALG2 = 0, 12, 2  # cusparseSpMMAlg_t


def algorithms_reaching_cusparse(launch: Callable[[], object]) -> list[tuple[str, int | None]]:
    """``(function, alg)`` of every cuSPARSE query and launch that ``launch()`` makes."""
    from cupy_backends.cuda.libs import cusparse

    before = len(cusparse.RECORDER.calls)
    launch()
    return [(call.function, call.alg) for call in cusparse.RECORDER.calls[before:]]


def spmv(alg: int, launched: int | None = None) -> list[tuple[str, int | None]]:
    """CuPy's default-algorithm size query, the one for ``alg`` (every query asks both sizes,
    where there is a deterministic algorithm), and the launch with ``launched`` (``alg``)."""
    queries = [0] if alg == SPMV_DEFAULT else [0, alg]
    return [("spMV_bufferSize", q) for q in queries] + [("spMV", alg if launched is None else launched)]


def spmm(alg: int, launched: int | None = None) -> list[tuple[str, int | None]]:
    queries = [0] if alg == SPMM_DEFAULT else [0, alg]
    return [("spMM_bufferSize", q) for q in queries] + [("spMM", alg if launched is None else launched)]


def test_sparse_products_take_cusparses_deterministic_algorithms_in_the_scope(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    import cupyx.cusparse

    csr = coo(cupy, "float32", *NO_DUPLICATES).tocsr()
    vector, matrix = cupy.ones(3, "float32"), cupy.ones((3, 2), "float32")
    products = {
        "csr @ vector": (lambda: csr @ vector, spmv(SPMV_CSR_ALG2)),
        "csr @ matrix": (lambda: csr @ matrix, spmm(SPMM_CSR_ALG3)),
        "csr.dot(vector)": (lambda: csr.dot(vector), spmv(SPMV_CSR_ALG2)),
        "coo @ vector": (lambda: coo(cupy, "float32", *NO_DUPLICATES) @ vector, spmv(SPMV_CSR_ALG2)),  # via tocsr
        "spmv(coo)": (lambda: cupyx.cusparse.spmv(csr.tocoo(), vector), spmv(SPMV_COO_ALG2)),
        "spmm(coo)": (lambda: cupyx.cusparse.spmm(csr.tocoo(), matrix), spmm(SPMM_COO_ALG2)),
        "spmv(csc, transa=True)": (lambda: cupyx.cusparse.spmv(csr.tocsc(), vector, transa=True), spmv(SPMV_CSR_ALG2)),
        "csr.sum()": (lambda: csr.sum(), spmv(SPMV_CSR_ALG2)),
        "csr.sum(axis=1)": (lambda: csr.sum(axis=1), spmv(SPMV_CSR_ALG2)),
        "csr.mean()": (lambda: csr.mean(), spmv(SPMV_CSR_ALG2)),
        "csc.sum(axis=0)": (lambda: csr.tocsc().sum(axis=0), spmv(SPMV_CSR_ALG2)),  # csc.T is a CSR matrix
    }
    for name, (launch, inside) in products.items():
        with DETERMINISTIC:
            assert algorithms_reaching_cusparse(launch) == inside, name
        with WARN_ONLY, warnings.catch_warnings():
            warnings.simplefilter("error")  # a deterministic algorithm: nothing to warn about
            assert algorithms_reaching_cusparse(launch) == inside, name
        default = [*inside[:-1], (inside[-1][0], 0)]  # the same queries
        assert algorithms_reaching_cusparse(launch) == default, name  # outside: CuPy's default, as CuPy
        with DETERMINISTIC, ALLOWED:
            assert algorithms_reaching_cusparse(launch) == default, name


def test_products_without_a_deterministic_algorithm_are_refused_naming_the_way_out(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    csr = coo(cupy, "float32", *NO_DUPLICATES).tocsr()
    csc = csr.tocsc()
    refusals = {
        "csc @ vector": lambda: csc @ cupy.ones(3, "float32"),
        "csc.sum()": lambda: csc.sum(),
        "csc.mean()": lambda: csc.mean(),
        "csc.sum(axis=1)": lambda: csc.sum(axis=1),
        "csr.sum(axis=0)": lambda: csr.sum(axis=0),
    }
    for name, launch in refusals.items():
        with DETERMINISTIC, refused("cupyx.cusparse.spmv with a transposed matrix") as raised:
            launch()
        # the way out for the operand held: a CSC matrix's CSR, or a transposed CSR's transpose as CSR
        assert "for a csc_matrix C, C.tocsr()" in str(raised.value), name
        assert "B = A.T.tocsr() (then B @ x, (B @ x.T).T, B.sum(axis=1).T)" in str(raised.value), name
        assert "csr_matrix.sum(axis=0)" in str(raised.value) and "csc_matrix.sum()" in str(raised.value)
        with WARN_ONLY, pytest.warns(backends.NondeterministicAlgorithmWarning, match="spmv with a transposed"):
            ran = algorithms_reaching_cusparse(launch)
        assert ran == spmv(SPMV_DEFAULT), name  # warned, and run as CuPy asked
    check_refused(lambda: csc @ cupy.ones((3, 2), "float32"), "cupyx.cusparse.spmm with a transposed matrix",
                  sparse_calls(cupy, "spMM"))  # fmt: skip


def test_a_sparse_format_without_a_deterministic_algorithm_is_refused(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    import cupyx.cusparse
    from cupy_backends.cuda.libs import cusparse

    csc = coo(cupy, "float32", *NO_DUPLICATES).tocsc()
    handle = cupy.cuda.device.get_cusparse_handle()
    desc = cupyx.cusparse.SpMatDescriptor.create(csc).desc  # a CSC descriptor: CuPy never makes one for SpMV
    x = cupyx.cusparse.DnVecDescriptor.create(cupy.ones(3, "float32")).desc
    with DETERMINISTIC, refused("cupyx.cusparse.spmv") as raised:
        cusparse.spMV(handle, 0, 0x10, desc, x, 0x20, x, 0, 0, 0)
    assert "for this sparse format" in str(raised.value)


def test_sparse_products_follow_each_threads_own_context(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    csr = coo(cupy, "float32", *NO_DUPLICATES).tocsr()
    vector = cupy.ones(3, "float32")
    seen: dict[str, list[tuple[str, int | None]]] = {}
    barrier = threading.Barrier(2)

    def product(name: str, scope: Any) -> None:
        with scope:
            barrier.wait()
            seen[name] = algorithms_reaching_thread(lambda: csr @ vector)

    def algorithms_reaching_thread(launch: Callable[[], object]) -> list[tuple[str, int | None]]:
        from cupy_backends.cuda.libs import cusparse

        launch()
        mine = threading.get_ident()
        return [(c.function, c.alg) for c in cusparse.RECORDER.calls if c.thread == mine]

    run_threads(lambda: product("deterministic", DETERMINISTIC), lambda: product("default", backends.flags({})))
    assert seen == {"deterministic": spmv(SPMV_CSR_ALG2), "default": spmv(SPMV_CSR_ALG2, launched=SPMV_DEFAULT)}


# -- ROCm: the legacy CSC path (issue 22, item 7) ----------------------------------------------------------


def test_rocm_legacy_transposed_products_are_refused_and_no_algorithm_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_CUPY_HIP", "1")
    from tests.standin_fixture import use_standin

    with use_standin() as cupy:
        import cupyx.cusparse
        from cupy_backends.cuda.libs import cusparse

        csr = coo(cupy, "float32", *NO_DUPLICATES).tocsr()
        csc = csr.tocsc()
        vector, matrix = cupy.ones(3, "float32"), cupy.ones((3, 2), "float32")
        assert hasattr(cusparse, "scsrmv") and cupy.cuda.runtime.is_hip
        check_refused(lambda: csc @ vector, "cupyx.cusparse.csrmv with a transposed matrix",
                      sparse_calls(cupy, "scsrmv"))  # fmt: skip
        check_refused(lambda: csc @ matrix, "cupyx.cusparse.csrmm2 with a transposed matrix",
                      sparse_calls(cupy, "scsrmm2"))  # fmt: skip
        with DETERMINISTIC:
            assert algorithms_reaching_cusparse(lambda: csr @ vector) == [("scsrmv", None)]  # rocSPARSE: deterministic
            assert algorithms_reaching_cusparse(lambda: csr @ matrix) == [("scsrmm2", None)]
            # the generic API (the linalg solvers call it directly): hipSPARSE's algorithms as CuPy asks
            assert algorithms_reaching_cusparse(lambda: cupyx.cusparse.spmv(csr, vector)) == spmv(SPMV_DEFAULT)
            with refused("cupyx.cusparse.spmv with a transposed matrix"):
                cupyx.cusparse.spmv(csr, vector, transa=True)


# -- CSR/CSC minor-axis fancy indexing (issue 22, item 2) --------------------------------------------------


def test_minor_axis_fancy_indexing_takes_cupys_sorted_path_in_the_scope(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    from cupyx.scipy.sparse import csr_matrix

    data = cupy.array([1.0, 2.0, 3.0, 4.0], "float32")
    csr = csr_matrix((data, cupy.array([0, 2, 1, 2], "int32"), cupy.array([0, 2, 4], "int32")), shape=(2, 3))
    idx = cupy.array([2, 0, 2], "int32")
    atomic, sorted_path = kernels(cupy, "fill_B"), kernels(cupy, "minor_index_fancy_sorted")
    for scope in (DETERMINISTIC, WARN_ONLY):
        for matrix, key in ((csr, (slice(None), idx)), (csr.tocsc(), (idx, slice(None)))):
            before = atomic(), sorted_path()
            with scope, warnings.catch_warnings():
                warnings.simplefilter("error")  # a deterministic path: nothing to warn about
                picked = matrix[key]
            assert (atomic(), sorted_path()) == (before[0], before[1] + 1), (scope, matrix.format)
            assert picked.has_sorted_indices is True and picked.has_canonical_format is True  # (computed)
    with DETERMINISTIC:
        picked = csr[:, idx]
    # row 0 holds columns 0 and 2 (1.0, 2.0); row 1 columns 1 and 2 (3.0, 4.0); idx picks 2, 0, 2
    assert (picked.indptr.values, picked.indices.values, picked.data.values) == (
        [0, 3, 5], [0, 1, 2, 0, 2], [2.0, 1.0, 2.0, 4.0, 4.0]
    )
    for scope in (backends.flags({}), ALLOWED):  # outside, and nested: CuPy's histogram path, as CuPy
        before = atomic(), sorted_path()
        with DETERMINISTIC if scope is ALLOWED else backends.flags({}), scope:
            picked = csr[:, idx]
        assert (atomic(), sorted_path()) == (before[0] + 1, before[1])
        assert getattr(picked, "_has_canonical_format", None) is None
        assert picked.indices.values == [1, 0, 2, 0, 2]  # the stored order: not sorted


def test_minor_axis_indexing_is_refused_where_the_sorted_path_cannot_be_reached(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    from cupyx.scipy.sparse import _compressed, csr_matrix

    from backends.sync import sparse

    cls = _compressed._compressed_sparse_matrix
    sorted_path = cls.__dict__["_minor_index_fancy_sorted"]
    try:
        del cls._minor_index_fancy_sorted  # a CuPy with the atomic kernel and no sorted path
        sparse.install(_compressed)
        csr = csr_matrix(
            (cupy.array([1.0, 2.0]), cupy.array([0, 1], "int32"), cupy.array([0, 1, 2], "int32")), shape=(2, 2)
        )
        check_refused(lambda: csr[:, cupy.array([1, 0], "int32")], "cupyx.scipy.sparse.csr_matrix[:, index_array]",
                      kernels(cupy, "fill_B"))  # fmt: skip
    finally:
        cls._minor_index_fancy_sorted = sorted_path
        sparse.install(_compressed)


def test_cupy13_minor_axis_indexing_is_left_alone(standin_cupy: ModuleType) -> None:
    from cupyx.scipy.sparse import _compressed

    from backends.sync import sparse
    from backends.sync.wrapping import original

    cls = _compressed._compressed_sparse_matrix
    saved = {name: cls.__dict__[name] for name in ("_fill_B", "_minor_index_fancy")}
    try:
        del cls._fill_B  # CuPy 13: no atomic write pointer (it indexes through a transpose)
        cls._minor_index_fancy = original(saved["_minor_index_fancy"])
        sparse.install(_compressed)
        assert not hasattr(cls.__dict__["_minor_index_fancy"], "__backends_wrapped__")
    finally:
        for name, value in saved.items():
            setattr(cls, name, value)
