"""Post-import hooks: run a function on a module right after it is imported.

The sync layer must wrap CuPy's launch points whichever of ``backends`` and
``cupy`` is imported first, without importing CuPy itself. A finder on
``sys.meta_path`` notices the import of a watched module, lets the normal
finders and loader do all the work, and then calls the hooks on the new module.
A module already imported is hooked at once. Hooks stay registered, so a module
imported again (after being removed from ``sys.modules``) is hooked again.

A hook that raises is recorded in ``failures`` and otherwise ignored: the sync
layer must never break CuPy.
"""

from __future__ import annotations

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
        try:
            hook(module)
        except Exception as error:  # never let our wrapping break the user's import
            failures.append((name, error))


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
    """Call ``hook(module)`` now if ``name`` is imported, and after every later import of it."""
    with _lock:
        _hooks.setdefault(name, []).append(hook)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    module = sys.modules.get(name)
    if module is not None:
        try:
            hook(module)
        except Exception as error:
            failures.append((name, error))
