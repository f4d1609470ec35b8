"""Dask tasks that run under the flags of the code that submits them.

Beside ``client.submit(backends.bind(fn), ...)``, which carries the flags effective when ``bind`` was
called, these take a ``backends.snapshot()`` when the work is handed to Dask::

    from backends.integrations import dask as backends_dask

    with backends.cudnn.flags(deterministic=True):
        future = backends_dask.submit(client, work, 1)            # client.submit(work, 1)
        futures = backends_dask.map(client, work, range(10))      # client.map(work, range(10))
        result, = backends_dask.compute(dask.delayed(work)(1))    # dask.compute(...)

The snapshot travels as the first argument of each task, so it is part of the task's key: with
Dask's default ``pure=True``, the same call under other flags is another task, never a result
computed under the earlier flags. The worker enters it as a scope around that task only: a worker
process (or thread) that runs task after task keeps nothing from one to the next, and its process
defaults are never touched. A task that submits work itself passes its flags on the same way.

Mirrors: ``submit`` mirrors ``Client.submit``, ``map`` mirrors ``Client.map`` (keyword arguments
are passed to Dask unchanged), and ``compute`` mirrors ``dask.compute``, for ``dask.delayed``
objects. Needs ``dask[distributed]`` (``pip install 'scoped-backends[dask]'``) for ``submit`` and
``map``, ``dask`` for ``compute``; ``import backends`` imports neither.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import dask
from dask.base import tokenize
from dask.delayed import Delayed

from .._engine.scope import Snapshot, snapshot

__all__ = ["compute", "map", "submit"]


class UnderFlags:
    """``fn`` as the worker runs it: called as ``UnderFlags(fn)(flags, *args, **kwargs)``, it
    enters ``flags`` (a ``backends.Snapshot``) around ``fn(*args, **kwargs)`` only, and raises
    ``TypeError`` if ``flags`` is anything else. It has ``fn``'s name, so Dask's keys and dashboard
    show ``fn``; it pickles when ``fn`` does."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"backends.integrations.dask takes a callable, got {type(fn).__name__}")
        self.fn = fn
        functools.update_wrapper(self, fn)
        del self.__wrapped__  # type: ignore[attr-defined]  # Dask would unwrap the name, not the call

    def __call__(self, flags: object, /, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(flags, Snapshot):
            raise TypeError(
                f"{getattr(self.fn, '__qualname__', self.fn)!r} was called without the caller's flags: "
                f"the first argument must be a backends.Snapshot, got {type(flags).__name__}"
            )
        with flags:
            return self.fn(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (UnderFlags, (self.fn,))

    def __repr__(self) -> str:
        return f"backends.integrations.dask.UnderFlags({self.fn!r})"


def submit(client: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``client.submit(fn, *args, **kwargs)``, the task run under the flags effective now; returns
    Dask's ``Future``. Raises ``TypeError`` if ``fn`` is not callable, and what ``client.submit``
    raises."""
    return client.submit(UnderFlags(fn), snapshot(), *args, **kwargs)


def map(client: Any, fn: Callable[..., Any], /, *iterables: Iterable[Any], **kwargs: Any) -> list[Any]:
    """``client.map(fn, *iterables, **kwargs)``, each task run under the flags effective now;
    returns Dask's list of ``Future``. The iterables are read here (into lists), as
    ``client.map`` reads them. Raises ``TypeError`` if ``fn`` is not callable."""
    lists = [list(iterable) for iterable in iterables]
    count = min((len(items) for items in lists), default=0)
    return client.map(UnderFlags(fn), [snapshot()] * count, *lists, **kwargs)  # type: ignore[no-any-return]


def _new_key(key: Any, token: str) -> Any:
    """``key`` for the same work under other flags: a new name with the flags' token in it."""
    if isinstance(key, tuple) and key:
        return (f"{key[0]}-{token}", *key[1:])
    return f"{key}-{token}"


def _delayed_under(flags: Snapshot, delayed: Delayed) -> Delayed:
    """A copy of ``delayed`` whose every task calls its function through ``UnderFlags`` with
    ``flags``, under new keys (the same graph under other flags is other work: Dask must not
    share results between them). Needs Dask's task spec (Dask 2024.12 or newer)."""
    spec = getattr(dask, "_task_spec", None)
    if spec is None:
        raise RuntimeError(f"backends.integrations.dask.compute() needs dask 2024.12 or newer, not {dask.__version__}")
    graph = spec.convert_legacy_graph(dict(delayed.__dask_graph__()))
    token = tokenize(flags)
    subs = {key: _new_key(key, token) for key in graph}
    flags_node = spec.DataNode(None, flags)
    rewritten = {}
    for key, node in graph.items():
        node = node.substitute(subs, key=subs[key])
        if type(node) is spec.Task:  # a call (not data, an alias or a container)
            node = spec.Task(node.key, UnderFlags(node.func), flags_node, *node.args, **node.kwargs)
        rewritten[node.key] = node
    return Delayed(subs[delayed.key], rewritten)


def compute(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """``dask.compute(*args, **kwargs)`` with every task of each ``dask.delayed`` object run under
    the flags effective now (on whichever scheduler ``dask.compute`` picks: the distributed
    ``Client`` too); returns what ``dask.compute`` returns. Other values pass through as they do
    in ``dask.compute``; another Dask collection (an array, a dataframe) raises ``TypeError``."""
    flags = snapshot()
    under = []
    for arg in args:
        if isinstance(arg, Delayed):
            arg = _delayed_under(flags, arg)
        elif dask.is_dask_collection(arg):
            raise TypeError(
                f"backends.integrations.dask.compute() carries the flags into dask.delayed objects only, got "
                f"{type(arg).__name__}: wrap the work in dask.delayed, or use submit()/map()"
            )
        under.append(arg)
    return dask.compute(*under, **kwargs)  # type: ignore[no-any-return]
