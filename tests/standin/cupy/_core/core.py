"""The stand-in ``ndarray``: a shape, a dtype name, the current device and a fake pointer; no data."""

from __future__ import annotations

import itertools
import math
from typing import Any

from cupy_backends.cuda.api import runtime

from cupy._core._dtype import CHAR, ITEMSIZE, get_dtype

_pointers = itertools.count(0x7F0000000000, 0x1000)


class MemoryPointer:
    __slots__ = ("device_id", "ptr")

    def __init__(self, ptr: int, device_id: int) -> None:
        self.ptr = ptr
        self.device_id = device_id


class ndarray:
    """``ndarray(shape, dtype="float64")``. Allocating needs a device, as in CuPy."""

    __array_priority__ = 100

    def __init__(self, shape: Any, dtype: Any = "float64") -> None:
        if isinstance(shape, int):
            shape = (shape,)
        self.shape: tuple[int, ...] = tuple(int(n) for n in shape)
        self.dtype: str = get_dtype(dtype)
        device_id = runtime.getDevice()  # raises CUDARuntimeError without a driver
        self.data = MemoryPointer(next(_pointers), device_id)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def char(self) -> str:
        return CHAR[self.dtype]

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

    def astype(self, dtype: Any, copy: bool = True, **kwargs: Any) -> ndarray:
        dtype = get_dtype(dtype)
        if not copy and dtype == self.dtype:
            return self
        return ndarray(self.shape, dtype)

    def copy(self) -> ndarray:
        return ndarray(self.shape, self.dtype)

    def reshape(self, *shape: Any) -> ndarray:
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        if math.prod(shape) != self.size:
            raise ValueError("cannot reshape array")
        return ndarray(shape, self.dtype)

    def dot(self, b: ndarray, out: ndarray | None = None) -> ndarray:
        from cupy._core._routines_linalg import dot

        return dot(self, b, out)

    def __matmul__(self, other: ndarray) -> ndarray:
        from cupy._core._routines_linalg import matmul

        return matmul(self, other)

    def __rmatmul__(self, other: ndarray) -> ndarray:
        from cupy._core._routines_linalg import matmul

        return matmul(other, self)
