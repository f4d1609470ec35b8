"""Stand-in for ``cupy.linalg._decomposition``: ``cholesky`` calls cuSOLVER's potrf by name.

Unlike the Cython GEMM code, this is Python in CuPy too: ``device.get_cusolver_handle``
is looked up on the module at call time.
"""

from __future__ import annotations

from cupy._core.core import ndarray
from cupy.cuda import device


def cholesky(a: ndarray) -> ndarray:
    from cupy_backends.cuda.libs import cublas, cusolver

    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError("cholesky needs a square 2-D array (the stand-in has no batched potrf)")
    dtype = {"float16": "float32", "bfloat16": "float32"}.get(a.dtype, a.dtype)
    if dtype in ("int8", "int16", "int32", "int64"):
        dtype = "float64"
    out_dtype = dtype
    if a.size == 0:
        return ndarray(a.shape, out_dtype)
    x = a.astype(dtype, copy=True)
    n = len(a)
    handle = device.get_cusolver_handle()
    dev_info = ndarray((1,), "int32")
    char = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}[dtype]
    potrf = getattr(cusolver, f"{char}potrf")
    potrf_bufferSize = getattr(cusolver, f"{char}potrf_bufferSize")
    buffersize = potrf_bufferSize(handle, cublas.CUBLAS_FILL_MODE_UPPER, n, x.data.ptr, n)
    workspace = ndarray((buffersize,), dtype)
    potrf(handle, cublas.CUBLAS_FILL_MODE_UPPER, n, x.data.ptr, n, workspace.data.ptr, buffersize, dev_info.data.ptr)
    return x
