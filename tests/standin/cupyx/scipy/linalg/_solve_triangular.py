"""Stand-in for ``cupyx.scipy.linalg._solve_triangular``: cuBLAS ``?trsm`` / ``?trsmBatched``.

As in CuPy 14, the module imports cuBLAS at the top (``from cupy.cuda import cublas``,
so importing it loads cuBLAS), takes the handle from the Python-level
``device.get_cublas_handle()`` and looks the routine up by name at call time. The
cuBLAS calls are CuPy's, argument for argument (after CuPy's rewriting of ``trans``
and ``lower`` for C-ordered batches); the copies and pointer arrays around them are
reduced to allocations.
"""

from __future__ import annotations

import math
from typing import Any

from cupy._core._dtype import CHAR, promote_types
from cupy._core.core import ndarray
from cupy.cuda import cublas, device

_ONE = 0x10  # a fake host pointer: CuPy passes ``numpy.array(1, dtype).ctypes.data``


def solve_triangular(
    a: ndarray,
    b: ndarray,
    trans: Any = 0,
    lower: bool = False,
    unit_diagonal: bool = False,
    overwrite_b: bool = False,
    check_finite: bool = False,
) -> ndarray:
    if a.ndim == 2:
        if a.shape[0] != a.shape[1]:
            raise ValueError("expected square matrix")
        if len(a) != len(b):
            raise ValueError("incompatible dimensions")
        batch_count = 0
    elif a.ndim > 2:
        if a.shape[-1] != a.shape[-2]:
            raise ValueError("expected a batch of square matrices")
        if a.shape[:-2] != b.shape[: a.ndim - 2]:
            raise ValueError("incompatible batch count")
        if b.ndim < a.ndim - 1 or a.shape[-2] != b.shape[a.ndim - 2]:
            raise ValueError("incompatible dimensions")
        batch_count = math.prod(a.shape[:-2])
    else:
        raise ValueError("expected one square matrix or a batch of square matrices")

    dtype = a.dtype if CHAR[a.dtype] in "fd" else promote_types(a.dtype, "float32")

    if batch_count:
        m, n = b.shape[-2:] if b.ndim == a.ndim else (b.shape[-1], 1)
        b_shape = b.shape
        # trsm receives Fortran arrays: CuPy flips trans/lower instead of copying
        if trans in ("N", cublas.CUBLAS_OP_N):
            trans, lower = cublas.CUBLAS_OP_T, not lower
        elif trans in ("T", cublas.CUBLAS_OP_T) or (trans in ("C", cublas.CUBLAS_OP_C) and CHAR[dtype] in "fd"):
            trans, lower = cublas.CUBLAS_OP_N, not lower
        elif trans in ("C", cublas.CUBLAS_OP_C):
            trans = cublas.CUBLAS_OP_C
        a = ndarray((batch_count, m, m), dtype)
        b = ndarray((batch_count, n, m), dtype)
        a_array = ndarray((batch_count,), "uint64")  # CuPy: cupy.arange(start, stop, step, dtype=cupy.uintp)
        b_array = ndarray((batch_count,), "uint64")
    else:
        a = ndarray(a.shape, dtype)  # CuPy: cupy.array(a, dtype=dtype, order='F')
        b = ndarray(b.shape, dtype)
        m, n = (b.size, 1) if b.ndim == 1 else b.shape
        trans = {"N": cublas.CUBLAS_OP_N, "T": cublas.CUBLAS_OP_T, "C": cublas.CUBLAS_OP_C}.get(trans, trans)

    cublas_handle = device.get_cublas_handle()
    uplo = cublas.CUBLAS_FILL_MODE_LOWER if lower else cublas.CUBLAS_FILL_MODE_UPPER
    diag = cublas.CUBLAS_DIAG_UNIT if unit_diagonal else cublas.CUBLAS_DIAG_NON_UNIT
    t = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}[dtype]

    if batch_count:
        trsm = getattr(cublas, t + "trsmBatched")
        trsm(
            cublas_handle, cublas.CUBLAS_SIDE_LEFT, uplo, trans, diag,
            m, n, _ONE, a_array.data.ptr, m, b_array.data.ptr, m, batch_count,
        )  # fmt: skip
        return ndarray(b_shape, dtype)
    trsm = getattr(cublas, t + "trsm")
    trsm(cublas_handle, cublas.CUBLAS_SIDE_LEFT, uplo, trans, diag, m, n, _ONE, a.data.ptr, m, b.data.ptr, m)
    return b
