"""Module-level helpers: importable by name, so they pickle into worker processes."""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import backends

#: The folder of the ``backends`` that the tests import: the checkout's in a development install,
#: site-packages' where an sdist's tests run against an installed wheel. Tests of the package's
#: own files (its C sources, its stubs) read them here, not beside the tests.
PACKAGE = Path(backends.__file__).resolve().parent

#: For a pytest run in a child process: no plugin autoloaded, ours loaded by its entry point's name
#: (``-p backends``), and each other plugin the run needs named (``-p asyncio``). Importing every
#: installed plugin, Hypothesis's above all, took most of such a run's time (0.8 s against 0.15 s).
NO_PLUGIN_AUTOLOAD = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
OUR_PLUGIN = ("-p", "no:cacheprovider", "-p", "backends")


def effective_flags() -> dict[str, object]:
    """Every flag's effective value in the calling thread/process, as plain data."""
    return backends.snapshot().to_dict()


def deterministic_now() -> bool:
    """``backends.cudnn.deterministic`` as the calling context sees it."""
    return backends.cudnn.deterministic


def state() -> list[tuple[str, object, str]]:
    """Every flag's name, value (with its type) and source: the "nothing changed" fingerprint."""
    return [(row.name, (type(row.value), row.value), row.source) for row in backends.describe()]


def new_thread(target: Callable[[], object]) -> threading.Thread:
    """A thread that starts in an empty context, as every new thread does unless Python 3.14's
    ``-X thread_inherit_context`` (on by default in free-threaded builds) copies the context of
    the code that starts it: "another thread" with only the process defaults, on every build."""
    if sys.version_info >= (3, 14):
        return threading.Thread(target=target, context=contextvars.Context())
    return threading.Thread(target=target)


def run_threads(*targets: Callable[[], object], unblock: Iterable[threading.Barrier | threading.Event] = ()) -> None:
    """Run each target in its own thread and wait for all; re-raise the first error.

    When a target raises, every barrier in ``unblock`` is aborted and every event set,
    so the other threads stop waiting at once instead of timing out.
    """
    errors: list[BaseException] = []
    waits = list(unblock)

    def guarded(target: Callable[[], object]) -> Callable[[], None]:
        def body() -> None:
            try:
                target()
            except BaseException as error:
                errors.append(error)
                for wait in waits:
                    if isinstance(wait, threading.Barrier):
                        wait.abort()
                    else:
                        wait.set()

        return body

    threads = [new_thread(guarded(target)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def flag_values(*names: str) -> tuple[object, ...]:
    """The effective values of the flags ``names`` (dotted) in the calling thread/process."""
    snap = backends.snapshot()
    return tuple(snap[name] for name in names)


def tag_with_flags(tag: object) -> tuple[object, bool, bool]:
    """``(tag, cudnn.benchmark, cudnn.deterministic)`` as the calling context sees them
    (for ``Pool.map``/``client.submit`` with an argument)."""
    return tag, backends.cudnn.benchmark, backends.cudnn.deterministic
