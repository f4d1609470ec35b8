"""Task-step sync for asyncio: ``backends.asyncio.install()``.

Tasks on one thread share CuPy's cuBLAS handle. The launch hooks already make
every GEMM that CuPy launches use its own task's flags; code that calls cuBLAS
itself with CuPy's handle right after an ``await`` also needs the handle to be in
step. ``install()`` sets a task factory whose tasks call ``backends.sync()``
before each step, in the task's own context. Its cost per step, when nothing
changed, is one wrapper call and one identity comparison.
"""

from __future__ import annotations

import asyncio
import collections.abc
from collections.abc import Coroutine, Generator
from typing import Any

from ..sync import sync


class SyncedCoroutine(collections.abc.Coroutine):  # type: ignore[type-arg]
    """Wraps a coroutine so each step (``send``/``throw``) runs ``backends.sync()`` first."""

    __slots__ = ("coroutine",)

    def __init__(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self.coroutine = coroutine

    def send(self, value: Any) -> Any:
        sync()
        return self.coroutine.send(value)

    def throw(self, *args: Any) -> Any:
        sync()
        return self.coroutine.throw(*args)

    def close(self) -> None:
        self.coroutine.close()

    def __await__(self) -> Generator[Any, None, Any]:
        return (yield from self.coroutine.__await__())

    def __getattr__(self, name: str) -> Any:
        # cr_running, cr_frame, cr_await, cr_code, __name__, __qualname__...: the coroutine's,
        # so inspect.getcoroutinestate() and task repr keep working.
        return getattr(self.coroutine, name)

    def __repr__(self) -> str:
        return f"<synced {self.coroutine!r}>"


def _factory(previous: Any) -> Any:
    def create_task(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        wrapped = SyncedCoroutine(coro) if asyncio.iscoroutine(coro) else coro
        if previous is not None:
            return previous(loop, wrapped, **kwargs)  # type: ignore[no-any-return]
        return asyncio.Task(wrapped, loop=loop, **kwargs)

    create_task.backends_previous = previous  # type: ignore[attr-defined]
    return create_task


def install(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Make every task created on ``loop`` from now on call ``backends.sync()`` before
    each step. ``loop`` defaults to the running loop (``RuntimeError`` if there is
    none). Keeps a task factory that was already set, by wrapping it. Idempotent."""
    loop = loop or asyncio.get_running_loop()
    current = loop.get_task_factory()
    if current is not None and hasattr(current, "backends_previous"):
        return
    loop.set_task_factory(_factory(current))


def uninstall(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Undo ``install()`` on ``loop`` (tasks created before keep syncing)."""
    loop = loop or asyncio.get_running_loop()
    current = loop.get_task_factory()
    if current is not None and hasattr(current, "backends_previous"):
        loop.set_task_factory(current.backends_previous)
