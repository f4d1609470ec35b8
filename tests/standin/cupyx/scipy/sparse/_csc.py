"""Stand-in for ``cupyx.scipy.sparse._csc`` (``_csc.py`` v14.2.0): ``_csc_base`` with
``_matmul_dispatch`` (lines 100-207: a dense operand goes to ``cusparse.spmv``/``spmm`` of
``self.T``, a CSR matrix, with ``transa=True``, after ``self.sum_duplicates()``, on ROCm
(HIP >= 5) to the legacy ``csrmv``/``csrmm2``; sparse operands are not modelled),
``_get_arrayXint`` (453-455, ``A[idx, j]``, ``idx`` of 1 or 2 dimensions), ``_get_arrayXslice``
(457-458, ``A[idx, :]``), ``tocoo``/``tocsc``/``tocsr`` (320-386), ``transpose`` (397-427, a
CSR matrix on the same arrays), and ``csc_matrix(spmatrix, _csc_base)``."""

from __future__ import annotations

from typing import Any

import cupy
from cupy_backends.cuda.api import driver, runtime

from cupyx.scipy.sparse import _base, _compressed


class _csc_base(_compressed._compressed_sparse_matrix):
    format = "csc"
    _major_axis = 1

    def _swap(self, x: Any, y: Any) -> tuple[Any, Any]:
        return (y, x)

    def _matmul_dispatch(self, other: Any) -> Any:
        from cupyx import cusparse

        if cupy.isscalar(other):
            self.sum_duplicates()
            return self._with_data(self.data * other)
        if _base.issparse(other):
            raise NotImplementedError("the stand-in does not model sparse @ sparse")
        elif _base.isdense(other):
            if other.ndim == 0:
                self.sum_duplicates()
                return self._with_data(self.data * other)
            elif other.ndim == 1:
                self.sum_duplicates()
                if cusparse.check_availability("csrmv") and (
                    not runtime.is_hip or driver.get_build_version() >= 5_00_00000
                ):
                    # trans=True is buggy as of ROCm 4.2.0
                    csrmv = cusparse.csrmv  # ROCm only: cuSPARSE 12 has no csrmv
                elif cusparse.check_availability("spmv") and not runtime.is_hip:
                    # trans=True is buggy as of ROCm 4.2.0
                    csrmv = cusparse.spmv
                else:
                    raise RuntimeError("no cuSPARSE spmv backend available")
                return csrmv(self.T, cupy.asfortranarray(other), transa=True)
            elif other.ndim == 2:
                self.sum_duplicates()
                if cusparse.check_availability("csrmm2") and (
                    not runtime.is_hip or driver.get_build_version() >= 5_00_00000
                ):
                    # trans=True is buggy as of ROCm 4.2.0
                    csrmm = cusparse.csrmm2  # ROCm only
                elif cusparse.check_availability("spmm"):
                    csrmm = cusparse.spmm
                else:
                    raise RuntimeError("no cuSPARSE spmm backend available")
                return csrmm(self.T, cupy.asfortranarray(other), transa=True)
            else:
                raise ValueError("could not interpret dimensions")
        else:
            return NotImplemented

    def _get_arrayXint(self, row: Any, col: Any) -> Any:
        col = slice(col, col + 1)
        return self._major_slice(col)._minor_index_fancy(row)

    def _get_arrayXslice(self, row: Any, col: Any) -> Any:
        return self._major_slice(col)._minor_index_fancy(row)

    def tocoo(self, copy: bool = False) -> Any:
        from cupyx import cusparse

        if copy:
            data = self.data.copy()
            indices = self.indices.copy()
        else:
            data = self.data
            indices = self.indices
        result = cusparse.csc2coo(self, data, indices)
        if not isinstance(result, self._coo_container):
            result = self._coo_container(result)
        return result

    def tocsc(self, copy: Any = None) -> Any:
        if copy:
            return self.copy()
        else:
            return self

    def tocsr(self, copy: bool = False) -> Any:
        from cupyx import cusparse

        # copy is ignored
        if cusparse.check_availability("csc2csr"):
            csc2csr = cusparse.csc2csr  # ROCm only
        elif cusparse.check_availability("csc2csrEx2"):
            csc2csr = cusparse.csc2csrEx2
        else:
            raise NotImplementedError
        # don't touch has_sorted_indices, as cuSPARSE made no guarantee
        result = csc2csr(self)
        if not isinstance(result, self._csr_container):
            result = self._csr_container(result)
        return result

    def transpose(self, axes: Any = None, copy: bool = False) -> Any:
        if axes is not None:
            raise ValueError("Sparse matrices do not support an 'axes' parameter.")
        shape = self.shape[1], self.shape[0]
        if copy:
            data, indices, indptr = self.data.copy(), self.indices.copy(), self.indptr.copy()
        else:
            data, indices, indptr = self.data, self.indices, self.indptr
        return self._csr_container._from_parts(
            data, indices, indptr, shape,
            has_canonical_format=getattr(self, "_has_canonical_format", None),
            has_sorted_indices=getattr(self, "_has_sorted_indices", None),
        )  # fmt: skip


class csc_matrix(_base.spmatrix, _csc_base):
    """Compressed Sparse Column matrix."""
