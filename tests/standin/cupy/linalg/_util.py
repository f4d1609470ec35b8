"""Stand-in for ``cupy.linalg._util``: the dtype rule of CuPy's linalg routines."""

from __future__ import annotations

from cupy._core._dtype import is_inexact, promote_types
from cupy._core.core import ndarray


def linalg_common_type(*arrays: ndarray, reject_float16: bool = True) -> tuple[str, str]:
    """``(compute dtype, result dtype)``: integers count as float64 (CuPy's default
    without ``CUPY_DEFAULT_PRECISION``), float16 is refused, as in CuPy."""
    dtypes = [array.dtype for array in arrays]
    if reject_float16 and "float16" in dtypes:
        raise TypeError("float16 is unsupported in linalg")
    inexact = [dtype if is_inexact(dtype) else "float64" for dtype in dtypes]
    common = inexact[0]
    for dtype in inexact[1:]:
        common = promote_types(common, dtype)
    compute = "float32" if common in ("float16", "bfloat16") else common
    return compute, common
