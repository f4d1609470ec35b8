"""Stand-in for ``cupyx.scipy.sparse._util``."""

from __future__ import annotations

from typing import Any

import cupy


def isscalarlike(x: Any) -> bool:
    return cupy.isscalar(x) or (isinstance(x, cupy.ndarray) and x.ndim == 0)


def isshape(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and all(isinstance(n, int) for n in x)


def check_shape(shape: Any) -> tuple[int, int]:
    shape = tuple(int(n) for n in shape)
    if len(shape) != 2:
        raise ValueError("Only two-dimensional sparse arrays are supported.")
    if any(n < 0 for n in shape):
        raise ValueError("'shape' elements cannot be negative")
    return shape  # type: ignore[return-value]
