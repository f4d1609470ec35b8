"""The sparse targets against what CuPy 14.2's sources do (issue 31, item 2), on the stand-in
CuPy, which models the 14.2 code read: the sorted minor-axis path's canonical flag and the
index shapes it takes; cuSPARSE's workspace sizes, its one-row / one-column SpMV, SpMM
CSR_ALG3's refusals, and the way out of a refused dense @ sparse product."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

import backends

DETERMINISTIC = backends.algorithms.flags(deterministic=True)
WARN_ONLY = backends.algorithms.flags(deterministic=True, warn_only=True)
ALLOWED = backends.algorithms.flags(deterministic=False)


def refused(operation: str) -> Any:
    """``pytest.raises`` for the error of a refused ``operation`` (a fragment of its name)."""
    return pytest.raises(RuntimeError, match=rf"^{re.escape(operation)}.* does not have a deterministic implementation")


def kernels(cupy: ModuleType, name: str) -> Callable[[], int]:
    return lambda: sum(1 for launch in cupy._core._kernel.KERNELS.calls if launch.name == name)


def structure(matrix: Any) -> tuple[list[int], list[int], list[Any]]:
    """``(indptr, indices, data)`` as lists (an empty array made without values gives ``[]``)."""
    return tuple(array.values if array.size else [] for array in (matrix.indptr, matrix.indices, matrix.data))


# -- minor-axis fancy indexing: CuPy 14.2's sorted path in the scope ---------------------------------


def with_duplicates(cupy: ModuleType) -> Any:
    """A 2x3 float CSR matrix storing (0, 2) twice (1.0 and 2.0): not canonical, and not known to be."""
    from cupyx.scipy.sparse import csr_matrix

    data = cupy.array([1.0, 2.0, 3.0, 4.0], "float32")
    indices, indptr = cupy.array([2, 2, 0, 1], "int32"), cupy.array([0, 2, 4], "int32")
    return csr_matrix((data, indices, indptr), shape=(2, 3))


def test_a_picked_matrix_is_not_flagged_canonical_when_the_duplicates_stay(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    matrix = with_duplicates(cupy)
    with DETERMINISTIC:
        picked = matrix[:, cupy.array([2, 0], "int32")]
    assert structure(picked) == ([0, 2, 3], [0, 0, 1], [1.0, 2.0, 3.0])
    assert picked.has_sorted_indices is True  # true, and kept
    assert picked.has_canonical_format is False  # (0, 0) is stored twice: computed when asked

    # so its duplicates are found: A[i, j] is refused in the scope (float atomics over them) ...
    with DETERMINISTIC, refused("cupyx.scipy.sparse.csr_matrix[i, j]"):
        picked[0, 0]
    # ... and sum_duplicates() sums them (it did nothing while the matrix claimed to be canonical)
    picked.sum_duplicates()
    assert (picked.indptr.values, picked.indices.values) == ([0, 1, 2], [0, 1])
    assert picked.has_canonical_format is True


def test_a_picked_matrix_keeps_the_canonical_flag_of_a_canonical_input(standin_cupy: ModuleType) -> None:
    from cupyx.scipy.sparse import csr_matrix

    cupy = standin_cupy
    data, indices, indptr = cupy.array([1.0, 2.0, 3.0]), cupy.array([0, 2, 1], "int32"), cupy.array([0, 2, 3], "int32")
    known = csr_matrix((data, indices, indptr), shape=(2, 3))
    assert known.has_canonical_format is True  # computed, and cached
    unknown = csr_matrix((data, indices, indptr), shape=(2, 3))  # canonical, but not known to be
    check = kernels(cupy, "cupyx_scipy_sparse_has_canonical_format")
    idx = cupy.array([1, 2, 1], "int32")
    with DETERMINISTIC:
        picked_known, picked_unknown = known[:, idx], unknown[:, idx]
        before = check()
        assert picked_known.has_canonical_format is True and check() == before  # taken from the input
        assert picked_unknown.has_canonical_format is True and check() == before + 1  # computed
    assert structure(picked_known) == structure(picked_unknown) == ([0, 1, 3], [1, 0, 2], [2.0, 3.0, 3.0])


def columns() -> Any:
    """A 4x3 matrix with column 0 = (1, 0, 4, 0) and column 2 = (2, 0, 5, 0), as a CSC matrix."""
    return (
        [1.0, 4.0, 3.0, 6.0, 2.0, 5.0],  # data, column by column
        [0, 2, 1, 3, 0, 2],  # their rows
        [0, 2, 4, 6],
    )


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([[2], [0], [2]], ([0, 3], [0, 1, 2], [4.0, 1.0, 4.0])),  # (3, 1): SciPy's own result too
        ([[2, 0], [1, 2]], ([0, 3], [0, 1, 3], [4.0, 1.0, 4.0])),  # (2, 2): read flat, as CuPy's kernels do
        ([[3], [1]], ([0, 0], [], [])),  # nothing stored there
    ],
)
def test_a_2d_row_index_with_an_int_column_works_in_the_scope(
    standin_cupy: ModuleType, rows: list[list[int]], expected: Any
) -> None:
    """``csc[idx2d, j]`` reaches ``_minor_index_fancy`` with the 2-D index (CuPy's
    ``_getitem_2d`` sends it to ``_get_arrayXint``): the scope flattens it for the sorted path
    (whose ``searchsorted`` refuses a 2-D index), with CuPy's result shape."""
    from cupyx.scipy.sparse import csc_matrix

    cupy = standin_cupy
    data, indices, indptr = columns()
    csc = csc_matrix((cupy.array(data), cupy.array(indices, "int32"), cupy.array(indptr, "int32")), shape=(4, 3))
    idx = cupy.array(rows, "int32")
    sorted_path = kernels(cupy, "minor_index_fancy_sorted")
    for scope in (DETERMINISTIC, WARN_ONLY):
        before = sorted_path()
        with scope, warnings.catch_warnings():
            warnings.simplefilter("error")
            picked = csc[idx, 0]
        assert picked.shape == (idx.size, 1) and picked.format == "csc"
        assert structure(picked) == expected
        assert sorted_path() == before + 1
        with scope:
            flat = csc[idx.ravel(), 0]  # the same rows as a 1-D index
        assert structure(flat) == expected and flat.shape == picked.shape
    negative = cupy.array([[-2], [-4]], "int32")  # taken modulo the length, as CuPy's _asindices
    with DETERMINISTIC:
        assert structure(csc[negative, 2]) == ([0, 2], [0, 1], [5.0, 2.0])


def test_outside_the_scope_a_2d_row_index_gets_cupys_own_result(standin_cupy: ModuleType) -> None:
    """CuPy 14.2's own path (modelled from ``_compressed.py``: ``col_order = cupy.argsort(idx)``
    sorts each row of a 2-D ``idx``, and ``fill_B`` reads it as flat) puts every entry of a
    (k, 1) index at row 0: the scope's result is SciPy's, this one is CuPy's, as without backends."""
    from cupyx.scipy.sparse import csc_matrix

    cupy = standin_cupy
    data, indices, indptr = columns()
    csc = csc_matrix((cupy.array(data), cupy.array(indices, "int32"), cupy.array(indptr, "int32")), shape=(4, 3))
    picked = csc[cupy.array([[2], [0], [2]], "int32"), 0]
    assert picked.shape == (3, 1)
    assert picked.indices.values == [0, 0, 0]


def test_the_sorted_path_itself_refuses_a_2d_index(standin_cupy: ModuleType) -> None:
    """What the scope used to run into: the stand-in's model of CuPy's sorted path raises as
    ``cupy.searchsorted`` does."""
    from cupyx.scipy.sparse import csc_matrix
    from cupyx.scipy.sparse._compressed import _compressed_sparse_matrix

    cupy = standin_cupy
    data, indices, indptr = columns()
    csc = csc_matrix((cupy.array(data), cupy.array(indices, "int32"), cupy.array(indptr, "int32")), shape=(4, 3))
    sorted_path = _compressed_sparse_matrix._minor_index_fancy_sorted
    with pytest.raises(ValueError, match=r"^object too deep for desired array$"):
        sorted_path(csc, cupy.array([[2], [0]], "int32"), 3, 2, (2, 3))


def test_a_row_with_an_index_array_takes_the_sorted_path_too(standin_cupy: ModuleType) -> None:
    """``csr[i, idx]`` (CSR ``_get_intXarray``: a one-row major slice, then ``_minor_index_fancy``)."""
    cupy = standin_cupy
    matrix = with_duplicates(cupy)
    atomic, sorted_path = kernels(cupy, "fill_B"), kernels(cupy, "minor_index_fancy_sorted")
    with DETERMINISTIC:
        picked = matrix[1, cupy.array([1, 0, 1], "int32")]
    assert (atomic(), sorted_path()) == (0, 1)
    assert picked.shape == (1, 3) and structure(picked) == ([0, 3], [0, 1, 2], [4.0, 3.0, 4.0])
    with DETERMINISTIC:
        row = matrix[0, cupy.array([2], "int32")]  # the duplicate (0, 2): stays, not flagged canonical
    assert structure(row) == ([0, 2], [0, 0], [1.0, 2.0]) and row.has_canonical_format is False


# -- cuSPARSE's workspace: one size query fits whichever algorithm the launch takes -----------------

SPMV_DEFAULT, SPMV_CSR_ALG2, SPMV_COO_ALG2 = 0, 3, 4  # cusparseSpMVAlg_t (cusparse.h)
SPMM_DEFAULT, SPMM_CSR_ALG3, SPMM_COO_ALG2 = 0, 12, 2  # cusparseSpMMAlg_t
CUDA_R_32F = 0


def canonical(cupy: ModuleType, dtype: str = "float32") -> Any:
    """A canonical 3x3 CSR matrix: (0, 0) 1, (0, 2) 2, (1, 1) 3, (2, 0) 4, (2, 2) 5."""
    from cupyx.scipy.sparse import csr_matrix

    data = cupy.array([1.0, 2.0, 3.0, 4.0, 5.0], dtype)
    return csr_matrix((data, cupy.array([0, 2, 1, 0, 2], "int32"), cupy.array([0, 2, 3, 5], "int32")), shape=(3, 3))


def calls(launch: Callable[[], object]) -> list[Any]:
    """The cuSPARSE queries and launches ``launch()`` makes (the stand-in's ``SparseCall``s)."""
    return run(launch)[1]


def run(launch: Callable[[], object]) -> tuple[Any, list[Any]]:
    """What ``launch()`` returns, and the cuSPARSE queries and launches it makes."""
    from cupy_backends.cuda.libs import cusparse

    before = len(cusparse.RECORDER.calls)
    result = launch()
    return result, list(cusparse.RECORDER.calls[before:])


def fits(call: Any) -> bool:
    """Whether a launch's buffer is as large as its algorithm needs (the stand-in's sizes)."""
    from cupy_backends.cuda.libs import cusparse

    return call.buffer_size is not None and call.buffer_size >= cusparse.BUFFER_SIZES[call.function, call.alg]


def test_the_stand_in_sizes_differ_per_algorithm(standin_cupy: ModuleType) -> None:
    """What the tests below rely on: a buffer sized for one algorithm can be too small for the
    other, both ways (the default SpMV needs more than CSR_ALG2, less than COO_ALG2)."""
    from cupy_backends.cuda.libs import cusparse

    sizes = cusparse.BUFFER_SIZES
    assert sizes["spMV", SPMV_CSR_ALG2] < sizes["spMV", SPMV_DEFAULT] < sizes["spMV", SPMV_COO_ALG2]
    assert sizes["spMM", SPMM_COO_ALG2] < sizes["spMM", SPMM_DEFAULT] < sizes["spMM", SPMM_CSR_ALG3]


@pytest.mark.parametrize("scope", ["deterministic", "outside"])
def test_cupys_products_launch_on_the_buffer_cupy_sized(standin_cupy: ModuleType, scope: str) -> None:
    import cupyx.cusparse

    cupy = standin_cupy
    csr = canonical(cupy)
    vector, matrix = cupy.ones(3, "float32"), cupy.ones((3, 2), "float32")
    products: dict[str, tuple[Callable[[], object], int]] = {
        "csr @ vector": (lambda: csr @ vector, SPMV_CSR_ALG2),
        "csr @ matrix": (lambda: csr @ matrix, SPMM_CSR_ALG3),
        "spmv(coo)": (lambda: cupyx.cusparse.spmv(csr.tocoo(), vector), SPMV_COO_ALG2),
        "spmm(coo)": (lambda: cupyx.cusparse.spmm(csr.tocoo(), matrix), SPMM_COO_ALG2),
    }
    from cupy_backends.cuda.libs import cusparse

    for name, (launch, deterministic) in products.items():
        with DETERMINISTIC if scope == "deterministic" else backends.flags({}):
            made = calls(launch)
        *queries, launched = made
        routine = launched.function
        assert [(q.function, q.alg) for q in queries] == [(f"{routine}_bufferSize", 0), (f"{routine}_bufferSize",
                                                                                         deterministic)], name
        assert launched.alg == (deterministic if scope == "deterministic" else 0), name
        # one buffer, CuPy's own: the larger of the two sizes, whichever algorithm runs
        sizes = cusparse.BUFFER_SIZES
        assert launched.buffer_size == max(sizes[routine, 0], sizes[routine, deterministic]), name
        assert fits(launched), name


@pytest.mark.parametrize(("made_in", "run_in"), [("deterministic", "deterministic"), ("outside", "deterministic"),
                                                 ("deterministic", "outside"), ("outside", "outside")])  # fmt: skip
def test_a_solver_sizes_one_buffer_and_launches_every_iteration_on_it(
    standin_cupy: ModuleType, made_in: str, run_in: str
) -> None:
    """CuPy's CG / GMRES / CGS (``_make_fast_matvec``): one size query, then a launch per
    iteration with new vector descriptors and that buffer; no query and no workspace of its
    own per launch, and the buffer fits the algorithm taken, wherever the query was made."""
    from cupyx.scipy.sparse.linalg import _iterative

    cupy = standin_cupy
    scopes = {"deterministic": DETERMINISTIC, "outside": backends.flags({})}
    with scopes[made_in]:
        sizing = calls(lambda: _iterative._make_fast_matvec(canonical(cupy)))
    assert [(c.function, c.alg) for c in sizing] == [("spMV_bufferSize", 0), ("spMV_bufferSize", SPMV_CSR_ALG2)]
    with scopes[made_in]:
        matvec = _iterative._make_fast_matvec(canonical(cupy))
    with scopes[run_in]:
        launches = calls(lambda: [matvec(cupy.ones(3, "float32")) for _ in range(5)])
    assert [c.function for c in launches] == ["spMV"] * 5  # no second query
    assert {c.alg for c in launches} == {SPMV_CSR_ALG2 if run_in == "deterministic" else SPMV_DEFAULT}
    assert len({c.buffer for c in launches}) == 1  # the solver's buffer every time: no workspace of ours
    assert all(fits(c) for c in launches)


def test_a_lanczos_run_launches_on_its_one_buffer_in_every_context(standin_cupy: ModuleType) -> None:
    """``eigsh``'s Lanczos (``_lanczos_fast``'s ``aux``): one query, then many launches with the
    same descriptors; here the context changes between launches (a thread's tasks)."""
    import cupyx.cusparse
    from cupy_backends.cuda.libs import cusparse

    cupy = standin_cupy
    handle = cupy.cuda.device.get_cusparse_handle()
    for matrix, deterministic in ((canonical(cupy), SPMV_CSR_ALG2), (canonical(cupy).tocoo(), SPMV_COO_ALG2)):
        desc = cupyx.cusparse.SpMatDescriptor.create(matrix).desc
        v = cupyx.cusparse.DnVecDescriptor.create(cupy.ones(3, "float32")).desc
        u = cupyx.cusparse.DnVecDescriptor.create(cupy.ones(3, "float32")).desc
        args = (handle, 0, 0x10, desc, v, 0x20, u, CUDA_R_32F)
        buffer = cupy.empty(cusparse.spMV_bufferSize(*args, 0), cupy.int8)
        launches = []
        for scope in (DETERMINISTIC, backends.flags({}), DETERMINISTIC, WARN_ONLY, ALLOWED):
            with scope:
                launches += calls(lambda: cusparse.spMV(*args, 0, buffer.data.ptr))  # noqa: B023
        assert [c.alg for c in launches] == [deterministic, 0, deterministic, deterministic, 0]
        assert {c.buffer for c in launches} == {buffer.data.ptr} and all(fits(c) for c in launches)


@pytest.mark.parametrize("format", ["csr", "coo"])
def test_no_record_of_an_earlier_query_sizes_a_launch(standin_cupy: ModuleType, format: str) -> None:
    """A query made in the scope and never launched, then a query outside it with the same
    arguments (handles and descriptors are addresses, which come back), then a launch in the
    scope: the buffer fits the deterministic algorithm (a record of the first query, matched
    by its arguments, handed CSR_ALG2 / COO_ALG2 a buffer sized for the default)."""
    import cupyx.cusparse
    from cupy_backends.cuda.libs import cusparse

    cupy = standin_cupy
    matrix = canonical(cupy) if format == "csr" else canonical(cupy).tocoo()
    handle = cupy.cuda.device.get_cusparse_handle()
    desc = cupyx.cusparse.SpMatDescriptor.create(matrix).desc
    x = cupyx.cusparse.DnVecDescriptor.create(cupy.ones(3, "float32")).desc
    args = (handle, 0, 0x10, desc, x, 0x20, x, CUDA_R_32F)
    with DETERMINISTIC:
        cusparse.spMV_bufferSize(*args, 0)  # (its launch never comes: an error in between)
    buffer = cupy.empty(cusparse.spMV_bufferSize(*args, 0), cupy.int8)  # outside the scope
    with DETERMINISTIC:
        (launched,) = calls(lambda: cusparse.spMV(*args, 0, buffer.data.ptr))
    assert launched.alg == (SPMV_CSR_ALG2 if format == "csr" else SPMV_COO_ALG2)
    assert launched.buffer == buffer.data.ptr and fits(launched)


def test_a_buffer_of_cupys_own_size_is_still_launched_as_asked_outside_the_scope(standin_cupy: ModuleType) -> None:
    """A buffer sized by the unwrapped query (for the default only) is fine where the launch
    takes the default: outside the scope nothing is changed, not even the buffer."""
    import cupyx.cusparse
    from cupy_backends.cuda.libs import cusparse

    from backends.sync.wrapping import original

    cupy = standin_cupy
    handle = cupy.cuda.device.get_cusparse_handle()
    desc = cupyx.cusparse.SpMatDescriptor.create(canonical(cupy)).desc
    x = cupyx.cusparse.DnVecDescriptor.create(cupy.ones(3, "float32")).desc
    args = (handle, 0, 0x10, desc, x, 0x20, x, CUDA_R_32F)
    buffer = cupy.empty(original(cusparse.spMV_bufferSize)(*args, 0), cupy.int8)
    (launched,) = calls(lambda: cusparse.spMV(*args, 0, buffer.data.ptr))
    assert (launched.alg, launched.buffer) == (0, buffer.data.ptr) and fits(launched)


# -- SPMV_CSR_ALG2, reported wrong for one row or one column (and beta=1) ---------------------------


def one_row(cupy: ModuleType, dtype: str = "float32") -> Any:
    """The 1x3 CSR matrix [1, 0, 2]."""
    from cupyx.scipy.sparse import csr_matrix

    return csr_matrix((cupy.array([1.0, 2.0], dtype), cupy.array([0, 2], "int32"), cupy.array([0, 2], "int32")),
                      shape=(1, 3))  # fmt: skip


def one_column(cupy: ModuleType, dtype: str = "float32") -> Any:
    """The 3x1 CSR matrix [1, 0, 4]^T."""
    from cupyx.scipy.sparse import csr_matrix

    data, indices, indptr = cupy.array([1.0, 4.0], dtype), cupy.array([0, 0], "int32"), cupy.array([0, 1, 1, 2])
    return csr_matrix((data, indices, indptr.astype("int32")), shape=(3, 1))


def spmv_launches(made: list[Any]) -> list[Any]:
    return [c for c in made if c.function.startswith("spMV")]


def test_one_row_and_one_column_products_are_computed_without_alg2_in_the_scope(standin_cupy: ModuleType) -> None:
    import cupyx.cusparse

    cupy = standin_cupy
    row, column = one_row(cupy), one_column(cupy)
    x3, x1 = cupy.array([3.0, 4.0, 5.0], "float32"), cupy.array([2.0], "float32")
    products: dict[str, tuple[Callable[[], Any], list[float]]] = {
        "row @ x": (lambda: row @ x3, [13.0]),  # 1*3 + 2*5
        "row.dot(x)": (lambda: row.dot(x3), [13.0]),
        "row.sum(axis=1)": (lambda: row.sum(axis=1), [3.0]),
        "column @ x": (lambda: column @ x1, [2.0, 0.0, 8.0]),
        "column.sum(axis=1)": (lambda: column.sum(axis=1), [1.0, 0.0, 4.0]),
        "spmv(row.T, transa=True)": (lambda: cupyx.cusparse.spmv(row.T, x3, transa=True), [13.0]),  # CSC: row
        "spmv(row, alpha)": (lambda: cupyx.cusparse.spmv(row, x3, alpha=-2.0), [-26.0]),
        "1x1 @ x": (lambda: row[:, cupy.array([2], "int32")] @ x1, [4.0]),
    }
    for name, (launch, expected) in products.items():
        for scope in (DETERMINISTIC, WARN_ONLY):
            with scope, warnings.catch_warnings():
                warnings.simplefilter("error")  # deterministic: nothing to warn about
                result, made = run(launch)
            assert spmv_launches(made) == [], name  # no cuSPARSE product
            assert result.ravel().tolist() == expected, name
        outside = calls(launch)  # CuPy's own cuSPARSE product, as without backends
        assert [(c.function, c.alg) for c in spmv_launches(outside)][-1] == ("spMV", SPMV_DEFAULT), name
    with DETERMINISTIC:
        assert row.sum().item() == 3.0 and column.sum().item() == 5.0  # sums: products with ones


def test_with_y_and_beta_the_scope_adds_beta_times_y_itself(standin_cupy: ModuleType) -> None:
    """``spmv(a, x, y, alpha, beta)``: cuSPARSE is asked for ``alpha * a @ x`` only (beta 0: the
    reported ``beta=1`` accumulate bug), the rest is added here, into ``y`` itself as CuPy does."""
    import cupyx.cusparse

    cupy = standin_cupy
    row, column, square = one_row(cupy), one_column(cupy), canonical(cupy)
    x3, x1 = cupy.array([3.0, 4.0, 5.0], "float32"), cupy.array([2.0], "float32")
    with DETERMINISTIC:
        y = cupy.array([10.0], "float32")
        assert cupyx.cusparse.spmv(row, x3, y, alpha=2.0, beta=3.0) is y and y.tolist() == [56.0]
        y = cupy.array([1.0, 1.0, 1.0], "float32")
        assert cupyx.cusparse.spmv(column, x1, y, beta=-1.0) is y and y.tolist() == [1.0, -1.0, 7.0]
        y = cupy.array([float("nan")], "float32")  # beta 0: y is not read (cuSPARSE's rule too)
        assert cupyx.cusparse.spmv(row, x3, y).tolist() == [13.0]
        y = cupy.array([10.0], "float64")  # the widest type: computed in it, into y
        assert cupyx.cusparse.spmv(row, x3, y, beta=1.0) is y and y.dtype == "float64" and y.tolist() == [23.0]
        y = cupy.array([10], "int32")  # a y of another type: CuPy's result is a new array of the common type
        out = cupyx.cusparse.spmv(row, x3, y, beta=1.0)
        assert out is not y and out.dtype == "float64" and out.tolist() == [23.0] and y.tolist() == [10]

        y = cupy.ones(3, "float32")
        result, made = run(lambda: cupyx.cusparse.spmv(square, x3, y, alpha=2.0, beta=1.0))
    assert result is y
    (launched,) = [c for c in made if c.function == "spMV"]
    assert (launched.alg, launched.beta) == (SPMV_CSR_ALG2, 0.0)  # alpha * A @ x alone
    made = calls(lambda: cupyx.cusparse.spmv(square, x3, cupy.ones(3, "float32"), beta=1.0))  # outside: as CuPy
    assert [(c.alg, c.beta) for c in made if c.function == "spMV"] == [(SPMV_DEFAULT, 1.0)]
    with DETERMINISTIC:
        made = calls(lambda: cupyx.cusparse.spmv(square, x3, cupy.ones(3, "float32"), beta=0.0))
    assert [(c.alg, c.beta) for c in made if c.function == "spMV"] == [(SPMV_CSR_ALG2, 0.0)]  # CuPy's own call


def test_the_scope_keeps_cupys_errors_for_one_row_products(standin_cupy: ModuleType) -> None:
    import cupyx.cusparse
    from cupyx.scipy.sparse import csr_matrix

    cupy = standin_cupy
    row = one_row(cupy)
    unsorted = csr_matrix((cupy.array([2.0, 1.0]), cupy.array([2, 0], "int32"), cupy.array([0, 2], "int32")),
                          shape=(1, 3))  # fmt: skip
    for scope in (DETERMINISTIC, backends.flags({})):
        with scope, pytest.raises(ValueError, match=r"^dimension mismatch$"):
            cupyx.cusparse.spmv(row, cupy.ones(2, "float32"))
        with scope, pytest.raises(ValueError, match=r"^dimension mismatch$"):
            cupyx.cusparse.spmv(row, cupy.ones(3, "float32"), cupy.ones(2, "float32"))
        with scope, pytest.raises(ValueError, match=r"^expected canonical format$"):
            cupyx.cusparse.spmv(unsorted, cupy.ones(3, "float32"))
    with DETERMINISTIC:
        assert (unsorted @ cupy.array([3.0, 4.0, 5.0])).tolist() == [13.0]  # @ sums duplicates and sorts first


def test_a_one_row_descriptor_reaching_spmv_directly_is_refused(standin_cupy: ModuleType) -> None:
    """``cupyx.scipy.sparse.linalg`` calls the bindings itself; a 1x1 system there would hand
    CSR_ALG2 a one-row matrix: refused in the scope, CuPy's default algorithm with ``warn_only``."""
    import cupyx.cusparse
    from cupyx.scipy.sparse.linalg import _iterative

    cupy = standin_cupy
    one_by_one = one_row(cupy)[:, cupy.array([0], "int32")]
    with DETERMINISTIC:
        matvec = _iterative._make_fast_matvec(one_by_one)
    message = "cupy_backends.cuda.libs.cusparse.spMV of a CSR matrix with one row or one column"
    with DETERMINISTIC, refused(message) as raised:
        matvec(cupy.ones(1, "float32"))
    assert "reported to give wrong results" in str(raised.value)
    assert "cupyx.cusparse.spmv (and so csr_matrix @ vector) computes such a product" in str(raised.value)
    with WARN_ONLY, pytest.warns(backends.NondeterministicAlgorithmWarning, match=re.escape(message)):
        made = calls(lambda: matvec(cupy.ones(1, "float32")))
    assert [(c.function, c.alg) for c in made] == [("spMV", SPMV_DEFAULT)] and fits(made[0])
    column = cupyx.cusparse.SpMatDescriptor.create(one_column(cupy)).desc  # one column: the same
    from cupy_backends.cuda.libs import cusparse

    x = cupyx.cusparse.DnVecDescriptor.create(cupy.ones(1, "float32")).desc
    with DETERMINISTIC, refused(message):
        cusparse.spMV(cupy.cuda.device.get_cusparse_handle(), 0, 0x10, column, x, 0x20, x, CUDA_R_32F, 0, 0)


# -- SPMM_CSR_ALG3's refusals ---------------------------------------------------------------------------


def test_an_alg3_refusal_is_reported_as_a_refused_deterministic_product(
    standin_cupy: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cuSPARSE answers CUSPARSE_STATUS_NOT_SUPPORTED for operands SPMM_CSR_ALG3 does not cover
    (modelled: float32 here): in the scope that is a refusal naming them and the way out, not a
    bare CuSparseError; outside, and with ``warn_only``, CuPy's own algorithm runs."""
    from cupy_backends.cuda.libs import cusparse

    cupy = standin_cupy
    monkeypatch.setattr(cusparse, "_ALG3_REFUSED_TYPES", {*cusparse._ALG3_REFUSED_TYPES, CUDA_R_32F})
    csr, matrix = canonical(cupy), cupy.ones((3, 2), "float32")
    operands = "A: 3x3 CSR of CUDA_R_32F, opA=N, opB=N, compute type CUDA_R_32F"
    operation = f"cupyx.cusparse.spmm of these operands ({operands})"
    with DETERMINISTIC, refused(operation) as raised:
        made = calls(lambda: csr @ matrix)
    message = str(raised.value)
    assert "cuSPARSE's deterministic CUSPARSE_SPMM_CSR_ALG3 does not support them: " in message
    assert "CUSPARSE_STATUS_NOT_SUPPORTED: operation not supported" in message
    assert "Multiply one dense column at a time instead (csr_matrix @ X[:, k]" in message
    assert isinstance(raised.value.__cause__, cusparse.CuSparseError) and raised.value.__cause__.status == 10
    assert not any(c.function == "spMM" for c in cusparse.RECORDER.calls)  # nothing launched

    with WARN_ONLY, pytest.warns(backends.NondeterministicAlgorithmWarning, match=re.escape(operation)):
        made = calls(lambda: csr @ matrix)
    assert [(c.function, c.alg) for c in made] == [("spMM_bufferSize", 0), ("spMM", SPMM_DEFAULT)]
    assert fits(made[-1])
    made = calls(lambda: csr @ matrix)  # outside the scope: as CuPy, on a buffer for its algorithm
    assert [(c.function, c.alg) for c in made] == [("spMM_bufferSize", 0), ("spMM", SPMM_DEFAULT)]
    assert fits(made[-1])
    with DETERMINISTIC:  # operands it covers still take it
        made = calls(lambda: canonical(cupy, "float64") @ cupy.ones((3, 2), "float64"))
    assert made[-1].alg == SPMM_CSR_ALG3 and fits(made[-1])


def test_an_alg3_refusal_of_a_conjugated_operand_names_it(standin_cupy: ModuleType) -> None:
    import cupyx.cusparse
    from cupy_backends.cuda.libs import cusparse

    cupy = standin_cupy
    handle = cupy.cuda.device.get_cusparse_handle()
    a = cupyx.cusparse.SpMatDescriptor.create(canonical(cupy, "complex64")).desc
    b = cupyx.cusparse.DnMatDescriptor.create(cupy.ones((3, 2), "complex64")).desc
    args = (handle, 0, 2, 0x10, a, b, 0x20, b, 4)  # opB = CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE
    buffer = cupy.empty(cusparse.spMM_bufferSize(*args, 0), cupy.int8)
    with DETERMINISTIC, refused("cupyx.cusparse.spmm of these operands (A: 3x3 CSR of CUDA_C_32F, opA=N, opB=C"):
        cusparse.spMM(*args, 0, buffer.data.ptr)
    cusparse.spMM(*args, 0, buffer.data.ptr)  # outside: as asked
    with pytest.raises(cusparse.CuSparseError, match="NOT_SUPPORTED"):
        cusparse.spMM(*args, SPMM_CSR_ALG3, buffer.data.ptr)  # asked for by the caller: cuSPARSE's own error


# -- dense @ sparse: the way out of the refusal ------------------------------------------------------


def test_dense_at_sparse_is_refused_with_a_way_out_that_works(standin_cupy: ModuleType) -> None:
    """``x @ csr`` is ``(csr.T @ x.T).T``, a transposed product: refused in the scope, with a way
    out that applies to a CSR operand (its transpose as CSR), which then takes the deterministic
    algorithm."""
    cupy = standin_cupy
    csr = canonical(cupy)
    vector, matrix = cupy.ones(3, "float32"), cupy.ones((2, 3), "float32")
    for launch, routine in ((lambda: vector @ csr, "spmv"), (lambda: matrix @ csr, "spmm"),
                            (lambda: matrix * csr, "spmm")):  # fmt: skip
        with DETERMINISTIC, refused(f"cupyx.cusparse.{routine} with a transposed matrix") as raised:
            launch()
        assert ("vector @ csr_matrix" if routine == "spmv" else "matrix @ csr_matrix") in str(raised.value)
        assert "B = A.T.tocsr() (then B @ x, (B @ x.T).T, B.sum(axis=1).T)" in str(raised.value)
    transposed = csr.T.tocsr()  # the way out, made once
    with DETERMINISTIC:
        result, made = run(lambda: transposed @ vector)
        assert made[-1].alg == SPMV_CSR_ALG2 and result.shape == (3,)
        result, made = run(lambda: (transposed @ matrix.T).T)
        assert made[-1].alg == SPMM_CSR_ALG3 and result.shape == (2, 3)
    assert (matrix @ csr).shape == (2, 3)  # outside the scope: CuPy's own product


def test_what_cusparse_answers_for_the_deterministic_size_never_fails_cupys_own_call(
    standin_cupy: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside the scope the extra size query must never fail CuPy's own product: whatever
    cuSPARSE answers for the deterministic algorithm, the query answers CuPy's size."""
    from cupy_backends.cuda.libs import cusparse

    cupy = standin_cupy
    for status in (10, 3):  # not supported; invalid value
        def refuse(*args: Any, status: int = status) -> None:
            raise cusparse.CuSparseError(status)

        monkeypatch.setattr(cusparse, "_alg3_operands", refuse)
        made = calls(lambda: canonical(cupy) @ cupy.ones((3, 2), "float32"))
        assert [(c.function, c.alg) for c in made] == [("spMM_bufferSize", 0), ("spMM", 0)] and fits(made[-1])
        with DETERMINISTIC, pytest.raises(RuntimeError if status == 10 else cusparse.CuSparseError) as raised:
            canonical(cupy) @ cupy.ones((3, 2), "float32")
        assert ("does not have a deterministic implementation" in str(raised.value)) is (status == 10)
