"""Functions defined as a notebook's cell or a script's top level defines them: in a namespace whose
``__name__`` is ``"__main__"``, which cloudpickle (Ray's and Dask's) copies by value, where it pickles
a function of an importable module by reference. Used by the pickling, Dask, Ray and notebook tests."""

from __future__ import annotations

from typing import Any

#: A notebook's cell: each kind of callable decorated with a scope, an actor-like class with
#: decorated methods, and an undecorated function to bind. Each reports its tag, then
#: (cudnn.deterministic, cudnn.benchmark): the decoration pins the first, the caller's flags give
#: the second.
CELL = '''
import asyncio

import backends


def observed():
    return backends.cudnn.deterministic, backends.cudnn.benchmark


@backends.cudnn.flags(deterministic=True)
def pinned(tag=None):
    """A function pinned to deterministic=True."""
    return tag, observed()


@backends.cudnn.flags(deterministic=True)
async def pinned_async(tag=None):
    """A coroutine function pinned to deterministic=True."""
    await asyncio.sleep(0)
    return tag, observed()


@backends.cudnn.flags(deterministic=True)
def pinned_numbers(count):
    """A generator function pinned to deterministic=True."""
    for i in range(count):
        yield i, observed()


@backends.cudnn.flags(deterministic=True)
async def pinned_async_numbers(count):
    """An async generator function pinned to deterministic=True."""
    for i in range(count):
        await asyncio.sleep(0)
        yield i, observed()


def unpinned(tag=None):
    return tag, observed()


class Model:
    def __init__(self, scale=1):
        self.scale = scale

    @backends.cudnn.flags(deterministic=True)
    def predict(self, x):
        """A method pinned to deterministic=True."""
        return x * self.scale, observed()

    @backends.cudnn.flags(deterministic=True)
    async def predict_async(self, x):
        await asyncio.sleep(0)
        return x * self.scale, observed()

    def unpinned(self, x):
        return x * self.scale, observed()
'''

#: The names CELL defines that are decorated with a scope.
DECORATED = ("pinned", "pinned_async", "pinned_numbers", "pinned_async_numbers")


def as_main(source: str = CELL) -> dict[str, Any]:
    """The namespace ``source`` leaves when run as ``__main__`` runs it (a notebook's or a script's)."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(source, "<notebook cell>", "exec"), namespace)
    return namespace
