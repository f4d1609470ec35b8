"""``cupyx.scipy.sparse``: summing duplicate entries, refused where ``algorithms.deterministic`` is on.

A COO matrix sums the data of duplicate (row, col) entries with ``atomicAdd``
(``sum_duplicates``, which ``tocsr``, ``tocsc``, CSR/CSC ``sum_duplicates`` and the sparse
products call); a CSR/CSC scalar ``A[i, j]`` adds every stored entry at (i, j) the same way
(``_get_intXint``). Both methods are looked up on the matrix at call time. Only float and
complex data with duplicates vary; the wrapper asks whether there are duplicates (a sort
and a device sync, paid only in a deterministic context, and any duplicate counts: two
entries added onto zero happen not to vary). A matrix CuPy knows to be canonical passes at once.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .nondeterministic import guard, kind

MODULES = ("cupyx.scipy.sparse._coo", "cupyx.scipy.sparse._compressed")
WHY = "float atomicAdd: the order in which duplicate entries are added varies from run to run"


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
    or ``coo_matrix`` in CuPy 13) or ``_get_intXint`` (``cupyx.scipy.sparse._compressed``)."""
    if module.__name__.endswith("._coo"):
        owner = getattr(module, "_coo_base", None) or module.coo_matrix
        operation = "cupyx.scipy.sparse.coo_matrix.sum_duplicates (also tocsr, tocsc) with duplicate entries"
        guard(owner, "sum_duplicates", operation, WHY, _coo_varies)
    else:
        operation = "cupyx.scipy.sparse.csr_matrix[i, j] (also csc_matrix) with duplicate entries"
        guard(module._compressed_sparse_matrix, "_get_intXint", operation, WHY, _compressed_varies)
