"""Ray tasks and actors that run under the flags of the code that calls ``.remote()``.

``backends.integrations.ray.remote`` is used in place of ``ray.remote``, with the same arguments::

    from backends.integrations import ray as backends_ray

    @backends_ray.remote                  # or @backends_ray.remote(num_cpus=1, ...)
    def work(x): ...

    with backends.cudnn.flags(deterministic=True):
        ref = work.remote(1)              # the task runs with cudnn.deterministic=True

At each ``.remote()`` the caller takes a ``backends.snapshot()``, and the worker enters it as a
scope around that call only, so a worker process that Ray reuses keeps nothing from one call to
the next, and its process defaults are never touched. A task that calls ``.remote()`` itself
passes its flags on the same way. How the snapshot travels: a task runs a Ray function exported
for that set of flags (one per set a function is called under, up to 16; the first call under a
new set exports it, a few milliseconds), so its calls send nothing more than a plain Ray task's.
Actor calls, and a task's calls under further sets, send it as the call's first argument,
encoded by the caller as plain data in ``bytes`` (which Ray passes as they are, and which the
worker decodes and checks without running anything from them).

Mirrors of Ray's objects: ``RemoteFunction`` (``.remote``, ``.options``), ``ActorClass``
(``.remote`` makes an actor whose ``__init__`` runs under the caller's flags, ``.options``) and
``ActorHandle`` (``handle.method.remote(...)``, ``.options``; it pickles, so it can be passed to
other tasks). Coroutine methods (async actors), generator functions and threaded actors work as
with Ray: each call is one scope in its own task or thread. ``ActorHandle(ray.get_actor(name))``
wraps a handle Ray gives back. Ray's own objects underneath (``RemoteFunction.ray_remote_function``,
``ActorHandle.ray_actor_handle``) take the snapshot (a ``Snapshot``, or the bytes ``.remote()``
sends) as an explicit first argument; called with anything else there (other ``bytes`` included,
which are never unpickled), the worker raises ``TypeError`` saying so.

Needs ``ray`` (``pip install 'scoped-backends[ray]'``); ``import backends`` does not import it.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, overload

import ray
from ray import cloudpickle

from .._engine.carry import MAGIC, decode, encode
from .._engine.scope import Snapshot, snapshot

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "RemoteFunction", "remote"]


def _encoded() -> bytes:
    """The flags effective here, as the call carries them: ``backends.snapshot()`` encoded as
    plain data. Ray passes ``bytes`` as they are, where it would run a ``Snapshot`` through its
    own serializer (about 0.4 ms more per call, benchmarks/bench_scale_out.py)."""
    return encode(snapshot())


def _checked(flags: object, name: str) -> Snapshot:
    """The caller's snapshot: ``flags`` itself, or decoded from the ``bytes`` that ``.remote()``
    sent (plain data, checked as it is decoded; never unpickled: Ray hands ``bytes`` over as
    data, and a program may pass on bytes it was given); a ``TypeError`` that says how the call
    was made wrongly for anything else."""
    if type(flags) is bytes and flags.startswith(MAGIC):
        try:
            return decode(flags)
        except (ValueError, KeyError, TypeError) as error:
            raise TypeError(
                f"{name} was called with flags encoded by backends that this worker cannot read: {error}"
            ) from error
    if not isinstance(flags, Snapshot):
        got = "bytes that are not the flags .remote() sends" if type(flags) is bytes else type(flags).__name__
        raise TypeError(
            f"{name} was called without the caller's flags: its first argument must be a "
            f"backends.Snapshot, got {got}; call it through "
            "backends.integrations.ray (work.remote(...), handle.method.remote(...)), or pass "
            "backends.snapshot() first when calling the Ray object itself"
        )
    return flags


def _under_flags(fn: Callable[..., Any], takes_self: bool = False) -> Callable[..., Any]:
    """``fn`` as the worker runs it: the first argument (after ``self`` for a method) is the
    caller's snapshot, entered as a scope around this call only. The wrapper keeps ``fn``'s kind
    (coroutine, generator, async generator), which Ray reads to run it."""
    name = getattr(fn, "__qualname__", repr(fn))

    def split(args: tuple[Any, ...]) -> tuple[Snapshot, tuple[Any, ...]]:
        if takes_self:
            if len(args) < 2:
                raise TypeError(f"{name} was called without the caller's flags (no arguments)")
            return _checked(args[1], name), (args[0], *args[2:])
        if not args:
            raise TypeError(f"{name} was called without the caller's flags (no arguments)")
        return _checked(args[0], name), args[1:]

    wrapper: Any
    if inspect.iscoroutinefunction(fn):

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            flags, rest = split(args)
            with flags:
                return await fn(*rest, **kwargs)

    elif inspect.isasyncgenfunction(fn):

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            flags, rest = split(args)
            async for item in flags(fn)(*rest, **kwargs):  # the scope holds only while fn's body runs
                yield item

    elif inspect.isgeneratorfunction(fn):

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            flags, rest = split(args)
            return (yield from flags(fn)(*rest, **kwargs))

    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            flags, rest = split(args)
            with flags:
                return fn(*rest, **kwargs)

    functools.update_wrapper(wrapper, fn)
    del wrapper.__wrapped__
    # Ray checks the arguments of each .remote() against this signature: fn's, with the snapshot
    # first (after self), so a wrong call still fails in the caller.
    parameters = list(inspect.signature(fn).parameters.values())
    at = 1 if takes_self and parameters else 0
    first = [p.replace(kind=inspect.Parameter.POSITIONAL_ONLY) for p in parameters[:at]]
    flags = inspect.Parameter("_backends_flags", inspect.Parameter.POSITIONAL_ONLY)
    wrapper.__signature__ = inspect.Signature([*first, flags, *parameters[at:]])
    return wrapper  # type: ignore[no-any-return]


# -- remote functions ------------------------------------------------------------------------------------
_PINNED_SETS = 16
"""How many sets of flags one remote function gets a Ray function of its own for, the flags
entered around each call (``snapshot(fn)``), so that a task's call sends nothing more than a plain
Ray task's (an argument costs about 15 us per call in Ray itself). Ray exports each to the cluster
once and keeps it for the job's life; calls under further sets send the flags as a first argument."""


class _Exports:
    """The Ray functions that one decorated function is exported as, shared by its ``.options()``:
    one that takes the caller's flags as its first argument, and one per set of flags it was
    called under, up to ``_PINNED_SETS``. All are made from one copy of the function, taken as
    cloudpickle copies it at the first call, so every call sees the globals and closure that the
    function held then, whatever its flags, as Ray's single export of a plain function would."""

    def __init__(self, function: Callable[..., Any], ray_options: dict[str, Any]) -> None:
        self.function = function
        self.ray_options = ray_options
        self.pinned: dict[bytes, Any] = {}  # encoded flags -> Ray's function running under them
        self._copy: Callable[..., Any] | None = None
        self._with_argument: Any = None
        self._lock = threading.Lock()  # so that racing threads export each set once, and no more than the bound

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]  # a lock does not pickle
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _copied(self) -> Callable[..., Any]:
        """The function as Ray would pickle it now, taken once (called with the lock held)."""
        if self._copy is None:
            try:
                self._copy = cloudpickle.loads(cloudpickle.dumps(self.function))
            except TypeError as error:  # what Ray raises for a function it cannot pickle
                name = getattr(self.function, "__qualname__", repr(self.function))
                raise TypeError(f"Could not serialize the function {name} for Ray: {error}") from error
        return self._copy

    @property
    def with_argument(self) -> Any:
        with self._lock:
            if self._with_argument is None:
                self._with_argument = _ray_remote(_under_flags(self._copied()), self.ray_options)
            return self._with_argument

    def pinned_to(self, flags: bytes) -> Any:
        """Ray's function pinned to ``flags`` (made at the first call under them), or ``None``
        once ``_PINNED_SETS`` others have one."""
        made = self.pinned.get(flags)
        if made is None:
            with self._lock:
                made = self.pinned.get(flags)
                if made is None and len(self.pinned) < _PINNED_SETS:
                    made = self.pinned[flags] = _ray_remote(decode(flags)(self._copied()), self.ray_options)
        return made


class RemoteFunction:
    """Mirrors ``ray.remote_function.RemoteFunction``: ``.remote(*args, **kwargs)`` runs the
    function as a Ray task under the flags effective at that call and returns what Ray's
    ``.remote()`` returns (an ``ObjectRef``, several, or a generator of them); ``.options(...)``
    takes Ray's options and returns another ``RemoteFunction`` (which takes ``.options`` again,
    the later ones winning). Pickles (Ray's own pickling).

    Under each of the first 16 sets of flags it is called under (``_PINNED_SETS``), the task
    runs a Ray function exported for those flags (the first call under a new set exports it, a
    few milliseconds, more for a function that captures large data); under later sets,
    ``ray_remote_function`` with the flags first. Every call sees the globals and closure the
    function held at its first call, as with Ray's own single export."""

    def __init__(self, exports: _Exports, call_options: dict[str, Any] | None = None) -> None:
        self._exports = exports
        self._call_options = call_options or {}
        self._targets: dict[bytes, Any] = {}  # encoded flags -> what .remote() calls under them

    @functools.cached_property
    def ray_remote_function(self) -> Any:
        """Ray's own remote function (with the ``.options()`` given), whose first argument is
        the snapshot."""
        base = self._exports.with_argument
        return base.options(**self._call_options) if self._call_options else base

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        flags = _encoded()
        target = self._targets.get(flags)
        if target is None:
            pinned = self._exports.pinned_to(flags)
            if pinned is None:
                return self.ray_remote_function.remote(flags, *args, **kwargs)
            target = self._targets[flags] = pinned.options(**self._call_options) if self._call_options else pinned
        return target.remote(*args, **kwargs)

    def options(self, **options: Any) -> RemoteFunction:
        return RemoteFunction(self._exports, {**self._call_options, **options})

    def __repr__(self) -> str:
        name = getattr(self._exports.function, "__qualname__", "?")
        options = f", options={self._call_options!r}" if self._call_options else ""
        return f"<backends.integrations.ray.RemoteFunction of {name}{options}>"


# -- actors -------------------------------------------------------------------------------------------------
def _with_flags(cls: type) -> type:
    """A subclass of ``cls`` whose ``__init__`` and public methods (static and class methods
    too) take the snapshot first."""
    overrides: dict[str, Any] = {}
    for name in dir(cls):
        if name.startswith("_") and name != "__init__":
            continue
        attribute = inspect.getattr_static(cls, name)
        if isinstance(attribute, staticmethod):
            overrides[name] = staticmethod(_under_flags(attribute.__func__))
        elif isinstance(attribute, classmethod):
            overrides[name] = classmethod(_under_flags(attribute.__func__, takes_self=True))
        elif inspect.isfunction(attribute):
            overrides[name] = _under_flags(attribute, takes_self=True)
    if "__init__" not in overrides:  # object's own __init__: the snapshot is still given

        def __init__(self: Any, flags: object, /) -> None:
            _checked(flags, f"{cls.__qualname__}.__init__")

        overrides["__init__"] = __init__
    return type(cls.__name__, (cls,), {**overrides, "__module__": cls.__module__, "__qualname__": cls.__qualname__})


class ActorClass:
    """Mirrors ``ray.actor.ActorClass``: ``.remote(*args, **kwargs)`` creates the actor, its
    ``__init__`` running under the flags effective at that call, and returns an ``ActorHandle``;
    ``.options(...)`` takes Ray's options and returns another ``ActorClass``."""

    def __init__(self, ray_actor_class: Any) -> None:
        self.ray_actor_class = ray_actor_class
        """Ray's own actor class, whose ``__init__`` and methods take the snapshot first."""

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        return ActorHandle(self.ray_actor_class.remote(_encoded(), *args, **kwargs))

    def options(self, **options: Any) -> ActorClass:
        return ActorClass(self.ray_actor_class.options(**options))

    def __repr__(self) -> str:
        return f"backends.integrations.ray.ActorClass({self.ray_actor_class!r})"


class ActorHandle:
    """Mirrors ``ray.actor.ActorHandle``: ``handle.method`` is an ``ActorMethod`` whose
    ``.remote()`` calls the actor under the flags effective at that call. Pickles as Ray's handle,
    so it can be passed to other tasks and actors, whose calls then carry their own flags.

    ``ActorHandle(handle)`` wraps a handle of an actor made by ``backends.integrations.ray.remote``
    that Ray gave back (``ray.get_actor(name)``); anything else raises ``TypeError``."""

    def __init__(self, ray_actor_handle: Any) -> None:
        if not isinstance(ray_actor_handle, ray.actor.ActorHandle):
            raise TypeError(
                "backends.integrations.ray.ActorHandle() takes a Ray actor handle (ray.get_actor(name), "
                f"or what ActorClass.remote() made), got {type(ray_actor_handle).__name__}"
            )
        self.ray_actor_handle = ray_actor_handle
        """Ray's own handle, whose public methods take the snapshot first."""

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("_"):
            raise AttributeError(name)
        return ActorMethod(getattr(self.ray_actor_handle, name), name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorHandle, (self.ray_actor_handle,))

    def __repr__(self) -> str:
        return f"backends.integrations.ray.ActorHandle({self.ray_actor_handle!r})"


class ActorMethod:
    """Mirrors ``ray.actor.ActorMethod``: ``.remote(*args, **kwargs)`` calls the method under the
    flags effective at that call; ``.options(...)`` takes Ray's method options."""

    def __init__(self, ray_actor_method: Any, name: str) -> None:
        self.ray_actor_method = ray_actor_method
        self._name = name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.ray_actor_method.remote(_encoded(), *args, **kwargs)

    def options(self, **options: Any) -> ActorMethod:
        return ActorMethod(self.ray_actor_method.options(**options), self._name)

    def __repr__(self) -> str:
        return f"backends.integrations.ray.ActorMethod({self._name!r})"


# -- the decorator ------------------------------------------------------------------------------------------
def _ray_remote(target: Any, options: dict[str, Any]) -> Any:
    """``ray.remote`` applied to ``target`` with ``options`` (Ray refuses ``ray.remote()`` with none)."""
    return (ray.remote(**options) if options else ray.remote)(target)


def _make(target: Any, options: dict[str, Any]) -> RemoteFunction | ActorClass:
    already = (RemoteFunction, ActorClass, ray.remote_function.RemoteFunction, ray.actor.ActorClass)
    if isinstance(target, already):
        raise TypeError(
            f"backends.integrations.ray.remote() takes the plain function or class, got {target!r}, which is "
            "already remote: use @backends.integrations.ray.remote in place of @ray.remote, not on top of it"
        )
    if inspect.isclass(target):
        return ActorClass(_ray_remote(_with_flags(target), options))
    if inspect.isfunction(target):
        return RemoteFunction(_Exports(target, options))
    raise TypeError(f"backends.integrations.ray.remote() takes a function or a class, got {type(target).__name__}")


@overload
def remote(target: type, /) -> ActorClass: ...  # type: ignore[overload-overlap]
@overload
def remote(target: Callable[..., Any], /) -> RemoteFunction: ...
@overload
def remote(**options: Any) -> Callable[[Any], Any]: ...
def remote(*args: Any, **options: Any) -> Any:
    """``ray.remote`` whose tasks and actor calls run under the flags of the code that calls
    ``.remote()``: ``@remote`` or ``@remote(**ray_options)`` on a function (a ``RemoteFunction``)
    or a class (an ``ActorClass``). Raises ``TypeError`` for anything else, an object that is
    already remote included; Ray's own errors (a bad option) pass through."""
    if args and not options and len(args) == 1:
        return _make(args[0], {})
    if args:
        raise TypeError("backends.integrations.ray.remote() takes one function or class, or only Ray's options")
    return lambda target: _make(target, options)
