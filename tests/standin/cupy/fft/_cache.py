"""Stand-in for ``cupy.fft._cache``: the per-thread, per-device LRU cache of cuFFT plans.

``RECORDER`` holds ``lookups`` (a ``PlanLookup(key, hit, max_size, curr_size, device,
thread)`` for every lookup, with the cache's size limit and plan count at that moment)
and ``executions`` (an ``Execution(plan, direction, device, thread)`` for every plan
run by ``cupy.cuda.cufft``); ``RECORDER.reset()`` empties both.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, NamedTuple

from cupy_backends.cuda.api import runtime


class PlanLookup(NamedTuple):
    key: tuple[Any, ...]
    hit: bool
    max_size: int
    curr_size: int
    device: int
    thread: int


class Execution(NamedTuple):
    plan: Any
    direction: int
    device: int
    thread: int


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.lookups: list[PlanLookup] = []
        self.executions: list[Execution] = []

    def reset(self) -> None:
        with self.lock:
            self.lookups.clear()
            self.executions.clear()


RECORDER = Recorder()

_thread_local = threading.local()


def _per_device_caches() -> list[PlanCache | None]:
    caches = getattr(_thread_local, "per_device_cufft_cache", None)
    if caches is None:
        caches = _thread_local.per_device_cufft_cache = [None] * runtime.getDeviceCount()
    return caches


def _memsize(plan: Any) -> int:
    return 0  # the fake plans have no work area


class PlanCache:
    """A per-thread, per-device LRU cache of cuFFT plans (``size=16`` plans, ``memsize=-1``:
    unlimited); a size or memsize of 0 disables it, -1 lifts that limit."""

    def __init__(self, size: int = 16, memsize: int = -1, dev: int = -1) -> None:
        self._validate_size_memsize(size, memsize)
        self._set_size_memsize(size, memsize)
        self._reset()
        self.dev = dev if dev != -1 else runtime.getDevice()

    # ------------------------------------------------------------ mapping
    def __getitem__(self, key: tuple[Any, ...]) -> Any:
        node = self._cache.get(key) if self.is_enabled else None
        with RECORDER.lock:
            RECORDER.lookups.append(
                PlanLookup(key, node is not None, self.size, self.curr_size, self.dev, threading.get_ident())
            )
        if not self.is_enabled:
            return None
        if node is not None:
            self._cache.move_to_end(key)
            self.hits += 1
            return node
        self.misses += 1
        raise KeyError(f"plan not found for key: {key}")

    def __setitem__(self, key: tuple[Any, ...], plan: Any) -> None:
        if not self.is_enabled:
            return
        memsize = _memsize(plan)
        if memsize > self.memsize > 0:
            raise RuntimeError("the plan memsize is too large")
        self._cache.pop(key, None)
        self._eject_until_fit(self.size - 1 if self.size != -1 else -1, self.memsize)
        self._cache[key] = plan

    def __delitem__(self, key: tuple[Any, ...]) -> None:
        if not self.is_enabled:
            return
        if key in self._cache:
            del self._cache[key]
            self.hits += 1
        else:
            self.misses += 1
            raise KeyError(f"plan not found for key: {key}")

    def __iter__(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """(key, plan), most recently used first."""
        yield from reversed(list(self._cache.items()))

    def __repr__(self) -> str:
        size = "(unlimited)" if self.size == -1 else self.size
        memsize = "(unlimited)" if self.memsize == -1 else self.memsize
        lines = [
            f"------------------- cuFFT plan cache (device {self.dev}) -------------------",
            f"cache enabled? {self.is_enabled}",
            f"current / max size   : {self.curr_size} / {size} (counts)",
            f"current / max memsize: {self.get_curr_memsize()} / {memsize} (bytes)",
            f"hits / misses: {self.hits} / {self.misses} (counts)",
            "",
            "cached plans (most recently used first):",
        ]
        lines += [f"key: {key}, plan type: {type(plan).__name__}, memory usage: 0" for key, plan in self]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------ helpers
    def _reset(self) -> None:
        self._cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _validate_size_memsize(size: int, memsize: int) -> None:
        if size < -1 or memsize < -1:
            raise ValueError("invalid input")

    def _set_size_memsize(self, size: int, memsize: int) -> None:
        self.size = size
        self.memsize = memsize
        self.is_enabled = size != 0 and memsize != 0

    def _eject_until_fit(self, size: int, memsize: int) -> None:
        while self._cache and not (size == -1 or len(self._cache) <= size):
            self._cache.popitem(last=False)

    @property
    def curr_size(self) -> int:
        return len(self._cache)

    # ------------------------------------------------------------ public
    def set_size(self, size: int) -> None:
        self._validate_size_memsize(size, self.memsize)
        self._eject_until_fit(size, self.memsize)
        self._set_size_memsize(size, self.memsize)

    def get_size(self) -> int:
        return self.size

    def get_curr_size(self) -> int:
        return self.curr_size

    def set_memsize(self, memsize: int) -> None:
        self._validate_size_memsize(self.size, memsize)
        self._set_size_memsize(self.size, memsize)

    def get_memsize(self) -> int:
        return self.memsize

    def get_curr_memsize(self) -> int:
        return 0

    def get(self, key: tuple[Any, ...], default: Any = None) -> Any:
        try:
            plan = self[key]
        except KeyError:
            return default
        return default if plan is None else plan

    def clear(self) -> None:
        self._reset()

    def show_info(self) -> None:
        print(self)


def get_plan_cache() -> PlanCache:
    """The current thread's plan cache for the current device (created on first use)."""
    caches = _per_device_caches()
    dev = runtime.getDevice()
    cache = caches[dev]
    if cache is None:
        cache = caches[dev] = PlanCache(dev=dev)
    return cache


def _experimental(api_name: str) -> None:
    warnings.warn(
        f"{api_name} is experimental. The interface can change in the future.", FutureWarning, stacklevel=3
    )


def get_plan_cache_size() -> int:
    _experimental("cupy.fft.cache.get_plan_cache_size")
    return get_plan_cache().get_size()


def set_plan_cache_size(size: int) -> None:
    _experimental("cupy.fft.cache.set_plan_cache_size")
    get_plan_cache().set_size(size)


def get_plan_cache_max_memsize() -> int:
    _experimental("cupy.fft.cache.get_plan_cache_max_memsize")
    return get_plan_cache().get_memsize()


def set_plan_cache_max_memsize(size: int) -> None:
    _experimental("cupy.fft.cache.set_plan_cache_max_memsize")
    get_plan_cache().set_memsize(size)


def clear_plan_cache() -> None:
    _experimental("cupy.fft.cache.clear_plan_cache")
    get_plan_cache().clear()


def show_plan_cache_info() -> None:
    """Print every plan cache of this thread, one per device."""
    print("=============== cuFFT plan cache info (all devices) ===============")
    for dev, cache in enumerate(_per_device_caches()):
        if cache is None:
            print(f"------------------- cuFFT plan cache (device {dev}) -------------------")
            print("(uninitialized)\n")
        else:
            cache.show_info()
