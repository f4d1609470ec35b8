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
