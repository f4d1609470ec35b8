"""Stand-in CuPy for the tests of ``backends`` (see ``tests/standin/README.md``).

Mimics CuPy 14's module paths and positional call signatures for what the sync
layer touches; arrays are shapes with a dtype name, and launches are recorded.
"""

from __future__ import annotations

from typing import Any

from cupy import _core, cuda, fft, linalg
from cupy._core.core import ndarray
from cupy.linalg._product import dot, matmul, tensordot

__version__ = "14.0.0+standin"

float16 = "float16"
bfloat16 = "bfloat16"
float32 = "float32"
float64 = "float64"
complex64 = "complex64"
complex128 = "complex128"
int32 = "int32"
int64 = "int64"


def empty(shape: Any, dtype: Any = "float64") -> ndarray:
    return ndarray(shape, dtype)


zeros = ones = empty


def asfortranarray(a: ndarray) -> ndarray:
    """As CuPy's ``_internal_asfortranarray``: a 2-D float32/float64 array is transposed by
    ``cublas.sgeam``/``dgeam`` (looked up by name at call time)."""
    from cupy_backends.cuda.libs import cublas

    out = ndarray(a.shape, a.dtype)
    if a.ndim == 2 and a.dtype in ("float32", "float64"):
        m, n = a.shape
        handle = cuda.device._c_get_cublas_handle()
        geam = cublas.sgeam if a.dtype == "float32" else cublas.dgeam
        geam(handle, 1, 1, m, n, 0x10, a.data.ptr, n, 0x20, a.data.ptr, n, out.data.ptr, m)
    return out


__all__ = [
    "__version__",
    "_core",
    "asfortranarray",
    "bfloat16",
    "complex64",
    "complex128",
    "cuda",
    "dot",
    "empty",
    "fft",
    "float16",
    "float32",
    "float64",
    "int32",
    "int64",
    "linalg",
    "matmul",
    "ndarray",
    "ones",
    "tensordot",
    "zeros",
]
