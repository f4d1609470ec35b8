"""Task-step sync for asyncio: ``backends.asyncio.install()``.

Tasks on one thread share CuPy's cuBLAS handle. The launch hooks already make
every GEMM that CuPy launches use its own task's flags; code that calls cuBLAS
itself with CuPy's handle right after an ``await`` also needs the handle to be in
step. ``install()`` sets a task factory whose tasks call ``backends.sync()``
before each step, in the task's own context: each task's coroutine is awaited
through ``synced()``, a native coroutine (asyncio's fast path) around a small
generator that calls ``sync()`` before passing each step on. When nothing
changed, a step costs that generator's resume and one identity comparison.
Nothing ``sync()`` raises reaches the task (a launch through the sync layer
pushes, and raises, again), and it creates no cuBLAS handle.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from typing import Any

from .._engine.scope import Stepped
from ..sync import quietly, sync


async def synced(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """``await coroutine`` and return its result (its exceptions pass through), with
    ``backends.sync()`` before each of its steps (never raising into it).

    A native coroutine around a generator (``drive``): asyncio's Task steps a native
    coroutine, its fast path, and the generator resumes by plain delegation."""
    return await Stepped(coroutine, before=functools.partial(quietly, sync))


def _factory(previous: Any) -> Any:
    def create_task(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        wrapped = synced(coro) if asyncio.iscoroutine(coro) else coro
        if previous is not None:
            task: asyncio.Task[Any] = previous(loop, wrapped, **kwargs)
        else:
            task = asyncio.Task(wrapped, loop=loop, **kwargs)
        if wrapped is not coro:
            # A task cancelled before its first step never starts `synced`, so nothing
            # would close the inner coroutine ("coroutine ... was never awaited").
            task.add_done_callback(lambda _: coro.close())
        return task

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
    """Undo ``install()`` on ``loop`` (default: the running loop; ``RuntimeError`` if there
    is none), restoring the task factory it wrapped. A no-op if it was not installed.
    Tasks created before keep syncing."""
    loop = loop or asyncio.get_running_loop()
    current = loop.get_task_factory()
    if current is not None and hasattr(current, "backends_previous"):
        loop.set_task_factory(current.backends_previous)
