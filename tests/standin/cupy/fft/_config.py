"""Stand-in for ``cupy.fft._config``; ``cupy.fft.config`` is this module's ``config`` object."""

from __future__ import annotations

import contextvars
from typing import Any

from cupy.fft._cache import (
    clear_plan_cache,
    get_plan_cache,
    get_plan_cache_max_memsize,
    get_plan_cache_size,
    set_plan_cache_max_memsize,
    set_plan_cache_size,
    show_plan_cache_info,
)


def get_current_callback_manager(*args: Any, **kwargs: Any) -> None:
    return None


class _FFTConfig:
    get_plan_cache = staticmethod(get_plan_cache)
    clear_plan_cache = staticmethod(clear_plan_cache)
    get_plan_cache_size = staticmethod(get_plan_cache_size)
    set_plan_cache_size = staticmethod(set_plan_cache_size)
    get_plan_cache_max_memsize = staticmethod(get_plan_cache_max_memsize)
    set_plan_cache_max_memsize = staticmethod(set_plan_cache_max_memsize)
    show_plan_cache_info = staticmethod(show_plan_cache_info)
    get_current_callback_manager = staticmethod(get_current_callback_manager)

    _use_multi_gpus = contextvars.ContextVar("cupy.fft.config.use_multi_gpus", default=False)
    _devices: contextvars.ContextVar[tuple[int, ...] | None] = contextvars.ContextVar(
        "cupy.fft.config.devices", default=None
    )

    @property
    def use_multi_gpus(self) -> bool:
        return self._use_multi_gpus.get()

    @use_multi_gpus.setter
    def use_multi_gpus(self, value: bool) -> None:
        self._use_multi_gpus.set(bool(value))

    @property
    def devices(self) -> tuple[int, ...] | None:
        return self._devices.get() if self._use_multi_gpus.get() else None


config = _FFTConfig()
