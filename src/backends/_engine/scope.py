"""Scopes: one object that is a context manager, an async context manager and a
decorator, and overrides only the flags it was given.

Semantics, in the manner of ``decimal.localcontext`` and ``contextlib``:

* entering publishes a new frame ``(values, scope, token)`` in the ContextVar (see
  ``state``): the current overrides with this scope's on top, and the ContextVar token
  kept *in that frame*, never on the scope, so one scope object can be entered many
  times, nested in itself and from many threads and tasks at once. The scope keeps its
  own overrides as ``values`` (``_alone``, what it publishes over no scope) and its last
  merge over other ``values`` (``_memo``), so entering it again builds no new ones;
* exiting checks that this scope is the innermost one of the current context
  and resets the token; anything else is refused with ``RuntimeError`` before
  any state changes, so the scopes can still be exited in the right order;
* except while an exception is in flight: then an enclosing scope still in this
  context's chain (an inner one was left entered, say by a ``KeyboardInterrupt``
  inside the inner exit) resets its own token, restoring what it saw at entry, and
  lets the exception propagate instead of masking it with a ``RuntimeError``.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import functools
import sys
import types
import weakref
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator, Iterable, Iterator, Mapping
from types import TracebackType

from . import mirror, state
from .accelerator import speedups
from .errors import MissingFlagsError, show, unknown_name
from .state import EMPTY, NO_SCOPE, SCOPE, TOKEN, VALUES, alone, check_mapping, current, effective, merged, overrides
from .table import NAMES, Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see record.py)
if TYPE_CHECKING:
    from typing import Any, TypeVar
    from typing import final as _final

    F = TypeVar("F", bound=Callable[..., Any])
else:

    def _final(cls: type) -> type:  # typing.final, without importing typing: Snapshot refuses subclasses
        return cls

_set, _reset = state.set_frame, state.reset_frame  # bound once: entry and exit are hot
_NO_MEMO = (None, None)  # a scope's _memo before its first merge: (values below, merged values)
#: What frames are: tuples (the compiled path's, and an assignment's), lists (the pure path's
#: entry, which stores the token in its frame right after publishing it).
_FRAMES = (tuple, list)
#: What a call returns whose body runs later, when awaited or iterated: CPython's own
#: types, which cannot be subclassed, so one set lookup of the result's type tells (about
#: half the cost of isinstance() with a tuple, on the hot path of every decorated call).
_DEFERRED = frozenset((types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType))
_DEFERRED_ABCS = (Coroutine, Generator, AsyncGenerator)
_CO_ITERABLE_COROUTINE = 0x100  # inspect.CO_ITERABLE_COROUTINE (@types.coroutine), without inspect
_sealed = False  # until Snapshot, Scope's one subclass, is defined (see Scope.__init_subclass__)


if speedups is not None:
    speedups.configure(overrides, NO_SCOPE, EMPTY, state.published)
if TYPE_CHECKING or speedups is None:
    _Base = object
    _SLOTS: tuple[str, ...] = ("__weakref__", "_label", "_overrides", "_alone", "_memo")
else:
    # __enter__ and __exit__ (the common case) in C; every other case in _exit_slow below.
    _Base = speedups.ScopeCore
    _SLOTS = ("__weakref__", "_label")  # _overrides, _alone and _memo are the C base's


class Scope(_Base):
    """A scope overriding some flags: ``with``, ``async with`` or ``@decorator``.

    Build one with ``backends.flags(mapping)``, ``backends.cudnn.flags(...)``,
    ``backends.cuda.matmul.flags(...)``, ``tf32(...)``, ``deterministic()`` or
    ``snapshot()``. Exiting restores the previous state even when the body
    raises or is cancelled; the exception passes through unchanged.

    Raises ``RuntimeError`` on exit when the scope is not the innermost one
    active in the current context (exited out of order, or in another thread or
    asyncio/trio task than the one that entered it); the refused exit changes
    nothing. While an exception is in flight, an enclosing scope still entered in
    this context exits anyway (restoring the state it saw at entry) and the
    exception propagates.

    Pickles as its overrides and label, validated again on load like construction.
    """

    __slots__ = _SLOTS
    _overrides: dict[str, Value]
    _alone: tuple[Any, ...]  # _overrides as values (state.alone), what entering publishes over no scope
    _memo: tuple[Any, Any]  # (values below, merged values): the last merge, reused while they are in force

    def __init__(self, overrides: Mapping[str, Any], label: str | None = None) -> None:
        """``overrides`` maps dotted flag names to values; checked like ``backends.flags()``.
        ``label``, if given, is the scope's repr (a ``str``). Raises ``TypeError`` on a scope
        already built: scopes are shared (a cached ``cudnn.flags(...)``, ``deterministic()``)."""
        if hasattr(self, "_overrides"):
            raise TypeError(f"{self!r} is immutable: __init__ only builds a new scope")
        if label is not None:
            if not issubclass(type(label), str):
                raise TypeError(f"backends.Scope() takes a str label or None, got {show(label)}")
            label = str.__str__(label)
        checked = check_mapping(overrides, "backends.Scope()")
        self._overrides = checked
        self._alone = alone(checked)
        self._memo = _NO_MEMO
        self._label = label

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Snapshot, below, is the only subclass: the engines enter and exit a scope without
        # looking for overrides (the compiled one in C, on every path), and scopes are shared.
        if _sealed:
            base = next(klass for klass in cls.__mro__[1:] if klass in (Scope, Snapshot))
            raise TypeError(
                f"backends.{base.__name__} cannot be subclassed (class {cls.__qualname__}): a scope is an "
                f"immutable object that backends shares (a namespace's flags() and deterministic() "
                f"return the same one each time), and `with`, `async with` and decorators enter and exit "
                f"it alike, calling no overrides. To run code around a scope, write a context manager "
                f"that enters one, e.g. @contextlib.contextmanager def traced(): ...; "
                f"with backends.flags({{...}}): yield"
            )
        super().__init_subclass__(**kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # Through the constructor, so loading validates (a pickle of the slots would not).
        return (Scope, (dict(self._overrides), self._label))

    def __setstate__(self, state: Any) -> None:
        """Validate slot state on load, as construction does: only pickles made without
        ``__reduce__`` (by hand, or before Scope had one) carry it."""
        slots = _slots_on_load(self, state)
        Scope.__init__(self, slots.get("_overrides"), slots.get("_label"))  # a missing one is None: refused

    @property
    def overrides(self) -> dict[str, Value]:
        """The flags this scope sets, by dotted name (a copy)."""
        return dict(self._overrides)

    def __repr__(self) -> str:
        return self._label or f"backends.flags({self._overrides!r})"

    # -- context manager -------------------------------------------------
    # The reference definitions. With the compiled accelerator, the C base class's __enter__
    # and __exit__ are used instead (same behaviour: its __exit__ calls _exit_slow, this
    # __exit__, for every case but "this scope is the innermost entry of this context").
    def __enter__(self) -> Scope:
        parent = current()
        below, values = parent[VALUES], self._alone
        if below is not EMPTY:  # inside another scope: merge, or reuse the last merge over the same values
            memo = self._memo
            if memo[0] is below:
                values = memo[1]
            else:
                values = merged(below, values)
                self._memo = (below, values)  # one store: another thread sees the old pair or the new
        notify = state.mirror_notify
        if notify is not None:  # a library following the flags (torch): before publishing, so that
            notify(values)  # a push that raises refuses the entry
        frame = [values, self, None]
        try:
            # No other context can see the frame before this line returns, so storing
            # the token in it right after publishing it is safe.
            frame[TOKEN] = _set(frame)
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
        # `frame` holds the frames this exit drops (the innermost one, and through its token
        # those below it) until the reset has returned: CPython's ContextVar.reset caches the
        # value it restores only after releasing the context's old mapping, so a finaliser run
        # inside it (a weakref callback on a scope left entered) that sets the variable would
        # leave that cache pointing to a value only the token holds, freed after the reset.
        frame = current()
        _, scope, token = frame
        if scope is not self:
            token = self._enclosing_token(scope, exc_type)
        try:
            _reset(token)
        except (ValueError, RuntimeError):
            # ContextVar.reset: ValueError for a token of another Context,
            # RuntimeError for a token already used.
            raise RuntimeError(
                f"cannot exit {self!r}: it was entered in a different context (another "
                f"thread or asyncio/trio task; in Jupyter, a cell that awaits at its top level "
                f"runs as a task of its own); a scope must be exited in the context that entered it"
            ) from None
        notify = state.mirror_notify
        if notify is not None:  # exited: the library follows the values below (a push that raises, raises here)
            notify(current()[VALUES])

    _enter_slow, _exit_slow = __enter__, __exit__  # the C ones call these for the uncommon cases
    if speedups is not None:  # the C base class's take over
        del __enter__, __exit__

    def _enclosing_token(self, innermost: Scope | None, exc_type: type[BaseException] | None) -> Any:
        """This scope's token when an exception is in flight and this scope is in the
        current context's chain of entries (the innermost such entry), else the refusal.

        An exception that left an inner scope entered (a ``KeyboardInterrupt`` inside the
        inner exit, a body that entered one by hand) must not turn into a ``RuntimeError``
        here: resetting our own token drops the abandoned entries above it with the state
        they were part of. With no exception in flight an out-of-order exit is a bug in the
        caller, refused before anything changes."""
        if exc_type is not None:
            frame: Any = current()
            # Each frame holds its entry's scope and token; token.old_value is the frame below
            # it (Token.MISSING, not a frame, below the first entry of a fresh context).
            seen = set()  # a frame set by hand could chain back to itself: a loop without end
            while type(frame) in _FRAMES and len(frame) == 3 and frame[TOKEN] is not None:
                if id(frame) in seen:
                    break
                seen.add(id(frame))
                _, scope, token = frame
                if scope is self:
                    return token  # reset by the caller; refused there if of another context
                frame = token.old_value
        raise RuntimeError(self._refusal(innermost))

    def _refusal(self, innermost: Scope | None) -> str:
        if innermost is None:
            return (
                f"cannot exit {self!r}: it is not active in this context (it was entered "
                f"in another thread or asyncio/trio task, such as a Jupyter cell that awaits at "
                f"its top level, or has already been exited)"
            )
        if repr(innermost) == repr(self):  # a copy, or a scope built again with the same arguments
            return (
                f"cannot exit {self!r} (object {id(self):#x}): the innermost scope active in this "
                f"context is a different Scope object with the same overrides (object "
                f"{id(innermost):#x}); a scope must be exited through the object that entered it"
            )
        return (
            f"cannot exit {self!r}: the innermost scope active in this context is "
            f"{innermost!r}; scopes must be exited innermost first, in the context "
            f"that entered them"
        )

    async def __aenter__(self) -> Scope:
        parent = current()
        try:
            return self.__enter__()
        except BaseException as error:  # a signal right after the entry: exit before passing it on
            _unwind(self, parent, error)
            raise

    def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> Coroutine[Any, Any, None]:
        # Exits when called, and returns an awaitable of the result: as an `async def`, a
        # signal between the call and the first step of its coroutine would skip the exit.
        frame = None
        try:
            frame = current()
            self.__exit__(exc_type, exc, tb)
        except BaseException as error:
            # A signal before the reset changed nothing and left this scope innermost (a
            # refused exit leaves another one innermost): exit with it in flight.
            now = current()
            if (frame is None or now is frame) and now[SCOPE] is self:
                self.__exit__(type(error), error, error.__traceback__)
            raise
        return _exited()

    if speedups is not None:  # the C base class's: awaitables whose one step is the C entry or exit
        del __aenter__, __aexit__

    # -- decorator ---------------------------------------------------------
    def __call__(self, fn: F) -> F:
        """Decorate ``fn`` so the override is active exactly while its own code runs.

        Works for plain functions, methods, coroutine functions, generator functions
        and async generator functions, keeping the kind, name, docstring and
        signature. A call that returns a coroutine, generator or async generator
        where ``inspect`` saw no such function (a callable object with an ``async def``
        ``__call__``, a sync wrapper around an ``async def``) gets the override in that
        body too, when awaited or iterated.

        On a test class, as ``unittest.mock.patch`` decorates one, returns the same class:
        a ``unittest.TestCase`` (``IsolatedAsyncioTestCase`` included) runs each test, from
        ``setUp`` to its last cleanup, under one entry of the scope; another class with
        ``test*`` methods (a pytest class) has each of them decorated. Inherited test methods
        get it and subclasses keep it; the nearer of two decorations wins flag by flag (a
        subclass's own over its base's; on one class, the one nearest the ``class`` line).
        Raises ``TypeError`` if ``fn`` is not callable, or is a class of neither kind.
        """
        if isinstance(fn, (staticmethod, classmethod)):  # decorated above @staticmethod
            return type(fn)(self(fn.__func__))
        if isinstance(fn, type):
            _decorate_class(self, fn)
            return fn  # the same class
        if not callable(fn):
            raise TypeError(f"{self!r} can only decorate a callable, got {show(fn)}")
        import inspect  # here, not at import: `inspect` costs ~8 ms of `import backends`

        if inspect.isasyncgenfunction(fn):
            kind = ASYNC_GENERATOR
        elif inspect.isgeneratorfunction(fn):
            kind = GENERATOR
        elif inspect.iscoroutinefunction(fn):
            kind = COROUTINE
        else:
            kind = FUNCTION
        return functools.wraps(fn)(_trampoline(Decorated(self, fn, kind).call, kind))  # type: ignore[return-value]


del _Base  # Scope.__bases__ names it; the module does not need the alias


# -- test classes ---------------------------------------------------------------------------
#: The scopes each decorated class was given itself, in the order applied (innermost first).
_CLASS_SCOPES: weakref.WeakKeyDictionary[type, tuple[Scope, ...]] = weakref.WeakKeyDictionary()
#: What unittest runs one test through: run() (debug() without a result), and the constructor,
#: where IsolatedAsyncioTestCase copies the context its test code runs in. One entry around them
#: holds from setUp to the last cleanup, sync or async, so a scope entered in setUp
#: (self.enterContext) and exited by a cleanup nests inside it as it should.
_TEST_CASE_ENTRY_POINTS = ("__init__", "run", "debug")
_WRAPS = "_backends_wraps"  # on a wrapper made here: (the attribute it wraps, its scopes)


def _decorate_class(scope: Scope, cls: type) -> None:
    """``@scope`` on a test class. Each test runs under the scopes of its class and of that
    class's bases, outermost first: a base's before its subclass's, and on one class the
    decorator nearest the ``class`` line innermost, so nearer decorations win flag by flag as
    nested scopes do. Applied again to each subclass as it is created (``__init_subclass__``),
    from the attributes as written: a subclass's own test methods get it too."""
    if not _targets(cls):
        raise TypeError(
            f"{scope!r} decorates functions and test classes (a unittest.TestCase, or a class with "
            f"test* methods), not the class {cls.__qualname__}: decorate its methods"
        )
    own = _CLASS_SCOPES.get(cls)
    if own is None:
        _keep_for_subclasses(cls)
    _CLASS_SCOPES[cls] = (*(own or ()), scope)
    _apply(cls)


def _targets(cls: type) -> Iterable[str]:
    """The attributes of ``cls`` a class decoration wraps: unittest's entry points for a
    ``TestCase``; else its ``test*`` functions, staticmethods and classmethods, inherited too."""
    import inspect
    import unittest  # here: only a decorated class pays for it

    if issubclass(cls, unittest.TestCase):
        return _TEST_CASE_ENTRY_POINTS
    methods = (types.FunctionType, staticmethod, classmethod)
    return [n for n in dir(cls) if n.startswith("test") and isinstance(inspect.getattr_static(cls, n), methods)]


def _apply(cls: type) -> None:
    """Set on ``cls`` each target wrapped in the scopes it runs under, unless the one it
    inherits is already that; a wrapper made for another class is rebuilt from what it wraps."""
    import inspect
    import unittest

    scopes = tuple(s for klass in reversed(cls.__mro__) for s in reversed(_CLASS_SCOPES.get(klass, ())))
    for name in _targets(cls):
        raw = inspect.getattr_static(cls, name)
        original, applied = getattr(getattr(raw, "__func__", raw), _WRAPS, (raw, ()))
        if applied != scopes:
            wrapper = original
            # A TestCase's own test code runs in run()'s context, but for IsolatedAsyncioTestCase's
            # (in a context of its own, where a scope left entered ends with it).
            if name in ("run", "debug") and not issubclass(cls, unittest.IsolatedAsyncioTestCase):
                wrapper = _checking_scopes(wrapper)
            for scope in reversed(scopes):  # innermost first
                wrapper = scope(wrapper)
            setattr(getattr(wrapper, "__func__", wrapper), _WRAPS, (original, scopes))
            setattr(cls, name, wrapper)


def _checking_scopes(run: Callable[..., Any]) -> Callable[..., Any]:
    """``TestCase.run`` or ``debug`` (inside the class's scopes) that reports a scope the test left entered as
    that test's error, from a cleanup that runs after its own, and exits it: the scopes' exits
    (and the tests after it) then find the state they expect, and the run goes on."""

    @functools.wraps(run)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = current()
        self.addCleanup(_check_scopes_exited, self, start)  # the first cleanup added: the last run
        try:
            return run(self, *args, **kwargs)
        finally:  # a skipped test runs no cleanup: drop ours
            self._cleanups[:] = [c for c in self._cleanups if c[0] is not _check_scopes_exited]

    return wrapper


def _check_scopes_exited(test: Any, start: Any) -> None:
    frame = current()
    if frame[TOKEN] is start[TOKEN]:  # the same entry (an assignment makes a new frame of it)
        return
    left: list[str] = []
    seen = set()  # a frame set by hand could chain back to itself
    while type(frame) in _FRAMES and len(frame) == 3 and frame[TOKEN] is not None and frame[TOKEN] is not start[TOKEN]:
        if id(frame) in seen:
            break
        seen.add(id(frame))
        left.append(repr(frame[SCOPE]))
        frame = frame[TOKEN].old_value
    state.set_frame(start)  # the class's scopes in force again, as at the start of the test
    scopes = f"a scope entered: {left[0]}" if len(left) == 1 else f"{len(left)} scopes entered: {', '.join(left[::-1])}"
    raise RuntimeError(
        f"{test.id()} left {scopes}; exited after the test, so the tests after it start without it: exit "
        f"every scope a test enters (`with`, or self.enterContext(scope) in setUp)"
    )


def _keep_for_subclasses(cls: type[object]) -> None:
    """Apply the decoration to each subclass of ``cls`` when it is created, after the
    ``__init_subclass__`` it would run anyway (``cls``'s own, else its bases')."""
    own = vars(cls).get("__init_subclass__")

    def __init_subclass__(subclass: type, /, **kwargs: Any) -> None:
        if own is not None:
            own.__get__(None, subclass)(**kwargs)
        else:
            super(cls, subclass).__init_subclass__(**kwargs)  # type: ignore[misc]  # (mypy: only a class it knows)
        _apply(subclass)

    cls.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]


def _slots_on_load(scope: Scope, state: Any) -> Any:
    """The ``{slot: value}`` dict of pickled slot state ``(None, {slot: value})``, for
    ``__setstate__`` to validate as construction does. A scope already built is immutable
    (scopes are shared: a cached ``cudnn.flags(...)``, ``deterministic()``)."""
    if hasattr(scope, "_overrides"):
        raise TypeError(f"{scope!r} is immutable: __setstate__ only restores a scope being unpickled")
    slots = state[1] if type(state) is tuple and len(state) == 2 else state
    return slots if type(slots) is dict else {}


# -- calls under a scope, safe against signals ---------------------------------------------
# A decorated call enters, calls and exits with the entry and both exits inside `try`: a
# KeyboardInterrupt handled at any bytecode boundary (right after the entry returns, at the
# start of the exit) still exits this call's entry. `parent`, the frame before the entry, tells
# whether this call entered anything: a signal before the entry leaves nothing to exit.


async def _exited() -> None:
    """What awaiting a scope's ``__aexit__`` gives: the exit is made by then."""


def _unwind(scope: Scope, parent: Any, error: BaseException, exiting: bool = False) -> None:
    """Exit ``scope`` as ``with`` does while ``error`` is in flight, if this call's entry (made
    on top of ``parent``) is still in the chain. ``exiting``: ``error`` came out of the plain
    exit, which only a signal at its start leaves with ``scope`` still innermost; otherwise it
    was a refused exit, which changed nothing and stays so."""
    frame = current()
    if frame is parent:
        return
    if exiting and frame[SCOPE] is not scope:
        return
    scope.__exit__(type(error), error, error.__traceback__)


#: What a decorated callable is, as ``inspect`` tells at decoration: the kind of function
#: ``@scope`` returns, and of the call ``Decorated`` makes.
FUNCTION, COROUTINE, GENERATOR, ASYNC_GENERATOR = "function", "coroutine", "generator", "async generator"
_KINDS = (FUNCTION, COROUTINE, GENERATOR, ASYNC_GENERATOR)

if TYPE_CHECKING or speedups is None:
    _DecoratedBase = object
    _DECORATED_SLOTS: tuple[str, ...] = ("scope", "fn", "kind", "_enter", "_exit", "_inner")
else:
    # call() of a decorated function in C; everything else (building, pickling) here.
    _DecoratedBase = speedups.DecoratedCore
    _DECORATED_SLOTS = ()  # scope, fn, kind, _enter, _exit and _inner are the C base's


class Decorated(_DecoratedBase):
    """What a function decorated with a scope hands each call to: ``call(args, kwargs)`` runs
    ``fn(*args, **kwargs)`` under ``scope``, as ``kind`` (``FUNCTION``: entered around the call;
    the other kinds: around the body of the coroutine, generator or async generator it returns).

    Pickles as ``(scope, fn, kind)`` and is rebuilt by the engine that loads it (either one),
    so a decorated function that cloudpickle copies by value (defined in ``__main__`` or a
    notebook) carries its scope's overrides and ``fn``, never the engine's state."""

    __slots__ = _DECORATED_SLOTS
    scope: Scope
    fn: Callable[..., Any]
    kind: str
    _enter: Callable[[], Any]
    _exit: Callable[..., Any]
    _inner: Callable[..., Any] | None

    def __init__(self, scope: Scope, fn: Callable[..., Any], kind: str) -> None:
        if hasattr(self, "scope"):
            raise TypeError(f"{self!r} is immutable: __init__ only builds a new one")
        if not isinstance(scope, Scope) or not callable(fn) or kind not in _KINDS:
            raise TypeError(
                f"Decorated(scope, fn, kind) takes a backends.Scope, a callable and one of {_KINDS}, "
                f"got {show(scope)}, {show(fn)}, {show(kind)}"
            )
        self.scope, self.fn, self.kind = scope, fn, kind
        self._enter, self._exit = scope.__enter__, scope.__exit__
        inner = {COROUTINE: _coroutine, GENERATOR: _generator, ASYNC_GENERATOR: _async_generator}.get(kind)
        self._inner = None if inner is None else inner(scope, fn)

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``fn(*args, **kwargs)`` under the scope (see the class)."""
        if self._inner is not None:
            return self._inner(*args, **kwargs)
        scope, parent = self.scope, current()
        try:
            self._enter()
            result = self.fn(*args, **kwargs)
        except BaseException as error:
            _unwind(scope, parent, error)
            raise
        try:
            self._exit()
        except BaseException as error:
            _unwind(scope, parent, error, exiting=True)
            raise
        # What inspect could not tell at decoration: a callable object with an async def or
        # generator __call__, a sync wrapper around an async def. Its body runs later.
        if type(result) in _DEFERRED:
            return follow(scope, result)
        return result

    # The C base class's, but on 3.12: there every call from C into Python counts against a fixed
    # C recursion limit (1,500 calls), so a recursive decorated function whose calls went through C
    # would stop at about 500 levels, whatever sys.setrecursionlimit() says; this method's call of
    # fn is Python to Python, bound by the recursion limit alone, as on the pure engine.
    if speedups is not None and sys.version_info[:2] != (3, 12):
        del call

    def __reduce__(self) -> tuple[Any, ...]:
        # The scope pickles through its constructor (a Scope or a Snapshot: neither can be
        # subclassed), so the call loads under the same flags.
        return (Decorated, (self.scope, self.fn, self.kind))

    def __repr__(self) -> str:
        return f"<backends decoration of {self.fn!r} ({self.kind}) under {self.scope!r}>"


del _DecoratedBase  # as _Base: Decorated.__bases__ names it


def _trampoline(call: Callable[[tuple[Any, ...], dict[str, Any]], Any], kind: str) -> Callable[..., Any]:
    """A function of ``kind`` that hands each call to ``call`` (a ``Decorated``'s): what a
    scope's decorator returns, with the decorated function's name, docstring and signature.
    Its code uses nothing but builtins and ``call``, so cloudpickle, which copies a function
    of ``__main__`` by value, copies only that code and ``call``, which pickles as its scope
    and function: none of the engine's state (its ContextVar) goes with it. (Its globals are a
    namespace of its own, builtins only, so not even this module's name and path go along.)"""
    made = _TRAMPOLINES[kind](call)
    return types.FunctionType(made.__code__, _TRAMPOLINE_GLOBALS, made.__name__, None, made.__closure__)


def _calling(call: Callable[[tuple[Any, ...], dict[str, Any]], Any]) -> Callable[..., Any]:
    def decorated(*args: Any, **kwargs: Any) -> Any:
        return call(args, kwargs)

    return decorated


def _awaiting(call: Callable[[tuple[Any, ...], dict[str, Any]], Any]) -> Callable[..., Any]:
    async def decorated(*args: Any, **kwargs: Any) -> Any:
        return await call(args, kwargs)

    return decorated


def _yielding(call: Callable[[tuple[Any, ...], dict[str, Any]], Any]) -> Callable[..., Any]:
    def decorated(*args: Any, **kwargs: Any) -> Any:
        return (yield from call(args, kwargs))

    return decorated


def _async_yielding(call: Callable[[tuple[Any, ...], dict[str, Any]], Any]) -> Callable[..., Any]:
    async def decorated(*args: Any, **kwargs: Any) -> Any:  # (an async generator cannot `yield from`)
        inner = call(args, kwargs)
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            try:
                item = await (inner.asend(sent) if thrown is None else inner.athrow(thrown))
            except StopAsyncIteration:
                return
            finally:
                thrown = None
            try:
                sent = yield item
            except GeneratorExit:
                await inner.aclose()
                raise
            except BaseException as error:
                thrown, sent = error, None

    return decorated


_TRAMPOLINE_GLOBALS = {"__builtins__": builtins}
_TRAMPOLINES = {FUNCTION: _calling, COROUTINE: _awaiting, GENERATOR: _yielding, ASYNC_GENERATOR: _async_yielding}


def _coroutine(scope: Scope, fn: Callable[..., Any]) -> Callable[..., Any]:
    enter, exit_ = scope.__enter__, scope.__exit__

    async def wrapper(*args: Any, **kwargs: Any) -> Any:  # Decorated.call's, awaiting
        parent = current()
        try:
            enter()
            result = await fn(*args, **kwargs)
        except BaseException as error:
            _unwind(scope, parent, error)
            raise
        try:
            exit_()
        except BaseException as error:
            _unwind(scope, parent, error, exiting=True)
            raise
        return result

    return wrapper


def follow(scope: Scope, result: Any) -> Any:
    """``result`` of a call made under ``scope``, with ``scope`` applied to its body as well
    when that body runs later: a coroutine when awaited, a generator or async generator
    when iterated (the override is then not visible to the consumer between steps)."""
    if isinstance(result, Coroutine):
        return _run_coroutine(scope, result)
    if isinstance(result, Generator):
        wrapper = _generator(scope, lambda: result)
        code = getattr(result, "gi_code", None)
        if code is not None and code.co_flags & _CO_ITERABLE_COROUTINE:
            wrapper = types.coroutine(wrapper)  # a @types.coroutine generator stays awaitable
        return wrapper()
    if isinstance(result, AsyncGenerator):
        return _async_generator(scope, lambda: result)()
    return result


if speedups is not None:  # what the C call() hands the uncommon cases to
    speedups.configure_calls(_unwind, follow)


def _run_coroutine(scope: Scope, coroutine: Coroutine[Any, Any, Any]) -> Any:
    return _coroutine(scope, lambda: coroutine)()


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
        # a step in another context (a decorated generator's own): a library following the flags
        # (torch) follows it there and back
        following = run is not None and state.mirror_notify is not None
        try:
            if run is None:
                yielded = steps.send(sent) if thrown is None else steps.throw(thrown)
            else:
                if following:
                    run(mirror.sync)
                yielded = run(steps.send, sent) if thrown is None else run(steps.throw, thrown)
        except StopIteration as stop:
            return stop.value
        finally:
            thrown = None
            if following:
                mirror.sync()
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
        token = _enter_in(context, scope)
        try:
            return (yield from drive(inner, context.run))
        finally:
            _leave(context, token)

    return wrapper


def _async_generator(scope: Scope, fn: Callable[..., Any]) -> Callable[..., Any]:
    # As _generator, with every step of every awaitable run in the generator's context.
    # aclose() from asyncio's finaliser in another task works too: nothing is reset in
    # the finalising task's context.
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        inner = fn(*args, **kwargs)
        context = contextvars.copy_context()
        token = _enter_in(context, scope)
        try:
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
        finally:
            _leave(context, token)

    return wrapper


def _enter_in(context: contextvars.Context, scope: Scope) -> Any:
    """Enter ``scope`` in ``context`` (a generator's own); the token of that entry, or ``None``
    where it published no frame of its own (a subclass whose ``__enter__`` enters nothing)."""
    before = context.get(overrides)
    context.run(scope.__enter__)
    mirror.sync()  # the entry pushed the generator's flags (torch): the caller's again until it steps
    frame: Any = context.get(overrides)
    if frame is before or type(frame) not in _FRAMES or len(frame) != 3:
        return None
    return frame[TOKEN]


def _leave(context: contextvars.Context, token: Any) -> None:
    """Drop the entry ``_enter_in`` made in ``context`` when its generator is done (finished,
    closed or collected), with whatever its body left entered above it, as dropping the context
    would: the frame published there holds its token, which holds the context, a reference
    cycle per call that only the cyclic garbage collector would free otherwise."""
    if token is not None:
        with contextlib.suppress(ValueError, RuntimeError):  # exited by hand inside the body: nothing left
            context.run(_reset, token)


@_final
class Snapshot(Scope, Mapping[str, Value]):
    """An immutable, hashable, picklable ``Mapping[str, value]`` of every flag by
    dotted name; also a scope that applies all of them (``with snap:``, ``@snap``).

    Pickles as plain data and is validated again when unpickled; like any pickle,
    only unpickle snapshots from peers you trust.
    """

    __slots__ = ()

    def __getitem__(self, name: str) -> Value:
        try:
            return self._overrides[name]
        except KeyError:  # a KeyError still (Mapping), saying the nearest flag
            raise unknown_name(name, NAMES) from None

    # Mapping's would call __getitem__ and build that message only to drop it.
    def __contains__(self, name: object) -> bool:
        return name in self._overrides

    def get(self, name: str, default: Any = None) -> Any:
        return self._overrides.get(name, default)

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

    def __setstate__(self, state: Any) -> None:
        Snapshot.__init__(self, _slots_on_load(self, state).get("_overrides"))

    def to_dict(self) -> dict[str, Value]:
        """Every flag's value by dotted name, as a new plain ``dict``."""
        return dict(self._overrides)

    def __init__(self, data: Mapping[str, Any]) -> None:
        """Every flag's value by dotted name; raises as ``from_dict()`` does."""
        self._build(data, "backends.Snapshot()")

    def _build(self, data: Mapping[str, Any], what: str) -> None:
        """``__init__``'s work, its errors naming ``what`` was called."""
        checked = check_mapping(data, what)
        missing = [name for name in NAMES if name not in checked]
        if missing:
            raise MissingFlagsError(
                f"a Snapshot needs every flag; missing {', '.join(map(repr, missing))} "
                f"(for a partial override use backends.flags(mapping))"
            )
        if hasattr(self, "_overrides"):  # as Scope.__init__ (the values are checked already)
            raise TypeError(f"{self!r} is immutable: __init__ only builds a new scope")
        self._fill(tuple(checked[name] for name in NAMES))

    @classmethod
    def _of(cls, values: tuple[Any, ...]) -> Snapshot:
        """The snapshot of ``values``, one per slot, each a flag's checked value (what the
        engine's frames and defaults hold), without checking them again."""
        self = cls.__new__(cls)
        self._fill(values)
        return self

    def _fill(self, values: tuple[Any, ...]) -> None:
        self._overrides = dict(zip(NAMES, values, strict=True))
        self._alone = values  # every slot set: what entering publishes, over any values
        self._memo = _NO_MEMO
        self._label = None

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        # Dask names a task by its arguments (a snapshot is one, with backends.integrations.dask):
        # by the flags' names and values, where Dask's default would pickle the snapshot each time.
        return ("backends.Snapshot", tuple(self._overrides.items()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Snapshot:
        """Build a snapshot from plain data, as made by ``to_dict()``.

        Raises ``TypeError``/``ValueError`` for a bad value, and ``KeyError`` for an
        unknown name or a missing one (a snapshot holds every flag).
        """
        self = cls.__new__(cls)
        self._build(data, "backends.Snapshot.from_dict()")
        return self


_sealed = True  # Scope.__init_subclass__ refuses every class from here on
#: The last snapshot taken, and the frame values and published defaults it was taken from: both
#: immutable, so the same pair (by identity) gives the same snapshot. One store, atomic.
_last_snapshot: tuple[Any, Any, Snapshot | None] = (None, None, None)


def snapshot() -> Snapshot:
    """Every flag's effective value in the current context, as an immutable, hashable,
    picklable ``Snapshot`` (a ``Mapping[str, bool | int | str]`` by dotted name) that is
    also a scope applying all of them."""
    global _last_snapshot
    values, defaults = current()[VALUES], state.published[0]
    last = _last_snapshot
    if last[0] is values and last[1] is defaults and last[2] is not None:
        return last[2]
    if type(values) is tuple and len(values) == len(NAMES) and type(defaults) is tuple:
        # the engine's own frame and defaults: their values were checked when they were set
        taken = Snapshot._of(tuple([d if v is None else v for v, d in zip(values, defaults, strict=False)]))
    else:  # a frame set by hand: checked as any mapping is
        taken = Snapshot(effective())
    _last_snapshot = (values, defaults, taken)
    return taken


class Bound(functools.partial):  # type: ignore[type-arg]  # (partial[Any]: a runtime subscript of typing.Any)
    """``fn`` run under the flags of a snapshot; see ``backends.bind``.

    A ``functools.partial`` of ``fn`` with no arguments, so that ``inspect`` sees through it
    to ``fn``: ``inspect.iscoroutinefunction(bind(async_fn))`` (and the generator
    predicates) is true on every supported Python, where 3.11 recognises only
    functions and partials of them. Pickles as ``fn`` and the snapshot, validated on load.
    """

    snapshot: Snapshot
    _call: Callable[[tuple[Any, ...], dict[str, Any]], Any]

    def __new__(cls, fn: Callable[..., Any], flags: Snapshot) -> Bound:
        if not callable(fn):
            raise TypeError(f"backends.bind() takes a callable, got {show(fn)}")
        self = super().__new__(cls, fn)
        functools.update_wrapper(self, fn)
        self.snapshot = flags
        self._call = Decorated(flags, fn, FUNCTION).call
        return self

    @property
    def fn(self) -> Callable[..., Any]:
        """The callable this runs: ``fn`` as given (``func`` and ``args``, the partial's view,
        are ``fn``'s own when ``fn`` is itself a ``functools.partial``)."""
        return self.__wrapped__  # type: ignore[attr-defined, no-any-return]  # set by update_wrapper in __new__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self._call(args, kwargs)
        # A coroutine's or generator's body runs later: the wrapper follows CPython's own
        # types; bind(), not on a per-call hot path like decorators, also those registered
        # with the ABCs (Cython's).
        if type(result) not in _DEFERRED and isinstance(result, _DEFERRED_ABCS):
            return follow(self.snapshot, result)
        return result

    def __get__(self, instance: object, owner: type | None = None) -> Bound:
        # As a class attribute it stays itself, as before (a partial becomes a method
        # descriptor in Python 3.14, and 3.13 warns that it will).
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Bound, (self.fn, self.snapshot))

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        # Dask names a pure task (client.submit's default) by its function and arguments: the
        # flags are part of the function, so the same call bound under other flags is other work.
        return ("backends.bind", self.fn, tuple(self.snapshot.items()))

    def __repr__(self) -> str:
        return f"backends.bind({self.fn!r}) with {self.snapshot!r}"


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
