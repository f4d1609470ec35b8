"""Stand-in CuPy for the tests of ``backends`` (see ``tests/standin/README.md``).

Mimics CuPy 14's module paths and positional call signatures for what the sync
layer touches; arrays are shapes with a dtype (and, from ``cupy.array``, values),
and launches are recorded.
"""

from __future__ import annotations

from typing import Any

import numpy as _numpy

from cupy import _core, _util, cuda, fft, linalg
from cupy._core._kernel import ElementwiseKernel, ufunc
from cupy._core._routines_math import add, multiply, subtract
from cupy._core.core import _cast, _grid, array, ndarray
from cupy._math.misc import maximum, minimum
from cupy._math.sumprod import cumprod, cumsum
from cupy.linalg._einsum import einsum
from cupy.linalg._product import dot, matmul, tensordot

__version__ = "14.0.0+standin"

bool_ = "bool"
float16 = "float16"
# no bfloat16 name: the real CuPy has none (a bfloat16 array takes ml_dtypes.bfloat16; here "bfloat16")
float32 = "float32"
float64 = "float64"
complex64 = "complex64"
complex128 = "complex128"
int8 = "int8"
int16 = "int16"
int32 = "int32"
int64 = "int64"
intp = "int64"
uint8 = "uint8"
uint16 = "uint16"
uint32 = "uint32"
uint64 = "uint64"
ulonglong = "uint64"
newaxis = None
isscalar = _numpy.isscalar


def empty(shape: Any, dtype: Any = "float64", order: str = "C") -> ndarray:
    return ndarray(shape, dtype)


def zeros(shape: Any, dtype: Any = "float64", order: str = "C") -> ndarray:
    return _filled(shape, dtype, 0)


def ones(shape: Any, dtype: Any = "float64", order: str = "C") -> ndarray:
    return _filled(shape, dtype, 1)


def _filled(shape: Any, dtype: Any, value: int) -> ndarray:
    """An array of ``value`` (with values: CuPy fills it)."""
    out = ndarray(shape, dtype)
    out.values = [_cast(value, out.dtype.kind)] * out.size
    return out


def empty_like(a: ndarray, dtype: Any = None, order: str = "K", subok: Any = None, shape: Any = None) -> ndarray:
    return ndarray(a.shape if shape is None else shape, a.dtype if dtype is None else dtype)


zeros_like = ones_like = empty_like


def asarray(a: Any, dtype: Any = None, order: Any = None, *, blocking: bool = False) -> ndarray:
    return array(a, dtype, copy=False)


def unique(ar: ndarray) -> ndarray:
    """The sorted unique values of ``ar`` (needs values: its size depends on them)."""
    return array(sorted(set(ar._known_values())), ar.dtype)


def stack(tup: Any, axis: int = 0, out: Any = None) -> ndarray:
    from cupy._core._dtype import promote_types

    dtype = tup[0].dtype
    for a in tup[1:]:
        dtype = promote_types(dtype, a.dtype)
    if any(a.values is None for a in tup):
        return ndarray(_numpy.stack([_numpy.broadcast_to(0, a.shape) for a in tup], axis).shape, dtype)
    return _core.core._from_grid(_numpy.stack([_grid(a) for a in tup], axis), dtype)


def lexsort(keys: ndarray) -> ndarray:
    """Indices that sort by ``keys[-1]``, then ``keys[-2]``, ... (``keys`` 2-D, with values)."""
    if keys.ndim != 2:
        raise NotImplementedError("Keys must be a 2D array")
    rows = _grid(keys).tolist()
    order = sorted(range(keys.shape[1]), key=lambda i: tuple(row[i] for row in reversed(rows)))
    return array(order, "int64")


def broadcast_arrays(*args: ndarray) -> list[ndarray]:
    shape = _numpy.broadcast_shapes(*(a.shape for a in args))
    out = []
    for a in args:
        if a.shape == shape:
            out.append(a)
        elif a.values is None:
            out.append(ndarray(shape, a.dtype))
        else:
            out.append(_core.core._from_grid(_numpy.broadcast_to(_grid(a), shape), a.dtype))
    return out


def sqrt(x: ndarray) -> ndarray:
    dtype = x.dtype if x.dtype.kind in "fc" else "float64"
    return ndarray(x.shape, dtype, values=None if x.values is None else [v**0.5 for v in x.values])


class _OGrid:
    """``cupy.ogrid[slices]``: open (broadcastable) ``arange`` grids, one per slice."""

    def __getitem__(self, key: Any) -> list[ndarray]:
        key = list(key) if isinstance(key, (list, tuple)) else [key]
        grids = []
        for i, s in enumerate(key):
            values = list(range(*s.indices(s.stop)))
            shape = [1] * len(key)
            shape[i] = len(values)
            grids.append(ndarray(shape, "int64", values=values))
        return grids


ogrid = _OGrid()


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
    out.values = a.values
    return out


# after the names above: the module reads ``cupy.<name>`` at call time
from cupy._statistics.histogram import bincount, histogram, histogram2d, histogramdd  # noqa: E402

__all__ = [
    "ElementwiseKernel",
    "__version__",
    "_core",
    "_util",
    "add",
    "array",
    "asarray",
    "asfortranarray",
    "bincount",
    "bool_",
    "broadcast_arrays",
    "complex64",
    "complex128",
    "cuda",
    "cumprod",
    "cumsum",
    "dot",
    "einsum",
    "empty",
    "empty_like",
    "fft",
    "float16",
    "float32",
    "float64",
    "histogram",
    "histogram2d",
    "histogramdd",
    "int8",
    "int16",
    "int32",
    "int64",
    "intp",
    "isscalar",
    "lexsort",
    "linalg",
    "matmul",
    "maximum",
    "minimum",
    "multiply",
    "ndarray",
    "newaxis",
    "ogrid",
    "ones",
    "ones_like",
    "sqrt",
    "stack",
    "subtract",
    "tensordot",
    "ufunc",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "ulonglong",
    "unique",
    "zeros",
    "zeros_like",
]
