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
objects and the collections ``dask.delayed`` takes. Needs ``dask[distributed]``
(``pip install 'scoped-backends[dask]'``); ``import backends`` imports neither.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import dask
from dask.base import normalize_token, tokenize
from dask.delayed import Delayed

from .._engine.scope import Bound, Snapshot, snapshot

__all__ = ["UnderFlags", "compute", "map", "submit"]


# Dask's tokenizer names a functools.partial by its function and arguments, which would leave a
# Bound's flags out of its task's name: a Bound is named by its own __dask_tokenize__ instead.
# (backends registers this on Dask's import, so plain client.submit(backends.bind(fn)) has it.)
normalize_token.register(Bound)(Bound.__dask_tokenize__)


async def _coroutine_signature(flags: object, /, *args: Any, **kwargs: Any) -> Any:
    """(What ``inspect`` reads of an ``UnderFlags`` of a coroutine function: its code.)"""


class UnderFlags:
    """``fn`` as the worker runs it: called as ``UnderFlags(fn)(flags, *args, **kwargs)``, it
    enters ``flags`` (a ``backends.Snapshot``) around ``fn(*args, **kwargs)`` only, and raises
    ``TypeError`` if ``flags`` is anything else. It has ``fn``'s name, so Dask's keys and dashboard
    show ``fn``; it pickles when ``fn`` does.

    Of a coroutine function (``async def``) it is one too, as ``inspect.iscoroutinefunction``
    tells (it has the code of one, as Cython's functions do): Dask's distributed workers run such
    a task on their event loop, and the flags are entered around the whole of it, awaits included."""

    __defaults__ = __kwdefaults__ = None  # with __code__, what inspect reads of a function-like object

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"backends.integrations.dask takes a callable, got {type(fn).__name__}")
        self.fn = fn
        functools.update_wrapper(self, fn)
        del self.__wrapped__  # type: ignore[attr-defined]  # Dask would unwrap the name, not the call
        self._coroutine = inspect.iscoroutinefunction(fn)
        if self._coroutine:
            self.__code__ = _coroutine_signature.__code__

    def _flags(self, flags: object) -> Snapshot:
        if not isinstance(flags, Snapshot):
            raise TypeError(
                f"{getattr(self.fn, '__qualname__', self.fn)!r} was called without the caller's flags: "
                f"the first argument must be a backends.Snapshot, got {type(flags).__name__}"
            )
        return flags

    def __call__(self, flags: object, /, *args: Any, **kwargs: Any) -> Any:
        if self._coroutine:
            return self._awaited(self._flags(flags), args, kwargs)
        with self._flags(flags):
            return self.fn(*args, **kwargs)

    async def _awaited(self, flags: Snapshot, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with flags:
            return await self.fn(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (UnderFlags, (self.fn,))

    def __repr__(self) -> str:
        return f"backends.integrations.dask.UnderFlags({self.fn!r})"


def submit(client: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``client.submit(fn, *args, **kwargs)``, the task run under the flags effective now; returns
    Dask's ``Future``. Raises ``TypeError`` if ``fn`` is not callable, and what ``client.submit``
    raises (a ``TypeError`` naming ``fn`` where Dask cannot pickle the task)."""
    task = UnderFlags(fn)
    with _naming(task):
        return client.submit(task, snapshot(), *args, **kwargs)


def map(client: Any, fn: Callable[..., Any], /, *iterables: Iterable[Any], **kwargs: Any) -> list[Any]:
    """``client.map(fn, *iterables, **kwargs)``, each task run under the flags effective now;
    returns Dask's list of ``Future``. The iterables are read here (into lists), as
    ``client.map`` reads them. Raises ``TypeError`` if ``fn`` is not callable, or names ``fn``
    where Dask cannot pickle its tasks."""
    lists = [list(iterable) for iterable in iterables]
    count = min((len(items) for items in lists), default=0)
    task = UnderFlags(fn)
    with _naming(task):
        return client.map(task, [snapshot()] * count, *lists, **kwargs)  # type: ignore[no-any-return]


@contextlib.contextmanager
def _naming(task: UnderFlags) -> Iterator[None]:
    """Dask's ``TypeError`` for a task it cannot pickle (``Could not serialize object of type ...``,
    the reason only in its ``__cause__`` and Dask's log), raised again naming the function."""
    try:
        yield
    except TypeError as error:
        cause = error.__cause__
        if cause is None or "serialize" not in str(error):
            raise
        name = getattr(task.fn, "__qualname__", None) or repr(task.fn)
        raise TypeError(
            f"Dask cannot send {name} to its workers: {type(cause).__name__}: {cause} (pickling the function, "
            f"its arguments or what they refer to)"
        ) from error


def _new_key(key: Any, token: str) -> Any:
    """``key`` for the same work under other flags: a new name with the flags' token in it."""
    if isinstance(key, tuple) and key:
        return (f"{key[0]}-{token}", *key[1:])
    return f"{key}-{token}"


def _node_under(flags: object, node: Any, keys: tuple[Any, ...], *values: Any) -> Any:
    """A graph node run under ``flags``, given its dependencies' ``keys`` and ``values``."""
    with _node_flags(flags):
        return node(dict(zip(keys, values, strict=True)))


async def _coroutine_node_under(flags: object, node: Any, keys: tuple[Any, ...], *values: Any) -> Any:
    """``_node_under`` of a task whose function is a coroutine function: Dask's distributed
    workers await it on their event loop, under ``flags`` throughout."""
    with _node_flags(flags):
        return await node(dict(zip(keys, values, strict=True)))


def _node_flags(flags: object) -> Snapshot:
    if not isinstance(flags, Snapshot):
        raise TypeError(f"a task was called without the caller's flags, got {type(flags).__name__}")
    return flags


def _delayed_under(flags: Snapshot, delayed: Delayed) -> Delayed:
    """A copy of ``delayed`` whose every task runs under ``flags`` (its arguments computed
    inline included), under new keys (the same graph under other flags is other work: Dask must not
    share results between them). Needs Dask's task spec (Dask 2024.12 or newer)."""
    spec = getattr(dask, "_task_spec", None)
    if spec is None:
        raise RuntimeError(f"backends.integrations.dask.compute() needs dask 2024.12 or newer, not {dask.__version__}")
    legacy = dict(delayed.__dask_graph__())
    graph = spec.convert_legacy_graph(legacy)
    if delayed.key not in graph:  # persisted: computed already, under the flags it was persisted under
        return delayed
    token = tokenize(flags)
    subs = {key: _new_key(key, token) for key in graph}
    flags_node = spec.DataNode(None, flags)
    # What the conversion leaves out is computed already (a Future, a persisted result): kept as it is.
    rewritten = {key: value for key, value in legacy.items() if key not in graph}
    for key, node in graph.items():
        if isinstance(node, spec.TaskRef):  # a key that stands for another
            node = spec.TaskRef(subs.get(node.key, node.key))
        else:
            renamed = {dependency: subs.get(dependency, dependency) for dependency in node.dependencies}
            node = node.substitute(renamed, key=subs[key])
            if isinstance(node, spec.Task):  # a call: the whole of it, its inline arguments too, under the flags
                dependencies = tuple(node.dependencies)
                under = _coroutine_node_under if node.is_coro else _node_under
                node = spec.Task(
                    subs[key], under, flags_node, spec.DataNode(None, node), spec.DataNode(None, dependencies),
                    *[spec.TaskRef(dependency) for dependency in dependencies],
                )
        rewritten[subs[key]] = node
    return Delayed(subs[delayed.key], rewritten)


def compute(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """``dask.compute(*args, **kwargs)`` with every task of each Dask collection run under the
    flags effective now, on whichever scheduler ``dask.compute`` picks (a distributed ``Client``
    too); returns what ``dask.compute`` returns. ``dask.delayed`` objects, and collections that
    ``dask.delayed`` takes (arrays, bags), also inside lists, tuples, sets and dicts as
    ``dask.compute`` finds them (``traverse=True``); other values pass through unchanged. Raises
    what ``dask.compute`` raises, and ``RuntimeError`` on a Dask older than 2024.12."""
    flags = snapshot()
    traverse = kwargs.get("traverse", True)
    under = []
    for arg in args:
        if isinstance(arg, Delayed):
            arg = _delayed_under(flags, arg)
        elif dask.is_dask_collection(arg) or (traverse and isinstance(arg, list | tuple | set | dict)):
            arg = _delayed_under(flags, dask.delayed(arg))
        under.append(arg)
    return dask.compute(*under, **kwargs)  # type: ignore[no-any-return]
