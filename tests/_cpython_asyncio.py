"""Driver for tests/test_cpython_asyncio.py: run CPython's own asyncio tests, with or without
``backends.asyncio.install()`` on every event loop.

``python tests/_cpython_asyncio.py MODE OUT.json NAME...`` loads each NAME (a module such as
``test.test_asyncio.test_tasks``, or one test's id) with unittest, runs them and writes
``{"run": N, "skipped": N, "failed": {test id: traceback}, "rerun": {test id: name to load},
"loops": N, "coroutines": N, "backends imported": bool, "accelerated": bool or None}``.

MODE ``baseline`` never imports backends. MODE ``installed`` makes every event loop get
``backends.asyncio.install(loop)`` at the end of ``BaseEventLoop.__init__``, before it runs, so
every task a loop makes, main tasks included, goes through the library's task factory. A
factory a test sets itself (``loop.set_task_factory(f)``) is wrapped the same way, as
``install()`` wraps a factory set before it, and ``loop.get_task_factory()`` answers with the
factory the test set, as it would without ``install()``.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import unittest
from typing import Any

counts = {"loops": 0, "coroutines": 0}


def _shim() -> None:
    import asyncio.base_events

    import backends
    import backends.integrations.asyncio as integration

    loop_class = asyncio.base_events.BaseEventLoop
    original_init = loop_class.__init__
    original_set = loop_class.set_task_factory
    original_get = loop_class.get_task_factory
    inside = threading.local()  # install()'s own get/set_task_factory calls see the real factory

    def install(loop: Any) -> None:
        inside.on = True
        try:
            backends.asyncio.install(loop)
        finally:
            inside.on = False

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        counts["loops"] += 1
        install(self)

    def set_task_factory(self: Any, factory: Any) -> None:
        original_set(self, factory)
        if not getattr(inside, "on", False):
            install(self)  # wraps the test's factory (None: asyncio's plain Task)

    def get_task_factory(self: Any) -> Any:
        factory = original_get(self)
        if getattr(inside, "on", False):
            return factory
        return getattr(factory, "backends_previous", factory)

    loop_class.__init__ = __init__  # type: ignore[method-assign]
    loop_class.set_task_factory = set_task_factory  # type: ignore[method-assign]
    loop_class.get_task_factory = get_task_factory  # type: ignore[method-assign]

    # Count the coroutines the factory steps (its stepper is built before the Task, so this
    # adds no frame to a task's creation traceback).
    original_stepper_init = integration.synced.__init__

    def stepper_init(self: Any, coroutine: Any) -> None:
        counts["coroutines"] += 1
        original_stepper_init(self, coroutine)

    integration.synced.__init__ = stepper_init  # type: ignore[method-assign]


def _rerun_name(test: Any) -> str | None:
    """The name that loads ``test`` again (the test a subtest belongs to); None for a class or
    module fixture's error."""
    case = getattr(test, "test_case", test)  # a subTest failure: its test
    return case.id() if isinstance(case, unittest.TestCase) else None


def main() -> None:
    mode, out, *names = sys.argv[1:]
    if mode == "installed":
        _shim()
    elif mode != "baseline":
        raise SystemExit(f"unknown mode {mode!r}")
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    stream = io.StringIO()
    result = unittest.TextTestRunner(stream=stream, verbosity=0).run(suite)
    failed: dict[str, str] = {}
    rerun: dict[str, str] = {}
    for test, text in result.failures + result.errors:
        failed[test.id()] = text
        name = _rerun_name(test)
        if name is not None:
            rerun[test.id()] = name
    report = {
        "run": result.testsRun,
        "skipped": len(result.skipped),
        "failed": failed,
        "rerun": rerun,
        "loops": counts["loops"],
        "coroutines": counts["coroutines"],
        "backends imported": "backends" in sys.modules,
        "accelerated": sys.modules["backends._engine"].ACCELERATED if "backends._engine" in sys.modules else None,
    }
    with open(out, "w", encoding="utf-8") as file:
        json.dump(report, file)


if __name__ == "__main__":
    main()
