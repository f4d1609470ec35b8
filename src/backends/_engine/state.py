"""Where flag values live: process defaults plus one ContextVar of frames.

Each flag has a slot, its index in the flag table (``SLOT[name]``). The ContextVar holds a
frame, ``(values, scope, token)``: ``values`` is a tuple with one item per slot, the override
active in this context or ``None`` where there is none (no flag's value is ``None``), and
``scope`` and ``token`` are the innermost scope entry of this context (``token.old_value``
is the frame below it). Outside any scope the frame is ``NO_SCOPE``: no overrides, no entry.
A read is two index operations and, where the slot is ``None``, one into the defaults.

``values`` tuples are immutable and shared: a scope keeps its overrides as such a tuple (its
values over no scope) and its last merge over another one, so entering it again over the same
values builds none. A live scope entry costs its 3-item frame and the ContextVar's own token.
A frame is never changed once another context could see it (copied contexts share it; the
pure path's frame is a list whose token is stored right after publishing it, before
``__enter__`` returns), so reads and scope entry/exit take no lock.

Process defaults are published the same way: ``published[0]`` is a tuple, one value per slot
and then (at index ``SOURCES``) their sources, never changed once published; a write builds a
new one under ``_lock`` and stores it in that one-item list (one store, atomic), the cell that
both engines read. A reader that takes ``published[0]`` once per call sees one whole write,
never a mix of two, without a lock.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, copy_context

from . import environment
from .accelerator import speedups
from .errors import UnknownFlagError, unknown_name, use_the_flag
from .record import Record
from .table import BY_NAME, FLAGS, NAMES, VIEWS, Value
from .wording import show

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see record.py)
if TYPE_CHECKING:
    from typing import Any

VIEWS_BY_NAME = {view.name: view for view in VIEWS}

#: Each flag's slot: its index in ``values`` tuples and in the published defaults.
SLOT: dict[str, int] = {name: slot for slot, name in enumerate(NAMES)}
#: The items of a frame.
VALUES, SCOPE, TOKEN = 0, 1, 2
#: ``values`` with no override.
EMPTY: tuple[None, ...] = (None,) * len(NAMES)
NO_SCOPE: tuple[Any, ...] = (EMPTY, None, None)

overrides: ContextVar[Any] = ContextVar("backends.overrides", default=NO_SCOPE)
current = overrides.get
# Set in the importing context (its value is the default): a ContextVar caches only a value
# that is set, so reads there and in the contexts copied from it (asyncio tasks) take the
# cached path, as decimal's context does after its first getcontext().
overrides.set(NO_SCOPE)

# CPython gh-148891, on 3.11: ContextVar.set and .reset read the context's mapping, which only the
# context holds, across allocations that can start the garbage collector, whose finalisers (a
# __del__ that enters a scope, a weakref callback) may set a variable of this same context: that
# replaces and frees the mapping being read (a crash, or a mapping without the frame). So every
# change of the frame goes through set_frame/reset_frame. On 3.11 the compiled ones keep the
# collector off inside the change (no Python code runs there, so no other thread can see it off);
# the pure ones (below) let a finaliser's change made inside this thread's change keep the mapping
# it replaces until that change returns. 3.12+ collects only between bytecodes: there they are the
# ContextVar's own methods.
if TYPE_CHECKING or sys.version_info >= (3, 12):
    set_frame, reset_frame = overrides.set, overrides.reset
elif speedups is not None:
    set_frame, reset_frame = speedups.set_frame, speedups.reset_frame
else:

    class _Held(threading.local):
        def __init__(self) -> None:
            # [whether this thread is changing the frame, the copies of the context that hold the
            # mappings replaced since (None: none yet)]
            self.box: list[Any] = [False, None]

    _held = _Held()  # one for both: a finaliser's reset may run inside a set, and the reverse

    def _holding(change: Any) -> Any:
        """``change`` (the ContextVar's set or reset), safe from finalisers run inside it.

        A finaliser runs inside a change only from a collection (or from a release the collection
        makes). Every mapping the change reads was the context's at some moment of it, so it is freed
        only if a change made since replaced it: that one, a finaliser's, first takes a copy of the
        context (of that mapping), held until the outer change returns. (The copy allocates; a
        collection it starts runs finalisers whose own changes hold their mappings the same way.)"""

        def held_change(argument: Any, _change: Any = change, _copy: Any = copy_context, _this: Any = _held) -> Any:
            box = _this.box
            if box[0]:  # a finaliser's change, inside one of this thread's
                pins = box[1]
                if pins is None:
                    pins = box[1] = []
                pins.append(_copy())
                return _change(argument)
            try:
                box[0] = True
                return _change(argument)
            finally:
                box[0] = False
                box[1] = None  # the replaced mappings go (their release may run finalisers: changes of their own)

        return held_change

    set_frame, reset_frame = _holding(overrides.set), _holding(overrides.reset)

#: Built-in defaults after environment variables; ``reset_defaults()`` returns here.
BUILTIN: dict[str, Value] = {flag.name: flag.default for flag in FLAGS}
BUILTIN_SOURCE: dict[str, str] = dict.fromkeys(NAMES, "default")
for _name, _value in environment.read(os.environ).items():
    BUILTIN[_name] = _value
    BUILTIN_SOURCE[_name] = "environment"

#: In the published defaults, the index of the sources (``describe()``'s column), one per
#: slot, so that a value and its source are published together.
SOURCES = len(NAMES)

#: The process defaults, ``published[0]``: one value per slot, then the tuple of their sources.
#: A one-item list, the cell that the compiled path holds too; never changed but by
#: ``_write_defaults``, which replaces its item. Read the item ONCE per call (``defaults = published[0]``).
published: list[tuple[Any, ...]] = [
    (*(BUILTIN[name] for name in NAMES), tuple(BUILTIN_SOURCE[name] for name in NAMES))
]
#: Serialises writers (so none is lost). Re-entrant, so that a signal handler that writes a
#: default, or forks, while its thread is writing one does not deadlock. See "fork" below.
_lock = threading.RLock()
_frozen = False
#: Bumped on every process-default write, after the new defaults are published, so the sync
#: layer, which reads it before the flags, can tell "nothing changed" from the frame's
#: identity plus this number (a stale number only ever costs it one extra push).
version = 0
#: Called with the dotted names of each process-default write, where set: the pytest plugin, while
#: a test runs, to say where the test changed a default it did not restore.
on_write: Callable[[Iterable[str]], object] | None = None
#: Called with the ``values`` (overrides) about to be in force in the current context wherever they
#: may change: a scope's entry and exit, an assignment, a process-default write, ``backends.sync()``.
#: ``None`` (no cost) unless a library's settings follow the flags (``mirror.install``, the torch target).
mirror_notify: Callable[[tuple[Any, ...]], object] | None = None

def read(name: str) -> Value:
    """The effective value of ``name`` in the current context."""
    slot = SLOT[name]
    value: Value | None = current()[VALUES][slot]
    return published[0][slot] if value is None else value


def effective() -> dict[str, Value]:
    """Every flag's effective value in the current context, by dotted name."""
    values, defaults = current()[VALUES], published[0]
    # (strict=False: the defaults end with their sources)
    return {
        name: default if value is None else value
        for name, value, default in zip(NAMES, values, defaults, strict=False)
    }


def merged(below: tuple[Any, ...], alone: tuple[Any, ...]) -> tuple[Any, ...]:
    """The ``values`` of a scope whose own are ``alone`` entered where ``below`` is in force:
    ``alone``'s override where it has one, else ``below``'s (``alone`` itself where it has all)."""
    if None not in alone:
        return alone
    return tuple([mine if mine is not None else theirs for mine, theirs in zip(alone, below, strict=True)])


def alone(overrides: Mapping[str, Value]) -> tuple[Any, ...]:
    """Checked ``{dotted name: value}`` overrides as ``values``: a value in each of their slots."""
    if not overrides:
        return EMPTY
    values: list[Any] = list(EMPTY)
    for name, value in overrides.items():
        values[SLOT[name]] = value
    return tuple(values)


def check_mapping(mapping: object, what: str) -> dict[str, Value]:
    """Validate a ``{dotted name: value}`` mapping completely, before anything changes."""
    if not issubclass(type(mapping), Mapping):
        raise TypeError(f"{what} takes a mapping of dotted flag names to values, got {show(mapping)}")
    checked: dict[str, Value] = {}
    for name, value in mapping.items():  # type: ignore[attr-defined]
        # Look up a plain str: a str subclass's own __hash__/__eq__ never runs.
        plain = str.__str__(name) if issubclass(type(name), str) else None
        flag = BY_NAME.get(plain) if plain is not None else None
        if flag is None:
            view = VIEWS_BY_NAME.get(plain) if plain is not None else None
            if view is not None:
                raise UnknownFlagError(f"{plain!r} is a view, not a flag: {use_the_flag(view)}")
            raise unknown_name(name, NAMES)
        checked[flag.name] = flag.check(value)
    return checked


def _write_defaults(values: Mapping[str, Value], sources: Mapping[str, str]) -> None:
    """The one place process defaults change: new defaults built from the current ones under
    the lock and published by one store, then ``version`` bumped for the sync layer."""
    global version
    with _lock:
        old = published[0]
        new, new_sources = list(old[:SOURCES]), list(old[SOURCES])
        for name, value in values.items():
            new[SLOT[name]] = value
        for name, source in sources.items():
            new_sources[SLOT[name]] = source
        published[0] = (*new, tuple(new_sources))
        version += 1
    watcher = on_write
    if watcher is not None:
        watcher(values)
    notify = mirror_notify
    if notify is not None:  # the writer's own context: other threads follow at their next push
        notify(current()[VALUES])


def assign(name: str, value: object) -> None:
    """Attribute assignment: inside a scope, for the rest of that scope in this
    context only; outside any scope, the process default."""
    __tracebackhide__ = True  # see assign_checked
    assign_checked({name: BY_NAME[name].check(value)})


def assign_checked(values: dict[str, Value]) -> None:
    """``assign()`` of checked values, all at once (one store, so no reader sees half of them)."""
    # pytest leaves out of a traceback the frames that set this (the plugin's errors do the same): a
    # refused assignment (under --backends-strict, say) or a bad value ends at the user's line, as
    # these functions and the namespace's __setattr__ and property setter that call them do too.
    __tracebackhide__ = True
    frame = current()
    if frame[SCOPE] is None:  # outside any scope
        if _frozen:
            names = " and ".join(f"backends.{name}" for name in values)
            namespace = next(iter(values)).rpartition(".")[0]
            keywords = ", ".join(f"{name.rpartition('.')[2]}={value!r}" for name, value in values.items())
            raise RuntimeError(
                f"global flags are disabled (backends.disable_global_flags(), or pytest's --backends-strict), so "
                f"{names} cannot be assigned outside a scope; use "
                f"`with backends.{namespace}.flags({keywords}):` (or backends.flags({values!r})) instead"
            )
        _write_defaults(values, dict.fromkeys(values, "process default"))
        return
    new = list(frame[VALUES])
    for name, value in values.items():
        new[SLOT[name]] = value
    changed = tuple(new)
    notify = mirror_notify
    if notify is not None:  # before the frame: a push that raises refuses the assignment
        notify(changed)
    set_frame((changed, frame[SCOPE], frame[TOKEN]))  # same entry: undone when that scope exits


def set_defaults(mapping: Mapping[str, Any]) -> None:
    """Set process defaults by dotted name (``{"cudnn.benchmark": True}``), from anywhere:
    inside a scope or not, frozen or not. Seen at once by every thread and task without an
    override of that flag.

    Raises ``TypeError`` for a non-mapping or a wrong type (``None`` included), ``ValueError``
    for a value out of range, ``KeyError`` (``UnknownFlagError``) for an unknown name; the
    whole mapping is checked first, so after an error nothing has changed.
    """
    checked = check_mapping(mapping, "set_defaults()")
    _write_defaults(checked, dict.fromkeys(checked, "process default"))


def reset_defaults() -> None:
    """Restore every process default to its built-in value, as set by the ``BACKENDS_*``
    (and ``CUPY_TF32``) environment variables at import. Scope overrides are untouched."""
    _write_defaults(BUILTIN, BUILTIN_SOURCE)


class SavedDefaults(Record):
    """Process defaults with their sources, and the freeze; for tools that must put
    the process back as it was (the pytest plugin)."""

    values: dict[str, Value]
    sources: dict[str, str]
    frozen: bool


def save_defaults() -> SavedDefaults:
    with _lock:  # for the freeze: the defaults alone need no lock
        values = published[0]
        sources = dict(zip(NAMES, values[SOURCES], strict=True))
        return SavedDefaults(dict(zip(NAMES, values, strict=False)), sources, _frozen)  # (values end with sources)


def restore_defaults(saved: SavedDefaults) -> None:
    set_frozen(saved.frozen)
    _write_defaults(saved.values, saved.sources)


def set_frozen(frozen: bool) -> None:
    global _frozen
    with _lock:
        _frozen = frozen


def is_frozen() -> bool:
    return _frozen


class FlagRow(Record):
    """One row of ``describe()``: ``name`` (dotted, ``str``), ``value`` (``bool``, ``int`` or
    ``str``, the effective value in the current context) and ``source`` (``"default"``,
    ``"environment"``, ``"process default"`` or ``"scope"``)."""

    name: str
    value: Value
    source: str  # "default", "environment", "process default" or "scope"


def describe() -> list[FlagRow]:
    values, defaults = current()[VALUES], published[0]
    return [
        FlagRow(name, default, source) if value is None else FlagRow(name, value, "scope")
        for name, value, default, source in zip(NAMES, values, defaults, defaults[SOURCES], strict=False)
    ]


# -- fork ---------------------------------------------------------------------------------------
# os.fork() copies only the forking thread: a lock another thread held at that moment would
# stay held in the child for ever. Holding the lock across fork() means no other thread is half
# way through a write then, so the child inherits whole defaults and a version that matches
# them; the child gets a fresh lock instead of the copy the forking thread acquired.


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork()
    os.register_at_fork(
        before=lambda: _lock.acquire(),  # looked up at fork time: the child rebinds _lock
        after_in_parent=lambda: _lock.release(),
        after_in_child=_after_fork_in_child,
    )
