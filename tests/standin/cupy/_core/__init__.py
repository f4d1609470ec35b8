"""Stand-in for ``cupy._core``."""

from cupy._core import _accelerator, _kernel, _routines_linalg, _routines_math, core
from cupy._core._kernel import ElementwiseKernel, ufunc
from cupy._core._routines_linalg import dot, get_compute_type, matmul, set_compute_type, tensordot_core
from cupy._core._routines_math import add, multiply, subtract
from cupy._core.core import array, ndarray

__all__ = [
    "ElementwiseKernel",
    "_accelerator",
    "_kernel",
    "_routines_linalg",
    "_routines_math",
    "add",
    "array",
    "core",
    "dot",
    "get_compute_type",
    "matmul",
    "multiply",
    "ndarray",
    "set_compute_type",
    "subtract",
    "tensordot_core",
    "ufunc",
]
