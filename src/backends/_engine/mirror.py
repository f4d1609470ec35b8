"""Mirrors: another library's process-wide settings, made to follow the effective values of some
flags in the code running now (the torch target, ``backends/sync/torch.py``, is one).

The engine knows nothing of that library. A ``Mirror`` lists, for each flag it follows, how to
read the library's own value (``get``), put it back (``put``) and set a flag's value (``push``).
The engine calls ``notify(values)`` with the overrides about to be in force in this context (a
frame's ``values``, see ``state``) at every moment they may change: a scope's entry (before it
is published: a push that raises refuses the entry) and exit (after it), an assignment inside a
scope, a process-default write, and ``backends.sync()`` (which ``backends.asyncio.install()``
and the trio instrument call before every task step).

What a flag wants in the library: its override, else its process default where that was set
through ``backends`` (source other than ``"default"``), else nothing (``UNSET``): the library's
own value stands. ``wanted`` is what the mirror put in force for each flag; where it goes from
``UNSET`` to a value, the library's own value is read first (``own``), and where it goes back to
``UNSET`` that value is put back. So a scope's exit gives the library back what it had before
the scope pushed, and a flag never set through ``backends`` is left to the library's own API.

The library's settings are process-wide, the flags are per context: the mirror is exact while
one thread at a time runs the library. Each thread that pushes is remembered (with the values
of its last push) while it lives. A push by a thread while another one holds a different value
of a flag warns (``conflict``, once per conflict) and puts in force the value of the thread that
pushed; a thread that holds nothing for a flag leaves another thread's value in force.

Cost: ``notify`` answers "nothing changed" from the identity of ``values`` and of the published
defaults when the thread is the one that checked last (the compiled engine does this, and the
push of what changed while one thread holds values, in C: ``_speedups.c``); everything else
(another thread, a thread holding values) goes through ``arbitrate`` here.
"""

from __future__ import annotations

import operator
import os
import sys
import threading
import warnings
from collections.abc import Callable, Sequence

from . import state
from .accelerator import speedups
from .record import Record
from .state import SLOT, SOURCES

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see record.py)
if TYPE_CHECKING:
    from typing import Any


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


#: What a flag wants where it wants nothing: the library's own value stands.
UNSET: Any = _Unset()
_DEFAULT = "default"  # the source of a flag never set through backends (state.BUILTIN_SOURCE)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Setting(Record):
    """How one flag reaches the library: ``get()`` its own value (whatever form it has),
    ``put(own)`` that value back, ``push(value)`` the flag's value; ``spelling``, the library's
    name for the setting (in messages)."""

    name: str
    get: Callable[[], object]
    put: Callable[[Any], object]
    push: Callable[[Any], object]
    spelling: str = ""


class Mirror:
    """The library's settings for ``settings``' flags, following the code running now.

    ``label`` names the library in messages (``"torch"``); ``conflict`` is the warning category
    of a push that overrides another thread's value."""

    def __init__(self, label: str, settings: Sequence[Setting], conflict: type[Warning]) -> None:
        self.label = label
        self.settings = tuple(settings)
        self.names = tuple(setting.name for setting in self.settings)
        self.slots = tuple(SLOT[name] for name in self.names)
        self.accessors = tuple((setting.get, setting.put, setting.push) for setting in self.settings)
        self.conflict = conflict
        #: per flag: the value the mirror put in force, or UNSET (the library's own stands)
        self.wanted: list[Any] = [UNSET] * len(self.settings)
        #: per flag: the library's own value, read when a flag's value replaced it
        self.own: list[Any] = [None] * len(self.settings)
        #: the last check, one tuple (stored at once): (the thread that made it, whether no other
        #: thread held a value, the values and the defaults it checked)
        self.seen: tuple[int, bool, Any, Any] = (0, True, None, None)
        #: live threads that pushed: ident -> (name, the values of their last push)
        self.threads: dict[int, tuple[str, tuple[Any, ...]]] = {}
        self.warned: set[tuple[Any, ...]] = set()  # conflicts warned and still going on

    # -- what each flag wants ---------------------------------------------------------------
    def wants(self, values: tuple[Any, ...], defaults: tuple[Any, ...]) -> list[Any]:
        """Per flag: its override in ``values``, else its process default set through backends,
        else UNSET."""
        sources = defaults[SOURCES]
        return [
            values[slot] if values[slot] is not None else UNSET if sources[slot] == _DEFAULT else defaults[slot]
            for slot in self.slots
        ]

    # -- the reference path of notify (the compiled engine's is in C) ------------------------------
    def notify(self, values: tuple[Any, ...]) -> None:
        """The overrides ``values`` are (about to be) in force in this context: bring the library
        in step. Raises what a push raises, or the conflict warning made an error by a filter."""
        defaults = state.published[0]
        me = threading.get_ident()
        holder, solo, seen_values, seen_defaults = self.seen
        if me == holder:
            if values is seen_values and defaults is seen_defaults:
                return
            if solo and not _busy[0] and all(map(operator.is_, self.wants(values, defaults), self.wanted)):
                self.settle(me, True, values, defaults)  # other values, the same for the library
                return
        if _busy[0] == me:  # a push made from inside a push (a setter entering a scope): the outer one decides
            return
        with _lock:
            _busy[0] = me
            try:
                holder, solo, _, _ = self.seen
                if me == holder and solo:
                    self.apply(self.wants(values, defaults))
                    self.settle(me, True, values, defaults)
                else:
                    self.arbitrate(values)
            finally:
                _busy[0] = 0

    def apply(self, wanted: list[Any]) -> None:
        """Put ``wanted`` in force: only what differs from what is (by identity), recording the
        library's own value where a flag takes over and putting it back where one lets go."""
        for index, want in enumerate(wanted):
            was = self.wanted[index]
            if want is was:
                continue
            get, put, push = self.accessors[index]
            if was is UNSET:
                self.own[index] = get()
                push(want)
            elif want is UNSET:
                put(self.own[index])
                self.own[index] = None
            else:
                push(want)
            self.wanted[index] = want

    def settle(self, holder: int, solo: bool, values: tuple[Any, ...], defaults: tuple[Any, ...]) -> None:
        """Record the check just made (the compiled engine keeps its own copy for its fast path)."""
        self.seen = (holder, solo, values, defaults)
        if _compiled is not None:
            _compiled.mirror_settle(holder, solo, values, defaults)

    # -- several threads ---------------------------------------------------------------------
    def arbitrate(self, values: tuple[Any, ...]) -> None:
        """``notify`` where another thread checked last or holds values (under the mirror's lock)."""
        defaults = state.published[0]
        me = threading.get_ident()
        mine = self.wants(values, defaults)
        live = {thread.ident: thread for thread in threading.enumerate()}
        for ident in [ident for ident in self.threads if ident not in live or ident == me]:
            del self.threads[ident]  # ended (an ident may be reused), or this thread's old entry
        target, conflicts, solo = list(mine), [], True
        for ident, (name, theirs_values) in self.threads.items():
            for index, theirs in enumerate(self.wants(theirs_values, defaults)):
                if theirs is UNSET:
                    continue
                solo = False
                if mine[index] is UNSET:  # mine wants nothing: another thread's value stays in force
                    if target[index] is UNSET:
                        target[index] = self.wanted[index] if self.wanted[index] == theirs else theirs
                elif mine[index] != theirs:
                    conflicts.append((index, ident, name, theirs))
        me_name = threading.current_thread().name
        going_on = set()
        for index, ident, name, theirs in conflicts:
            key = (index, frozenset({(me, repr(mine[index])), (ident, repr(theirs))}))
            going_on.add(key)
            if key not in self.warned:
                # before anything changes: a filter that makes it an error refuses this push
                warnings.warn(self._conflict_message(index, me_name, mine[index], name, theirs), self.conflict,
                              stacklevel=_caller_level())
                self.warned.add(key)
        # conflicts of this thread that are over are forgotten: if one starts again, it warns again
        self.warned = {key for key in self.warned if key in going_on or all(me != who for who, _ in key[1])}
        self.threads[me] = (me_name, values)
        self.apply(target)
        self.settle(me, solo, values, defaults)

    def _conflict_message(self, index: int, me: str, mine: Any, other: str, theirs: Any) -> str:
        name = self.names[index]
        return (
            f"backends.{name} reaches {self.label}, whose setting is one for the whole process: thread {me!r} "
            f"now pushes {mine!r} while thread {other!r} holds {theirs!r}; {self.label} runs with {mine!r} "
            f"until the next push, so {self.label} code running in thread {other!r} meanwhile reads {mine!r}. "
            f"Run {self.label} from one thread at a time, or give the threads the same value (warned once per "
            f"conflict)"
        )

    # -- reading (describe, the pytest plugin's leak check) ---------------------------------
    def spelling(self, name: str) -> str:
        """The library's name for the setting of flag ``name``."""
        return self.settings[self.names.index(name)].spelling or f"{self.label}'s {name}"

    def put_back(self, values: dict[str, Any]) -> None:
        """Set the library's own values ``{flag name: value as current() gave it}`` (the pytest
        plugin, after a test changed them through the library's API)."""
        for name, value in values.items():
            self.accessors[self.names.index(name)][1](value)

    def current(self) -> dict[str, Any]:
        """The library's value of each flag now, as its getter gives it (an error's text where it raises)."""
        values: dict[str, Any] = {}
        for name, (get, _, _) in zip(self.names, self.accessors, strict=True):
            try:
                values[name] = get()
            except Exception as error:  # a getter torch refuses (its legacy/new TF32 mix check)
                values[name] = f"<{type(error).__name__}: {error}>"
        return values


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside backends."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


# -- the one mirror in force --------------------------------------------------------------------
_lock = threading.Lock()
_busy = [0]  # the thread inside a push (its ident), so that a push from inside it is not waited for
_compiled: Any = None  # the compiled engine, where it keeps the fast path
mirror: Mirror | None = None


def install(new: Mirror | None) -> None:
    """Make ``new`` the mirror that the engine notifies (``None``: none, at no cost); brings the
    library in step with the current context at once. The mirror replaced first gives the library
    back its own value of every flag it holds."""
    global mirror, _compiled
    old, mirror = mirror, new
    if old is not None and old is not new:
        with _lock:
            old.apply([UNSET] * len(old.settings))
    if speedups is not None:
        _compiled = speedups if new is not None else None
        speedups.mirror_configure(new, UNSET, _DEFAULT)
        state.mirror_notify = speedups.mirror_notify if new is not None else None
    else:
        state.mirror_notify = new.notify if new is not None else None
    if new is not None:
        sync()


def sync() -> None:
    """Bring the mirror in step with the current context (a task step, ``backends.sync()``)."""
    notify = state.mirror_notify
    if notify is not None:
        notify(state.current()[state.VALUES])


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    _busy[0] = 0
    if speedups is not None:
        speedups.mirror_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
