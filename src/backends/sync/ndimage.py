"""``cupyx.scipy.ndimage`` label statistics: refused on their atomics branch where
``algorithms.deterministic`` is on.

``sum_labels`` (``sum``, and ``center_of_mass`` through it), ``mean``, ``variance`` (and
``standard_deviation`` through it) with an array ``index`` add each element into its label's
float64 total with ``atomicAdd`` (``_ndimage_sum_kernel``, ``_ndimage_mean_kernel``,
``_ndimage_variance_kernel``: module globals looked up at each call). CuPy takes a masked
reduction instead for inputs of 262,144 elements or more with at most 4 labels, and for
dtypes its kernels do not take; those paths have no atomics and pass untouched, as do sums
and means of integers up to 32 bits and bools (exact in float64 while the totals stay below
2**53; 64-bit integers are refused).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .nondeterministic import guard, inexact_in_float64

MODULE = "cupyx.scipy.ndimage._measurements"
WHY = "float atomicAdd: the order of the additions into a label's total varies from run to run"


def _inexact_input(*args: Any, **kwargs: Any) -> bool:
    return bool(args) and inexact_in_float64(args[0])


def _always(*args: Any, **kwargs: Any) -> bool:
    return True  # squared deviations from the mean are floats whatever the input


def install(module: ModuleType) -> None:
    """Wrap the three atomics kernels of ``module`` (``cupyx.scipy.ndimage._measurements``)."""
    operations = (
        ("_ndimage_sum_kernel", "cupyx.scipy.ndimage.sum_labels (also sum, center_of_mass)", _inexact_input),
        ("_ndimage_mean_kernel", "cupyx.scipy.ndimage.mean (also variance, standard_deviation)", _inexact_input),
        ("_ndimage_variance_kernel", "cupyx.scipy.ndimage.variance (also standard_deviation)", _always),
    )
    for kernel, operation, varies in operations:
        guard(module, kernel, operation + " with an array index", WHY, varies)
