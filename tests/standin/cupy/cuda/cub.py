"""Stand-in for ``cupy.cuda.cub`` (``cub.pyx``, v14.2.0): ``cub_scan`` (lines 509-526, with
``_cub_support_dtype`` 403-421 and ``device_scan`` 276-306) and ``cub_histogram`` (529-545).

``cub_scan`` returns ``None`` where CUB cannot scan (another op, a dtype outside
``CUB_support_dtype``, more than ``0x7fffffff`` elements) and otherwise scans in place
and returns the array, recording ``Scan("cub", op, dtype, thread)`` in
``cupy._core._routines_math.SCANS`` (nothing for an empty array: CuPy launches nothing).
``cub_histogram`` records ``Launch("cub_histogram", (x.dtype, y.dtype), thread)`` in
``cupy._core._kernel.KERNELS`` and returns ``y`` (``None`` when ``y`` is too large).
"""

from __future__ import annotations

from typing import Any

from cupy.cuda import common, device

CUPY_CUB_SUM = 0
CUPY_CUB_MIN = 1
CUPY_CUB_MAX = 2
CUPY_CUB_ARGMIN = 3
CUPY_CUB_ARGMAX = 4
CUPY_CUB_CUMSUM = 5
CUPY_CUB_CUMPROD = 6
CUPY_CUB_PROD = 7

available = True

CUB_support_dtype_without_half = [
    "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float32", "float64", "complex64", "complex128",
]  # fmt: skip
CUB_support_dtype_with_half = [*CUB_support_dtype_without_half, "float16"]
CUB_support_dtype: dict[int, list[str]] = {}


def _cub_support_dtype(sum_mode: bool, dev_id: int) -> list[str]:
    # (CuPy keeps a second table for reductions with sum_mode=True; scans never use it)
    if dev_id not in CUB_support_dtype:
        if common._is_fp16_supported():
            CUB_support_dtype[dev_id] = CUB_support_dtype_with_half
        else:
            CUB_support_dtype[dev_id] = CUB_support_dtype_without_half
    return CUB_support_dtype[dev_id]


def device_scan(x: Any, op: int) -> Any:
    from cupy._core import _routines_math

    if op not in (CUPY_CUB_CUMSUM, CUPY_CUB_CUMPROD):
        raise ValueError("only CUPY_CUB_CUMSUM and CUPY_CUB_CUMPROD are supported.")
    if x.size == 0:
        return x
    scan = _routines_math.scan_op.SCAN_SUM if op == CUPY_CUB_CUMSUM else _routines_math.scan_op.SCAN_PROD
    _routines_math._run_scan("cub", x, scan, x)  # the scan is in-place
    return x


def cub_scan(arr: Any, op: int) -> Any:
    """Perform an (in-place) prefix scan using CUB.

    If the specified scan is not possible, None is returned.
    """
    if op not in (CUPY_CUB_CUMSUM, CUPY_CUB_CUMPROD):
        return None
    x_dtype = arr.dtype
    dev_id = device._c_get_device_id()
    if x_dtype in _cub_support_dtype(False, dev_id):
        # CUB device scan uses int for num_items (cupy/cupy#3309)
        if arr.size > 0x7FFFFFFF:
            return None
        return device_scan(arr, op)
    return None


def cub_histogram(x: Any, y: Any, bins: Any) -> Any:
    """``None`` when ``y`` is too large for CUB's int offsets; else the histogram ``y``."""
    from cupy._core._kernel import record_launch

    if y.size > 0x7FFFFFFF // 1024:
        return None
    record_launch("cub_histogram", x, y)
    y.values = None
    return y
