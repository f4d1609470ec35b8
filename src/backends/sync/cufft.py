"""cuFFT: ``cuda.cufft_plan_cache.max_size`` into CuPy's plan cache, right before each FFT.

CuPy keeps one cuFFT plan cache per (Python thread, device) and its FFTs fetch it
by calling ``cupy.fft._fft.get_plan_cache()`` (a module global looked up at call
time). The wrapper resizes the cache the launching context is about to use when
its capacity differs from what that context wants. Asyncio tasks on one thread share
the cache, so a task with a smaller ``max_size`` evicts plans for the others: capacity
is the one plan-cache setting cuFFT-side, and this makes it follow the launcher.

CuPy's own setting stands where the flag is not set (contract section 8): a size given
through CuPy (``PlanCache.set_size``, ``cupy.fft.config.set_plan_cache_size``), or CuPy's
default of 16, is what the cache holds in every context whose ``describe()`` source for
the flag is ``"default"``. Where the flag is set (a scope, an assignment, ``set_defaults()``
or ``BACKENDS_CUDA_CUFFT_PLAN_CACHE_MAX_SIZE``), the flag's value is pushed; back in a
context where it is not, CuPy's own size is put back. A size set through CuPy after a push
becomes CuPy's own size from then on: the flag, where set, still wins at the next FFT there.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import Any

from .._engine import state
from . import invalidate
from .wrapping import replace

MODULE = "cupy.fft._fft"
FLAG = "cuda.cufft_plan_cache.max_size"
_SLOT = state.SLOT[FLAG]


class _Record:
    """What this thread knows of one of its caches: CuPy's own size for it, and the size the
    sync layer last gave it (``None`` while it holds CuPy's own)."""

    __slots__ = ("cache", "own", "pushed")

    def __init__(self, cache: Any, own: int) -> None:
        self.cache = cache  # held, so that its id is not reused while it is recorded
        self.own = own
        self.pushed: int | None = None


_thread = threading.local()  # .records: id(cache) -> _Record (CuPy's caches are per thread)


def wanted() -> int | None:
    """The flag's value where it is set in the current context (any ``describe()`` source but
    ``"default"``), else ``None``: CuPy's own plan cache size is then in force."""
    value = state.current()[state.VALUES][_SLOT]
    if value is not None:
        return value  # type: ignore[no-any-return]
    defaults = state.published[0]  # read once: values and sources are published together
    if defaults[state.SOURCES][_SLOT] == "default":
        return None
    return defaults[_SLOT]  # type: ignore[no-any-return]


def _records() -> dict[int, _Record]:
    try:
        return _thread.records  # type: ignore[no-any-return]
    except AttributeError:
        records: dict[int, _Record] = {}
        _thread.records = records
        return records


def fit(cache: Any) -> Any:
    """Give ``cache`` (a CuPy ``PlanCache`` of this thread) the size the current context wants:
    the flag's where it is set, else CuPy's own (see the module docstring). Returns ``cache``.

    Raises what ``PlanCache.set_size`` raises (``ValueError`` below -1; the flag never holds
    such a value)."""
    want = wanted()
    size = cache.get_size()
    records = _records()
    record = records.get(id(cache))
    if record is None or record.cache is not cache:
        if want is None or want == size:  # nothing pushed into it yet, and nothing to push
            return cache
        record = records[id(cache)] = _Record(cache, size)
    elif record.pushed is None or size != record.pushed:
        # It holds CuPy's own size, or one set through CuPy since our last push: CuPy's own now.
        record.own, record.pushed = size, None
    target = record.own if want is None else want
    if size != target:
        cache.set_size(target)
        record.pushed = want
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
