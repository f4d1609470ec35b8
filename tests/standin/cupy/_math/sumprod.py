"""Stand-in for ``cupy._math.sumprod``: ``cumsum`` and ``cumprod`` (``sumprod.py`` v14.2.0
lines 145-180), both ``scan_core`` through the module ``_math`` at call time."""

from __future__ import annotations

from typing import Any

from cupy._core import _routines_math as _math


def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """Returns the cumulative sum of an array along a given axis."""
    return _math.scan_core(a, axis, _math.scan_op.SCAN_SUM, dtype, out)


def cumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """Returns the cumulative product of an array along a given axis."""
    return _math.scan_core(a, axis, _math.scan_op.SCAN_PROD, dtype, out)
