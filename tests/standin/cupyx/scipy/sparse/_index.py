"""Stand-in for ``cupyx.scipy.sparse._index`` (``_index.py`` v14.2.0): the scalar-lookup
kernels (lines 28-43), ``_get_csr_submatrix_major_axis`` (46-68) and ``IndexMixin``'s
dispatch of an ``(int, int)`` key to ``_get_intXint`` (356-379, 476-482), of ``(slice,
int array)`` to ``_get_sliceXarray`` and ``(int array, slice)`` to ``_get_arrayXslice``;
other keys are not modelled (``NotImplementedError``), and an index array must be a CuPy
array of integers (CuPy also takes lists and checks bounds)."""

from __future__ import annotations

import operator
from typing import Any

import numpy
from cupy import _core

_int_scalar_types = (int, numpy.integer)

_compress_getitem_kern = _core.ElementwiseKernel(
    "T d, S ind, S minor",
    "raw T answer",
    "if (ind == minor) atomicAdd(&answer[0], d);",
    "cupyx_scipy_sparse_compress_getitem",
)

_compress_getitem_complex_kern = _core.ElementwiseKernel(
    "T real, T imag, S ind, S minor",
    "raw T answer_real, raw T answer_imag",
    """
    if (ind == minor) {
    atomicAdd(&answer_real[0], real);
    atomicAdd(&answer_imag[0], imag);
    }
    """,
    "cupyx_scipy_sparse_compress_getitem_complex",
)


def _get_csr_submatrix_major_axis(Ax: Any, Aj: Any, Ap: Any, start: int, stop: int) -> tuple[Any, Any, Any]:
    """Return a submatrix of the input sparse matrix by slicing major axis."""
    Ap = Ap[start : stop + 1]
    start_offset, stop_offset = int(Ap[0]), int(Ap[-1])  # synchronize!
    Bp = Ap - start_offset
    Bj = Aj[start_offset:stop_offset]
    Bx = Ax[start_offset:stop_offset]
    return Bx, Bj, Bp


class IndexMixin:
    """The common dispatching of indexing (an ``(int, int)`` key only, in the stand-in)."""

    def __getitem__(self, key: Any) -> Any:
        row, col = self._parse_indices(key)
        if isinstance(row, _int_scalar_types) and isinstance(col, _int_scalar_types):
            return self._get_intXint(row, col)
        if isinstance(row, slice) and isinstance(col, _core.core._ndarray_base):
            return self._get_sliceXarray(row, col)
        if isinstance(row, _core.core._ndarray_base) and isinstance(col, slice):
            return self._get_arrayXslice(row, col)
        raise NotImplementedError("the stand-in models only A[i, j] with integers, A[:, idx] and A[idx, :]")

    def _get_sliceXarray(self, row: Any, col: Any) -> Any:
        raise NotImplementedError("the stand-in models A[:, idx] on CSR only")

    def _get_arrayXslice(self, row: Any, col: Any) -> Any:
        raise NotImplementedError("the stand-in models A[idx, :] on CSC only")

    def _parse_indices(self, key: Any) -> tuple[Any, Any]:
        if not (isinstance(key, tuple) and len(key) == 2):
            raise NotImplementedError("the stand-in models only A[i, j]")
        M, N = self.shape
        row, col = key
        if isinstance(row, _int_scalar_types) and isinstance(col, _int_scalar_types):
            row, col = operator.index(row), operator.index(col)
            if not -M <= row < M:
                raise IndexError(f"row index ({row}) out of range")
            if not -N <= col < N:
                raise IndexError(f"column index ({col}) out of range")
            row, col = row % M, col % N
        return row, col
