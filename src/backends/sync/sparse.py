"""``cupyx.scipy.sparse``: summing duplicate entries, refused where ``algorithms.deterministic`` is on.

A COO matrix sums the data of duplicate (row, col) entries with ``atomicAdd``
(``sum_duplicates``, which ``tocsr``, ``tocsc``, CSR/CSC ``sum_duplicates`` and the sparse
products call); a CSR/CSC scalar ``A[i, j]`` adds every stored entry at (i, j) the same way
(``_get_intXint``). Both methods are looked up on the matrix at call time. Only float and
complex data with duplicates vary; the wrapper asks whether there are duplicates (a sort
and a device sync, paid only in a deterministic context, and any duplicate counts: two
entries added onto zero happen not to vary). A matrix CuPy knows to be canonical passes at once.

CuPy 14.2's CSR/CSC minor-axis fancy indexing (``csr[:, idx]``, ``csc[idx, :]``, and every
caller of ``_compressed_sparse_matrix._minor_index_fancy``) writes each row's entries through
a shared ``atomicAdd`` write pointer (the ``fill_B`` kernel), so their order within a row can
differ from run to run. In the scope it takes CuPy's own sort-based path of the same class,
``_minor_index_fancy_sorted`` (which CuPy takes itself past int32 sizes): the same entries,
sorted within each row, every run. Two things the wrapper adds to that path:

- the index is flattened first. ``csc[idx, j]`` with a 2-D ``idx`` reaches
  ``_minor_index_fancy`` with it (``IndexMixin._getitem_2d`` sends a 2-D row index with an
  int column to ``_get_arrayXint``); CuPy's kernels read it as flat, while the sorted path's
  ``searchsorted`` refuses it (``ValueError: object too deep for desired array``). The result
  has CuPy's shape, ``(idx.size, 1)``, and entry k holds ``A[idx.flat[k], j]``. (CuPy's own
  path puts every entry of a 2-D index at the wrong row: its ``argsort`` sorts each row of
  ``idx``, not the flat index; the scope does not reproduce that.)
- the result is flagged canonical only when the input is known canonical. The sorted path
  flags it canonical unconditionally, yet duplicate entries of the input stay duplicates in
  it; with that flag ``sum_duplicates()`` would do nothing and ``A[i, j]``'s duplicate check
  would be skipped. Its sorted-indices flag is kept (it is true).

CuPy 13 has no such kernel (it indexes through a transpose) and is left as it is; a CuPy with
the kernel but without the sorted path refuses.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

from .._engine.state import read
from .nondeterministic import alert, guard, kind
from .wrapping import replace

MODULES = ("cupyx.scipy.sparse._coo", "cupyx.scipy.sparse._compressed")
WHY = "float atomicAdd: the order in which duplicate entries are added varies from run to run"
ORDER_WHY = "an atomicAdd write pointer orders the entries within each row differently from run to run"
MINOR_INDEX = "cupyx.scipy.sparse.csr_matrix[:, index_array] (also csc_matrix[index_array, :])"


def has_duplicates(coo: Any) -> bool:
    """Whether the COO matrix ``coo`` stores some (row, col) more than once (syncs the device)."""
    import cupy

    keys = coo.row.astype(cupy.int64) * coo.shape[-1] + coo.col
    return int(cupy.unique(keys).size) < int(keys.size)


def _coo_varies(matrix: Any, *args: Any, **kwargs: Any) -> bool:
    return kind(matrix.data) in ("f", "c") and not matrix.has_canonical_format and has_duplicates(matrix)


def _compressed_varies(matrix: Any, *args: Any, **kwargs: Any) -> bool:
    return kind(matrix.data) in ("f", "c") and not matrix.has_canonical_format and has_duplicates(matrix.tocoo())


def install(module: ModuleType) -> None:
    """Wrap ``sum_duplicates`` (``module`` is ``cupyx.scipy.sparse._coo``: on ``_coo_base``,
    or ``coo_matrix`` in CuPy 13), or ``_get_intXint`` and, in CuPy 14.2, ``_minor_index_fancy``
    (``cupyx.scipy.sparse._compressed``)."""
    if module.__name__.endswith("._coo"):
        owner = getattr(module, "_coo_base", None) or module.coo_matrix
        operation = "cupyx.scipy.sparse.coo_matrix.sum_duplicates (also tocsr, tocsc) with duplicate entries"
        guard(owner, "sum_duplicates", operation, WHY, _coo_varies)
    else:
        operation = "cupyx.scipy.sparse.csr_matrix[i, j] (also csc_matrix) with duplicate entries"
        guard(module._compressed_sparse_matrix, "_get_intXint", operation, WHY, _compressed_varies)
        _sorted_minor_index(module._compressed_sparse_matrix)


def _sorted_minor_index(matrix: type) -> None:
    """Reroute ``matrix._minor_index_fancy`` to ``_minor_index_fancy_sorted`` in the scope,
    where the class has CuPy 14.2's atomic ``fill_B`` kernel (``_fill_B``)."""
    if inspect.getattr_static(matrix, "_fill_B", None) is None:
        return  # CuPy 13: minor-axis indexing goes through a transpose, without the write pointer
    reachable = inspect.getattr_static(matrix, "_minor_index_fancy_sorted", None) is not None

    def make(minor_index_fancy: Any) -> Any:
        def fancy(self: Any, idx: Any) -> Any:
            if not read("algorithms.deterministic"):
                return minor_index_fancy(self, idx)
            M, _ = self._swap(*self.shape)
            n_idx = idx.size
            if self.nnz == 0 or n_idx == 0:  # CuPy's empty result: no kernel
                return minor_index_fancy(self, idx)
            if not reachable:
                alert(MINOR_INDEX, ORDER_WHY)  # raises, or warns and runs CuPy's path
                return minor_index_fancy(self, idx)
            picked = self._minor_index_fancy_sorted(idx.ravel(), M, n_idx, self._swap(M, n_idx))
            if getattr(self, "_has_canonical_format", None) is not True:
                # duplicates of self stay duplicates: whether picked is canonical is computed when asked
                vars(picked).pop("_has_canonical_format", None)
            return picked

        return fancy

    replace(matrix, "_minor_index_fancy", make)
