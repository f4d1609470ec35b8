"""Dtypes of the stand-in: names such as ``"float32"``, as a ``str`` subclass with NumPy's
``kind``, ``char``, ``itemsize`` and ``name``, so plain-name comparisons and dict look-ups
keep working."""

from __future__ import annotations

from typing import Any

from cupy_backends.cuda.api import runtime

_ALIASES = {
    "e": "float16",
    "f": "float32",
    "d": "float64",
    "F": "complex64",
    "D": "complex128",
    "half": "float16",
    "single": "float32",
    "double": "float64",
    "float": "float64",
    "complex": "complex128",
    "?": "bool",
    "bool_": "bool",
    "b": "int8",
    "h": "int16",
    "i": "int32",
    "intc": "int32",
    "l": "int64",
    "q": "int64",
    "int": "int64",
    "intp": "int64",
    "longlong": "int64",
    "B": "uint8",
    "H": "uint16",
    "I": "uint32",
    "uintc": "uint32",
    "L": "uint64",
    "Q": "uint64",
    "uintp": "uint64",
    "ulonglong": "uint64",
}
# name: (kind, char as NumPy (and ml_dtypes, for bfloat16) spells it, itemsize)
_INFO = {
    "bool": ("b", "?", 1),
    "float16": ("f", "e", 2),
    "bfloat16": ("f", "E", 2),
    "float32": ("f", "f", 4),
    "float64": ("f", "d", 8),
    "complex64": ("c", "F", 8),
    "complex128": ("c", "D", 16),
    "int8": ("i", "b", 1),
    "int16": ("i", "h", 2),
    "int32": ("i", "i", 4),
    "int64": ("i", "l", 8),
    "uint8": ("u", "B", 1),
    "uint16": ("u", "H", 2),
    "uint32": ("u", "I", 4),
    "uint64": ("u", "L", 8),
}
CHAR = {name: info[1] for name, info in _INFO.items()}
ITEMSIZE = {name: info[2] for name, info in _INFO.items()}


class _Dtype(str):
    """A dtype name (``"float32"``) that also answers ``kind``, ``char``, ``itemsize``, ``name``."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(self)

    @property
    def kind(self) -> str:
        return _INFO[self][0]

    @property
    def char(self) -> str:
        return _INFO[self][1]

    @property
    def itemsize(self) -> int:
        return _INFO[self][2]


_DTYPES = {name: _Dtype(name) for name in _INFO}


def get_dtype(dtype: Any) -> _Dtype:
    """The dtype; accepts names, NumPy chars, Python types and NumPy dtypes."""
    if dtype is None:
        return _DTYPES["float64"]
    if isinstance(dtype, type):
        dtype = dtype.__name__
    name = str(getattr(dtype, "name", dtype))
    name = _ALIASES.get(name, name)
    if name not in _DTYPES:
        raise TypeError(f"data type {dtype!r} not understood")
    return _DTYPES[name]


def is_inexact(dtype: str) -> bool:
    return dtype.startswith(("float", "complex", "bfloat"))


def promote_types(a: str, b: str) -> _Dtype:
    a, b = get_dtype(a), get_dtype(b)
    if a == b or b == "bool":
        return a
    if a == "bool":
        return b
    rank = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
    if a.kind == "c" or b.kind == "c":
        wide = any(x in ("complex128", "float64", "int32", "int64", "uint32", "uint64") for x in (a, b))
        return _DTYPES["complex128" if wide else "complex64"]
    if not is_inexact(a) and not is_inexact(b):
        if a.kind != b.kind and max(a.itemsize, b.itemsize) == 8:
            return _DTYPES["int64"]  # (NumPy: int64 with uint64 gives float64; not needed here)
        return max(a, b, key=lambda name: ITEMSIZE[name])
    if {a, b} == {"float16", "bfloat16"}:
        return _DTYPES["float32"]
    if not is_inexact(a) or not is_inexact(b):
        return _DTYPES["float64"]
    return max(a, b, key=rank.__getitem__)


def to_cuda_dtype(dtype: str, is_half_allowed: bool = False) -> int:
    """As ``cupy._core._dtype.to_cuda_dtype``."""
    if dtype == "float16" and is_half_allowed:
        return runtime.CUDA_R_16F
    if dtype == "float32":
        return runtime.CUDA_R_32F
    if dtype == "float64":
        return runtime.CUDA_R_64F
    if dtype == "complex64":
        return runtime.CUDA_C_32F
    if dtype == "complex128":
        return runtime.CUDA_C_64F
    if dtype == "bfloat16":
        return runtime.CUDA_R_16BF
    raise TypeError(f"dtype is not supported: {dtype}")
