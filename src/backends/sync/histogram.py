"""Weighted ``bincount`` and ``histogram``: refused where ``algorithms.deterministic`` is on.

Both add each weight into its bin with ``atomicAdd`` (``cupy/_statistics/histogram.py``),
so a float bin's sum depends on the order the additions land in. The wrapped objects are
the kernels, module globals CuPy looks up at each call, so ``histogramdd`` and
``histogram2d`` (which call ``cupy.bincount``) and any early binding of the functions are
covered. Unweighted counts, histograms with integer or bool weights (counted in an integer
array), and ``bincount`` weights of integers up to 32 bits or bools (exact in its float64 bins
while the totals stay below 2**53) pass untouched; 64-bit integer weights do not.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .nondeterministic import guard, inexact_in_float64, kind

MODULE = "cupy._statistics.histogram"
WHY = "float atomicAdd: the order of the additions into a bin varies from run to run"


def _float_output(*args: Any, **kwargs: Any) -> bool:
    # The bins are the kernel's last argument: float bins are summed in a varying order.
    return bool(args) and kind(args[-1]) in ("f", "c")


def _inexact_weights(x: Any = None, weights: Any = None, *args: Any, **kwargs: Any) -> bool:
    # float64 bins: exact for small integer and bool weights, not for floats and 64-bit integers
    return inexact_in_float64(weights)


def install(module: ModuleType) -> None:
    """Wrap the weighted kernels of ``module`` (``cupy._statistics.histogram``)."""
    guard(
        module,
        "_bincount_with_weight_kernel",
        "cupy.bincount(x, weights) (also cupy.histogramdd and cupy.histogram2d with weights)",
        WHY,
        _inexact_weights,
    )
    operation = "cupy.histogram(x, weights=...) with float or complex weights"
    guard(module, "_weighted_histogram_kernel", operation, WHY, _float_output)
