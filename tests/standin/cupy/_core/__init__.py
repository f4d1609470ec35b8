"""Stand-in for ``cupy._core``."""

from cupy._core import _routines_linalg
from cupy._core._routines_linalg import dot, get_compute_type, matmul, set_compute_type, tensordot_core
from cupy._core.core import ndarray

__all__ = ["_routines_linalg", "dot", "get_compute_type", "matmul", "ndarray", "set_compute_type", "tensordot_core"]
