"""``import backends`` racing another thread's import of a watched CuPy module, in a fresh interpreter.

Run by ``tests/test_sync_round3.py`` (with the stand-in CuPy on ``PYTHONPATH``) and
``tests/test_real_wheels.py`` (the real wheels): ``python tests/import_race_probe.py ORDER MODULE``.
It prints one JSON object. No CUDA function is called. The threads are held and released with
``threading.Event``s; a line trace (``sys.settrace``, in the held thread only) stops a module's
body part-way, at the first line matching ``HOLD_AT[MODULE]``: after its imports, before the
names the sync layer wraps exist. ORDER is one of:

``module first``
    A thread starts importing MODULE and is held part-way through its body (so MODULE is in
    ``sys.modules``, its ``__spec__._initializing`` true); the main thread runs ``import
    backends`` then; then the thread is released.
``backends first``
    A thread runs ``import backends`` and is held at the moment it registers MODULE's hook; the
    main thread imports MODULE (its first import, through no hook of ours); then the thread is
    released.
``both held``
    A thread is held part-way through MODULE's body, and a second thread runs ``import backends``
    and is held as it registers MODULE's hook; the first thread is released (its import
    completes), then the second.
``window``
    A thread starts importing MODULE and is held once its spec is found (not by our finder),
    before MODULE is in ``sys.modules``; a second thread runs
    ``import backends``; the first is released once the second has registered MODULE's hook and
    either returned from that registration or started waiting for the import in flight.

The report: ``installed`` (the sync layer's installed targets), ``failures`` (hook failures),
``wrapped`` (each wrap point of MODULE: its attribute is a wrapper of ours), ``early`` (in
``module first``: the wrap points' state while the body was held, and whether ``import
backends`` returned while it was held).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

# Running this file puts tests/ first on sys.path: drop it, so only what is installed (or on
# PYTHONPATH) answers.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

ORDERS = ("module first", "backends first", "both held", "window")
TIMEOUT = 60.0  # a safety net for a broken run, never reached when healthy

#: Where to hold each module's body: the first line matching (after its imports, before the
#: wrapped names are defined). The wrap points: (attribute path in the module, attribute).
HOLD_AT = {
    "cupy.fft._fft": r"^from cupy\.fft\._cache import get_plan_cache",
    "cupyx.scipy.ndimage._measurements": r"^_ndimage_sum_kernel\b",
    "cupyx.scipy.sparse._coo": r"^class ",
    "cupyx.scipy.sparse._compressed": r"^class ",
}
WRAP_POINTS = {
    "cupy.fft._fft": [("", "get_plan_cache")],
    "cupyx.scipy.ndimage._measurements": [("", "_ndimage_sum_kernel"), ("", "_ndimage_mean_kernel")],
    "cupyx.scipy.sparse._coo": [("_coo_base|coo_matrix", "sum_duplicates")],
    "cupyx.scipy.sparse._compressed": [("_compressed_sparse_matrix", "_get_intXint")],
}


class Hold:
    """Hold the thread that gets here until ``release`` is set; ``reached`` says it got here."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()
        self.done = False

    def wait_here(self) -> None:
        if not self.done:
            self.done = True
            self.reached.set()
            self.release.wait(TIMEOUT)


def body_hold(module: str, hold: Hold) -> Callable[..., Any]:
    """A ``sys.settrace`` function holding the thread at MODULE's ``HOLD_AT`` line."""
    # Found on sys.path by hand: importlib.util.find_spec would import the parent packages,
    # whose __init__ may import MODULE itself.
    relative = os.path.join(*module.split(".")) + ".py"
    origin = next(
        os.path.realpath(os.path.join(entry, relative))
        for entry in sys.path
        if os.path.isfile(os.path.join(entry or os.curdir, relative))
    )
    with open(origin, encoding="utf-8") as source:
        pattern = re.compile(HOLD_AT[module])
        line = next(number for number, text in enumerate(source, 1) if pattern.match(text))

    def local(frame: types.FrameType, event: str, arg: object) -> Any:
        if event == "line" and frame.f_lineno >= line:
            hold.wait_here()
            return None
        return local

    def trace(frame: types.FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        if event == "call" and code.co_name == "<module>" and os.path.realpath(code.co_filename) == origin:
            return local
        return None

    return trace


def registration_hold(module: str, hold: Hold) -> Callable[..., Any]:
    """A ``sys.settrace`` function holding the thread as ``hooks.when_imported(MODULE, ...)`` starts."""

    def trace(frame: types.FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        if (event == "call" and code.co_name == "when_imported" and code.co_filename.endswith("hooks.py")
                and frame.f_locals.get("name") == module):
            hold.wait_here()
        return None

    return trace


class HeldFinder:
    """A ``sys.meta_path`` finder for MODULE whose loader holds the thread in ``create_module``:
    after the spec is found (the import system holds its global lock while finders run, so
    the thread cannot be held there), before the module is in ``sys.modules``."""

    def __init__(self, module: str, hold: Hold) -> None:
        self.module, self.hold = module, hold

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.module:
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        else:
            return None
        loader, hold = spec.loader, self.hold

        class Held:
            def create_module(self, spec: Any) -> Any:
                hold.wait_here()
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)

        spec.loader = Held()
        return spec


def registration_signal(module: str, signal: threading.Event) -> Callable[..., Any]:
    """A ``sys.settrace`` function setting ``signal`` once ``hooks.when_imported(MODULE, ...)``
    returns, or calls the import system's wait for a module another thread is importing."""
    registering = threading.Event()

    def local(frame: types.FrameType, event: str, arg: object) -> Any:
        if event == "return":
            signal.set()
        return local

    def trace(frame: types.FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        if event != "call":
            return None
        if code.co_name == "when_imported" and code.co_filename.endswith("hooks.py"):
            if frame.f_locals.get("name") == module:
                registering.set()
                return local
        elif code.co_name == "_lock_unlock_module" and registering.is_set():
            signal.set()
        return None

    return trace


def traced(trace: Callable[..., Any], action: Callable[[], object], errors: list[str]) -> threading.Thread:
    def run() -> None:
        sys.settrace(trace)
        try:
            action()
        except BaseException as error:  # reported, not raised: the main thread decides
            errors.append(f"{type(error).__name__}: {error}")
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wrap_points(module: str) -> dict[str, Any]:
    """Each wrap point: True (a wrapper of ours), False (CuPy's own), or None (absent)."""
    found = sys.modules.get(module)
    states: dict[str, Any] = {}
    for owners, attribute in WRAP_POINTS[module]:
        value = None
        for owner_name in owners.split("|"):
            owner = found if not owner_name else getattr(found, owner_name, None)
            if owner is not None and attribute in vars(owner):
                value = vars(owner)[attribute]
                break
        states[f"{owners}.{attribute}"] = None if value is None else hasattr(value, "__backends_wrapped__")
    return states


def import_backends() -> None:
    import backends  # noqa: F401


def main(order: str, module: str) -> dict[str, Any]:
    # Nothing of CuPy is imported first: ``import cupy`` itself may import MODULE (it imports
    # cupy.fft._fft, and CuPy 13 imports the sparse modules), so the held thread imports all of it.
    report: dict[str, Any] = {"order": order, "module": module, "errors": []}
    errors: list[str] = report["errors"]
    if order == "module first":
        held = Hold()
        thread = traced(body_hold(module, held), lambda: importlib.import_module(module), errors)
        assert held.reached.wait(TIMEOUT), "the import never reached the hold"
        import_backends()  # must not wait for the held import
        report["early"] = {"in sys.modules": module in sys.modules, "wrap points": wrap_points(module)}
        held.release.set()
        thread.join(TIMEOUT)
    elif order == "backends first":
        held = Hold()
        thread = traced(registration_hold(module, held), import_backends, errors)
        assert held.reached.wait(TIMEOUT), "import backends never registered the hook"
        importlib.import_module(module)
        report["early"] = {"wrap points": wrap_points(module)}
        held.release.set()
        thread.join(TIMEOUT)
    elif order == "window":
        finding, registered = Hold(), threading.Event()
        sys.meta_path.insert(0, HeldFinder(module, finding))
        importer = traced(lambda *args: None, lambda: importlib.import_module(module), errors)
        assert finding.reached.wait(TIMEOUT), "the import never reached the finder"
        registrar = traced(registration_signal(module, registered), import_backends, errors)
        assert registered.wait(TIMEOUT), "import backends never registered the hook"
        finding.release.set()
        importer.join(TIMEOUT)
        registrar.join(TIMEOUT)
    else:
        body, registration = Hold(), Hold()
        importer = traced(body_hold(module, body), lambda: importlib.import_module(module), errors)
        assert body.reached.wait(TIMEOUT), "the import never reached the hold"
        registrar = traced(registration_hold(module, registration), import_backends, errors)
        assert registration.reached.wait(TIMEOUT), "import backends never registered the hook"
        body.release.set()
        importer.join(TIMEOUT)
        registration.release.set()
        registrar.join(TIMEOUT)
    from backends.sync import hooks, installed

    report["installed"] = sorted(installed)
    report["failures"] = [f"{name}: {type(error).__name__}: {error}" for name, error in hooks.failures]
    report["wrapped"] = wrap_points(module)
    report["spec class"] = type(sys.modules[module].__spec__).__qualname__
    return report


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ORDERS or sys.argv[2] not in HOLD_AT:
        sys.exit(f"usage: python {sys.argv[0]} {{{' | '.join(ORDERS)}}} {{{' | '.join(HOLD_AT)}}}")
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
