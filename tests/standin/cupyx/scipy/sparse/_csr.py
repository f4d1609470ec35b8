"""Stand-in for ``cupyx.scipy.sparse._csr`` (``_csr.py`` v14.2.0): ``_csr_base`` with
``_matmul_dispatch`` (lines 188-266: a dense operand goes to ``cusparse.spmv``/``spmm``
with ``transa=False``, on ROCm to the legacy ``csrmv``/``csrmm2``; sparse operands are not
modelled), ``_get_intXarray`` (701-703, ``A[i, idx]``), ``_get_sliceXarray`` (714-715,
``A[:, idx]``), ``tocoo``/``tocsc``/``tocsr`` (564-638), ``transpose`` (657-691, a CSC
matrix on the same arrays), and ``csr_matrix(spmatrix, _csr_base)``."""

from __future__ import annotations

from typing import Any

import cupy

from cupyx.scipy.sparse import _base, _compressed


class _csr_base(_compressed._compressed_sparse_matrix):
    format = "csr"
    _major_axis = 0

    def _swap(self, x: Any, y: Any) -> tuple[Any, Any]:
        return (x, y)

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
                other = cupy.asfortranarray(other)
                if cusparse.check_availability("csrmv"):
                    csrmv = cusparse.csrmv  # ROCm only: cuSPARSE 12 has no csrmv
                elif cusparse.check_availability("spmv"):
                    csrmv = cusparse.spmv
                else:
                    raise RuntimeError("no cuSPARSE spmv backend available")
                return csrmv(self, other)
            elif other.ndim == 2:
                self.sum_duplicates()
                if cusparse.check_availability("csrmm2"):
                    csrmm = cusparse.csrmm2  # ROCm only
                elif cusparse.check_availability("spmm"):
                    csrmm = cusparse.spmm
                else:
                    raise RuntimeError("no cuSPARSE spmm backend available")
                return csrmm(self, cupy.asfortranarray(other))
            else:
                raise ValueError("could not interpret dimensions")
        else:
            return NotImplemented

    def _get_intXarray(self, row: Any, col: Any) -> Any:
        row = slice(row, row + 1)
        return self._major_slice(row)._minor_index_fancy(col)

    def _get_sliceXarray(self, row: Any, col: Any) -> Any:
        return self._major_slice(row)._minor_index_fancy(col)

    def tocoo(self, copy: bool = False) -> Any:
        from cupyx import cusparse

        if copy:
            data = self.data.copy()
            indices = self.indices.copy()
        else:
            data = self.data
            indices = self.indices
        result = cusparse.csr2coo(self, data, indices)
        if not isinstance(result, self._coo_container):
            result = self._coo_container(result)
        return result

    def tocsc(self, copy: bool = False) -> Any:
        from cupyx import cusparse

        # copy is ignored
        if cusparse.check_availability("csr2csc"):
            csr2csc = cusparse.csr2csc  # ROCm only
        elif cusparse.check_availability("csr2cscEx2"):
            csr2csc = cusparse.csr2cscEx2
        else:
            raise NotImplementedError
        # don't touch has_sorted_indices, as cuSPARSE made no guarantee
        result = csr2csc(self)
        if not isinstance(result, self._csc_container):
            result = self._csc_container(result)
        return result

    def tocsr(self, copy: bool = False) -> Any:
        if copy:
            return self.copy()
        else:
            return self

    def transpose(self, axes: Any = None, copy: bool = False) -> Any:
        if axes is not None:
            raise ValueError("Sparse matrices do not support an 'axes' parameter.")
        shape = self.shape[1], self.shape[0]
        if copy:
            data, indices, indptr = self.data.copy(), self.indices.copy(), self.indptr.copy()
        else:
            data, indices, indptr = self.data, self.indices, self.indptr
        return self._csc_container._from_parts(
            data, indices, indptr, shape,
            has_canonical_format=getattr(self, "_has_canonical_format", None),
            has_sorted_indices=getattr(self, "_has_sorted_indices", None),
        )  # fmt: skip


class csr_matrix(_base.spmatrix, _csr_base):
    """Compressed Sparse Row matrix."""


def _is_csr(x: Any) -> bool:
    """True if x is any CSR sparse (array or matrix)."""
    return isinstance(x, _csr_base)
