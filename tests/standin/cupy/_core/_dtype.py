"""Dtypes of the stand-in: plain names such as ``"float32"``."""

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
    "i": "int32",
    "l": "int64",
    "int": "int64",
    "L": "uint64",
    "uintp": "uint64",
}
_KNOWN = {
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "int8", "int16", "int32", "int64", "uint64",
}  # fmt: skip
# char as NumPy (and ml_dtypes, for bfloat16) spells it
CHAR = {
    "float16": "e",
    "bfloat16": "E",
    "float32": "f",
    "float64": "d",
    "complex64": "F",
    "complex128": "D",
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "l",
    "uint64": "L",
}
ITEMSIZE = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint64": 8,
}


def get_dtype(dtype: Any) -> str:
    """The dtype's name; accepts names, NumPy chars, Python types and NumPy dtypes."""
    if dtype is None:
        return "float64"
    if isinstance(dtype, type):
        dtype = dtype.__name__
    name = str(getattr(dtype, "name", dtype))
    name = _ALIASES.get(name, name)
    if name not in _KNOWN:
        raise TypeError(f"data type {dtype!r} not understood")
    return name


def is_inexact(dtype: str) -> bool:
    return dtype.startswith(("float", "complex", "bfloat"))


def promote_types(a: str, b: str) -> str:
    if a == b:
        return a
    rank = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
    if a.startswith("complex") or b.startswith("complex"):
        wide = any(x in ("complex128", "float64", "int32", "int64") for x in (a, b))
        return "complex128" if wide else "complex64"
    if not is_inexact(a) and not is_inexact(b):
        return max(a, b, key=lambda name: ITEMSIZE[name])
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    if not is_inexact(a) or not is_inexact(b):
        return "float64"
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
