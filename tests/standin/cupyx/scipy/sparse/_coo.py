"""Stand-in for ``cupyx.scipy.sparse._coo`` (``_coo.py`` v14.2.0): ``_coo_base`` with
``sum_duplicates`` (lines 660-768, the flow exactly), ``tocsc``/``tocsr`` (803-881, each
``sum_duplicates`` on a copy first) and ``coo_matrix(spmatrix, _coo_base)``. (CuPy 13.6
has no ``_coo_base``: ``coo_matrix`` itself defines ``sum_duplicates``, with int32 indices.)

Constructed from ``((data, (row, col)), shape=...)``, another sparse matrix, or a shape.
``sum_duplicates`` needs the values of ``row`` and ``col``: it sorts them and finds the
duplicates from them (where CuPy reads its diff kernel's output), launches the assign
kernel made at call time with ``cupy.ElementwiseKernel`` only when there are duplicates,
and computes the summed ``row``/``col`` (the data it leaves without values).
"""

from __future__ import annotations

from typing import Any

import cupy
from cupy import _core
from cupy._core._dtype import get_dtype as _get_dtype

from cupyx.scipy.sparse import _base, _util
from cupyx.scipy.sparse import _data as sparse_data

_IDX_DTYPE = "int32"  # CuPy picks int32 for a matrix whose indices fit


class _coo_base(sparse_data._data_matrix):
    """COO format base (shared by ``coo_matrix`` and, in CuPy, ``coo_array``)."""

    format = "coo"

    _sum_duplicates_diff = _core.ElementwiseKernel(
        "raw T row, raw T col",
        "T diff",
        """
        T diff_out = 1;
        if (i == 0 || row[i - 1] == row[i] && col[i - 1] == col[i]) {
          diff_out = 0;
        }
        diff = diff_out;
        """,
        "cupyx_scipy_sparse_coo_sum_duplicates_diff",
    )

    def __init__(self, arg1: Any, shape: Any = None, dtype: Any = None, copy: bool = False) -> None:
        if shape is not None:
            shape = _util.check_shape(shape)
        if _base.issparse(arg1):
            x = arg1.asformat(self.format)
            data, row, col = x.data, x.row, x.col
            if arg1.format != self.format:
                copy = False  # When formats are different, all arrays are already copied
            if shape is None:
                shape = arg1.shape
            self.has_canonical_format = x.has_canonical_format
        elif _util.isshape(arg1):
            shape = _util.check_shape(arg1)
            data = cupy.zeros(0, dtype if dtype else "d")
            row = cupy.array([], _IDX_DTYPE)
            col = cupy.array([], _IDX_DTYPE)
            copy = False
            self.has_canonical_format = True
        elif isinstance(arg1, tuple) and len(arg1) == 2:
            data, (row, col) = arg1
            if not (
                _base.isdense(data) and data.ndim == 1
                and _base.isdense(row) and row.ndim == 1
                and _base.isdense(col) and col.ndim == 1
            ):  # fmt: skip
                raise ValueError("row, column, and data arrays must be 1-D")
            if not (len(data) == len(row) == len(col)):
                raise ValueError("row, column, and data array must all be the same length")
            self.has_canonical_format = False
        else:
            raise TypeError("invalid input format")

        dtype = data.dtype if dtype is None else _get_dtype(dtype)
        if dtype not in ("bool", "float32", "float64", "complex64", "complex128"):
            raise ValueError("Only bool, float32, float64, complex64 and complex128 are supported")
        data = data.astype(dtype, copy=copy)
        row = row.astype(_IDX_DTYPE, copy=copy)
        col = col.astype(_IDX_DTYPE, copy=copy)

        if len(data) > 0 and row.values is not None and col.values is not None:  # (CuPy syncs for these)
            rmax, cmax, rmin, cmin = max(row.values), max(col.values), min(row.values), min(col.values)
            if shape is None:
                shape = (rmax + 1, cmax + 1)
            if rmax >= shape[0]:
                raise ValueError("row index exceeds matrix dimensions")
            if cmax >= shape[1]:
                raise ValueError("column index exceeds matrix dimensions")
            if rmin < 0:
                raise ValueError("negative row index found")
            if cmin < 0:
                raise ValueError("negative column index found")
        if shape is None:
            raise ValueError("the stand-in needs a shape for index arrays without values")

        sparse_data._data_matrix.__init__(self, data)
        self.row = row
        self.col = col
        self._shape = _util.check_shape(shape)

    @classmethod
    def _from_parts(cls, data: Any, row: Any, col: Any, shape: Any, has_canonical_format: bool = False) -> Any:
        """Construct from pre-validated arrays (internal, as CuPy's)."""
        shape = _util.check_shape(shape)
        if row.dtype != col.dtype:
            raise ValueError(f"row and col must have the same dtype, got {row.dtype} and {col.dtype}")
        if data.size != row.size or data.size != col.size:
            raise ValueError(
                f"data, row, and col must have the same length, got {data.size}, {row.size}, and {col.size}"
            )
        A = cls.__new__(cls)
        sparse_data._data_matrix.__init__(A, data)
        A.row = row
        A.col = col
        A._shape = shape
        A.has_canonical_format = has_canonical_format
        return A

    def _with_data(self, data: Any, copy: bool = True) -> Any:
        return type(self)._from_parts(
            data,
            self.row.copy() if copy else self.row,
            self.col.copy() if copy else self.col,
            self.shape,
            has_canonical_format=self.has_canonical_format,
        )

    def sum_duplicates(self) -> None:
        """Eliminate duplicate matrix entries by adding them together (in place)."""
        if self.has_canonical_format:
            return
        # Note: The sorting order below follows the cuSPARSE convention (first
        # row then col, so-called row-major) and differs from that of SciPy.
        keys = cupy.stack([self.col, self.row])
        order = cupy.lexsort(keys)
        src_data = self.data[order]
        src_row = self.row[order]
        src_col = self.col[order]
        diff = self._sum_duplicates_diff(src_row, src_col, size=self.row.size)
        # (the stand-in computes what the kernel writes: 0 where an entry repeats the one before)
        pairs = list(zip(src_row._known_values(), src_col._known_values(), strict=True))
        diff.values = [int(i != 0 and pairs[i - 1] != pairs[i]) for i in range(len(pairs))]

        if diff[1:].all():  # synchronize!
            # All elements have different indices.
            data = src_data
            row = src_row
            col = src_col
        else:
            idx_dtype = self.row.dtype
            index = cupy.cumsum(diff, dtype=idx_dtype)
            size = int(index[-1]) + 1  # synchronize!
            data = cupy.zeros(size, dtype=self.data.dtype)
            row = cupy.empty(size, dtype=idx_dtype)
            col = cupy.empty(size, dtype=idx_dtype)
            if self.data.dtype.kind == "b":
                cupy.ElementwiseKernel(
                    "T src_data, I src_row, I src_col, I index",
                    "raw T data, raw I row, raw I col",
                    """
                    if (src_data) data[index] = true;
                    row[index] = src_row;
                    col[index] = src_col;
                    """,
                    "cupyx_scipy_sparse_coo_sum_duplicates_assign",
                )(src_data, src_row, src_col, index, data, row, col)
            elif self.data.dtype.kind == "f":
                cupy.ElementwiseKernel(
                    "T src_data, I src_row, I src_col, I index",
                    "raw T data, raw I row, raw I col",
                    """
                    atomicAdd(&data[index], src_data);
                    row[index] = src_row;
                    col[index] = src_col;
                    """,
                    "cupyx_scipy_sparse_coo_sum_duplicates_assign",
                )(src_data, src_row, src_col, index, data, row, col)
            elif self.data.dtype.kind == "c":
                cupy.ElementwiseKernel(
                    "T src_real, T src_imag, I src_row, I src_col, I index",
                    "raw T real, raw T imag, raw I row, raw I col",
                    """
                    atomicAdd(&real[index], src_real);
                    atomicAdd(&imag[index], src_imag);
                    row[index] = src_row;
                    col[index] = src_col;
                    """,
                    "cupyx_scipy_sparse_coo_sum_duplicates_assign_complex",
                )(src_data.real, src_data.imag, src_row, src_col, index, data.real, data.imag, row, col)
            # (the stand-in computes the unique indices the kernel writes)
            unique = sorted(set(pairs))
            row.values = [r for r, _ in unique]
            col.values = [c for _, c in unique]

        self.data = data
        self.row = row
        self.col = col
        self.has_canonical_format = True

    def tocoo(self, copy: bool = False) -> Any:
        if copy:
            return self.copy()
        else:
            return self

    def tocsc(self, copy: bool = False) -> Any:
        """Converts the matrix to Compressed Sparse Column format (summing duplicates first)."""
        from cupyx import cusparse

        if self.nnz == 0:
            idx = self.col.dtype
            n = self.shape[1]
            return self._csc_container._from_parts(
                cupy.empty(0, self.dtype), cupy.array([], idx), cupy.array([0] * (n + 1), idx), self.shape
            )
        # copy is silently ignored (in line with SciPy) because both
        # sum_duplicates and coosort change the underlying data
        x = self.copy()
        x.sum_duplicates()
        cusparse.coosort(x, "c")
        result = cusparse.coo2csc(x)
        result.has_canonical_format = True
        if not isinstance(result, self._csc_container):
            result = self._csc_container(result)
        return result

    def tocsr(self, copy: bool = False) -> Any:
        """Converts the matrix to Compressed Sparse Row format (summing duplicates first)."""
        from cupyx import cusparse

        if self.nnz == 0:
            idx = self.row.dtype
            m = self.shape[0]
            return self._csr_container._from_parts(
                cupy.empty(0, self.dtype), cupy.array([], idx), cupy.array([0] * (m + 1), idx), self.shape
            )
        # copy is silently ignored (in line with SciPy) because both
        # sum_duplicates and coosort change the underlying data
        x = self.copy()
        x.sum_duplicates()
        cusparse.coosort(x, "r")
        result = cusparse.coo2csr(x)
        result.has_canonical_format = True
        if not isinstance(result, self._csr_container):
            result = self._csr_container(result)
        return result

    def transpose(self, axes: Any = None, copy: bool = False) -> Any:
        if axes is not None:
            raise ValueError("Sparse matrices do not support an 'axes' parameter.")
        shape = self.shape[1], self.shape[0]
        if copy:
            data, row, col = self.data.copy(), self.col.copy(), self.row.copy()
        else:
            data, row, col = self.data, self.col, self.row
        return type(self)._from_parts(data, row, col, shape, has_canonical_format=False)


class coo_matrix(_base.spmatrix, _coo_base):
    """COOrdinate format sparse matrix."""
