"""Stand-in for ``cupy.linalg._product``."""

from __future__ import annotations

from typing import Any

from cupy import _core
from cupy._core.core import ndarray


def dot(a: ndarray, b: ndarray, out: ndarray | None = None) -> ndarray:
    return a.dot(b, out)


def matmul(a: ndarray, b: ndarray, out: ndarray | None = None, **kwargs: Any) -> ndarray:
    return _core.matmul(a, b, out)


def tensordot(a: ndarray, b: ndarray, axes: int = 2) -> ndarray:
    return _core._routines_linalg.tensordot(a, b, axes)
