"""Stand-in for ``cupyx.scipy.sparse._data``: ``_data_matrix`` (a sparse matrix with ``data``)."""

from __future__ import annotations

from typing import Any

from cupy._core._dtype import get_dtype

from cupyx.scipy.sparse import _base


class _data_matrix(_base._spbase):
    def __init__(self, data: Any) -> None:
        self.data = data

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    def _getnnz(self, axis: Any = None) -> int:
        return self.data.size

    def astype(self, dtype: Any, copy: bool = True) -> Any:
        dtype = get_dtype(dtype)
        if self.dtype != dtype:
            return self._with_data(self.data.astype(dtype, copy=copy))
        if copy:
            return self.copy()
        return self
