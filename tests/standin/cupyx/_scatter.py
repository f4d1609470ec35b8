"""Stand-in for ``cupyx._scatter`` (``_scatter.py`` v14.2.0): each function calls the
array's deprecated ``scatter_*`` method, which warns ``DeprecationWarning`` and calls
``a._scatter_op``, as in CuPy."""

from __future__ import annotations

from typing import Any


def scatter_add(a: Any, slices: Any, value: Any) -> None:
    """Adds given values to specified elements of an array."""
    a.scatter_add(slices, value)


def scatter_max(a: Any, slices: Any, value: Any) -> None:
    """Stores a maximum value of elements specified by indices to an array."""
    a.scatter_max(slices, value)


def scatter_min(a: Any, slices: Any, value: Any) -> None:
    """Stores a minimum value of elements specified by indices to an array."""
    a.scatter_min(slices, value)
