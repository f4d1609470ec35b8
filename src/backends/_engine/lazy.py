"""``Lazy``: a module imported at its first attribute access, for modules ``import backends``
does not need (each import costs it time): ``cpu = Lazy("backends.availability.cpu", globals(),
"cpu")`` binds a stand-in that, at the first ``cpu.name``, imports the module and puts it in
place of itself, so later calls read the module directly."""

from __future__ import annotations

import importlib


class Lazy:
    __slots__ = ("_module", "_name", "_namespace")

    def __init__(self, module: str, namespace: dict[str, object], name: str) -> None:
        self._module, self._namespace, self._name = module, namespace, name

    def __getattr__(self, attribute: str) -> object:
        module = importlib.import_module(self._module)
        self._namespace[self._name] = module  # from now on the global is the module itself
        return getattr(module, attribute)
