"""cuFFT: ``cuda.cufft_plan_cache.max_size`` into CuPy's plan cache, right before each FFT.

CuPy keeps one cuFFT plan cache per (Python thread, device) and its FFTs fetch it
by calling ``cupy.fft._fft.get_plan_cache()`` (a module global looked up at call
time). The wrapper resizes the cache the launching context is about to use when
its capacity differs from the flag. Asyncio tasks on one thread share the cache,
so a task with a smaller ``max_size`` evicts plans for the others: capacity is
the one plan-cache setting cuFFT-side, and this makes it follow the launcher.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from .._engine.state import read
from . import invalidate
from .wrapping import replace

MODULE = "cupy.fft._fft"


def fit(cache: Any) -> Any:
    """Give ``cache`` (a CuPy ``PlanCache``) the capacity the current context wants."""
    size = read("cuda.cufft_plan_cache.max_size")
    if cache.get_size() != size:
        cache.set_size(size)
        invalidate()  # this thread's last sync() no longer describes the cache
    return cache


def install(module: ModuleType) -> None:
    """Wrap ``get_plan_cache`` in ``cupy.fft._fft``, where every CuPy and
    ``cupyx.scipy.fft`` transform fetches its plan cache."""

    def fitted(original: Any) -> Any:
        def get_plan_cache(*args: Any, **kwargs: Any) -> Any:
            return fit(original(*args, **kwargs))

        return get_plan_cache

    replace(module, "get_plan_cache", fitted)


def current_cache() -> Any:
    """The current thread's plan cache on the current device (CuPy's own accessor)."""
    from cupy.fft._cache import get_plan_cache

    return get_plan_cache()


def sync() -> None:
    if "cupy.fft._cache" in sys.modules:  # else CuPy was unloaded: nothing to push into
        fit(current_cache())
