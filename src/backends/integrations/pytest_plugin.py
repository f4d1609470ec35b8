"""The pytest plugin: per-test flags, isolation between tests and leak detection.

Registered through the ``pytest11`` entry point, so installing ``backends`` is enough:

* ``@pytest.mark.backends({"cudnn.deterministic": True})`` on a test, class or module
  (``pytestmark``) scopes those flags to the test body and its function-scoped fixtures;
  nearer markers win flag by flag.
* the ``backends_flags`` fixture changes flags for the rest of a test:
  ``backends_flags.cudnn.benchmark = True``, ``backends_flags.set("cudnn.benchmark", True)``
  or ``backends_flags.set({...})``.
* ``--backends-leaks=fail|warn|off`` (ini ``backends_leaks``, default ``warn``) reports a
  test that changed process defaults or left a scope entered, a session-, package-,
  module- or class-scoped fixture that did so and did not undo it at its teardown, and a
  module that changed process defaults when imported; with torch imported, also a test or
  fixture that changed torch's own settings of those flags through torch's API
  (``torch.backends.cudnn.deterministic = True``, ``torch.use_deterministic_algorithms(True)``)
  and did not restore them; ``warn`` and ``fail`` then put the defaults, the scopes and torch's
  settings back, so the next test starts clean. The marker and the fixture reach torch as any
  scope does (the torch sync target).
* ``--backends-strict`` (ini ``backends_strict``) freezes bare global assignment while each
  test runs (``backends.disable_global_flags()``) and always unfreezes afterwards.

What each test or fixture is held to (see ``docs/testing.md``): a test's *region* runs from
the setup of its first function-scoped fixture to the end of the teardown of its last one,
after every higher-scoped fixture it uses is set up and before any is torn down, so what a
higher-scoped fixture changes is that fixture's, never the first test's. A higher-scoped
fixture is held to undo at its teardown what its setup changed, and to change nothing else
there.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import functools
import os
import sys
import warnings
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, overload

import pytest

import backends
from backends._engine import environment, state
from backends._engine import mirror as _mirror
from backends._engine.errors import unknown_name
from backends._engine.scope import flags as flags_of  # backends.flags, for a mapping built at run time
from backends._engine.state import SavedDefaults, assign, check_mapping, restore_defaults, save_defaults, set_frozen
from backends._engine.table import FLAGS, NAMES, VIEWS, Flag, Value, View

if TYPE_CHECKING:
    from backends._flagvalues import FlagValues
    from backends._types import BackendsFlagsNamespaces as _TypedNamespaces  # generated from the table
else:
    _TypedNamespaces = object

_LEAK_MODES = ("fail", "warn", "off")


class BackendsLeakWarning(UserWarning):
    """A test, a fixture or a test module changed process defaults or left a scope
    entered, and did not undo it."""


# -- settings: checked once, at start-up ------------------------------------------------------
class _Settings(NamedTuple):
    leaks: str  # "fail", "warn" or "off"
    strict: bool


_SETTINGS = pytest.StashKey[_Settings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("backends", "backends: scoped numeric backend flags")
    group.addoption(
        # No argparse `choices`: pytest_configure checks the value, so that a bad one is the
        # same one-line usage error whether it comes from the command line or the ini file.
        "--backends-leaks", metavar="fail|warn|off", default=None,
        help="what to do when a test or fixture leaves process defaults changed or a scope entered: "
        "fail, warn (default) or off",
    )
    group.addoption(
        "--backends-strict", action="store_true", default=None,
        help="forbid bare flag assignment outside a scope while each test runs",
    )
    parser.addini("backends_leaks", "fail, warn or off (see --backends-leaks)", default="warn")
    parser.addini("backends_strict", "freeze bare flag assignment during tests", type="bool", default=False)


def _read_settings(config: pytest.Config) -> _Settings:
    leaks, where = config.getoption("--backends-leaks"), "--backends-leaks"
    if leaks is None:
        leaks, where = config.getini("backends_leaks"), "backends_leaks"
    if leaks not in _LEAK_MODES:
        raise pytest.UsageError(f"{where} must be one of {', '.join(_LEAK_MODES)}, got {leaks!r}")
    strict = config.getoption("--backends-strict")
    if strict is None:
        try:
            strict = config.getini("backends_strict")
        except (ValueError, pytest.UsageError) as error:  # pytest's own: "invalid truth value 'maybe'"
            raise pytest.UsageError(f"backends_strict must be true or false (ini or -o): {error}") from None
    return _Settings(str(leaks), bool(strict))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        'backends(mapping): scope flags to this test, e.g. @pytest.mark.backends({"cudnn.deterministic": True})',
    )
    config.stash[_SETTINGS] = _read_settings(config)
    config.stash[_RUN] = _Run()


def pytest_report_header(config: pytest.Config) -> str:
    settings = config.stash[_SETTINGS]
    from_environment = [
        f"{name}={state.BUILTIN[name]!r} ({environment.variable(name, os.environ)})"
        for name in NAMES
        if state.BUILTIN_SOURCE[name] == "environment"
    ]
    return (
        f"backends: leaks={settings.leaks}, strict={'on' if settings.strict else 'off'}, "
        f"flags from the environment: {', '.join(from_environment) or 'none'}"
    )


# -- what is compared: process defaults and this context's scopes -------------------------------
class _Mark(NamedTuple):
    """The process defaults (and the freeze) and the main context's overrides at one moment."""

    defaults: SavedDefaults
    frame: Any  # state.current(): the innermost scope's frame, compared by identity
    #: a library's own settings that follow the flags (torch, once imported: mirror.current()), else None
    library: dict[str, Any] | None = None


def _mark() -> _Mark:
    mirrored = _mirror.mirror
    return _Mark(save_defaults(), state.current(), None if mirrored is None else mirrored.current())


def _library_changes(expected: _Mark, end: _Mark) -> tuple[list[str], dict[str, Any]]:
    """What changed in the library's own settings (torch's, set through torch's API): lines to
    report, and the values to put back."""
    mirrored = _mirror.mirror
    if mirrored is None or expected.library is None or end.library is None:
        return [], {}
    back = {name: value for name, value in expected.library.items()
            if name in end.library and _differs(value, end.library[name])}
    return [f"{mirrored.spelling(name)}: {value!r} -> {end.library[name]!r}" for name, value in back.items()], back


@dataclass
class _Region:
    """A test's region: what it must leave as it found (``start``), and the scopes the
    plugin's own fixtures entered in it (a test's leak may sit on top of them)."""

    start: _Mark
    ours: list[backends.Scope] = field(default_factory=list)
    checked: bool = False


@dataclass
class _FixtureMarks:
    before_setup: _Mark
    after_setup: _Mark | None = None
    before_teardown: _Mark | None = None


@dataclass
class _Run:
    item: pytest.Item | None = None  # the test whose setup, call or teardown is running
    fixtures: dict[Any, _FixtureMarks] = field(default_factory=dict)  # higher-scoped FixtureDef -> marks


_RUN = pytest.StashKey[_Run]()
_SETUP_MARK = pytest.StashKey[_Mark]()
_REGION = pytest.StashKey[_Region]()


def _differs(before: Any, after: Any) -> bool:
    return bool(before != after) or type(before) is not type(after)  # 1 == True, but not the same flag value


def _changed_names(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    return [name for name in before if _differs(before[name], after[name])]


def _diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    return [f"{name}: {before[name]!r} -> {after[name]!r}" for name in _changed_names(before, after)]


def _changes(before: SavedDefaults, after: SavedDefaults, frozen: bool = True) -> list[str]:
    changed = _diff(before.values, after.values)
    if frozen and before.frozen != after.frozen:
        changed.append(f"flags_frozen: {before.frozen!r} -> {after.frozen!r}")
    return changed


def _with_values_of(base: SavedDefaults, other: SavedDefaults, names: list[str], frozen: bool) -> SavedDefaults:
    """``base`` with the values and sources of ``names`` (and the freeze, if ``frozen``) from ``other``."""
    return base._replace(
        values={**base.values, **{name: other.values[name] for name in names}},
        sources={**base.sources, **{name: other.sources[name] for name in names}},
        frozen=other.frozen if frozen else base.frozen,
    )


def _effective_in(frame: Any) -> dict[str, Any]:
    """Every flag's effective value under ``frame``, read in a fresh context."""

    def read() -> dict[str, Any]:
        state.set_frame(frame)
        return state.effective()

    return contextvars.Context().run(read)


def _walk(end: Any, start: Any, ours: list[backends.Scope]) -> tuple[list[str], Any]:
    """Walk down from ``end`` towards ``start``: each frame's entry holds its scope and the
    ContextVar token whose ``old_value`` is the frame below. Returns the scopes passed,
    outermost first and without the plugin's own, and the frame where the walk stopped:
    ``start``, a frame of ``start``'s own scope (a flag assigned inside it: same entry, new
    frame), or ``None`` where the frames do not say (the engine's layout is its own)."""
    entered: list[str] = []
    frame = end
    seen = set()  # a frame set by hand could chain back to itself
    try:
        start_token = start[state.TOKEN]
        while frame is not start:
            if id(frame) in seen:
                return entered[::-1], None
            seen.add(id(frame))
            _, scope, token = frame
            if token is None:
                return entered[::-1], None
            if token is start_token:
                break
            if not any(scope is own for own in ours):
                entered.append(repr(scope))
            frame = token.old_value
            if frame is contextvars.Token.MISSING:  # nothing set below it: the context's default
                frame = start
                break
    except Exception:  # frames changed shape: say less, never fail the report
        return [], None
    return entered[::-1], frame


def _scope_leak(start: _Mark, end: _Mark, ours: list[backends.Scope]) -> str | None:
    """What is left over in the main context, or ``None`` if nothing is."""
    if end.frame is start.frame:
        return None
    scopes, stopped = _walk(end.frame, start.frame, ours)
    parts = []
    if scopes:
        parts.append(f"left {'a scope' if len(scopes) == 1 else f'{len(scopes)} scopes'} entered: {', '.join(scopes)}")
    if stopped is not None and stopped is not start.frame:
        before, after = _effective_in(start.frame), _effective_in(stopped)
        changed = _diff(before, after)
        enclosing = repr(start.frame[state.SCOPE])
        parts.append(f"changed flags of the scope it runs in ({enclosing}, entered before it): {'; '.join(changed)}")
    if not parts:
        before, after = _effective_in(start.frame), _effective_in(end.frame)
        overridden = [f"{name}={after[name]!r}" for name in before if _differs(before[name], after[name])]
        parts.append(f"left a scope entered (overriding {', '.join(overridden) or 'no flag'})")
    return " and ".join(parts)


def _advice(values: Mapping[str, Any]) -> str:
    """What to use instead of setting these process defaults (``{dotted name: value}``): a scope
    (the namespace's ``flags()`` where they share one), the marker or the fixture."""
    spaces = {name.rpartition(".")[0] for name in values}
    if len(spaces) == 1:
        keywords = ", ".join(f"{name.rpartition('.')[2]}={value!r}" for name, value in values.items())
        scope = f"backends.{spaces.pop()}.flags({keywords})"
    else:
        scope = f"backends.flags({dict(values)!r})"
    marker = f"@pytest.mark.backends({dict(values)!r})"
    return f"use a scope (`with {scope}:`), {marker} or the backends_flags fixture instead"


_SCOPE_ADVICE = "exit every scope that is entered (`with`), and close a generator that holds one"
_FIXTURE_ADVICE = (
    "undo after its `yield` what it sets up (or hold a scope across the yield: "
    "`with backends.flags({...}): yield`)"
)


def _settle(
    config: pytest.Config, who: str, expected: _Mark, where: tuple[str, int], ours: list[backends.Scope],
    fixture: bool = False, written: Mapping[str, tuple[str, int]] | None = None,
) -> None:
    """Compare the process and the main context with ``expected``; on a difference, put them
    back and report it (``fail``: raise into the running teardown; ``warn``: warn), at the line
    ``written`` has for the first changed default it has, else at ``where``."""
    __tracebackhide__ = True
    settings = config.stash[_SETTINGS]
    end = _mark()
    # Under strict mode the plugin owns the freeze: a test's enable/disable cannot outlive it.
    changed = _changes(expected.defaults, end.defaults, frozen=not settings.strict)
    scopes = _scope_leak(expected, end, ours)
    library, back = _library_changes(expected, end)
    if not changed and scopes is None and not library:
        return
    if changed:
        # (under strict mode, the freeze stays the plugin's until the teardown ends)
        frozen = end.defaults.frozen if settings.strict else expected.defaults.frozen
        restore_defaults(expected.defaults._replace(frozen=frozen))
    if scopes is not None:
        state.set_frame(expected.frame)  # the context as it was: no override left over
    label = _mirror.mirror.label if _mirror.mirror is not None else ""
    if back and _mirror.mirror is not None:
        _mirror.mirror.put_back(back)
    parts = [f"changed process defaults and did not restore them: {'; '.join(changed)}"] if changed else []
    if scopes is not None:
        parts.append(f"{scopes}; what comes next starts without it")
    if library:
        parts.append(f"changed {label}'s own settings and did not restore them: {'; '.join(library)}")
    if fixture:
        advice = [_FIXTURE_ADVICE]
    else:
        names = _changed_names(expected.defaults.values, end.defaults.values)
        now = {name: end.defaults.values[name] for name in names}
        advice = ([_advice(now)] if now else []) + ([_SCOPE_ADVICE] if scopes is not None else [])
        if library:
            advice.append(f"scope {label}'s flags with backends instead (the marker, the fixture or a scope), "
                          f"or put {label}'s value back")
        where = next((place for name, place in (written or {}).items() if name in now), where)
    message = f"{who} {' and '.join(parts)}; {'; '.join(advice)}"
    # Fail only inside a test's teardown, where pytest reports it; a fixture torn down at
    # the end of the session (after -x or Ctrl-C stopped the run) can only warn.
    in_test = config.stash[_RUN].item is not None
    if settings.leaks == "fail" and in_test:
        raise pytest.fail.Exception(message, pytrace=False)
    with warnings.catch_warnings():
        if not in_test:  # nothing to fail: a warning even where the filters make it an error (-W error)
            warnings.simplefilter("always", BackendsLeakWarning)
        warnings.warn_explicit(message, BackendsLeakWarning, where[0], where[1])


def _test_location(item: pytest.Item) -> tuple[str, int]:
    path, line, _ = item.location  # point the warning at the test, not at this plugin
    return str(item.config.rootpath / path), (line or 0) + 1


def _changed_values(before: SavedDefaults, after: SavedDefaults) -> dict[str, Any]:
    return {name: after.values[name] for name in _changed_names(before.values, after.values)}


#: Per test: where in the test's file each process default was first written while it ran (state.on_write).
_WRITTEN = pytest.StashKey[dict[str, tuple[str, int]]]()
_WATCHER = pytest.StashKey[Any]()  # the state.on_write in place before this test's


def _record_writes(item: pytest.Item, names: Iterable[str]) -> None:
    """``state.on_write`` while ``item`` runs: the line of the test that wrote each default (that
    called what wrote it), else the line of the test's file nearest the write."""
    written = item.stash.get(_WRITTEN, None)
    unknown = [] if written is None else [name for name in names if name not in written]
    if written is None or not unknown:
        return
    path, test = str(item.path), getattr(item, "originalname", item.name)
    frame: Any = sys._getframe(1)
    line = None
    while frame is not None:
        if frame.f_code.co_filename == path:
            line = line or frame.f_lineno
            if frame.f_code.co_name == test:
                line = frame.f_lineno
                break
        frame = frame.f_back
    if line is not None:
        for name in unknown:
            written[name] = (path, line)


def _fixture_location(fixturedef: Any) -> tuple[str, int]:
    code = getattr(getattr(fixturedef, "func", None), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else ("<fixture>", 0)


# -- import-time leaks --------------------------------------------------------
@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    settings = collector.config.stash[_SETTINGS]
    if not isinstance(collector, pytest.Module) or settings.leaks == "off":
        return (yield)
    before = save_defaults()
    report = yield
    changed = _changes(before, save_defaults())
    if changed:
        message = (
            f"importing {collector.nodeid} changed process defaults: {'; '.join(changed)}. "
            f"Every test after it runs with them; {_advice(_changed_values(before, save_defaults()))}"
        )
        if settings.leaks != "fail":
            try:
                warnings.warn_explicit(message, BackendsLeakWarning, str(collector.path), 0)
                return report
            except BackendsLeakWarning:  # the warning filters make it an error (-W error): fail, saying so
                message = f"{BackendsLeakWarning.__name__}: {message}"
        report.outcome = "failed"
        report.longrepr = message
    return report


# -- per test: strict mode, and the region of its function-scoped fixtures ------------------------
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    __tracebackhide__ = True  # a setup error passes through here: the user's frames, not ours
    item.config.stash[_RUN].item = item
    item.stash[_SETUP_MARK] = _mark()
    item.stash[_WRITTEN] = {}
    item.stash[_WATCHER] = state.on_write  # (an outer run's, where pytester runs pytest inside a test)
    state.on_write = functools.partial(_record_writes, item)
    if _REGION in item.stash:  # a run before this one of the same item (pytest-rerunfailures): its own
        del item.stash[_REGION]
    if item.config.stash[_SETTINGS].strict:
        set_frozen(True)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Generator[None, object, object]:
    __tracebackhide__ = True  # as in pytest_runtest_setup
    config = request.config
    if config.stash[_SETTINGS].leaks == "off":
        return (yield)
    if fixturedef.scope == "function":
        item = request.node
        if isinstance(item, pytest.Item) and _REGION not in item.stash:
            # The first function-scoped fixture: every higher-scoped one this test uses is set
            # up, none is torn down yet. A finalizer added now runs after every function-scoped
            # fixture's teardown (they are added after it) and before any higher-scoped one's.
            item.stash[_REGION] = _Region(_mark())
            item.addfinalizer(functools.partial(_check_test, item))
        return (yield)
    run = config.stash[_RUN]
    marks = run.fixtures[fixturedef] = _FixtureMarks(_mark())
    # Added before the fixture's own teardown is (during its setup): runs after it.
    fixturedef.addfinalizer(functools.partial(_check_fixture, config, fixturedef))
    try:
        return (yield)
    finally:
        marks.after_setup = _mark()
        # Added after its teardown: runs before it.
        fixturedef.addfinalizer(functools.partial(_before_teardown, marks))
        region = run.item.stash.get(_REGION, None) if run.item is not None else None
        if region is not None and not region.checked:
            # Set up lazily (request.getfixturevalue) inside a test's region: its changes are
            # its own, not the test's.
            names = _changed_names(marks.before_setup.defaults.values, marks.after_setup.defaults.values)
            region.start = region.start._replace(
                defaults=_with_values_of(region.start.defaults, marks.after_setup.defaults, names, frozen=False)
            )


def _before_teardown(marks: _FixtureMarks) -> None:
    marks.before_teardown = _mark()


def _check_test(item: pytest.Item) -> None:
    __tracebackhide__ = True
    region = item.stash[_REGION]
    region.checked = True
    _settle(item.config, item.nodeid, region.start, _test_location(item), region.ours, written=item.stash[_WRITTEN])


def _check_fixture(config: pytest.Config, fixturedef: Any) -> None:
    """After a higher-scoped fixture's teardown: what its setup changed is undone, and its
    teardown changed nothing else."""
    __tracebackhide__ = True
    marks = config.stash[_RUN].fixtures.pop(fixturedef, None)
    if marks is None or marks.after_setup is None or marks.before_teardown is None:
        return
    before, after, last = marks.before_setup, marks.after_setup, marks.before_teardown
    names = _changed_names(before.defaults.values, after.defaults.values)
    expected = _Mark(
        _with_values_of(last.defaults, before.defaults, names, frozen=before.defaults.frozen != after.defaults.frozen),
        before.frame if after.frame is not before.frame else last.frame,
        before.library if after.library != before.library else last.library,
    )
    who = f"fixture {fixturedef.argname!r} ({fixturedef.scope}-scoped, at its teardown)"
    _settle(config, who, expected, _fixture_location(fixturedef), [], fixture=True)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    __tracebackhide__ = True  # as in pytest_runtest_setup; and a leak reported under -W error
    config = item.config
    settings = config.stash[_SETTINGS]
    start = item.stash.get(_SETUP_MARK, None)
    try:
        result = yield  # every fixture is torn down inside this
        if start is not None and _REGION not in item.stash and settings.leaks != "off":
            # An item without function-scoped fixtures has no region: the whole test is held.
            _settle(config, item.nodeid, start, _test_location(item), [], written=item.stash.get(_WRITTEN, None))
        return result
    finally:
        config.stash[_RUN].item = None
        state.on_write = item.stash.get(_WATCHER, None)
        if start is not None and settings.strict:
            set_frozen(start.defaults.frozen)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    # Before pytest tears down what a stopped run (Ctrl-C) left set up: no test runs now.
    session.config.stash[_RUN].item = None


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


@contextlib.contextmanager
def _entered(scope: backends.Scope, request: pytest.FixtureRequest) -> Iterator[None]:
    """``with scope:`` for the plugin's fixtures, whose exit must never fail a teardown: a
    scope the test left entered on top makes the exit refused (which changes nothing), and
    the test's leak check reports it and puts the context back."""
    region = request.node.stash.get(_REGION, None)
    if region is not None:
        region.ours.append(scope)
    scope.__enter__()
    try:
        yield
    finally:
        with contextlib.suppress(RuntimeError):
            scope.__exit__(None, None, None)


@pytest.fixture(autouse=True)
def _backends_marker(request: pytest.FixtureRequest) -> Iterator[None]:
    """Apply ``@pytest.mark.backends`` for the test body and its function-scoped fixtures."""
    __tracebackhide__ = True
    try:
        marked = _marker_flags(request.node)
        scope = flags_of(marked) if marked else None
        problem = None
    except (TypeError, ValueError, KeyError) as error:
        problem = f"@pytest.mark.backends: {type(error).__name__}: {error}"
    if problem is not None:  # this test errors at setup, not the run
        pytest.fail(problem, pytrace=False)
    if scope is None:
        yield
        return
    with _entered(scope, request):
        yield


_NOTHING: Any = object()


def _prefixes() -> dict[str, dict[str, Any]]:
    """Namespace prefix ("" for the top) -> its attributes: child prefix -> None, or a
    flag's or view's attribute -> the flag or view."""
    tree: dict[str, dict[str, Any]] = {"": {}}
    members: list[Flag | View] = [*FLAGS, *VIEWS]
    for member in members:
        parts = member.namespace.split(".")
        for depth in range(len(parts)):
            parent, child = ".".join(parts[:depth]), ".".join(parts[: depth + 1])
            tree.setdefault(parent, {})[parts[depth]] = None
            tree.setdefault(child, {})
        tree[member.namespace][member.attribute] = member
    return tree


_TREE = _prefixes()


def _real(prefix: str) -> Any:
    return functools.reduce(getattr, prefix.split("."), backends)


def _not_a_flag(prefix: str, name: str) -> AttributeError:
    """The error for ``backends_flags.<prefix>.<name>`` that is no flag: the namespace's own
    (with its did-you-mean) for a name it does not have, else "not a flag"."""
    dotted = f"{prefix}.{name}" if prefix else name
    members = _TREE[prefix]
    if not prefix:  # the top: only namespaces with flags
        if name in members:
            return AttributeError(f"backends_flags.{name} is a namespace, not a flag")
        near = difflib.get_close_matches(name, list(members), n=1)
        hint = f"; did you mean backends_flags.{near[0]}?" if near else f" (it has {', '.join(members)})"
        return AttributeError(f"backends_flags has no flag namespace {name!r}{hint}")
    try:
        getattr(_real(prefix), name)
    except AttributeError as error:  # UnknownFlagError, naming the closest flag
        return error
    flags = [attribute for attribute, member in members.items() if member is not None]
    return AttributeError(
        f"backends_flags.{dotted} is not a flag: backends_flags changes flags only "
        f"(backends_flags.{prefix} has {', '.join(flags) or 'no flag of its own'})"
    )


class _Namespace:
    """``backends_flags.cudnn`` and the like: reads give the effective value, assignments
    change the flag for the rest of the test, as ``backends_flags.set()`` does."""

    __slots__ = ("_prefix",)

    def __init__(self, prefix: str) -> None:
        object.__setattr__(self, "_prefix", prefix)

    def _read(self, name: str) -> Any:
        __tracebackhide__ = True
        prefix = object.__getattribute__(self, "_prefix")
        member = _TREE[prefix].get(name, _NOTHING)
        if member is None:
            return _Namespace(f"{prefix}.{name}" if prefix else name)
        if member is _NOTHING:
            raise _not_a_flag(prefix, name).with_traceback(None) from None
        value = getattr(_real(prefix), name)
        return value() if getattr(member, "spelling", "attribute") == "function" else value

    def _assign(self, name: str, value: Any) -> None:
        __tracebackhide__ = True
        prefix = object.__getattribute__(self, "_prefix")
        if _TREE[prefix].get(name) is None:  # a namespace, or no flag at all
            raise _not_a_flag(prefix, name).with_traceback(None) from None
        try:
            # The real namespace checks the value and assigns it: inside the fixture's scope
            # (or a scope the test entered since), so for the rest of that scope only.
            setattr(_real(prefix), name, value)
        except (TypeError, ValueError, AttributeError, RuntimeError) as error:
            raise error.with_traceback(None) from None  # the user's line, not the library's

    if not TYPE_CHECKING:
        # Hidden from the checkers, which see each flag with its type instead (BackendsFlags's
        # base, from backends/_types.pyi): a misspelt flag or a wrong type is an error there too.
        __getattr__, __setattr__ = _read, _assign

    def __dir__(self) -> list[str]:
        return sorted(_TREE[object.__getattribute__(self, "_prefix")])

    def __repr__(self) -> str:
        return f"<backends_flags.{object.__getattribute__(self, '_prefix')}>"


class BackendsFlags(_Namespace, _TypedNamespaces):
    """What the ``backends_flags`` fixture gives: change flags for the rest of the test.

    ``backends_flags.cudnn.benchmark = True`` (as on ``backends`` itself: typos raise
    ``AttributeError`` naming the closest flag, wrong types ``TypeError``), or
    ``backends_flags.set(...)``; reading ``backends_flags.cudnn.benchmark`` gives the
    effective value. The type to annotate the fixture with
    (``def test_x(backends_flags: BackendsFlags) -> None``): mypy and pyright then check
    each flag's name and value type, as on ``backends.cudnn`` and the other namespaces.
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("")

    @overload
    def set(self, name_or_mapping: FlagValues) -> None: ...
    @overload
    def set(self, name_or_mapping: str, value: Value) -> None: ...
    def set(self, name_or_mapping: str | Mapping[str, Any], value: Any = _NOTHING) -> None:
        """``set("cudnn.benchmark", True)`` or ``set({"cudnn.benchmark": True, ...})``.

        Takes effect for the rest of the test, in the test's own context (an async
        test's task included), and is undone at teardown; process defaults are not
        touched. Inside a ``with`` scope of the test it lasts until that scope exits.
        Raises ``KeyError``, ``TypeError`` or ``ValueError`` as ``backends.flags()`` does,
        changing nothing.
        """
        __tracebackhide__ = True
        if issubclass(type(name_or_mapping), str):
            if value is _NOTHING:
                shown = str.__str__(name_or_mapping)
                raise TypeError(f"backends_flags.set({shown!r}) needs a value: set(name, value)")
            mapping: Any = {str.__str__(name_or_mapping): value}
        elif value is not _NOTHING:
            raise TypeError("backends_flags.set(mapping) takes no value: set(name, value) or set(mapping)")
        else:
            mapping = name_or_mapping
        try:
            checked = check_mapping(mapping, "backends_flags.set()")
        except (KeyError, TypeError, ValueError) as error:
            raise error.with_traceback(None) from None  # the user's line, not the library's
        for name, flag_value in checked.items():
            assign(name, flag_value)

    def __getitem__(self, name: str) -> Value:
        """The effective value of a flag by dotted name (``bool``, ``int`` or ``str``); ``KeyError``
        naming the closest flag for an unknown one."""
        __tracebackhide__ = True
        values = backends.snapshot()
        if issubclass(type(name), str) and str.__str__(name) in values:
            return values[str.__str__(name)]
        raise unknown_name(name, NAMES)

    def __repr__(self) -> str:
        return "<backends_flags>"


@pytest.fixture
def backends_flags(request: pytest.FixtureRequest) -> Iterator[BackendsFlags]:
    """Change flags inside a test; every change is undone at teardown."""
    # An empty scope: assignments inside it last until it exits at teardown.
    with _entered(backends.flags({}), request):
        yield BackendsFlags()
