"""Post-import hooks: run a function on a module right after it is imported.

The sync layer must wrap CuPy's launch points whichever of ``backends`` and
``cupy`` is imported first, without importing CuPy itself. A finder on
``sys.meta_path`` notices the import of a watched module, lets the normal
finders and loader do all the work, and then calls the hooks on the new module.
A module already imported is hooked at once. Hooks stay registered, so a module
imported again (after being removed from ``sys.modules``) is hooked again.

A hook is never run on a half-imported module. Registering a hook while the module
is being imported (the import began before the hook was registered, so it does not
pass through the finder) is handled where the import system handles it:

- the module is in ``sys.modules`` but its body is still running, in another thread
  or in this one (``module.__spec__._initializing`` is true): the hook is deferred to
  the moment that import completes. The import system sets ``_initializing`` back to
  false in the importing thread, inside its per-module import lock, right after the
  body has run; the spec's class is swapped for the duration for one whose
  ``_initializing`` setter runs the deferred hooks there, and then swapped back. So
  the hooks run before any other thread can see the module as imported, as with the
  finder, and registering never waits for that import;
- the module is not in ``sys.modules`` yet but another thread holds its import lock
  (it is finding or creating the module): registering waits for that lock, as the
  import system itself does (``importlib._bootstrap._lock_unlock_module``, which
  gives up instead of deadlocking when that import waits for this thread), then
  looks again.

A hook may therefore run more than once on one module (the finder's loader and a
registration can both see its import complete); hooks must be idempotent, as the
sync layer's are (``wrapping.replace`` always wraps CuPy's original).

A hook that raises is recorded in ``failures`` and otherwise ignored: the sync
layer must never break CuPy.
"""

from __future__ import annotations

import importlib._bootstrap as _bootstrap
import os
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see _engine/record.py)
if TYPE_CHECKING:
    from typing import Any

Hook = Callable[[ModuleType], None]

_hooks: dict[str, list[Hook]] = {}
_lock = threading.RLock()
#: (module name, the exception) for each hook that failed.
failures: list[tuple[str, BaseException]] = []


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()


# os.fork() copies only the forking thread: held across fork(), the lock guarantees no other
# thread was half way through registering a hook (hook listed, finder not yet installed), and
# the child gets a fresh lock that nobody holds.
if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork()
    os.register_at_fork(
        before=lambda: _lock.acquire(),
        after_in_parent=lambda: _lock.release(),
        after_in_child=_after_fork_in_child,
    )


def _run(name: str, module: ModuleType) -> None:
    for hook in list(_hooks.get(name, ())):
        _call(name, hook, module)


class _HookedLoader:
    """Delegates to the real loader, then runs the hooks on the loaded module."""

    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _run(self._name, module)

    def __getattr__(self, attribute: str) -> Any:  # get_source, get_resource_reader, ...
        return getattr(self._loader, attribute)


class _Finder:
    """A ``sys.meta_path`` finder that only ever answers for watched modules."""

    _busy = threading.local()

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in _hooks or getattr(self._busy, "name", None) == name:
            return None
        self._busy.name = name  # the other finders may import: don't find ourselves again
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec: ModuleSpec | None = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.name = None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _HookedLoader(spec.loader, name)  # type: ignore[assignment]
        return spec


_finder = _Finder()


def when_imported(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` now if ``name`` is imported, and after every later import of it.

    If ``name`` is being imported right now (by another thread, or by this one: its body is
    running), ``hook`` runs once that import has completed, in the importing thread, and not
    at all if it fails. Waits only for another thread's import that has not yet put the
    module in ``sys.modules``. Never raises for what the hook raises (see ``failures``).
    """
    with _lock:
        _hooks.setdefault(name, []).append(hook)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    module = sys.modules.get(name)
    if module is None:
        wait = getattr(_bootstrap, "_lock_unlock_module", None)  # CPython 3.3 to 3.14 at least
        if wait is None or not _import_in_flight(name):
            return
        wait(name)  # until that import completes (or at once, where waiting would deadlock)
        module = sys.modules.get(name)
        if module is None:  # it failed, or was still finding the module: the finder has it
            return
    if _initializing(module) and _defer(name, module, hook):
        return
    _call(name, hook, module)


def _call(name: str, hook: Hook, module: ModuleType) -> None:
    try:
        hook(module)
    except Exception as error:  # never let our wrapping break the user's import
        failures.append((name, error))


def _import_in_flight(name: str) -> bool:
    """Whether some thread may hold ``name``'s import lock (it has one while it is in use)."""
    locks = getattr(_bootstrap, "_module_locks", None)
    return locks is None or name in locks


def _initializing(module: ModuleType) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


# -- deferring a hook until the import in progress completes ----------------------------------------
#: id(spec) -> (spec, its own class, module name, the deferred hooks), while its import runs
_deferred: dict[int, tuple[Any, type, str, list[Hook]]] = {}
_deferring_classes: dict[type, type] = {}  # a spec class -> its subclass with the setter


def _deferring_class(base: type) -> type:
    subclass = _deferring_classes.get(base)
    if subclass is None:

        def getter(spec: Any) -> bool:
            return bool(vars(spec).get("_initializing", False))

        def setter(spec: Any, value: bool) -> None:
            vars(spec)["_initializing"] = value
            if not value:
                _import_completed(spec)

        namespace = {"_initializing": property(getter, setter), "__slots__": ()}
        subclass = _deferring_classes[base] = type(base.__name__, (base,), namespace)
        subclass.__module__, subclass.__qualname__ = base.__module__, base.__qualname__
    return subclass


def _defer(name: str, module: ModuleType, hook: Hook) -> bool:
    """Run ``hook`` when the import of ``module`` completes; ``False`` if it already has
    (or its spec cannot be watched): then the caller runs it now."""
    spec = module.__spec__
    with _lock:
        entry = _deferred.get(id(spec))
        if entry is not None and entry[0] is spec:
            entry[3].append(hook)
            return True
        own = type(spec)
        try:
            spec.__class__ = _deferring_class(own)
        except TypeError:  # a spec class that cannot be subclassed or swapped
            return False
        _deferred[id(spec)] = (spec, own, name, [hook])
        # The import may have completed between the check and the swap (its store then went
        # to the instance dict, past the setter): look again now that the setter is in place.
        if not vars(spec).get("_initializing", False):
            del _deferred[id(spec)]
            spec.__class__ = own
            return False
    return True


def _import_completed(spec: Any) -> None:
    """In the importing thread, as the import system marks ``spec`` initialised."""
    with _lock:
        entry = _deferred.pop(id(spec), None)
        if entry is None or entry[0] is not spec:
            return
        _, own, name, deferred = entry
        spec.__class__ = own
    module = sys.modules.get(name)
    if module is not None and not _initializing(module):  # not a failed import
        for hook in deferred:
            _call(name, hook, module)
