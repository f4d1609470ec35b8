"""Stand-in for ``cupyx.scipy.sparse._index`` (``_index.py`` v14.2.0): the scalar-lookup
kernels (lines 28-43), ``_get_csr_submatrix_major_axis`` (46-68) and ``IndexMixin``'s
parse and dispatch of a 2-D key (``__getitem__``, ``_getitem_2d``, ``_parse_indices``,
``_asindices``, ``_normalize_index``: 361-379, 476-525, 603-643, 787-792), which send each
shape of key to the method CuPy sends it to (``_get_intXint``, ``_get_arrayXint`` for a 1-D
or 2-D row index with an int column, ...). Of those methods the stand-in models
``_get_intXint``, CSR ``_get_intXarray`` / ``_get_sliceXarray`` and CSC ``_get_arrayXint`` /
``_get_arrayXslice``; the others raise ``NotImplementedError``, as ``IndexMixin``'s own do.
Not modelled: 1-D sparse arrays, boolean and sparse keys, ellipses, inner (fancy) indexing
with two arrays; an index array must be a CuPy array of integers (CuPy also takes lists)."""

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
    """The common dispatching of indexing, as CuPy's (2-D keys)."""

    def __getitem__(self, key: Any) -> Any:
        row, col = self._parse_indices(key)
        return self._getitem_2d(row, col)

    def _getitem_2d(self, row: Any, col: Any) -> Any:
        # Dispatch to specialized methods (CuPy's order and tests).
        if isinstance(row, _int_scalar_types):
            if isinstance(col, _int_scalar_types):
                return self._get_intXint(row, col)
            elif isinstance(col, slice):
                return self._get_intXslice(row, col)
            elif col.ndim == 1:
                return self._get_intXarray(row, col)
            raise IndexError("index results in >2 dimensions")
        elif isinstance(row, slice):
            if isinstance(col, _int_scalar_types):
                return self._get_sliceXint(row, col)
            elif isinstance(col, slice):
                if row == slice(None) and row == col:
                    return self.copy()
                return self._get_sliceXslice(row, col)
            elif col.ndim == 1:
                return self._get_sliceXarray(row, col)
            raise IndexError("index results in >2 dimensions")
        elif row.ndim == 1:
            if isinstance(col, _int_scalar_types):
                return self._get_arrayXint(row, col)
            elif isinstance(col, slice):
                return self._get_arrayXslice(row, col)
        else:  # row.ndim == 2
            if isinstance(col, _int_scalar_types):
                return self._get_arrayXint(row, col)
            elif isinstance(col, slice):
                raise IndexError("index results in >2 dimensions")
            elif row.shape[1] == 1 and (col.ndim == 1 or col.shape[0] == 1):
                # special case for outer indexing
                return self._get_columnXarray(row[:, 0], col.ravel())
        raise NotImplementedError("the stand-in does not model inner (fancy) indexing with two index arrays")

    def _parse_indices(self, key: Any) -> tuple[Any, Any]:
        if not (isinstance(key, tuple) and len(key) == 2):
            raise NotImplementedError("the stand-in models only two-index keys, A[row, col]")
        M, N = self.shape
        row, col = key
        if isinstance(row, _int_scalar_types):
            row = _normalize_index(operator.index(row), M, "row")
        elif not isinstance(row, slice):
            row = self._asindices(row, M)
        if isinstance(col, _int_scalar_types):
            col = _normalize_index(operator.index(col), N, "column")
        elif not isinstance(col, slice):
            col = self._asindices(col, N)
        return row, col

    def _asindices(self, idx: Any, length: int) -> Any:
        """``idx`` as an index array of ``self.indices``'s dtype, of 1 or 2 dimensions, modulo
        ``length`` (CuPy: ``cupy.asarray(idx, dtype=self.indices.dtype) % length``)."""
        if not isinstance(idx, _core.core._ndarray_base):
            raise NotImplementedError("the stand-in takes only CuPy arrays as index arrays")
        try:
            x = idx.astype(self.indices.dtype, copy=False)
        except (ValueError, TypeError, MemoryError):
            raise IndexError("invalid index") from None
        if x.ndim not in (1, 2):
            raise IndexError("Index dimension must be <= 2")
        return x % length

    def _get_intXint(self, row: Any, col: Any) -> Any:
        raise NotImplementedError()

    def _get_intXarray(self, row: Any, col: Any) -> Any:
        raise NotImplementedError()

    def _get_intXslice(self, row: Any, col: Any) -> Any:
        raise NotImplementedError()

    def _get_sliceXint(self, row: Any, col: Any) -> Any:
        raise NotImplementedError()

    def _get_sliceXslice(self, row: Any, col: Any) -> Any:
        raise NotImplementedError()

    def _get_sliceXarray(self, row: Any, col: Any) -> Any:
        raise NotImplementedError()

    def _get_arrayXint(self, row: Any, col: Any) -> Any:
        raise NotImplementedError()

    def _get_arrayXslice(self, row: Any, col: Any) -> Any:
        raise NotImplementedError()

    def _get_columnXarray(self, row: Any, col: Any) -> Any:
        raise NotImplementedError()


def _normalize_index(x: int, dim: int, name: str) -> int:
    if x < -dim or x >= dim:
        raise IndexError(f"{name} ({x}) out of range")
    if x < 0:
        x += dim
    return x
