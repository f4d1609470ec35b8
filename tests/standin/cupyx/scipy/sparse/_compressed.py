"""Stand-in for ``cupyx.scipy.sparse._compressed`` (``_compressed.py`` v14.2.0):
``_compressed_sparse_matrix`` with ``_get_intXint`` (lines 691-710), the lazily computed
``has_canonical_format`` and ``has_sorted_indices`` (1349-1425), ``sum_duplicates`` through
COO (1543-1563), ``_from_parts`` (455-528) and the constructor's main forms (231-453).

``has_canonical_format`` launches CuPy's check kernel and takes its answer from the
values of ``indptr`` and ``indices`` (sorted, no repeat, within each major row), unless
a flag is cached (``_has_canonical_format``), as in CuPy. ``_get_intXint`` reads
``indptr`` values (CuPy syncs there too) and launches ``_index._compress_getitem_kern``
(or ``_compress_getitem_complex_kern``, or the kernel on int32 copies for bool data),
looked up on ``_index`` at call time.

CuPy 14.2's minor-axis fancy indexing (``_minor_index_fancy``, 962-1048, reached from
``csr[:, idx]`` and ``csc[idx, :]``, with ``_major_slice`` of a full slice, 1103-1134, and
``_empty_like``, 604-612): the histogram path records ``Launch``es of its three raw kernels
(``bincount_idx_global``, ``row_kept_count``, ``fill_B``; ``_fill_B`` is the class attribute
that holds CuPy's ``RawModule``) and gives each row's entries in the order of the stored
entries (CuPy: the order the ``atomicAdd`` write pointer hands out, which varies), with no
format flags. It takes ``_minor_index_fancy_sorted`` (1050-1101) past int32 sizes, as CuPy;
that path records one ``Launch("minor_index_fancy_sorted", ...)`` (CuPy launches a series of
sorts, searches and gathers, all without float atomics) and gives the entries sorted, flagged
canonical. Both compute the result from the index values (the data values where they exist).
"""

from __future__ import annotations

import collections
import itertools
from typing import Any

import cupy
from cupy import _core
from cupy._core._dtype import get_dtype as _get_dtype
from cupy._core._kernel import record_launch as _record_launch

from cupyx.scipy.sparse import _base, _index, _util
from cupyx.scipy.sparse import _data as sparse_data

_IDX_DTYPE = "int32"  # CuPy picks int32 for a matrix whose indices fit
_INT32_MAX = 2**31 - 1


class _RawModule:
    """What stands for CuPy's ``_core.RawModule`` of a raw kernel (only its name)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _rows_ok(indptr: Any, indices: Any, strict: bool) -> list[bool]:
    """Per major row: its minor indices increase (strictly: no repeat). What CuPy's kernels compute."""
    bounds, minor = indptr._known_values(), indices._known_values()
    rows = [minor[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]
    if strict:
        return [bounds[i] <= bounds[i + 1] and all(a < b for a, b in itertools.pairwise(r)) for i, r in enumerate(rows)]
    return [all(a <= b for a, b in itertools.pairwise(r)) for r in rows]


def _argsort(values: list[Any]) -> list[int]:
    """``cupy.argsort`` of a 1-D array (stable)."""
    return sorted(range(len(values)), key=values.__getitem__)


class _compressed_sparse_matrix(sparse_data._data_matrix, _index.IndexMixin):
    _major_axis = 0

    _has_sorted_indices_kern = _core.ElementwiseKernel(
        "raw T indptr, raw T indices",
        "bool diff",
        """
        bool diff_out = true;
        for (T jj = indptr[i]; jj < indptr[i+1] - 1; jj++) {
            if (indices[jj] > indices[jj+1]){
                diff_out = false;
            }
        }
        diff = diff_out;
        """,
        "cupyx_scipy_sparse_has_sorted_indices",
    )

    _has_canonical_format_kern = _core.ElementwiseKernel(
        "raw T indptr, raw T indices",
        "bool diff",
        """
        bool diff_out = true;
        if (indptr[i] > indptr[i+1]) {
            diff = false;
            return;
        }
        for (T jj = indptr[i]; jj < indptr[i+1] - 1; jj++) {
            if (indices[jj] >= indices[jj+1]) {
                diff_out = false;
            }
        }
        diff = diff_out;
        """,
        "cupyx_scipy_sparse_has_canonical_format",
    )

    def __init__(self, arg1: Any, shape: Any = None, dtype: Any = None, copy: bool = False) -> None:
        from cupyx import cusparse

        if shape is not None:
            shape = _util.check_shape(shape)

        if _base.issparse(arg1):
            x = arg1.asformat(self.format)
            data = x.data
            indices = x.indices
            indptr = x.indptr
            if arg1.format != self.format:
                # When formats are different, all arrays are already copied
                copy = False
            if shape is None:
                shape = arg1.shape
        elif _util.isshape(arg1):
            m, n = _util.check_shape(arg1)
            data = cupy.zeros(0, dtype if dtype else "d")
            indices = cupy.array([], _IDX_DTYPE)
            indptr = cupy.array([0] * (self._swap(m, n)[0] + 1), _IDX_DTYPE)
            # shape and copy argument is ignored
            shape = (m, n)
            copy = False
        elif isinstance(arg1, tuple) and len(arg1) == 2:
            # Note: not efficient -- constructs an intermediate COO and converts.
            sp_coo = self._coo_container(arg1, shape=shape, dtype=dtype, copy=copy)
            sp_compressed = sp_coo.asformat(self.format)
            data = sp_compressed.data
            indices = sp_compressed.indices
            indptr = sp_compressed.indptr
        elif isinstance(arg1, tuple) and len(arg1) == 3:
            data, indices, indptr = arg1
            if not (
                _base.isdense(data) and data.ndim == 1
                and _base.isdense(indices) and indices.ndim == 1
                and _base.isdense(indptr) and indptr.ndim == 1
            ):  # fmt: skip
                raise ValueError("data, indices, and indptr must be 1-D cupy arrays")
            if len(data) != len(indices):
                raise ValueError("indices and data should have the same size")
            if indptr.size > 0 and indptr.values is not None:  # (CuPy syncs to read both ends)
                first, nnz_live = indptr.values[0], indptr.values[-1]
                if first != 0:
                    raise ValueError(f"index pointer should start with 0 (got {first})")
                if nnz_live > data.size:
                    raise ValueError(f"last index pointer ({nnz_live}) exceeds the size of data/indices ({data.size})")
                if data.size > nnz_live:
                    data = data[:nnz_live]
                    indices = indices[:nnz_live]
        else:
            raise ValueError("Unsupported initializer format")

        dtype = data.dtype if dtype is None else _get_dtype(dtype)
        if dtype not in ("bool", "float32", "float64", "complex64", "complex128"):
            raise ValueError("Only bool, float32, float64, complex64 and complex128 are supported")

        data = data.astype(dtype, copy=copy)
        sparse_data._data_matrix.__init__(self, data)
        self.indices = indices.astype(_IDX_DTYPE, copy=copy)
        self.indptr = indptr.astype(_IDX_DTYPE, copy=copy)

        if shape is None:
            shape = self._swap(len(indptr) - 1, max(indices._known_values()) + 1)  # synchronize!

        major, minor = self._swap(*shape)  # noqa: RUF059
        if len(indptr) != major + 1:
            raise ValueError(f"index pointer size ({len(indptr)}) should be ({major + 1})")

        self._descr = cusparse.MatDescriptor.create()
        self._shape = shape

    @classmethod
    def _from_parts(
        cls, data: Any, indices: Any, indptr: Any, shape: Any,
        has_canonical_format: bool | None = None, has_sorted_indices: bool | None = None,
    ) -> Any:  # fmt: skip
        """Construct from pre-validated arrays (internal, as CuPy's)."""
        from cupyx.cusparse import MatDescriptor

        shape = _util.check_shape(shape)
        if indices.dtype != indptr.dtype:
            raise ValueError(f"indices and indptr must have the same dtype, got {indices.dtype} and {indptr.dtype}")
        if has_canonical_format is True and has_sorted_indices is False:
            raise ValueError(
                "has_canonical_format=True implies sorted indices, but has_sorted_indices=False was passed"
            )
        if data.size != indices.size:
            raise ValueError(f"data and indices must have the same length, got {data.size} and {indices.size}")
        major = shape[cls._major_axis]
        if indptr.size != major + 1:
            raise ValueError(f"indptr has length {indptr.size}, expected {major + 1} (major axis + 1)")
        A = cls.__new__(cls)
        sparse_data._data_matrix.__init__(A, data)
        A.indices = indices
        A.indptr = indptr
        A._descr = MatDescriptor.create()
        A._shape = shape
        if has_canonical_format is not None:
            A._has_canonical_format = has_canonical_format
            if has_canonical_format:
                A._has_sorted_indices = True
        if has_sorted_indices is not None:
            A._has_sorted_indices = has_sorted_indices
        return A

    def _with_data(self, data: Any, copy: bool = True) -> Any:
        return self.__class__._from_parts(
            data,
            self.indices.copy() if copy else self.indices,
            self.indptr.copy() if copy else self.indptr,
            self.shape,
            has_canonical_format=getattr(self, "_has_canonical_format", None),
            has_sorted_indices=getattr(self, "_has_sorted_indices", None),
        )

    def _swap(self, x: Any, y: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    _fill_B = _RawModule("fill_B")  # CuPy: fill_B<T, I>, an atomicAdd write pointer per row

    def _empty_like(self, shape: Any) -> Any:
        return self.__class__(shape, dtype=self.dtype)

    def _major_slice(self, idx: slice, copy: bool = False) -> Any:
        """Index along the major axis where idx is a slice object (a step other than 1 is not modelled)."""
        M, N = self._swap(*self.shape)
        start, stop, step = idx.indices(M)
        if start == 0 and stop == M and step == 1:
            return self.copy() if copy else self
        M = len(range(start, stop, step))
        new_shape = self._swap(M, N)
        if step != 1:
            raise NotImplementedError("the stand-in does not model _major_index_fancy (a stepped major slice)")
        if M == 0 or self.nnz == 0:
            return self._empty_like(new_shape)
        data, indices, indptr = _index._get_csr_submatrix_major_axis(self.data, self.indices, self.indptr, start, stop)
        if copy:
            data = data.copy()
            indices = indices.copy()
        return self.__class__._from_parts(
            data, indices, indptr, new_shape,
            has_canonical_format=getattr(self, "_has_canonical_format", None),
            has_sorted_indices=getattr(self, "_has_sorted_indices", None),
        )  # fmt: skip

    def _minor_entries(self, idx: Any, col_order: list[int] | None) -> tuple[Any, Any, Any]:
        """The (data, indices, indptr) of ``self`` indexed by ``idx`` along the minor axis.

        ``col_order`` ``None``: each row's entries sorted by their new minor index, ties in
        stored order (the sorted path's ``lexsort``). Otherwise ``fill_B``'s placement: each
        stored entry of minor index ``c``, in stored order, gets the new minor indices
        ``col_order[start:start + count(c)]``, where ``start`` counts the index values below
        ``c`` and ``col_order`` is ``cupy.argsort(idx)`` read flat, as the kernel reads it."""
        bounds, minor, picks = self.indptr._known_values(), self.indices._known_values(), idx._known_values()
        counts = collections.Counter(picks)
        starts = {c: sum(n for v, n in counts.items() if v < c) for c in counts}
        rows = []
        for row in range(len(bounds) - 1):
            stored = range(bounds[row], bounds[row + 1])
            if col_order is None:
                rows.append(sorted((k, p) for p in stored for k, c in enumerate(picks) if c == minor[p]))
            else:
                rows.append([
                    (col_order[starts[minor[p]] + i], p) for p in stored for i in range(counts.get(minor[p], 0))
                ])  # fmt: skip
        flat = [entry for row in rows for entry in row]
        indptr = cupy.array(list(itertools.accumulate([0] + [len(row) for row in rows])), self.indptr.dtype)
        indices = cupy.array([k for k, _ in flat], self.indices.dtype)
        if self.data.values is None:
            data = cupy.ndarray((len(flat),), self.data.dtype)
        else:
            data = cupy.array([self.data.values[p] for _, p in flat], self.data.dtype)
        return data, indices, indptr

    def _minor_index_fancy(self, idx: Any) -> Any:
        """Index along the minor axis where idx is an array of ints."""
        M, N = self._swap(*self.shape)
        n_idx = idx.size
        new_shape = self._swap(M, n_idx)
        if self.nnz == 0 or n_idx == 0:
            return self._empty_like(new_shape)
        if N > _INT32_MAX or n_idx > _INT32_MAX:
            return self._minor_index_fancy_sorted(idx, M, n_idx, new_shape)
        _record_launch("bincount_idx_global", idx)
        _record_launch("row_kept_count", self.indptr, self.indices)
        # CuPy: col_order = cupy.argsort(idx), which sorts along the last axis: for a 2-D idx
        # (csc[idx2d, j]) that is each row's own order, which the kernel then reads as flat
        picks, width = idx._known_values(), idx.shape[-1]
        col_order = [j for r in range(0, len(picks), width) for j in _argsort(picks[r : r + width])]
        data, indices, indptr = self._minor_entries(idx, col_order)
        _record_launch(self._fill_B.name, self.indptr, self.indices, self.data, indptr, indices, data)
        return self.__class__._from_parts(data, indices, indptr, new_shape)

    def _minor_index_fancy_sorted(self, idx: Any, M: int, n_idx: int, new_shape: Any) -> Any:
        """Sort-based fancy minor-axis indexing (CuPy's deterministic path)."""
        idx = idx.astype(self.indices.dtype, copy=False)
        if idx.ndim > 1:
            # CuPy: idx[cupy.argsort(idx)] has idx.ndim + 1 axes, and cupy.searchsorted refuses
            # more than one (cupy/_sorting/search.py, _searchsorted)
            raise ValueError("object too deep for desired array")
        _record_launch("minor_index_fancy_sorted", self.indices, idx)
        data, indices, indptr = self._minor_entries(idx, None)
        if data.size == 0:
            return self._empty_like(new_shape)
        return self.__class__._from_parts(
            data, indices, indptr, new_shape, has_canonical_format=True, has_sorted_indices=True
        )

    def _get_intXint(self, row: int, col: int) -> Any:
        major, minor = self._swap(row, col)
        data, indices, _ = _index._get_csr_submatrix_major_axis(self.data, self.indices, self.indptr, major, major + 1)
        dtype = data.dtype
        if dtype.kind == "c":
            res = cupy.zeros((), dtype=dtype)
            _index._compress_getitem_complex_kern(data.real, data.imag, indices, minor, res.real, res.imag)
            return res
        if dtype.kind == "b":
            # ``atomicAdd`` has no bool overload; accumulate the matching
            # entries as int, then a non-zero count means a stored True.
            res = cupy.zeros((), dtype=cupy.int32)
            _index._compress_getitem_kern(data.astype(cupy.int32), indices, minor, res)
            return res.astype(dtype)
        res = cupy.zeros((), dtype=dtype)
        _index._compress_getitem_kern(data, indices, minor, res)
        return res

    def __get_has_canonical_format(self) -> bool:
        """Whether the matrix has sorted indices and no duplicates (might synchronize)."""
        if self.data.size == 0:
            self._has_canonical_format = True
            self._has_sorted_indices = True
        # check to see if result was cached
        elif not getattr(self, "_has_sorted_indices", True):
            # not sorted => not canonical
            self._has_canonical_format = False
        elif not hasattr(self, "_has_canonical_format"):
            is_canonical = self._has_canonical_format_kern(self.indptr, self.indices, size=self.indptr.size - 1)
            is_canonical.values = _rows_ok(self.indptr, self.indices, strict=True)  # what the kernel writes
            self._has_canonical_format = bool(is_canonical.all())  # synchronize!
            if self._has_canonical_format:
                self._has_sorted_indices = True
        return self._has_canonical_format

    def __set_has_canonical_format(self, val: bool) -> None:
        self._has_canonical_format = bool(val)
        if val:
            self.has_sorted_indices = True

    has_canonical_format = property(fget=__get_has_canonical_format, fset=__set_has_canonical_format)

    def __get_sorted(self) -> bool:
        """Whether the indices are sorted within each major row (might synchronize)."""
        if self.data.size == 0:
            self._has_sorted_indices = True
        elif not hasattr(self, "_has_sorted_indices"):
            is_sorted = self._has_sorted_indices_kern(self.indptr, self.indices, size=self.indptr.size - 1)
            is_sorted.values = _rows_ok(self.indptr, self.indices, strict=False)  # what the kernel writes
            self._has_sorted_indices = bool(is_sorted.all())  # synchronize!
        return self._has_sorted_indices

    def __set_sorted(self, val: bool) -> None:
        self._has_sorted_indices = bool(val)

    has_sorted_indices = property(fget=__get_sorted, fset=__set_sorted)

    def sum_duplicates(self) -> None:
        """Eliminate duplicate matrix entries by adding them together (in place, through COO)."""
        if self.has_canonical_format:
            return
        # TODO(leofang): add a kernel for compressed sparse matrices without
        # converting to coo
        coo = self.tocoo()
        coo.sum_duplicates()
        self.__init__(coo.asformat(self.format))  # type: ignore[misc]
        self.has_canonical_format = True
