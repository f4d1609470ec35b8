"""Stand-in for ``cupy.cublas``: ``batched_gesv``, behind batched ``cupy.linalg.solve``.

CuPy's module is plain Python: it imports ``cupy_backends.cuda.libs.cublas`` at the top
and looks ``cublas.<t>getrfBatched`` / ``<t>getrsBatched`` up by name at call time,
with the handle from ``cupy.cuda.device.get_cublas_handle()``. The cuBLAS calls here
are CuPy 14's, argument for argument; the array work around them (transposed copies,
pointer arrays made with ``cupy.arange``) is reduced to allocating arrays of the
right shape, as the stand-in computes nothing.
"""

from __future__ import annotations

import math

from cupy_backends.cuda.libs import cublas

from cupy._core.core import ndarray
from cupy.cuda import device
from cupy.linalg._util import linalg_common_type

_batched_gesv_limit = 256
_INFO = 0x30  # a fake host pointer: CuPy passes ``numpy.empty((1,), numpy.int32).ctypes.data``


def get_batched_gesv_limit() -> int:
    return _batched_gesv_limit


def set_batched_gesv_limit(limit: int) -> None:
    global _batched_gesv_limit
    _batched_gesv_limit = limit


def batched_gesv(a: ndarray, b: ndarray) -> ndarray:
    """Solves ``a x = b`` for a stack of matrices with ``cublas<t>getr[fs]Batched()``."""
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError("a must be a stack of square matrices")
    if not ((a.ndim == b.ndim or a.ndim == b.ndim + 1) and a.shape[:-1] == b.shape[: a.ndim - 1]):
        raise ValueError("a must have (..., M, M) shape and b must have (..., M) or (..., M, K)")
    dtype, out_dtype = linalg_common_type(a, b)
    if a.size == 0:
        return ndarray(b.shape, out_dtype)
    t = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}[dtype]
    getrf = getattr(cublas, t + "getrfBatched")
    getrs = getattr(cublas, t + "getrsBatched")

    bs = math.prod(a.shape[:-2]) if a.ndim > 2 else 1
    n = a.shape[-1]
    nrhs = b.shape[-1] if a.ndim == b.ndim else 1
    b_shape = b.shape
    a = ndarray((bs, n, n), dtype)  # CuPy: a Fortran-order copy of each matrix
    b = ndarray((bs, nrhs, n), dtype)

    handle = device.get_cublas_handle()
    lda = ldb = n
    a_array = ndarray((bs,), "uint64")  # CuPy: cupy.arange(a.data.ptr, ..., step, dtype=cupy.uintp)
    b_array = ndarray((bs,), "uint64")
    pivot = ndarray((bs, n), "int32")
    dinfo = ndarray((bs,), "int32")
    getrf(handle, n, a_array.data.ptr, lda, pivot.data.ptr, dinfo.data.ptr, bs)
    getrs(handle, cublas.CUBLAS_OP_N, n, nrhs, a_array.data.ptr, lda, pivot.data.ptr, b_array.data.ptr, ldb, _INFO, bs)
    return ndarray(b_shape, out_dtype)
