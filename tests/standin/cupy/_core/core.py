"""The stand-in ``ndarray``: a shape, a dtype, the current device, a fake pointer and, for
arrays made by ``cupy.array``, a flat list of Python values (C order); other arrays have
``values = None`` and no data.

Values are carried through what the stand-in's own models need (``astype``, ``reshape``,
``ravel``, indexing, ``+ - * / %`` elementwise, ``all``, ``sum``, ``int()``, ``bool()``);
anything a kernel writes loses them. Reading the values of an array without any raises
``TypeError``, so a model never silently computes with made-up data.

Scatters (CuPy's ``_routines_indexing.pyx``) are recorded in ``SCATTERS``: a
``Scatter(op, dtype, thread)`` for each ``_scatter_op`` (``ufunc.at``, ``cupyx.scatter_*``,
``ndarray.scatter_*``), each ``a[idx] = v`` (op ``"update"``) and each ``put`` (op
``"update"``). As in CuPy, ``ufunc.at`` and the ``scatter_*`` methods reach
``self._scatter_op`` as an attribute at call time, while ``__setitem__`` and ``put`` call
the module-level functions directly (Cython's C-level calls).
"""

from __future__ import annotations

import itertools
import math
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy
from cupy_backends._standin_recorder import CallRecorder
from cupy_backends.cuda.api import runtime

# private: the real cupy._core.core has none of these names
from cupy._core._dtype import CHAR as _CHAR
from cupy._core._dtype import ITEMSIZE as _ITEMSIZE
from cupy._core._dtype import get_dtype as _get_dtype
from cupy._core._dtype import promote_types as _promote_types

_pointers = itertools.count(0x7F0000000000, 0x1000)
_allocations: weakref.WeakValueDictionary[int, _ndarray_base] = weakref.WeakValueDictionary()


def _allocation_size(ptr: int) -> int | None:
    """The size in bytes of the live array whose data starts at ``ptr``, or ``None`` (not
    CuPy's: lets a stand-in library see how large a buffer it was handed is)."""
    array = _allocations.get(ptr)
    return None if array is None else array.nbytes


class _MemoryPointer:
    __slots__ = ("device_id", "ptr")

    def __init__(self, ptr: int, device_id: int) -> None:
        self.ptr = ptr
        self.device_id = device_id


class Scatter(NamedTuple):
    op: str
    dtype: str
    thread: int


SCATTERS: CallRecorder[Scatter] = CallRecorder()


def _cast(value: Any, kind: str) -> Any:
    """A Python value of NumPy kind ``kind`` (complex to real drops the imaginary part, as NumPy)."""
    if kind == "c":
        return complex(value)
    if isinstance(value, complex):
        value = value.real
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    return float(value)


def _grid(a: _ndarray_base) -> Any:
    """``a``'s values as a NumPy object array of ``a``'s shape (Python arithmetic, broadcasting)."""
    grid = numpy.empty(len(a._known_values()), dtype=object)
    grid[:] = a.values
    return grid.reshape(a.shape)


def _from_grid(grid: Any, dtype: Any) -> ndarray:
    dtype = _get_dtype(dtype)
    grid = numpy.asarray(grid, dtype=object)
    return ndarray(grid.shape, dtype, values=[_cast(v, dtype.kind) for v in grid.ravel().tolist()])


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float, complex, numpy.generic))


def _scalar_result_dtype(dtype: Any, scalar: Any) -> Any:
    """NumPy 2's rule for an array with a Python scalar: the array's dtype wins within its kind."""
    if isinstance(scalar, numpy.generic):
        return _promote_types(dtype, scalar.dtype.name)
    kind = dtype.kind
    if isinstance(scalar, bool) or (isinstance(scalar, int) and kind != "b"):
        return dtype
    if isinstance(scalar, int):
        return _get_dtype("int64")
    if isinstance(scalar, float):
        return dtype if kind in "fc" else _get_dtype("float64")
    return dtype if kind == "c" else _get_dtype("complex128")


def _binary(a: Any, b: Any, fn: Callable[[Any, Any], Any], true_divide: bool = False) -> ndarray:
    """``fn`` elementwise with broadcasting; values only when both operands have them."""
    arrays = [x for x in (a, b) if isinstance(x, _ndarray_base)]
    if len(arrays) == 2:
        dtype = _promote_types(a.dtype, b.dtype)
    else:
        scalar = b if isinstance(a, _ndarray_base) else a
        if not _is_scalar(scalar):
            return NotImplemented
        dtype = _scalar_result_dtype(arrays[0].dtype, scalar)
    if true_divide and dtype.kind in "biu":
        dtype = _get_dtype("float64")
    shape = numpy.broadcast_shapes(*(x.shape for x in arrays))
    if any(x.values is None for x in arrays):
        return ndarray(shape, dtype)
    operands = [_grid(x) if isinstance(x, _ndarray_base) else x for x in (a, b)]
    try:
        return _from_grid(fn(*operands), dtype)
    except ArithmeticError:  # 1 / 0 in Python: no values rather than NumPy's inf
        return ndarray(shape, dtype)


def _should_use_rop(x: Any, y: Any) -> bool:
    """CuPy's ``core.pyx`` ``_should_use_rop``: leave ``x op y`` to ``y`` (``NotImplemented``)
    when ``y`` opts out of ufuncs, or has a higher ``__array_priority__`` (sparse matrices: 101)."""
    y_ufunc = getattr(y, "__array_ufunc__", _HANDLED)
    if y_ufunc is not _HANDLED:
        return y_ufunc is None
    return bool(getattr(x, "__array_priority__", 0) < getattr(y, "__array_priority__", 0))


_HANDLED = object()


class _Flags:
    c_contiguous = True  # stand-in arrays have no strides
    f_contiguous = False


class _ndarray_base:
    """``ndarray(shape, dtype="float64", *, values=None)``. Allocating needs a device, as in CuPy."""

    __array_priority__ = 100

    def __init__(self, shape: Any, dtype: Any = "float64", *, values: list[Any] | None = None) -> None:
        if isinstance(shape, int):
            shape = (shape,)
        self.shape: tuple[int, ...] = tuple(int(n) for n in shape)
        self.dtype = _get_dtype(dtype)
        if values is not None and len(values) != self.size:
            raise ValueError(f"{len(values)} values for an array of size {self.size}")
        self.values = values
        device_id = runtime.getDevice()  # raises CUDARuntimeError without a driver
        self.data = _MemoryPointer(next(_pointers), device_id)
        _allocations[self.data.ptr] = self

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def char(self) -> str:
        return _CHAR[self.dtype]

    @property
    def flags(self) -> _Flags:
        return _Flags()

    @property
    def device(self) -> Any:
        from cupy.cuda.device import Device

        return Device(self.data.device_id)

    def __repr__(self) -> str:
        return f"ndarray(shape={self.shape}, dtype={self.dtype})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self) -> Iterator[ndarray]:
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    # ------------------------------------------------------------ values
    def _known_values(self) -> list[Any]:
        if self.values is None:
            raise TypeError(f"the stand-in {self!r} has no values (only cupy.array(...) makes arrays with values)")
        return self.values

    def _scalar(self) -> Any:
        if self.size != 1:
            raise ValueError("only an array of one element can be converted to a Python scalar")
        return self._known_values()[0]

    def __int__(self) -> int:
        return int(self._scalar())

    def __float__(self) -> float:
        return float(self._scalar())

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError("The truth value of an array with more than one element is ambiguous.")
        return bool(self._scalar())

    def item(self) -> Any:
        return self._scalar()

    def tolist(self) -> Any:
        return _grid(self).tolist()

    def get(self, stream: Any = None) -> Any:
        """The values as a NumPy array (``TypeError`` without values)."""
        return numpy.array(self.tolist(), dtype=None if self.dtype == "bfloat16" else str(self.dtype))

    # ------------------------------------------------------------ shape and dtype
    def astype(self, dtype: Any, copy: bool = True, **kwargs: Any) -> ndarray:
        dtype = _get_dtype(dtype)
        if not copy and dtype == self.dtype:
            return self
        values = None if self.values is None else [_cast(v, dtype.kind) for v in self.values]
        return ndarray(self.shape, dtype, values=values)

    def copy(self, order: str = "C") -> ndarray:
        return ndarray(self.shape, self.dtype, values=None if self.values is None else list(self.values))

    def reshape(self, *shape: Any, order: str = "C") -> ndarray:
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        shape = tuple(int(n) for n in shape)
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            shape = tuple(self.size // known if n == -1 else n for n in shape)
        if math.prod(shape) != self.size:
            raise ValueError("cannot reshape array")
        return ndarray(shape, self.dtype, values=self.values)

    def ravel(self, order: str = "C") -> ndarray:
        return self.reshape(self.size)

    def fill(self, value: Any) -> None:
        self.values = None  # (the stand-in keeps no values for a filled array)

    @property
    def real(self) -> ndarray:
        """For complex arrays, CuPy's view of the real parts (a float array of half the width)."""
        if self.dtype.kind != "c":
            return self
        values = None if self.values is None else [v.real for v in self.values]
        return ndarray(self.shape, self.dtype.char.lower(), values=values)

    @property
    def imag(self) -> ndarray:
        if self.dtype.kind != "c":
            return ndarray(self.shape, self.dtype, values=None if self.values is None else [0] * self.size)
        values = None if self.values is None else [v.imag for v in self.values]
        return ndarray(self.shape, self.dtype.char.lower(), values=values)

    # ------------------------------------------------------------ reductions (whole array only)
    def all(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> ndarray:
        return ndarray((), "bool", values=None if self.values is None else [all(self.values)])

    def any(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> ndarray:
        return ndarray((), "bool", values=None if self.values is None else [any(self.values)])

    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False) -> ndarray:
        if dtype is None:
            kind = self.dtype.kind
            dtype = "int64" if kind in "bi" else "uint64" if kind == "u" else self.dtype
        dtype = _get_dtype(dtype)
        values = None if self.values is None else [_cast(sum(self.values), dtype.kind)]
        return ndarray((), dtype, values=values)

    def cumsum(self, axis: Any = None, dtype: Any = None, out: Any = None) -> ndarray:
        import cupy

        return cupy.cumsum(self, axis, dtype, out)

    def cumprod(self, axis: Any = None, dtype: Any = None, out: Any = None) -> ndarray:
        import cupy

        return cupy.cumprod(self, axis, dtype, out)

    # ------------------------------------------------------------ arithmetic
    def __add__(self, other: Any) -> ndarray:
        return _binary(self, other, lambda x, y: x + y)

    def __radd__(self, other: Any) -> ndarray:
        return _binary(other, self, lambda x, y: x + y)

    def __sub__(self, other: Any) -> ndarray:
        return _binary(self, other, lambda x, y: x - y)

    def __rsub__(self, other: Any) -> ndarray:
        return _binary(other, self, lambda x, y: x - y)

    def __mul__(self, other: Any) -> ndarray:
        return _binary(self, other, lambda x, y: x * y)

    def __rmul__(self, other: Any) -> ndarray:
        return _binary(other, self, lambda x, y: x * y)

    def __truediv__(self, other: Any) -> ndarray:
        return _binary(self, other, lambda x, y: x / y, true_divide=True)

    def __rtruediv__(self, other: Any) -> ndarray:
        return _binary(other, self, lambda x, y: x / y, true_divide=True)

    def __mod__(self, other: Any) -> ndarray:
        return _binary(self, other, lambda x, y: x % y)

    def dot(self, b: ndarray, out: ndarray | None = None) -> ndarray:
        from cupy._core._routines_linalg import dot

        return dot(self, b, out)

    def __matmul__(self, other: Any) -> Any:
        from cupy._core._routines_linalg import matmul

        if isinstance(other, _ndarray_base):
            return matmul(self, other)
        if _should_use_rop(self, other):  # a sparse matrix: its __rmatmul__
            return NotImplemented
        raise NotImplementedError("the stand-in does not model numpy.matmul of a CuPy array")

    def __rmatmul__(self, other: ndarray) -> ndarray:
        from cupy._core._routines_linalg import matmul

        return matmul(other, self)

    @property
    def T(self) -> ndarray:
        """The axes reversed (values transposed where known)."""
        if self.values is None:
            return ndarray(self.shape[::-1], self.dtype)
        return _from_grid(numpy.transpose(_grid(self)), self.dtype)

    # ------------------------------------------------------------ indexing
    def __getitem__(self, slices: Any) -> ndarray:
        """Basic and advanced indexing (a gather: nothing is recorded)."""
        key, known = _host_key(slices)
        if self.values is None or not known:
            shape = numpy.broadcast_to(numpy.int8(0), self.shape)[key].shape
            return ndarray(shape, self.dtype)
        picked = numpy.arange(self.size).reshape(self.shape)[key]
        return ndarray(numpy.shape(picked), self.dtype, values=[self.values[i] for i in numpy.ravel(picked).tolist()])

    def __setitem__(self, slices: Any, value: Any) -> None:
        """``a[slices] = value``: CuPy's ``_ndarray_setitem`` calls ``_scatter_op`` at C level."""
        _scatter_op(self, slices, value, "update")

    def put(self, indices: Any, values: Any, mode: str = "wrap") -> None:
        """CuPy's ``_ndarray_put``: its own ``_put_*_kernel``, no ``_scatter_op``."""
        if mode not in ("raise", "wrap", "clip"):
            raise ValueError("clipmode not understood")
        if not isinstance(values, _ndarray_base):
            values = array(values, dtype=self.dtype)
        if values.size == 0:
            return
        SCATTERS.record(Scatter("update", self.dtype, threading.get_ident()))
        self.values = None

    # (stacklevel=2: CuPy warns from Cython, which has no frame of its own)
    def scatter_add(self, slices: Any, value: Any) -> None:
        warnings.warn(
            "`ndarray.scatter_add` is deprecated. Please use `cupy.add.at` instead.", DeprecationWarning, stacklevel=2
        )
        self._scatter_op(slices, value, "add")

    def scatter_max(self, slices: Any, value: Any) -> None:
        warnings.warn(
            "`ndarray.scatter_max` is deprecated Please use `cupy.maximum.at` instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        self._scatter_op(slices, value, "max")

    def scatter_min(self, slices: Any, value: Any) -> None:
        warnings.warn(
            "`ndarray.scatter_min` is deprecated Please use `cupy.minimum.at` instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        self._scatter_op(slices, value, "min")

    def _scatter_op(self, slices: Any, value: Any, op: Any) -> None:
        _scatter_op(self, slices, value, op)

    # ------------------------------------------------------------ NumPy interoperability
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """As CuPy's: ``numpy.add.at(a, ...)`` becomes ``cupy.add.at(a, ...)`` (``cupy``'s
        ufunc of the same ``__name__``, looked up at call time)."""
        import cupy

        inout = inputs
        if "out" in kwargs:
            out = kwargs["out"]
            if len(out) != 1:
                raise ValueError("The 'out' parameter must have exactly one array value")
            inout += out
            kwargs["out"] = out[0]
        if method not in ("__call__", "outer", "at", "reduce", "accumulate", "reduceat"):
            return NotImplemented
        try:
            func = getattr(cupy, ufunc.__name__)  # (CuPy also tries cupyx.scipy.special)
            if method != "__call__":
                func = getattr(func, method)
        except AttributeError:
            return NotImplemented
        for x in inout:
            # CuPy takes its scalar types, CuPy and NumPy arrays (and __cuda_array_interface__)
            if not _is_scalar(x) and not isinstance(x, (_ndarray_base, numpy.ndarray)):
                return NotImplemented
        return func(*inputs, **kwargs)


class ndarray(_ndarray_base):
    """``cupy.ndarray`` (CuPy's Python subclass of the Cython ``_ndarray_base``)."""


def _host_key(slices: Any) -> tuple[tuple[Any, ...], bool]:
    """An index NumPy understands, and whether its index arrays have values (without, index
    arrays become placeholders of the right shape: zeros, or all-True masks)."""
    known = True
    key = []
    for k in slices if isinstance(slices, tuple) else (slices,):
        if isinstance(k, _ndarray_base):
            if k.values is None:
                known = False
                k = numpy.ones(k.shape, bool) if k.dtype == "bool" else numpy.zeros(k.shape, numpy.int64)
            else:
                k = numpy.array(k.values, dtype=bool if k.dtype == "bool" else numpy.int64).reshape(k.shape)
        key.append(k)
    return tuple(key), known


def _is_mask(index: Any) -> bool:
    if isinstance(index, _ndarray_base):
        return index.dtype == "bool"
    return numpy.asarray(index).dtype == bool


_ATOMIC_INTS = {"int32", "int64", "uint32", "uint64"}
# What ``_scatter_op_single`` accepts (CuPy 14.2; 13.6 lacks int64 for add, max and min).
_SINGLE_DTYPES = {
    "add": (_ATOMIC_INTS | {"float16", "float32", "float64"}, "cupy.add.at only supports int32, int64, float16, "
            "float32, float64, uint32, uint64 as data type"),
    "sub": ({"int32", "uint32"}, "cupy.subtract.at only supports int32, uint32, as data type"),
    "max": (_ATOMIC_INTS | {"float32", "float64"}, "cupy.maximum.at only supports int32, int64, float32, "
            "float64, uint32, uint64 as data type"),
    "min": (_ATOMIC_INTS | {"float32", "float64"}, "cupy.minimum.at only supports int32, int64, float32, "
            "float64, uint32, uint64 as data type"),
    "and": (_ATOMIC_INTS, "cupy.bitwise_and.at only supports int32, int64, uint32, uint64 as data type"),
    "or": (_ATOMIC_INTS, "cupy.bitwise_or.at only supports int32, int64, uint32, uint64 as data type"),
    "xor": (_ATOMIC_INTS, "cupy.bitwise_xor.at only supports int32, int64, uint32, uint64 as data type"),
}  # fmt: skip
_APPLY = {"update": None, "add": numpy.add, "sub": numpy.subtract, "max": numpy.maximum, "min": numpy.minimum}


def _scatter_op(a: _ndarray_base, slices: Any, value: Any, op: Any) -> None:
    """CuPy's ``_routines_indexing._scatter_op``: with integer-array indices,
    ``_scatter_op_single`` refuses dtypes its atomics lack (``TypeError``); a lone boolean
    mask (``_scatter_op_mask_single``) and basic indices take no dtype check."""
    keys = slices if isinstance(slices, tuple) else (slices,)
    advanced = [k for k in keys if isinstance(k, (_ndarray_base, numpy.ndarray, list))]
    if advanced and not (len(keys) == 1 and _is_mask(keys[0])):
        if op != "update":
            if op not in _SINGLE_DTYPES:
                raise ValueError("provided op is not supported")
            dtypes, message = _SINGLE_DTYPES[op]
            if a.dtype not in dtypes:  # the value is cast to a's dtype first
                raise TypeError(message)
    elif op not in _APPLY and op not in _SINGLE_DTYPES:
        raise ValueError("this op is not supported")
    SCATTERS.record(Scatter(op, a.dtype, threading.get_ident()))
    _apply_values(a, slices, value, op)


def _apply_values(a: _ndarray_base, slices: Any, value: Any, op: str) -> None:
    """What the scatter leaves in ``a``, computed with NumPy when every operand has values."""
    key, known = _host_key(slices)
    if isinstance(value, _ndarray_base):
        value = None if value.values is None else _grid(value)
    elif not _is_scalar(value):
        value = None
    if a.values is None or not known or value is None or op not in _APPLY:
        a.values = None
        return
    grid = _grid(a)
    if op == "update":
        grid[key] = value
    else:
        _APPLY[op].at(grid, key, value)
    a.values = [_cast(v, a.dtype.kind) for v in grid.ravel().tolist()]


def array(
    obj: Any, dtype: Any = None, copy: bool = True, order: str = "K", subok: bool = False, ndmin: int = 0
) -> ndarray:
    """``cupy.array``: an array with values, from nested lists, scalars, NumPy arrays or CuPy arrays."""
    if isinstance(obj, _ndarray_base):
        return obj.astype(obj.dtype if dtype is None else dtype, copy=copy)
    host = numpy.asarray(obj)
    dtype = _get_dtype(host.dtype.name if dtype is None else dtype)
    shape = (1,) * (ndmin - host.ndim) + host.shape
    return ndarray(shape, dtype, values=[_cast(v, dtype.kind) for v in host.ravel().tolist()])
