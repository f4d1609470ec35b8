"""Threads and executors that carry the flags: each call runs in a copy of the
context of the code that submitted it.

A plain ``threading.Thread``, ``ThreadPoolExecutor.submit`` and
``loop.run_in_executor`` start from the worker thread's own context, so scope
overrides are lost there (``asyncio.to_thread`` copies the context). Python 3.14's
``threading.Thread(context=...)`` and ``-X thread_inherit_context`` (on by default
only in free-threaded builds) change this for plain threads only; executors still
reuse their worker threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: threading.Thread(context=...): Python 3.14 runs a thread's body in that context
_TAKES_CONTEXT = sys.version_info >= (3, 14)


class ThreadPoolExecutor(concurrent.futures.ThreadPoolExecutor):
    """A drop-in ``concurrent.futures.ThreadPoolExecutor`` whose ``submit`` and ``map``
    run each call in a copy of the submitting context, as ``asyncio.to_thread`` does.

    A worker thread never keeps a context from an earlier call: each call gets the
    copy taken when it was submitted, and changes made in it stay there.
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        """``Executor.submit``, with ``fn`` run in a copy of the current context.
        Raises as the standard ``submit`` does (``RuntimeError`` after ``shutdown``)."""
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)

    # Executor.map calls self.submit once per item, in the submitting thread.


def run_in_executor(
    executor: concurrent.futures.Executor | None, fn: Callable[..., T], *args: Any
) -> asyncio.Future[T]:
    """``loop.run_in_executor(executor, fn, *args)`` in a copy of the current context,
    so ``fn`` sees the calling task's flags. Must be called from a running event loop
    (raises ``RuntimeError`` otherwise, as ``asyncio.get_running_loop()`` does)."""
    loop = asyncio.get_running_loop()
    return loop.run_in_executor(executor, contextvars.copy_context().run, fn, *args)


class Thread(threading.Thread):
    """A ``threading.Thread`` that runs in a copy of its creator's context, taken when
    the thread object is created, on every supported Python.

    Python 3.14 added ``threading.Thread(context=...)``, the context a thread's body runs
    in (by default an empty one, or with ``-X thread_inherit_context`` a copy of the
    context of the code that calls ``start()``). This class passes a copy of its creator's
    context there; a ``context=`` given explicitly (not ``None``) is used as given. Before
    3.14 the copy is entered around the whole thread body (``run()`` included, so a subclass
    that overrides ``run()`` runs in it too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        context = contextvars.copy_context()
        if _TAKES_CONTEXT:
            if kwargs.get("context") is None:
                kwargs["context"] = context
            super().__init__(*args, **kwargs)
        else:
            super().__init__(*args, **kwargs)
            self._backends_context = context

    __init__.__wrapped__ = threading.Thread.__init__  # type: ignore[attr-defined]  # its signature, for help()

    if not _TAKES_CONTEXT:

        def _bootstrap_inner(self) -> None:
            # Wrap the whole thread body, not run(): subclasses override run().
            self._backends_context.run(super()._bootstrap_inner)  # type: ignore[misc]
