"""Task-step sync for asyncio: ``backends.asyncio.install()``.

Tasks on one thread share CuPy's cuBLAS handle. The launch hooks already make
every GEMM that CuPy launches use its own task's flags; code that calls cuBLAS
itself with CuPy's handle right after an ``await`` also needs the handle to be in
step. ``install()`` sets a task factory whose tasks call ``backends.sync()``
before each step, in the task's own context.

Each task steps its coroutine through ``synced(coroutine)``: a small object that
asyncio's Task accepts as a coroutine and that, for each step the task asks of
it, calls ``sync()`` and then ``send()``/``throw()`` on the user's coroutine
itself. A step costs one Python method call on top of ``sync()`` (no generator
frame, no ``__await__`` iterator), and any coroutine asyncio accepts works:
``async def``, ``types.coroutine`` generators, ``collections.abc.Coroutine``
objects. Everything that looks at a task's coroutine sees the user's:
``task.get_coro()`` returns it, and ``repr(task)``, ``get_stack()`` and
``inspect.getcoroutinestate()`` read its frame and code through the wrapper.
Nothing ``sync()`` raises reaches the task (a launch through the sync layer
pushes, and raises, again), and it creates no cuBLAS handle.

The compiled stepper (``backends/sync/_speedups.c``) has no Python frame. The pure
one's step is a Python method, whose frame (``__next__``, ``send`` or ``throw``
here) is on the stack while the task runs, so a running task's own
``get_stack()``, ``traceback.print_stack()`` and ``inspect.stack()`` show it; it
drops that frame from the traceback of what the coroutine raises, so tracebacks and
a failed task's ``get_stack()`` / ``print_stack()`` do not show it. A suspended
task's ``get_stack()`` never shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from .._engine.wording import show
from ..sync import compiled, sync

_speedups = compiled()


class _Steps:  # the pure path's steps are synced's own (below); compiled, the C base's
    __slots__ = ()


if _speedups is None:
    _Stepper: Any = _Steps
    _SLOTS: tuple[str, ...] = ("_coro", "_send", "_throw")
else:  # __next__, send and throw (and the Task's own am_send) in C; the rest below
    _Stepper = _speedups.StepperCore
    _SLOTS = ()  # _coro is the C base's
    _speedups.configure_stepper(globals(), sync)  # a step calls this module's `sync`, as below


class synced(_Stepper, Coroutine[Any, Any, Any]):  # type: ignore[misc]  # lower case: called like a function
    """``coroutine``, stepped with ``backends.sync()`` (never raising into it) before each
    of its steps; awaiting it awaits ``coroutine`` and returns its result.

    Any attribute it does not have itself (``cr_frame``, ``cr_code``, ``gi_frame``,
    ``__qualname__``, ...) is the coroutine's, so asyncio's ``repr()`` and ``get_stack()``
    of a task stepping it show the user's coroutine.
    """

    __slots__ = _SLOTS

    def __init__(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self._coro = coroutine
        # Bound once (these run on every step), on both engines: an object without send() or
        # throw() raises AttributeError here, and so create_task() raises it. Rebinding _coro
        # later changes what the stepper shows, not what it steps.
        self._send, self._throw = coroutine.send, coroutine.throw

    # The Task steps a non-native coroutine with PyIter_Send: ``__next__`` when it sends
    # None (every step but a throw), else ``send``. ``sync`` is read from this module's
    # globals at each step, so a test can replace it. What the coroutine raises passes
    # through unchanged (a StopIteration subclass included), without this frame in its
    # traceback where Python allows it (see the module's docstring).
    def __next__(self) -> Any:
        try:  # noqa: SIM105  (contextlib.suppress costs a context manager per step)
            sync()
        except Exception:
            pass
        try:
            return self._send(None)
        except BaseException as error:
            _leave_out_the_step(error)
            raise

    def send(self, value: Any, /) -> Any:
        try:  # noqa: SIM105
            sync()
        except Exception:
            pass
        try:
            return self._send(value)
        except BaseException as error:
            _leave_out_the_step(error)
            raise

    def throw(self, *exception: Any) -> Any:  # a cancellation, or a throw() of the caller's
        try:  # noqa: SIM105
            sync()
        except Exception:
            pass
        try:
            if len(exception) == 1:
                # No tuple may hold the exception while the coroutine handles it: 3.14's TaskGroup
                # tests (gc.get_referrers) count such a tuple as a reference cycle left behind.
                value = exception[0]
                del exception
                return self._throw(value)
            return self._throw(*exception)  # throw(type, value, traceback), or the coroutine's TypeError
        except BaseException as error:
            _leave_out_the_step(error)
            raise

    if _speedups is not None:  # the C base class's take over (its __init__ binds the same)
        del __init__, __next__, send, throw

    def close(self) -> None:
        self._coro.close()

    def __reduce__(self) -> tuple[Any, ...]:  # copy.copy(): a stepper of the same coroutine, on both engines
        return (synced, (self._coro,))

    def coroutine(self) -> Coroutine[Any, Any, Any]:
        """The coroutine this steps."""
        return self._coro

    def __await__(self) -> synced:
        return self

    def __iter__(self) -> synced:
        return self

    def __getattr__(self, name: str) -> Any:  # only for what the class does not define
        if name in ("_coro", "_send", "_throw"):  # not set yet (copy, pickle): no recursion through _coro
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r} (its __init__ did not run)")
        return getattr(self._coro, name)

    def __repr__(self) -> str:
        return repr(self._coro)


#: the code of the pure stepper's steps: the frame that _leave_out_the_step drops
_STEP_CODES = frozenset(vars(synced)[name].__code__ for name in ("__next__", "send", "throw") if name in vars(synced))


def _leave_out_the_step(error: BaseException) -> None:
    """Drop the pure stepper's own frame from the head of ``error``'s traceback, as the C
    stepper has none: a bare ``raise`` then re-raises it without adding the frame again."""
    traceback = error.__traceback__
    if traceback is not None and traceback.tb_frame.f_code in _STEP_CODES:
        error.__traceback__ = traceback.tb_next


class _Task(asyncio.Task):  # type: ignore[type-arg]
    """The Task ``install()`` makes when no other factory was set: a plain Task whose
    ``get_coro()`` is the user's coroutine, at no cost per task."""

    def get_coro(self) -> Any:
        stepper = super().get_coro()
        return stepper.coroutine() if isinstance(stepper, synced) else stepper


# ``repr(task)`` reads ``<Task pending name=... coro=<the user's coroutine>>``, as without install().
_Task.__name__ = _Task.__qualname__ = "Task"


def _get_coro_of(task: asyncio.Task[Any]) -> Callable[[], Any]:
    """``task``'s ``get_coro()`` for a task of another factory's type: the task's own answer,
    with the user's coroutine for the stepper. It asks the task each time (a task may drop
    its coroutine: on 3.13 an eagerly completed C Task answers ``None``), and holds neither
    the task, the stepper nor the coroutine."""
    own = type(task).get_coro
    task_ref = weakref.ref(task)

    def get_coro() -> Any:
        task = task_ref()
        stepper = None if task is None else own(task)
        return stepper.coroutine() if isinstance(stepper, synced) else stepper

    return get_coro


def _plain_task(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
    return _Task(coro, loop=loop, **kwargs)


def _factory(previous: Any) -> Any:
    def create_task(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        if not asyncio.iscoroutine(coro):  # not ours to step: let asyncio (or that factory) refuse it
            return (previous or _plain_task)(loop, coro, **kwargs)
        stepper = synced(coro)
        if previous is None:
            return _plain_task(loop, stepper, **kwargs)
        task: asyncio.Task[Any] = previous(loop, stepper, **kwargs)
        # Another factory chose the task's type: an instance attribute shadows its
        # get_coro() (a type without room for one, or without weak references, keeps
        # answering with the stepper, which still shows the coroutine's name and frame in
        # repr() and get_stack()).
        with contextlib.suppress(AttributeError, TypeError):
            task.get_coro = _get_coro_of(task)  # type: ignore[method-assign]
        return task

    create_task.backends_previous = previous  # type: ignore[attr-defined]
    return create_task


def _the_loop(loop: object, function: str) -> asyncio.AbstractEventLoop:
    """``loop``, or the running loop where it is ``None``, for ``install()``/``uninstall()``
    (``function``): ``RuntimeError`` saying where to call it if none is running, ``TypeError``
    for what is not an ``asyncio.AbstractEventLoop`` (as ``asyncio.set_event_loop()`` refuses)."""
    if loop is None:
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                f"backends.asyncio.{function}() found no running event loop: call it from code running in "
                f"the loop (e.g. first thing in the async def that asyncio.run() runs), or pass loop="
            ) from None
    if not isinstance(loop, asyncio.AbstractEventLoop):
        raise TypeError(f"backends.asyncio.{function}() takes an asyncio event loop or None, got {show(loop)}")
    return loop


def install(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Make every task created on ``loop`` from now on call ``backends.sync()`` before
    each step. ``loop`` defaults to the running loop (``RuntimeError`` if there is
    none; ``TypeError`` for what is not an event loop). Keeps a task factory that was
    already set (``asyncio.eager_task_factory`` included), by wrapping it. Idempotent."""
    loop = _the_loop(loop, "install")
    current = loop.get_task_factory()
    if current is not None and hasattr(current, "backends_previous"):
        return
    loop.set_task_factory(_factory(current))


def uninstall(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Undo ``install()`` on ``loop`` (default: the running loop; ``RuntimeError`` if there
    is none; ``TypeError`` for what is not an event loop), restoring the task factory it
    wrapped. A no-op if it was not installed. Tasks created before keep syncing."""
    loop = _the_loop(loop, "uninstall")
    current = loop.get_task_factory()
    if current is not None and hasattr(current, "backends_previous"):
        loop.set_task_factory(current.backends_previous)
