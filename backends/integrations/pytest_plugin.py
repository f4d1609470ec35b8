"""The pytest plugin: per-test flags, isolation between tests and leak detection.

Registered through the ``pytest11`` entry point, so installing ``backends`` is enough:

* ``@pytest.mark.backends({"cudnn.deterministic": True})`` on a test, class or module
  (``pytestmark``) scopes those flags to the test body and its function-scoped fixtures;
  nearer markers win flag by flag.
* the ``backends_flags`` fixture changes flags for the rest of a test:
  ``backends_flags.set("cudnn.benchmark", True)`` or ``backends_flags.set({...})``.
* ``--backends-leaks=fail|warn|off`` (ini ``backends_leaks``, default ``warn``) reports a
  test, or a module at import, that changed process defaults and did not restore them;
  ``warn`` and ``fail`` then restore them, so the next test starts clean.
* ``--backends-strict`` (ini ``backends_strict``) freezes bare global assignment while each
  test runs (``backends.disable_global_flags()``) and always unfreezes afterwards.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator, Iterator, Mapping
from typing import Any

import pytest

import backends
from backends._engine.state import SavedDefaults, assign, check_mapping, restore_defaults, save_defaults, set_frozen

_LEAK_MODES = ("fail", "warn", "off")
_BEFORE = pytest.StashKey[SavedDefaults]()


class BackendsLeakWarning(UserWarning):
    """A test or a test module changed process defaults and did not restore them."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("backends", "backends: scoped numeric backend flags")
    group.addoption(
        "--backends-leaks", choices=_LEAK_MODES, default=None,
        help="what to do when a test leaves process defaults changed: fail, warn (default) or off",
    )
    group.addoption(
        "--backends-strict", action="store_true", default=None,
        help="forbid bare flag assignment outside a scope while each test runs",
    )
    parser.addini("backends_leaks", "fail, warn or off (see --backends-leaks)", default="warn")
    parser.addini("backends_strict", "freeze bare flag assignment during tests", type="bool", default=False)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        'backends(mapping): scope flags to this test, e.g. @pytest.mark.backends({"cudnn.deterministic": True})',
    )
    mode = config.getoption("--backends-leaks") or config.getini("backends_leaks")
    if mode not in _LEAK_MODES:
        raise pytest.UsageError(f"backends_leaks must be one of {', '.join(_LEAK_MODES)}, got {mode!r}")


def _leaks(config: pytest.Config) -> str:
    return str(config.getoption("--backends-leaks") or config.getini("backends_leaks"))


def _strict(config: pytest.Config) -> bool:
    option = config.getoption("--backends-strict")
    return bool(option if option is not None else config.getini("backends_strict"))


def _changes(before: SavedDefaults, after: SavedDefaults) -> list[str]:
    changed = [
        f"{name}: {before.values[name]!r} -> {after.values[name]!r}"
        for name in before.values
        if before.values[name] != after.values[name] or type(before.values[name]) is not type(after.values[name])
    ]
    if before.frozen != after.frozen:
        changed.append(f"flags_frozen: {before.frozen!r} -> {after.frozen!r}")
    return changed


_ADVICE = (
    "use a scope (`with backends.cudnn.flags(...)`), @pytest.mark.backends({...}) "
    "or the backends_flags fixture instead"
)


# -- import-time leaks --------------------------------------------------------
@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    if not isinstance(collector, pytest.Module) or _leaks(collector.config) == "off":
        return (yield)
    before = save_defaults()
    report = yield
    changed = _changes(before, save_defaults())
    if changed:
        message = (
            f"importing {collector.nodeid} changed process defaults: {'; '.join(changed)}. "
            f"Every test after it runs with them; {_ADVICE}"
        )
        if _leaks(collector.config) == "fail":
            report.outcome = "failed"
            report.longrepr = message
        else:
            warnings.warn_explicit(message, BackendsLeakWarning, str(collector.path), 0)
    return report


# -- per test: strict mode and leak detection -----------------------------------
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_BEFORE] = save_defaults()
    if _strict(item.config):
        set_frozen(True)
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)  # every fixture is torn down inside this
    finally:
        before = item.stash.get(_BEFORE, None)
        if before is not None:
            if _strict(item.config):
                set_frozen(before.frozen)
            mode = _leaks(item.config)
            changed = _changes(before, save_defaults()) if mode != "off" else []
            if changed:
                restore_defaults(before)  # isolation: the next test starts from the same defaults
                message = (
                    f"{item.nodeid} changed process defaults and did not restore them: "
                    f"{'; '.join(changed)}; {_ADVICE}"
                )
                if mode == "fail":
                    raise pytest.fail.Exception(message, pytrace=False)
                path, line, _ = item.location  # point the warning at the test, not at this plugin
                warnings.warn_explicit(message, BackendsLeakWarning, str(item.config.rootpath / path), (line or 0) + 1)


# -- the marker and the fixture ---------------------------------------------------
def _marker_flags(item: pytest.Item) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for marker in reversed(list(item.iter_markers("backends"))):  # farthest first: nearer wins
        if len(marker.args) != 1 or marker.kwargs or not isinstance(marker.args[0], Mapping):
            raise TypeError(
                'the backends marker takes one mapping of dotted flag names, e.g. '
                f'@pytest.mark.backends({{"cudnn.deterministic": True}}); got args={marker.args!r} '
                f'kwargs={marker.kwargs!r}'
            )
        merged.update(marker.args[0])
    return merged


@pytest.fixture(autouse=True)
def _backends_marker(request: pytest.FixtureRequest) -> Iterator[None]:
    """Apply ``@pytest.mark.backends`` for the test body and its function-scoped fixtures."""
    try:
        marked = _marker_flags(request.node)
        scope = backends.flags(marked) if marked else None
    except (TypeError, ValueError, KeyError) as error:  # this test errors at setup, not the run
        pytest.fail(f"@pytest.mark.backends: {type(error).__name__}: {error}", pytrace=False)
    if scope is None:
        yield
        return
    with scope:
        yield


_NOTHING: Any = object()


class BackendsFlags:
    """What the ``backends_flags`` fixture gives: change flags for the rest of the test."""

    def set(self, name_or_mapping: str | Mapping[str, Any], value: Any = _NOTHING) -> None:
        """``set("cudnn.benchmark", True)`` or ``set({"cudnn.benchmark": True, ...})``.

        Takes effect for the rest of the test, in the test's own context (an async
        test's task included), and is undone at teardown; process defaults are not
        touched. Inside a ``with`` scope of the test it lasts until that scope exits.
        Raises ``KeyError``, ``TypeError`` or ``ValueError`` as ``backends.flags()`` does,
        changing nothing.
        """
        if issubclass(type(name_or_mapping), str):
            if value is _NOTHING:
                shown = str.__str__(name_or_mapping)
                raise TypeError(f"backends_flags.set({shown!r}) needs a value: set(name, value)")
            mapping: Any = {str.__str__(name_or_mapping): value}
        elif value is not _NOTHING:
            raise TypeError("backends_flags.set(mapping) takes no value: set(name, value) or set(mapping)")
        else:
            mapping = name_or_mapping
        for name, checked in check_mapping(mapping, "backends_flags.set()").items():
            assign(name, checked)

    def __getitem__(self, name: str) -> Any:
        """The effective value of a flag by dotted name."""
        return backends.snapshot()[name]


@pytest.fixture
def backends_flags() -> Iterator[BackendsFlags]:
    """Change flags inside a test; every change is undone at teardown."""
    # An empty scope: assignments inside it last until it exits at teardown.
    with backends.flags({}):
        yield BackendsFlags()
