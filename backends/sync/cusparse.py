"""cuSPARSE: SpMV and SpMM with a transposed sparse matrix, refused where
``algorithms.deterministic`` is on.

cuSPARSE documents that SpMM with the (conjugate) transpose of the sparse matrix "may
produce slightly different results during different runs with the same input
parameters", and its SpMV transpose path works the same way. CuPy asks for it in
``cupyx.cusparse.spmv``/``spmm`` with ``transa=True``, with a CSC matrix (stored as the
transpose of a CSR one), and so in ``csc_matrix @ dense``. Both call
``cupy_backends.cuda.libs.cusparse.spMV``/``spMM``, looked up at call time, with the
operation on the sparse matrix as the second argument.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .nondeterministic import guard

MODULE = "cupy_backends.cuda.libs.cusparse"
NON_TRANSPOSE = 0  # CUSPARSE_OPERATION_NON_TRANSPOSE
WHY = "cuSPARSE's transposed SpMV/SpMM may give slightly different results from run to run"


def _transposed(handle: Any = None, op_a: Any = NON_TRANSPOSE, *args: Any, **kwargs: Any) -> bool:
    return bool(op_a != NON_TRANSPOSE)


def install(module: ModuleType) -> None:
    """Wrap ``spMV`` and ``spMM`` of ``module`` (CuPy's cuSPARSE bindings)."""
    guard(module, "spMV", "cupyx.cusparse.spmv with a transposed matrix (also csc_matrix @ vector)", WHY, _transposed)
    guard(module, "spMM", "cupyx.cusparse.spmm with a transposed matrix (also csc_matrix @ matrix)", WHY, _transposed)
