"""Scatter-add (``ufunc.at``): refused where ``algorithms.deterministic`` is on, for float data.

Every ``ufunc.at`` (``cupy.add.at``, and ``numpy.add.at`` on a CuPy array, which CuPy's
``__array_ufunc__`` sends to it), ``cupyx.scatter_add`` and ``ndarray.scatter_add`` end in
``a._scatter_op(indices, values, op)``, a method CuPy looks up on the array when it is
called, so it is wrapped on ``cupy.ndarray``. Only ``op == "add"`` on float or complex data
with an index that can repeat (an integer array or a list) varies (float ``atomicAdd``: with
duplicate indices the order of the additions differs from run to run); max/min and integer
scatters are order-independent and pass untouched, as do ints, slices and bool masks.
``a[idx] = v`` and ``put`` never reach it: CuPy calls its scatter from C there.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .nondeterministic import guard, kind

MODULE = "cupy._core.core"


def may_repeat(index: Any) -> bool:
    """Whether ``index`` can name an element twice: an integer array or a list does (a bool
    mask, an int, a slice, ``None`` and ``...`` do not)."""
    if type(index) is tuple:
        return any(may_repeat(part) for part in index)
    if index is None or index is Ellipsis or isinstance(index, (int, slice)):
        return False
    return kind(index) != "b"


def _varies(array: Any, slices: Any = None, value: Any = None, op: Any = None, *rest: Any, **kwargs: Any) -> bool:
    return op == "add" and kind(array) in ("f", "c") and may_repeat(slices)


def install(module: ModuleType) -> None:
    """Wrap ``cupy.ndarray._scatter_op`` (``module`` is ``cupy._core.core``)."""
    guard(
        module.ndarray,
        "_scatter_op",
        "cupy.add.at (also numpy.add.at on a CuPy array, cupyx.scatter_add, ndarray.scatter_add)",
        "float atomicAdd: with duplicate indices the order of the additions varies from run to run",
        _varies,
    )
