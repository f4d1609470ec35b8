"""Scopes: one object that is a context manager, an async context manager and a
decorator, and overrides only the flags it was given.

Semantics, in the manner of ``decimal.localcontext`` and ``contextlib``:

* entering publishes a new frame (the current overrides plus this scope's) in
  the ContextVar and keeps the ContextVar token *in that frame*, never on the
  scope, so one scope object can be entered many times, nested in itself and
  from many threads and tasks at once;
* exiting checks that this scope is the innermost one of the current context
  and resets the token; anything else is refused with ``RuntimeError`` before
  any state changes, so the scopes can still be exited in the right order.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

from .errors import show
from .state import ENTRY, check_mapping, current, effective, overrides
from .table import NAMES, Value

F = TypeVar("F", bound=Callable[..., Any])
_set, _reset = overrides.set, overrides.reset  # bound once: entry and exit are hot
_NO_ENTRY = (None, None)


class Scope:
    """A scope overriding some flags: ``with``, ``async with`` or ``@decorator``.

    Build one with ``backends.flags(mapping)``, ``backends.cudnn.flags(...)``,
    ``backends.cuda.matmul.flags(...)``, ``tf32(...)``, ``deterministic()`` or
    ``snapshot()``. Exiting restores the previous state even when the body
    raises or is cancelled; the exception passes through unchanged.

    Raises ``RuntimeError`` on exit when the scope is not the innermost one
    active in the current context (exited out of order, or in another thread or
    asyncio/trio task than the one that entered it); the refused exit changes
    nothing.
    """

    __slots__ = ("__weakref__", "_label", "_overrides")

    def __init__(self, overrides: Mapping[str, Any], label: str | None = None) -> None:
        """``overrides`` maps dotted flag names to values; checked like ``backends.flags()``."""
        self._overrides = check_mapping(overrides, "backends.Scope()")
        self._label = label

    @property
    def overrides(self) -> dict[str, Value]:
        """The flags this scope sets, by dotted name (a copy)."""
        return dict(self._overrides)

    def __repr__(self) -> str:
        return self._label or f"backends.flags({self._overrides!r})"

    # -- context manager -------------------------------------------------
    def __enter__(self) -> Scope:
        parent = current()
        frame = {**parent, **self._overrides}
        try:
            # No other context can see the frame before this line returns, so adding
            # the entry right after publishing it is safe.
            frame[ENTRY] = (self, _set(frame))
        except BaseException:
            # A signal (KeyboardInterrupt) handled between publishing the frame and
            # recording its entry: put the parent back, so a scope is never half-entered.
            if current() is frame:
                _set(parent)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        scope, token = current().get(ENTRY, _NO_ENTRY)
        if scope is not self:
            raise RuntimeError(self._refusal(scope))
        try:
            _reset(token)
        except (ValueError, RuntimeError):
            # ContextVar.reset: ValueError for a token of another Context,
            # RuntimeError for a token already used.
            raise RuntimeError(
                f"cannot exit {self!r}: it was entered in a different context (another "
                f"thread or asyncio/trio task); a scope must be exited in the context "
                f"that entered it"
            ) from None

    def _refusal(self, innermost: Scope | None) -> str:
        if innermost is None:
            return (
                f"cannot exit {self!r}: it is not active in this context (it was entered "
                f"in another thread or asyncio/trio task, or has already been exited)"
            )
        return (
            f"cannot exit {self!r}: the innermost scope active in this context is "
            f"{innermost!r}; scopes must be exited innermost first, in the context "
            f"that entered them"
        )

    async def __aenter__(self) -> Scope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    # -- decorator ---------------------------------------------------------
    def __call__(self, fn: F) -> F:
        """Decorate ``fn`` so the override is active exactly while its own code runs.

        Works for plain functions, methods, coroutine functions, generator functions
        and async generator functions, keeping the kind, name, docstring and
        signature. Raises ``TypeError`` if ``fn`` is not callable.
        """
        if isinstance(fn, (staticmethod, classmethod)):  # decorated above @staticmethod
            return type(fn)(self(fn.__func__))
        if isinstance(fn, type):
            raise TypeError(f"{self!r} decorates functions, not the class {fn.__qualname__}: decorate its methods")
        if not callable(fn):
            raise TypeError(f"{self!r} can only decorate a callable, got {show(fn)}")
        import inspect  # here, not at import: `inspect` costs ~8 ms of `import backends`

        if inspect.isasyncgenfunction(fn):
            wrapper: Callable[..., Any] = _async_generator(self, fn)
        elif inspect.isgeneratorfunction(fn):
            wrapper = _generator(self, fn)
        elif inspect.iscoroutinefunction(fn):
            wrapper = _coroutine(self, fn)
        else:
            wrapper = _function(self, fn)
        return functools.wraps(fn)(wrapper)  # type: ignore[return-value]


def _function(scope: Scope, fn: Callable[..., Any]) -> Callable[..., Any]:
    enter, exit_ = scope.__enter__, scope.__exit__

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        enter()
        try:
            return fn(*args, **kwargs)
        finally:
            exit_()

    return wrapper


def _coroutine(scope: Scope, fn: Callable[..., Any]) -> Callable[..., Any]:
    enter, exit_ = scope.__enter__, scope.__exit__

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        enter()
        try:
            return await fn(*args, **kwargs)
        finally:
            exit_()

    return wrapper


def drive(
    steps: Any, run: Callable[..., Any] | None = None, before: Callable[[], Any] | None = None
) -> Generator[Any, Any, Any]:
    """Pass each step of ``steps`` (a generator, or an awaitable's iterator) on to our
    caller, calling ``before()`` ahead of each step and making each step through
    ``run`` (``Context.run``) when given. Values sent and exceptions thrown in pass
    through; closing closes ``steps``; returns what ``steps`` returns."""
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        if before is not None:
            before()
        try:
            if run is None:
                yielded = steps.send(sent) if thrown is None else steps.throw(thrown)
            else:
                yielded = run(steps.send, sent) if thrown is None else run(steps.throw, thrown)
        except StopIteration as stop:
            return stop.value
        finally:
            thrown = None
        try:
            sent = yield yielded
        except GeneratorExit:
            run(steps.close) if run is not None else steps.close()
            raise
        except BaseException as error:  # thrown in (cancellation, the consumer's throw()): pass it on
            thrown, sent = error, None


class Stepped:
    """An awaitable: ``awaitable`` awaited through ``drive`` (see there)."""

    __slots__ = ("awaitable", "before", "run")

    def __init__(self, awaitable: Any, run: Callable[..., Any] | None = None, before: Callable[[], Any] | None = None):
        self.awaitable, self.run, self.before = awaitable, run, before

    def __await__(self) -> Generator[Any, Any, Any]:
        return drive(self.awaitable.__await__(), self.run, self.before)


def _generator(scope: Scope, fn: Callable[..., Any]) -> Callable[..., Any]:
    # The generator's code runs in a context of its own, copied when it starts, with
    # the scope entered there: every step sees the override (and scopes or assignments
    # that span a yield), and the consumer between steps does not.
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        inner = fn(*args, **kwargs)
        context = contextvars.copy_context()
        context.run(scope.__enter__)
        return (yield from drive(inner, context.run))

    return wrapper


def _async_generator(scope: Scope, fn: Callable[..., Any]) -> Callable[..., Any]:
    # As _generator, with every step of every awaitable run in the generator's context.
    # aclose() from asyncio's finaliser in another task works too: nothing is reset in
    # the finalising task's context.
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        inner = fn(*args, **kwargs)
        context = contextvars.copy_context()
        context.run(scope.__enter__)
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            try:
                step = inner.asend(sent) if thrown is None else inner.athrow(thrown)
                item = await Stepped(step, context.run)
            except StopAsyncIteration:
                return
            finally:
                thrown = None
            try:
                sent = yield item
            except GeneratorExit:
                await Stepped(inner.aclose(), context.run)
                raise
            except BaseException as error:
                thrown, sent = error, None

    return wrapper


class Snapshot(Scope, Mapping[str, Value]):
    """An immutable, hashable, picklable ``Mapping[str, value]`` of every flag by
    dotted name; also a scope that applies all of them (``with snap:``, ``@snap``).

    Pickles as plain data and is validated again when unpickled; like any pickle,
    only unpickle snapshots from peers you trust.
    """

    __slots__ = ()

    def __getitem__(self, name: str) -> Value:
        return self._overrides[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._overrides)

    def __len__(self) -> int:
        return len(self._overrides)

    def __hash__(self) -> int:
        return hash(tuple(self._overrides.items()))

    def __eq__(self, other: object) -> bool:
        return Mapping.__eq__(self, other)

    def __repr__(self) -> str:
        return f"backends.Snapshot({self._overrides!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Snapshot.from_dict, (dict(self._overrides),))

    def to_dict(self) -> dict[str, Value]:
        """Every flag's value by dotted name, as a new plain ``dict``."""
        return dict(self._overrides)

    def __init__(self, data: Mapping[str, Any]) -> None:
        """Every flag's value by dotted name; raises as ``from_dict()`` does."""
        checked = check_mapping(data, "backends.Snapshot()")
        missing = [name for name in NAMES if name not in checked]
        if missing:
            raise KeyError(
                f"a Snapshot needs every flag; missing {', '.join(map(repr, missing))} "
                f"(for a partial override use backends.flags(mapping))"
            )
        super().__init__({name: checked[name] for name in NAMES})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Snapshot:
        """Build a snapshot from plain data, as made by ``to_dict()``.

        Raises ``TypeError``/``ValueError`` for a bad value, and ``KeyError`` for an
        unknown name or a missing one (a snapshot holds every flag).
        """
        return cls(data)


def snapshot() -> Snapshot:
    """Every flag's effective value in the current context, as an immutable, hashable,
    picklable ``Snapshot`` (a ``Mapping[str, bool | int | str]`` by dotted name) that is
    also a scope applying all of them."""
    return Snapshot(effective())


class Bound:
    """``fn`` run under the flags of a snapshot; see ``backends.bind``."""

    def __init__(self, fn: Callable[..., Any], flags: Snapshot) -> None:
        if not callable(fn):
            raise TypeError(f"backends.bind() takes a callable, got {show(fn)}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.snapshot = flags

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.snapshot:
            result = self.fn(*args, **kwargs)
        # A coroutine's or generator's body runs later, when awaited or iterated.
        if isinstance(result, Coroutine):
            return _run_coroutine(self.snapshot, result)
        if isinstance(result, Generator):
            return _generator(self.snapshot, lambda: result)()
        if isinstance(result, AsyncGenerator):
            return _async_generator(self.snapshot, lambda: result)()
        return result

    def __repr__(self) -> str:
        return f"backends.bind({self.fn!r}) with {self.snapshot!r}"


async def _run_coroutine(flags: Snapshot, coroutine: Coroutine[Any, Any, Any]) -> Any:
    with flags:
        return await coroutine


def bind(fn: Callable[..., Any]) -> Bound:
    """Return a ``Bound`` callable that runs ``fn`` (with the arguments it is called with)
    under the flags effective now, in any thread or process: every flag is applied, as by
    ``snapshot()``. A coroutine function's or generator's body runs under them too, when
    awaited or iterated. Picklable when ``fn`` is (only unpickle from trusted peers).
    Raises ``TypeError`` if ``fn`` is not callable."""
    return Bound(fn, snapshot())


def flags(mapping: Mapping[str, Any]) -> Scope:
    """A scope overriding the flags in ``mapping`` (dotted names), e.g.
    ``backends.flags({"cudnn.deterministic": True})``.

    Raises ``KeyError`` (``UnknownFlagError``) for an unknown name and
    ``TypeError``/``ValueError`` for a bad value (``None`` included), before
    anything is entered.
    """
    return Scope(check_mapping(mapping, "backends.flags()"))
