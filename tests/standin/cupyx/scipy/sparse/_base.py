"""Stand-in for ``cupyx.scipy.sparse._base`` (``_base.py`` v14.2.0): ``_spbase``, ``spmatrix``
and ``issparse``; ``A @ B`` goes to the format's ``_matmul_dispatch``, ``x @ A`` (a CuPy array
leaves it to ``A``: ``__array_priority__`` 101) to ``_rmatmul_dispatch``, which multiplies
``A.T`` by ``x.T`` and transposes the result (lines 43, 191-215; ``spmatrix``'s ``*``, 789-793)."""

from __future__ import annotations

from typing import Any

import cupy

from cupyx.scipy.sparse import _util


class _spbase:
    """The base of every sparse matrix: 2-D only in the stand-in."""

    format: str = ""
    __array_priority__ = 101

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def nnz(self) -> int:
        return self._getnnz()

    @property
    def shape(self) -> tuple[int, int]:
        return self._shape

    @property
    def _csr_container(self) -> Any:
        from cupyx.scipy.sparse._csr import csr_matrix

        return csr_matrix

    @property
    def _csc_container(self) -> Any:
        from cupyx.scipy.sparse._csc import csc_matrix

        return csc_matrix

    @property
    def _coo_container(self) -> Any:
        from cupyx.scipy.sparse._coo import coo_matrix

        return coo_matrix

    def __matmul__(self, other: Any) -> Any:
        if _util.isscalarlike(other):
            raise ValueError("Scalar operands are not allowed, use '*' instead")
        return self._matmul_dispatch(other)

    def __rmatmul__(self, other: Any) -> Any:
        if _util.isscalarlike(other):
            raise ValueError("Scalar operands are not allowed, use '*' instead")
        return self._rmatmul_dispatch(other)

    def _matmul_dispatch(self, other: Any) -> Any:
        """Default: convert to CSR.  Format subclasses override."""
        return self.tocsr()._matmul_dispatch(other)

    def _rmatmul_dispatch(self, other: Any) -> Any:
        if cupy.isscalar(other) or (isdense(other) and other.ndim == 0):
            return self._matmul_dispatch(other)
        else:
            try:
                tr = other.T
            except AttributeError:
                return NotImplemented
            return (self.T._matmul_dispatch(tr)).T

    @property
    def T(self) -> Any:
        return self.transpose()

    def asformat(self, format: str | None) -> Any:
        if format is None or format == self.format:
            return self
        return getattr(self, "to" + format)()

    def copy(self) -> Any:
        return self.__class__(self, copy=True)

    def dot(self, other: Any) -> Any:
        if cupy.isscalar(other):
            return self * other
        return self @ other

    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        """Sum the matrix elements over a given axis (``_base.py`` v14.2.0 626-702, 2-D, not bool):
        products with a vector of ones, ``self.T`` for ``axis=0``."""
        m, n = self.shape
        if axis is None:
            return self.dot(cupy.ones(n, dtype=self.dtype)).sum(dtype=dtype, out=out)
        if axis < 0:
            axis += 2
        if axis == 0:
            ret = self.T.dot(cupy.ones(m, dtype=self.dtype)).reshape(1, n)
        else:
            ret = self.dot(cupy.ones(n, dtype=self.dtype)).reshape(m, 1)
        return ret if dtype is None else ret.astype(dtype, copy=False)

    def mean(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        """The arithmetic mean (``_base.py`` v14.2.0 496-560, float data): the data scaled, then
        ``sum``. (CuPy divides by a 0-d array for ``axis=None``; the stand-in multiplies.)"""
        m, n = self.shape
        if axis is None:
            return (self * (1.0 / (m * n))).sum(dtype=dtype, out=out)
        if axis < 0:
            axis += 2
        return (self * (1.0 / (m if axis == 0 else n))).sum(axis=axis, dtype=dtype, out=out)


class spmatrix(_spbase):
    """Matrix semantics: ``*`` is the matrix product."""

    def __mul__(self, other: Any) -> Any:
        return self._matmul_dispatch(other)

    def __rmul__(self, other: Any) -> Any:
        return self._rmatmul_dispatch(other)


def issparse(x: Any) -> bool:
    return isinstance(x, _spbase)


def isdense(x: Any) -> bool:
    return isinstance(x, cupy.ndarray)
