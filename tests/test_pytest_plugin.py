"""The pytest plugin (``backends.integrations.pytest_plugin``, entry point ``pytest11: backends``).

Each test writes a small suite into ``pytester``'s temporary directory and runs it with
``runpytest_subprocess``: a fresh interpreter that loads the plugin through its entry point
(no conftest), as a user's suite would. Plugin autoloading is off in those runs (``-p backends``
loads ours by its entry point's name, and a test that needs another plugin names it: ``-p asyncio``),
because importing every installed plugin, Hypothesis's above all, took most of each run's time;
``test_the_plugin_is_autoloaded_through_its_entry_point`` runs with autoloading on.
"""

from __future__ import annotations

import os
import re
import textwrap

import pytest

from tests._helpers import NO_PLUGIN_AUTOLOAD, OUR_PLUGIN

pytest_plugins = ["pytester"]

# Helper pasted into the inner suites: every flag at its built-in default, nothing overridden.
AT_DEFAULTS = """
import backends

def at_defaults():
    return all(row.source == "default" for row in backends.describe()) and backends.snapshot().to_dict() == {
        flag.name: flag.default for flag in backends.FLAGS
    }
"""


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner runs inherit the environment: no flag defaults from it, no plugin autoloaded."""
    for name in list(os.environ):
        if name.startswith("BACKENDS_") or name == "CUPY_TF32":
            monkeypatch.delenv(name)
    for name, value in NO_PLUGIN_AUTOLOAD.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PYTEST_PLUGINS", raising=False)


def _ini(pytester: pytest.Pytester, *lines: str) -> None:
    """A tox.ini for the inner run (so it never picks up this repository's config)."""
    pytester.makeini("\n".join(["[pytest]", *lines]) + "\n")


def _source(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def _suite(text: str) -> str:
    """A test module that starts with the ``at_defaults()`` helper."""
    return AT_DEFAULTS + textwrap.dedent(text)


def _run(pytester: pytest.Pytester, *args: str, timeout: float = 60) -> pytest.RunResult:
    """The inner suite in a fresh interpreter, with our plugin loaded by its entry point's name."""
    return pytester.runpytest_subprocess(*OUR_PLUGIN, *args, timeout=timeout)


def _lines(result: pytest.RunResult) -> list[str]:
    return result.outlines + result.errlines


def test_the_plugin_is_autoloaded_through_its_entry_point(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user's plain ``pytest`` does: no ``-p``, every installed plugin autoloaded, ours by its
    ``pytest11`` entry point, with its marker, fixture and options."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    _ini(pytester, "asyncio_default_fixture_loop_scope = function")  # pytest-asyncio is autoloaded too
    pytester.makepyfile(
        test_autoloaded=_suite(
            """
            import pytest


            @pytest.mark.backends({"cudnn.deterministic": True})
            def test_marker():
                assert backends.cudnn.deterministic is True


            def test_fixture_undoes_its_defaults(backends_flags):
                backends_flags.cudnn.benchmark = True
                assert backends.cudnn.benchmark is True


            def test_z_defaults_after():
                assert at_defaults()
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", "--backends-leaks=fail")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["backends: leaks=fail, strict=off, *", "plugins: *scoped-backends-*"])


# --------------------------------------------------------------------------------------------
# 1. The marker
# --------------------------------------------------------------------------------------------


def test_marker_on_function_class_and_module_nearer_wins_flag_by_flag(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_markers=_source(
            """
            import contextvars
            import sys
            import threading

            import pytest

            import backends

            pytestmark = pytest.mark.backends({"cudnn.deterministic": True, "cudnn.benchmark_limit": 3})
            # an empty context, as a new thread has unless 3.14's thread_inherit_context copies ours
            EMPTY = (lambda: {"context": contextvars.Context()}) if sys.version_info >= (3, 14) else dict


            @pytest.fixture(scope="module")
            def module_view():
                # set up before any marker scope is entered: sees neither the module nor the function marker
                return (backends.cudnn.deterministic, backends.cudnn.benchmark)


            @pytest.fixture
            def function_view():
                return (backends.cudnn.deterministic, backends.cudnn.benchmark)


            def test_module_marker():
                assert backends.cudnn.deterministic is True
                assert backends.cudnn.benchmark_limit == 3
                assert backends.cudnn.benchmark is False
                # a scope, not a process default: a plain thread (no context) reads the defaults
                seen = []
                thread = threading.Thread(target=lambda: seen.append(backends.cudnn.deterministic), **EMPTY())
                thread.start()
                thread.join()
                assert seen == [False]
                rows = {row.name: row.source for row in backends.describe()}
                assert rows["cudnn.deterministic"] == "scope"


            @pytest.mark.backends({"cudnn.benchmark": True, "cudnn.benchmark_limit": 4})
            def test_function_marker_over_module_marker(module_view, function_view):
                assert backends.cudnn.benchmark is True
                assert backends.cudnn.benchmark_limit == 4
                assert backends.cudnn.deterministic is True  # from the module marker
                assert function_view == (True, True)
                assert module_view == (False, False)


            @pytest.mark.backends({"cudnn.benchmark_limit": 5, "cuda.matmul.allow_tf32": True})
            class TestClassMarker:
                def test_class_over_module(self, function_view):
                    assert backends.cudnn.benchmark_limit == 5
                    assert backends.cuda.matmul.allow_tf32 is True
                    assert backends.cudnn.deterministic is True  # from the module marker
                    assert function_view == (True, False)

                @pytest.mark.backends({"cudnn.benchmark_limit": 7, "cuda.preferred_linalg_library": "cusolver"})
                def test_function_over_class_over_module(self):
                    assert backends.cudnn.benchmark_limit == 7
                    assert backends.cuda.preferred_linalg_library() == "cusolver"
                    assert backends.cuda.matmul.allow_tf32 is True  # from the class marker
                    assert backends.cudnn.deterministic is True  # from the module marker
            """
        ),
        test_z_after=_suite(
            """

            def test_nothing_left_over_from_the_markers():
                assert at_defaults()
            """
        ),
    )
    result = _run(pytester, "--strict-markers", "--backends-leaks=fail")
    result.assert_outcomes(passed=5)


def test_bad_marker_fails_only_that_test_at_setup(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_bad=_source(
            """
            import pytest

            import backends


            @pytest.mark.backends({"cudnn.deterministic": 1})
            def test_wrong_type():
                pass


            @pytest.mark.backends({"cudnn.determinstic": True})
            def test_typo():
                pass


            @pytest.mark.backends({"cudnn.benchmark_limit": -1})
            def test_out_of_range():
                pass


            @pytest.mark.backends({"cudnn.deterministic": True})
            def test_good_marker():
                assert backends.cudnn.deterministic is True


            def test_plain():
                assert backends.cudnn.deterministic is False
            """
        )
    )
    result = _run(pytester, "--strict-markers")
    result.assert_outcomes(passed=2, errors=3)
    result.stdout.fnmatch_lines(["*ERROR at setup of test_wrong_type*"])
    result.stdout.fnmatch_lines(["*ERROR at setup of test_typo*"])
    result.stdout.fnmatch_lines(["*ERROR at setup of test_out_of_range*"])
    result.stdout.fnmatch_lines(["*cudnn.deterministic must be a bool (True or False), got 1 (int)*"])
    result.stdout.fnmatch_lines(["*unknown flag 'cudnn.determinstic'; did you mean 'cudnn.deterministic'?*"])
    result.stdout.fnmatch_lines(["*cudnn.benchmark_limit must be an int >= 0, got -1 (int)*"])
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


# --------------------------------------------------------------------------------------------
# 2. The backends_flags fixture
# --------------------------------------------------------------------------------------------


def test_backends_flags_fixture(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_fixture=_suite(
            """

            import contextvars
            import sys
            import threading

            import pytest

            # an empty context, as a new thread has unless 3.14's thread_inherit_context copies ours
            EMPTY = (lambda: {"context": contextvars.Context()}) if sys.version_info >= (3, 14) else dict


            def read_in_plain_thread(read):
                seen = []
                thread = threading.Thread(target=lambda: seen.append(read()), **EMPTY())
                thread.start()
                thread.join()
                return seen[0]


            @pytest.fixture
            def tuned(backends_flags):
                backends_flags.set("cudnn.benchmark", True)


            def test_set_one_flag(backends_flags):
                assert backends.cudnn.benchmark is False
                backends_flags.set("cudnn.benchmark", True)
                assert backends.cudnn.benchmark is True
                # not a process default
                assert read_in_plain_thread(lambda: backends.cudnn.benchmark) is False
                backends_flags.set("cudnn.benchmark", False)
                assert backends.cudnn.benchmark is False


            def test_set_a_mapping(backends_flags):
                backends_flags.set({"cudnn.deterministic": True, "cuda.preferred_linalg_library": "magma"})
                assert backends.cudnn.deterministic is True
                assert backends.cuda.preferred_linalg_library() == "magma"
                assert read_in_plain_thread(lambda: backends.cudnn.deterministic) is False


            def test_undone_after_each_test():
                assert at_defaults()


            def test_from_another_fixture(tuned):
                assert backends.cudnn.benchmark is True


            @pytest.mark.backends({"cudnn.benchmark": True, "cudnn.deterministic": True})
            def test_on_top_of_a_marker(backends_flags):
                backends_flags.set("cudnn.benchmark", False)
                assert backends.cudnn.benchmark is False
                assert backends.cudnn.deterministic is True


            def test_bad_input_raises_and_changes_nothing(backends_flags):
                with pytest.raises(TypeError, match="cudnn.benchmark must be a bool"):
                    backends_flags.set("cudnn.benchmark", 1)
                with pytest.raises(ValueError, match="cudnn.benchmark_limit"):
                    backends_flags.set("cudnn.benchmark_limit", -1)
                with pytest.raises(KeyError, match="cudnn.benchmark"):
                    backends_flags.set("cudnn.benchmak", True)
                with pytest.raises(KeyError, match="cudnn.deterministic"):
                    backends_flags.set({"cudnn.determinstic": True})
                with pytest.raises(TypeError):
                    backends_flags.set({"cudnn.deterministic": True, "cudnn.benchmark": None})
                assert at_defaults()


            def test_z_still_undone():
                assert at_defaults()
            """
        )
    )
    # fail mode: the fixture never counts as a leak of process defaults
    result = _run(pytester, "--strict-markers", "--backends-leaks=fail")
    result.assert_outcomes(passed=7)


# --------------------------------------------------------------------------------------------
# 3. Leak detection
# --------------------------------------------------------------------------------------------

LEAKY_SUITE = (
    AT_DEFAULTS
    + """

def test_leaky_assignment():
    backends.cudnn.benchmark = True


def test_sees_defaults_after_assignment():
    assert at_defaults()


def test_leaky_set_defaults():
    backends.set_defaults({"cuda.preferred_linalg_library": "magma"})


def test_sees_defaults_after_set_defaults():
    assert at_defaults()


def test_leaky_freeze():
    backends.disable_global_flags()


def test_unfrozen_after_freeze():
    assert not backends.flags_frozen()
    backends.cudnn.deterministic = True  # bare assignment works again
    backends.reset_defaults()


def test_restores_what_it_changes():
    backends.cudnn.benchmark_limit = 3
    backends.reset_defaults()
"""
)


@pytest.mark.parametrize(
    ("args", "ini"),
    [
        pytest.param(["--backends-leaks=warn"], [], id="option"),
        pytest.param([], ["backends_leaks = warn"], marks=pytest.mark.slow, id="ini"),
        pytest.param([], [], id="default"),
    ],
)
def test_leaks_warn_reports_and_restores(pytester: pytest.Pytester, args: list[str], ini: list[str]) -> None:
    _ini(pytester, *ini)
    pytester.makepyfile(test_leaks=_source(LEAKY_SUITE))
    result = _run(pytester, "--strict-config", *args)
    result.assert_outcomes(passed=7)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*test_leaky_assignment*"])
    result.stdout.fnmatch_lines(["*cudnn.benchmark*False*True*"])
    result.stdout.fnmatch_lines(["*test_leaky_set_defaults*"])
    result.stdout.fnmatch_lines(["*cuda.preferred_linalg_library*default*magma*"])
    result.stdout.fnmatch_lines(["*test_leaky_freeze*"])
    result.stdout.fnmatch_lines(["*flags_frozen*"])
    # no false positives: a test that restores what it changed, and the tests after the leaks
    output = result.stdout.str()
    assert "test_restores_what_it_changes" not in output
    assert "benchmark_limit" not in output
    assert "test_sees_defaults_after" not in output
    assert "cudnn.deterministic" not in output


@pytest.mark.parametrize(
    ("args", "ini"),
    [
        pytest.param(["--backends-leaks=fail"], [], id="option"),
        pytest.param([], ["backends_leaks = fail"], marks=pytest.mark.slow, id="ini"),
    ],
)
def test_leaks_fail_errors_at_teardown(pytester: pytest.Pytester, args: list[str], ini: list[str]) -> None:
    _ini(pytester, *ini)
    pytester.makepyfile(
        test_leaks=_source(
            """
            import backends


            def test_leaky_assignment():
                backends.cudnn.benchmark = True


            def test_clean():
                pass


            def test_leaky_freeze():
                backends.disable_global_flags()


            def test_restores_what_it_changes():
                backends.set_defaults({"cudnn.benchmark_limit": 3})
                backends.reset_defaults()
            """
        )
    )
    result = _run(pytester, "--strict-config", *args)
    result.assert_outcomes(passed=4, errors=2)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_leaky_assignment*"])
    result.stdout.fnmatch_lines(["*cudnn.benchmark*False*True*"])
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_leaky_freeze*"])
    result.stdout.fnmatch_lines(["*flags_frozen*"])
    result.stdout.no_fnmatch_line("*ERROR at teardown of test_clean*")
    result.stdout.no_fnmatch_line("*ERROR at teardown of test_restores_what_it_changes*")


def test_leaks_off_reports_nothing_and_restores_nothing(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_leaks=_source(
            """
            import backends


            def test_leaky_assignment():
                backends.cudnn.benchmark = True


            def test_sees_the_leak():
                assert backends.cudnn.benchmark is True
                backends.reset_defaults()
            """
        )
    )
    result = _run(pytester, "--backends-leaks=off")
    result.assert_outcomes(passed=2, warnings=0)
    output = result.stdout.str()
    assert "cudnn.benchmark" not in output
    assert "test_leaky_assignment" not in output


def test_import_time_leak_is_reported_once_naming_the_module(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_import_leak=_source(
            """
            import backends

            backends.set_defaults({"cudnn.deterministic": True})


            def test_alpha():
                pass


            def test_beta():
                pass
            """
        ),
        test_other=_source(
            """
            def test_gamma():
                pass
            """
        ),
    )
    result = _run(pytester)
    result.assert_outcomes(passed=3)
    lines = _lines(result)
    reports = [line for line in lines if "cudnn.deterministic" in line]
    assert len(reports) == 1, result.stdout.str()
    # named by the module (not the progress line, not a test's node id) ...
    naming_module = [
        line
        for line in lines
        if "test_import_leak" in line and "::" not in line and not re.match(r"test_import_leak\.py [.EFsx]+", line)
    ]
    assert naming_module, result.stdout.str()
    # ... and not as a leak of the first test that happened to run after the import
    assert "test_alpha" not in reports[0]
    assert "test_beta" not in reports[0]


def test_a_leak_warning_points_at_the_tests_line_that_changed_the_default_and_names_its_namespace(
    pytester: pytest.Pytester,
) -> None:
    """The warning's location is the test's line that changed the default (that called the helper
    that did), else the test's def line (a scope left entered); the advice is the scope of the
    changed flags' namespace (backends.flags({...}) for several namespaces)."""
    _ini(pytester)
    pytester.makepyfile(
        test_where=_source(
            """
            import backends


            def test_matmul():
                x = 1
                backends.cuda.matmul.allow_tf32 = True
                x += 1


            def helper():
                backends.set_defaults({"cudnn.benchmark": True, "cuda.preferred_linalg_library": "magma"})


            def test_through_a_helper():
                helper()


            def test_a_scope_left_entered():
                backends.cudnn.flags(deterministic=True).__enter__()
            """
        )
    )
    result = _run(pytester, "-W", "always")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "*test_where.py:6: BackendsLeakWarning: test_where.py::test_matmul changed process defaults and did not "
        "restore them: cuda.matmul.allow_tf32: False -> True; use a scope (`with backends.cuda.matmul.flags("
        "allow_tf32=True):`), @pytest.mark.backends({'cuda.matmul.allow_tf32': True}) or the backends_flags "
        "fixture instead",
        "*test_where.py:15: BackendsLeakWarning: test_where.py::test_through_a_helper changed process defaults*; "
        "use a scope (`with backends.flags({'cudnn.benchmark': True, 'cuda.preferred_linalg_library': 'magma'}):`)*",
        "*test_where.py:18: BackendsLeakWarning: test_where.py::test_a_scope_left_entered left a scope entered*",
    ])


# --------------------------------------------------------------------------------------------
# 4. Strict mode
# --------------------------------------------------------------------------------------------

STRICT_CONFTEST = """
import backends


def pytest_runtest_logfinish(nodeid, location):
    with open("frozen.log", "a", encoding="utf-8") as log:
        log.write(f"{nodeid} {backends.flags_frozen()}\\n")


def pytest_sessionfinish(session):
    with open("frozen.log", "a", encoding="utf-8") as log:
        log.write(f"session-end {backends.flags_frozen()}\\n")
"""

STRICT_SUITE = (
    AT_DEFAULTS
    + """

import pytest


def test_bare_assignment_raises():
    assert backends.flags_frozen()
    with pytest.raises(RuntimeError, match=r"flags\\("):
        backends.cudnn.benchmark = True
    assert backends.cudnn.benchmark is False


def test_scope_and_set_defaults_still_work():
    with backends.cudnn.flags(benchmark=True):
        backends.cudnn.benchmark = False
        backends.cudnn.deterministic = True
        assert backends.cudnn.benchmark is False
        assert backends.cudnn.deterministic is True
    assert at_defaults()
    backends.set_defaults({"cudnn.benchmark": True})
    assert backends.cudnn.benchmark is True
    backends.reset_defaults()


@pytest.mark.backends({"cudnn.deterministic": True})
def test_marker_and_fixture_still_work(backends_flags):
    backends_flags.set("cudnn.benchmark", True)
    assert backends.cudnn.deterministic is True
    assert backends.cudnn.benchmark is True
"""
)


@pytest.mark.parametrize(
    ("args", "ini"),
    [
        pytest.param(["--backends-strict"], [], id="option"),
        pytest.param([], ["backends_strict = true"], marks=pytest.mark.slow, id="ini"),
    ],
)
def test_strict_freezes_during_each_test_and_unfreezes_after(
    pytester: pytest.Pytester, args: list[str], ini: list[str]
) -> None:
    _ini(pytester, *ini)
    pytester.makeconftest(_source(STRICT_CONFTEST))
    pytester.makepyfile(test_strict=_source(STRICT_SUITE))
    # fail mode too: the plugin's own freeze is never reported as a leak
    result = _run(pytester, "--strict-config", "--strict-markers", "--backends-leaks=fail", *args)
    result.assert_outcomes(passed=3)
    log = (pytester.path / "frozen.log").read_text(encoding="utf-8").split()
    assert log[1::2] == ["False"] * 4, log


def test_not_strict_by_default(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_not_strict=_source(
            """
            import backends


            def test_bare_assignment_works():
                assert not backends.flags_frozen()
                backends.cudnn.benchmark = True
                assert backends.cudnn.benchmark is True
                backends.reset_defaults()
            """
        )
    )
    result = _run(pytester, "--backends-leaks=fail")
    result.assert_outcomes(passed=1)


# --------------------------------------------------------------------------------------------
# 5. Async tests
# --------------------------------------------------------------------------------------------

ASYNCIO_STRICT_SUITE = (
    AT_DEFAULTS
    + """

import asyncio

import pytest
import pytest_asyncio


@pytest_asyncio.fixture
async def tuned():
    async with backends.cudnn.flags(benchmark=True):
        yield


async def deterministic_in_child_task():
    return backends.cudnn.deterministic


@pytest.mark.asyncio
async def test_a_defaults_first():
    assert at_defaults()


@pytest.mark.asyncio
@pytest.mark.backends({"cudnn.deterministic": True})
async def test_marker_across_await():
    assert backends.cudnn.deterministic is True
    await asyncio.sleep(0)
    assert backends.cudnn.deterministic is True
    assert await asyncio.create_task(deterministic_in_child_task()) is True


@pytest.mark.asyncio
async def test_async_fixture_scope(tuned):
    assert backends.cudnn.benchmark is True
    await asyncio.sleep(0)
    assert backends.cudnn.benchmark is True


@pytest.mark.asyncio
@pytest.mark.backends({"cudnn.deterministic": True})
async def test_marker_with_async_fixture(tuned, backends_flags):
    backends_flags.set("cudnn.benchmark_limit", 2)
    await asyncio.sleep(0)
    assert backends.cudnn.deterministic is True
    assert backends.cudnn.benchmark is True
    assert backends.cudnn.benchmark_limit == 2


@pytest.mark.asyncio
async def test_attribute_assignment_in_an_async_test(backends_flags):
    backends_flags.cudnn.deterministic = True
    await asyncio.sleep(0)
    assert backends.cudnn.deterministic is True
    assert await asyncio.create_task(deterministic_in_child_task()) is True


@pytest.mark.asyncio
async def test_z_defaults_after():
    assert at_defaults()
"""
)

ASYNCIO_AUTO_SUITE = (
    AT_DEFAULTS
    + """

import asyncio

import pytest


@pytest.fixture
async def tuned():
    async with backends.cudnn.flags(benchmark=True):
        yield


async def test_a_defaults_first():
    assert at_defaults()


@pytest.mark.backends({"cudnn.deterministic": True})
async def test_marker_across_await():
    await asyncio.sleep(0)
    assert backends.cudnn.deterministic is True


@pytest.mark.backends({"cudnn.deterministic": True})
async def test_marker_with_async_fixture(tuned):
    await asyncio.sleep(0)
    assert backends.cudnn.deterministic is True
    assert backends.cudnn.benchmark is True


async def test_z_defaults_after():
    assert at_defaults()
"""
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "suite", "passed"),
    [
        pytest.param("strict", ASYNCIO_STRICT_SUITE, 6, id="strict"),
        pytest.param("auto", ASYNCIO_AUTO_SUITE, 4, id="auto"),
    ],
)
def test_pytest_asyncio(pytester: pytest.Pytester, mode: str, suite: str, passed: int) -> None:
    pytest.importorskip("pytest_asyncio", minversion="0.25")
    _ini(pytester, "asyncio_default_fixture_loop_scope = function")
    pytester.makepyfile(test_async=_source(suite))
    result = _run(pytester, "-p", "asyncio", f"--asyncio-mode={mode}", "--strict-markers", "--backends-leaks=fail")
    result.assert_outcomes(passed=passed)


@pytest.mark.slow
def test_anyio_plugin(pytester: pytest.Pytester) -> None:
    pytest.importorskip("anyio")
    pytest.importorskip("trio")
    _ini(pytester)
    pytester.makepyfile(
        test_anyio=_suite(
            """

            import anyio
            import pytest


            @pytest.fixture(params=["asyncio", "trio"])
            def anyio_backend(request):
                return request.param


            @pytest.mark.anyio
            async def test_a_defaults_first():
                assert at_defaults()


            @pytest.mark.anyio
            @pytest.mark.backends({"cudnn.deterministic": True})
            async def test_marker_across_await():
                assert backends.cudnn.deterministic is True
                await anyio.sleep(0)
                assert backends.cudnn.deterministic is True


            @pytest.mark.anyio
            async def test_z_defaults_after():
                assert at_defaults()
            """
        )
    )
    result = _run(pytester, "-p", "anyio", "--strict-markers", "--backends-leaks=fail")
    result.assert_outcomes(passed=6)


# --------------------------------------------------------------------------------------------
# 6. pytest-xdist
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_xdist_workers_start_from_the_same_defaults(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    _ini(pytester)
    suite = AT_DEFAULTS + "\nimport pytest\n"
    for i in range(4):
        suite += textwrap.dedent(
            f"""

            @pytest.mark.backends({{"cudnn.deterministic": True, "cudnn.benchmark_limit": {i}}})
            def test_marker_{i}():
                assert backends.cudnn.deterministic is True
                assert backends.cudnn.benchmark_limit == {i}


            def test_leak_{i}():
                backends.cudnn.benchmark = True
                backends.set_defaults({{"cuda.matmul.allow_tf32": True}})


            def test_defaults_{i}():
                assert at_defaults()
            """
        )
    pytester.makepyfile(test_xdist_a=suite, test_xdist_b=suite)
    result = _run(pytester, "-p", "xdist", "-n", "2", "--backends-leaks=warn", "--strict-markers", timeout=120)
    result.assert_outcomes(passed=24)
    result.stdout.fnmatch_lines(["*2 workers*"])


# --------------------------------------------------------------------------------------------
# 7. Scopes left entered
# --------------------------------------------------------------------------------------------

LEAKED_SCOPES_SUITE = (
    AT_DEFAULTS
    + """

import pytest

KEEP = []  # keeps the abandoned generator alive, so its scope stays entered


def test_bare_enter():
    backends.cudnn.flags(benchmark=True).__enter__()


def test_clean_after_bare_enter():
    assert at_defaults()
    with backends.cudnn.flags(deterministic=True):  # scopes work as usual
        assert backends.cudnn.deterministic is True
    assert at_defaults()


def test_abandoned_generator():
    def holding():
        with backends.flags({"cuda.preferred_linalg_library": "magma"}):
            yield

    generator = holding()
    next(generator)
    KEEP.append(generator)


def test_clean_after_generator():
    assert at_defaults()


@pytest.mark.backends({"cudnn.benchmark_limit": 3})
def test_bare_enter_under_marker_and_fixture(backends_flags):
    backends_flags.set("cudnn.allow_tf32", False)
    backends.cuda.matmul.tf32(True).__enter__()


def test_z_clean_at_the_end():
    assert at_defaults()
"""
)

SCOPE_LEAKERS = ["test_bare_enter", "test_abandoned_generator", "test_bare_enter_under_marker_and_fixture"]


def test_a_scope_left_entered_is_reported_and_the_next_test_starts_without_it(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(test_scopes=_source(LEAKED_SCOPES_SUITE))
    result = _run(pytester, "--strict-markers", "-W", "always")
    result.assert_outcomes(passed=6)
    output = result.stdout.str()
    for name in SCOPE_LEAKERS:
        reports = [line for line in _lines(result) if f"{name} left" in line]
        assert len(reports) == 1, output  # one report per test, naming it
    # each names the scopes it left (not the marker's nor the fixture's own)
    result.stdout.fnmatch_lines(["*test_bare_enter left a scope entered: backends.cudnn.flags(benchmark=True);*"])
    result.stdout.fnmatch_lines(
        ["*test_abandoned_generator left a scope entered: backends.flags(*'cuda.preferred_linalg_library': 'magma'*);*"]
    )
    result.stdout.fnmatch_lines(
        ["*_under_marker_and_fixture left a scope entered: backends.cuda.matmul.flags(allow_tf32=True);*"]
    )
    assert "RuntimeError" not in output  # the marker's and the fixture's scopes never refuse to exit
    assert "test_clean_after" not in output.replace("PASSED", "")


def test_a_scope_left_entered_fails_under_fail_mode(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(test_scopes=_source(LEAKED_SCOPES_SUITE))
    result = _run(pytester, "--strict-markers", "--backends-leaks=fail")
    result.assert_outcomes(passed=6, errors=3)
    for name in SCOPE_LEAKERS:
        result.stdout.fnmatch_lines([f"*ERROR at teardown of {name}*"])
    output = result.stdout.str()
    assert "RuntimeError" not in output
    assert "pytest_plugin.py" not in output  # no plugin frames in the report
    assert "During handling of the above exception" not in output


def test_a_scope_left_entered_under_off_mode_is_neither_reported_nor_undone(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_scopes=_source(
            """
            import backends

            SCOPE = backends.cudnn.flags(benchmark=True)


            def test_bare_enter():
                SCOPE.__enter__()


            def test_still_inside():
                assert backends.cudnn.benchmark is True
                SCOPE.__exit__(None, None, None)
            """
        )
    )
    result = _run(pytester, "--backends-leaks=off")
    result.assert_outcomes(passed=2, warnings=0)
    assert "left a scope" not in result.stdout.str()


# --------------------------------------------------------------------------------------------
# 8. Higher-scoped fixtures
# --------------------------------------------------------------------------------------------

SCOPED_FIXTURES_CONFTEST = """
import pytest

import backends


@pytest.fixture(scope="session")
def session_tf32():
    backends.set_defaults({"cuda.matmul.allow_tf32": True})
    yield
    backends.set_defaults({"cuda.matmul.allow_tf32": False})
"""

SCOPED_FIXTURES_PACKAGE_CONFTEST = """
import pytest

import backends


@pytest.fixture(scope="package", autouse=True)
def package_magma():
    backends.set_defaults({"cuda.preferred_linalg_library": "magma"})
    yield
    backends.set_defaults({"cuda.preferred_linalg_library": "default"})
"""

SCOPED_FIXTURES_MODULE = """
import pytest

import backends


@pytest.fixture(scope="module")
def module_limit():
    backends.set_defaults({"cudnn.benchmark_limit": 3})
    yield
    backends.set_defaults({"cudnn.benchmark_limit": 10})


@pytest.fixture(scope="module")
def module_never_undone():
    backends.set_defaults({"cudnn.deterministic": True})


@pytest.fixture(scope="module")
def module_scope():
    with backends.cudnn.flags(enabled=False):  # entered for the rest of the module
        yield


def test_module_fixture(module_limit, session_tf32):
    assert backends.cudnn.benchmark_limit == 3
    assert backends.cuda.matmul.allow_tf32 is True
    assert backends.cuda.preferred_linalg_library() == "magma"  # the package's autouse fixture


def test_module_fixture_still_holds(module_limit):
    assert backends.cudnn.benchmark_limit == 3
    assert backends.cuda.matmul.allow_tf32 is True  # the session fixture too


def test_never_undone(module_never_undone):
    assert backends.cudnn.deterministic is True


def test_never_undone_still_holds_in_its_module(module_never_undone):
    assert backends.cudnn.deterministic is True


def test_a_module_fixture_holding_a_scope(module_scope):
    assert backends.cudnn.enabled is False
    assert backends.describe()[0].source == "scope"


@pytest.fixture(scope="class")
def class_benchmark():
    backends.set_defaults({"cudnn.benchmark": True})
    yield
    backends.set_defaults({"cudnn.benchmark": False})


class TestClassScope:
    def test_one(self, class_benchmark):
        assert backends.cudnn.benchmark is True

    def test_two(self, class_benchmark):
        assert backends.cudnn.benchmark is True


def test_after_the_class():
    assert backends.cudnn.benchmark is False
"""

AFTER_THE_PACKAGE = (
    AT_DEFAULTS
    + """

def test_everything_restored_after_the_package():
    import backends

    values = backends.snapshot().to_dict()
    assert values["cuda.matmul.allow_tf32"] is True  # the session fixture is still set up
    values["cuda.matmul.allow_tf32"] = False
    assert values == {flag.name: flag.default for flag in backends.FLAGS}


def test_z_session_fixture_user(session_tf32):
    import backends

    assert backends.cuda.matmul.allow_tf32 is True
"""
)


def _scoped_fixture_suite(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makeconftest(_source(SCOPED_FIXTURES_CONFTEST))
    package = pytester.mkpydir("pkg")
    (package / "conftest.py").write_text(_source(SCOPED_FIXTURES_PACKAGE_CONFTEST), encoding="utf-8")
    (package / "test_in_package.py").write_text(_source(SCOPED_FIXTURES_MODULE), encoding="utf-8")
    pytester.makepyfile(test_z_after=_source(AFTER_THE_PACKAGE))


def test_higher_scoped_fixtures_set_defaults_for_their_scope_and_only_a_fixture_that_leaks_is_reported(
    pytester: pytest.Pytester,
) -> None:
    _scoped_fixture_suite(pytester)
    result = _run(pytester, "-W", "always")
    result.assert_outcomes(passed=10)
    lines = [line for line in _lines(result) if "changed process defaults" in line]
    assert len(lines) == 1, result.stdout.str()
    assert "module_never_undone" in lines[0] and "cudnn.deterministic" in lines[0], lines
    for name in ("test_module_fixture", "test_never_undone", "test_one", "session_tf32", "module_limit"):
        assert name not in lines[0], lines


def test_a_higher_scoped_fixture_that_leaks_errors_at_its_teardown_under_fail_mode(pytester: pytest.Pytester) -> None:
    _scoped_fixture_suite(pytester)
    result = _run(pytester, "--backends-leaks=fail")
    result.assert_outcomes(passed=10, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of *test_after_the_class*"])
    result.stdout.fnmatch_lines(["*module_never_undone*cudnn.deterministic*"])
    assert "pytest_plugin.py" not in result.stdout.str()


def test_a_higher_scoped_fixture_that_leaves_a_scope_entered_is_reported_at_its_teardown(
    pytester: pytest.Pytester,
) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_module_scope=_suite(
            """

            import pytest


            @pytest.fixture(scope="module")
            def entered_for_good():
                backends.cudnn.flags(benchmark=True).__enter__()


            def test_sees_it(entered_for_good):
                assert backends.cudnn.benchmark is True


            def test_still_sees_it(entered_for_good):
                assert backends.cudnn.benchmark is True
            """
        ),
        test_z_after=_suite(
            """

            def test_clean():
                assert at_defaults()
            """
        ),
    )
    result = _run(pytester, "-W", "always")
    result.assert_outcomes(passed=3)
    lines = [line for line in _lines(result) if "left a scope entered" in line]
    assert len(lines) == 1 and "entered_for_good" in lines[0], result.stdout.str()


def test_an_assignment_inside_a_module_fixtures_scope_is_reported_and_undone_after_the_test(
    pytester: pytest.Pytester,
) -> None:
    """A bare assignment in a test that runs inside a scope a module fixture holds changes that
    scope (not a process default) for the rest of the module: reported, and undone."""
    _ini(pytester)
    pytester.makepyfile(
        test_inside=_source(
            """
            import pytest

            import backends


            @pytest.fixture(scope="module")
            def deterministic_module():
                with backends.deterministic():
                    yield


            def test_assigns(deterministic_module):
                backends.cudnn.benchmark_limit = 1


            def test_next(deterministic_module):
                assert backends.cudnn.benchmark_limit == 10
                assert backends.cudnn.deterministic is True  # the fixture's scope is still there
            """
        )
    )
    result = _run(pytester, "-W", "always")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*test_assigns changed flags of the scope it runs in (backends.deterministic()*benchmark_limit: 10 -> 1*"]
    )
    assert "left a scope" not in result.stdout.str()


def test_an_item_without_fixtures_is_held_from_its_setup_to_its_teardown(pytester: pytest.Pytester) -> None:
    """A non-Python item (no fixtures, so no region of function-scoped fixtures) is checked too."""
    _ini(pytester)
    pytester.makeconftest(
        _source(
            """
            import pytest

            import backends


            class LeakyItem(pytest.Item):
                def runtest(self):
                    backends.set_defaults({"cudnn.benchmark": True})


            class LeakyFile(pytest.File):
                def collect(self):
                    yield LeakyItem.from_parent(self, name="leaky")


            def pytest_collect_file(file_path, parent):
                if file_path.suffix == ".leak":
                    return LeakyFile.from_parent(parent, path=file_path)
            """
        )
    )
    pytester.path.joinpath("a.leak").write_text("", encoding="utf-8")
    pytester.makepyfile(test_z_after=_suite("\n\ndef test_clean():\n    assert at_defaults()\n"))
    result = _run(pytester, "--backends-leaks=fail")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["ERROR a.leak::leaky - Failed: a.leak::leaky changed process defaults*"])
    result.stdout.fnmatch_lines(["*cudnn.benchmark: False -> True*"])


# --------------------------------------------------------------------------------------------
# 9. Configuration, tracebacks and the report header
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "ini", "named"),
    [
        pytest.param([], ["backends_strict = maybe"], "backends_strict", id="ini-strict"),
        pytest.param([], ["backends_leaks = sometimes"], "backends_leaks", marks=pytest.mark.slow, id="ini-leaks"),
        pytest.param(
            ["-o", "backends_strict=maybe"], [], "backends_strict", marks=pytest.mark.slow, id="override-strict"
        ),
        pytest.param(["-o", "backends_leaks=sometimes"], [], "backends_leaks", id="override-leaks"),
        pytest.param(["--backends-leaks=sometimes"], [], "--backends-leaks", id="option-leaks"),
    ],
)
def test_bad_settings_are_a_one_line_usage_error_at_start_up(
    pytester: pytest.Pytester, args: list[str], ini: list[str], named: str
) -> None:
    _ini(pytester, *ini)
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = _run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, _lines(result)
    errors = [line for line in _lines(result) if line.strip()]
    assert len(errors) == 1, errors
    assert named in errors[0] and ("maybe" in errors[0] or "sometimes" in errors[0]), errors
    assert "Traceback" not in "\n".join(_lines(result))


def test_errors_raised_into_tests_show_no_plugin_frames_and_no_doubled_messages(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_errors=_source(
            """
            def test_set_typo(backends_flags):
                backends_flags.set("cudnn.benchmak", True)


            def test_set_wrong_type(backends_flags):
                backends_flags.set({"cudnn.benchmark": 1})


            def test_attribute_typo(backends_flags):
                backends_flags.cudnn.benchmak = True


            def test_attribute_wrong_type(backends_flags):
                backends_flags.cudnn.benchmark = "yes"


            def test_set_without_value(backends_flags):
                backends_flags.set("cudnn.benchmark")
            """
        )
    )
    result = _run(pytester)
    result.assert_outcomes(failed=5)
    output = result.stdout.str()
    assert "pytest_plugin.py" not in output, output
    assert "backends/_engine" not in output, output
    assert "During handling of the above exception" not in output, output
    assert "The above exception was the direct cause" not in output, output
    result.stdout.fnmatch_lines(["E * did you mean 'cudnn.benchmark'?*"])
    result.stdout.fnmatch_lines(["E * did you mean backends.cudnn.benchmark?*"])
    result.stdout.fnmatch_lines(["E *cudnn.benchmark must be a bool*got 1 (int)*"])
    result.stdout.fnmatch_lines(["E *cudnn.benchmark must be a bool*got 'yes' (str)*"])


def test_report_header_names_the_modes_and_the_flags_from_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ini(pytester)
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = _run(pytester)
    result.stdout.fnmatch_lines(["backends: leaks=warn, strict=off, flags from the environment: none"])
    monkeypatch.setenv("BACKENDS_CUDNN_DETERMINISTIC", "1")
    monkeypatch.setenv("BACKENDS_CUDNN_BENCHMARK_LIMIT", "4")
    monkeypatch.setenv("CUPY_TF32", "1")
    result = _run(pytester, "--backends-leaks=fail", "--backends-strict")
    result.stdout.fnmatch_lines(
        [
            "backends: leaks=fail, strict=on, flags from the environment: cudnn.benchmark_limit=4 "
            "(BACKENDS_CUDNN_BENCHMARK_LIMIT), cudnn.deterministic=True (BACKENDS_CUDNN_DETERMINISTIC), "
            "cuda.matmul.allow_tf32=True (CUPY_TF32)"
        ]
    )


# --------------------------------------------------------------------------------------------
# 10. backends_flags by attribute
# --------------------------------------------------------------------------------------------


def test_backends_flags_takes_attribute_assignment(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_attributes=_suite(
            """

            import contextvars
            import sys
            import threading

            import pytest

            # an empty context, as a new thread has unless 3.14's thread_inherit_context copies ours
            EMPTY = (lambda: {"context": contextvars.Context()}) if sys.version_info >= (3, 14) else dict


            def in_plain_thread(read):
                seen = []
                thread = threading.Thread(target=lambda: seen.append(read()), **EMPTY())
                thread.start()
                thread.join()
                return seen[0]


            @pytest.fixture
            def exact(backends_flags):
                backends_flags.cuda.matmul.allow_tf32 = False
                backends_flags.cudnn.allow_tf32 = False


            def test_assign_and_read(backends_flags):
                backends_flags.cudnn.benchmark = True
                assert backends.cudnn.benchmark is True
                assert backends_flags.cudnn.benchmark is True
                assert in_plain_thread(lambda: backends.cudnn.benchmark) is False  # not a process default
                backends_flags.cuda.matmul.allow_tf32 = True
                backends_flags.cuda.preferred_linalg_library = "magma"
                backends_flags.cuda.cufft_plan_cache.max_size = 4
                backends_flags.cudnn.conv.fp32_precision = "ieee"  # a view sets its flag
                assert backends.cuda.matmul.allow_tf32 is True
                assert backends_flags.cuda.preferred_linalg_library == "magma"
                assert backends.cuda.preferred_linalg_library() == "magma"
                assert backends.cuda.cufft_plan_cache.max_size == 4
                assert backends.cudnn.allow_tf32 is False
                assert backends_flags.cudnn.conv.fp32_precision == "ieee"
                assert backends_flags["cuda.cufft_plan_cache.max_size"] == 4


            def test_undone_after_the_test():
                assert at_defaults()


            def test_from_a_fixture(exact):
                assert backends.cuda.matmul.allow_tf32 is False
                assert backends.cudnn.allow_tf32 is False


            def test_reads_the_effective_value(backends_flags):
                assert backends_flags.cudnn.deterministic is False
                with backends.cudnn.flags(deterministic=True):
                    assert backends_flags.cudnn.deterministic is True
                backends.set_defaults({"cudnn.benchmark_limit": 2})
                assert backends_flags.cudnn.benchmark_limit == 2
                backends.reset_defaults()


            def test_bad_names_and_values_raise_and_change_nothing(backends_flags):
                with pytest.raises(AttributeError, match=r"did you mean backends\\.cudnn\\.benchmark\\?"):
                    backends_flags.cudnn.benchmak = True
                with pytest.raises(AttributeError, match=r"did you mean backends\\.cudnn\\.benchmark\\?"):
                    backends_flags.cudnn.benchmak
                with pytest.raises(AttributeError, match="cudnn"):
                    backends_flags.cudn.benchmark = True
                with pytest.raises(TypeError, match=r"cudnn\\.benchmark must be a bool"):
                    backends_flags.cudnn.benchmark = 1
                with pytest.raises(ValueError, match=r"cudnn\\.benchmark_limit"):
                    backends_flags.cudnn.benchmark_limit = -1
                with pytest.raises(ValueError, match="fp32_precision"):
                    backends_flags.cuda.matmul.fp32_precision = "bf16"
                with pytest.raises(AttributeError, match="not a flag"):
                    backends_flags.cudnn.flags = None  # never monkeypatches backends itself
                with pytest.raises(AttributeError, match="not a flag"):
                    backends_flags.cuda.matmul = None
                with pytest.raises(AttributeError):
                    backends_flags.anything = 1
                with pytest.raises(KeyError, match="did you mean 'cudnn.benchmark'"):
                    backends_flags["cudnn.benchmak"]
                assert callable(backends.cudnn.flags)
                assert at_defaults()


            def test_z_still_undone():
                assert at_defaults()
            """
        )
    )
    result = _run(pytester, "--backends-leaks=fail")
    result.assert_outcomes(passed=6)


# --------------------------------------------------------------------------------------------
# 11. Reruns (pytest-rerunfailures), warnings made errors, and strict mode's failures
# --------------------------------------------------------------------------------------------

RERUN_SUITE = (
    AT_DEFAULTS
    + """

RUNS = []


def test_flaky_and_leaky():
    RUNS.append(len(RUNS) + 1)
    backends.cudnn.benchmark_limit = len(RUNS)  # a process default: each run leaks its own
    backends.cudnn.flags(deterministic=True).__enter__()  # and leaves a scope entered
    assert len(RUNS) == 3, f"flaky: run {len(RUNS)}"


def test_next_starts_clean():
    assert RUNS == [1, 2, 3]
    assert at_defaults()
"""
)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["warn", "fail"])
def test_each_rerun_is_checked_and_no_leak_reaches_the_next_test(pytester: pytest.Pytester, mode: str) -> None:
    pytest.importorskip("pytest_rerunfailures")
    _ini(pytester)
    pytester.makepyfile(test_rerun=RERUN_SUITE)
    result = _run(pytester, "-p", "rerunfailures", "--reruns", "2", f"--backends-leaks={mode}", "-W", "always")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == 2, _lines(result)  # the next test too: every run was put back
    assert outcomes.get("failed", 0) == 0, _lines(result)
    output = result.stdout.str()
    # warn: each run's report in the warnings summary; fail: each run's teardown error makes a rerun,
    # and the last run's is the one reported
    runs = (1, 2, 3) if mode == "warn" else (3,)
    for run in runs:
        assert f"test_rerun.py::test_flaky_and_leaky changed process defaults and did not restore them: " \
               f"cudnn.benchmark_limit: 10 -> {run} and left a scope entered: " \
               f"backends.cudnn.flags(deterministic=True);" in output, output
    for run in {1, 2, 3} - set(runs):  # fail: the earlier runs' reports are not shown
        assert f"cudnn.benchmark_limit: 10 -> {run} and left a scope entered" not in output, output
    if mode == "fail":
        assert outcomes["errors"] == 1 and outcomes["rerun"] >= 2, outcomes


LEAKS_FOR_WARNING_FILTERS = """
import pytest

import backends


def test_default():
    backends.cudnn.benchmark = True


def test_scope():
    backends.cudnn.flags(deterministic=True).__enter__()


@pytest.fixture(scope="module")
def module_leak():
    backends.set_defaults({"cudnn.enabled": False})


def test_module_fixture(module_leak):
    pass


def test_clean():
    assert backends.cudnn.benchmark is False and backends.cudnn.deterministic is False
"""


@pytest.mark.parametrize(
    "filter_",
    [
        "error",
        pytest.param("error::UserWarning", marks=pytest.mark.slow),
        pytest.param("error::backends.integrations.pytest_plugin.BackendsLeakWarning", marks=pytest.mark.slow),
    ],
)
def test_leaks_under_warnings_made_errors_show_the_report_and_no_plugin_frame(
    pytester: pytest.Pytester, filter_: str
) -> None:
    _ini(pytester)
    pytester.makepyfile(test_filters=_source(LEAKS_FOR_WARNING_FILTERS))
    result = _run(pytester, "-W", filter_)
    result.assert_outcomes(passed=4, errors=3)
    output = result.stdout.str()
    assert "pytest_plugin.py" not in output and "INTERNALERROR" not in output, output
    for test, report in [
        ("test_default", "test_filters.py::test_default changed process defaults and did not restore them: "
                         "cudnn.benchmark: False -> True"),
        ("test_scope", "test_filters.py::test_scope left a scope entered: backends.cudnn.flags(deterministic=True)"),
        ("test_clean", "fixture 'module_leak' (module-scoped, at its teardown) changed process defaults and did not "
                       "restore them: cudnn.enabled: True -> False"),
    ]:
        result.stdout.fnmatch_lines([f"*ERROR at teardown of {test}*", f"E   *BackendsLeakWarning: {report}*"])


def test_an_import_time_leak_under_warnings_made_errors_is_a_collection_error(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(test_imports="import backends\nbackends.cudnn.benchmark = True\n\ndef test_x():\n    pass\n")
    result = _run(pytester, "-W", "error::UserWarning")
    assert result.ret == pytest.ExitCode.INTERRUPTED, _lines(result)
    output = "\n".join(_lines(result))
    assert "pytest_plugin.py" not in output and "INTERNALERROR" not in output, output
    result.stdout.fnmatch_lines([
        "*ERROR collecting test_imports.py*",
        "BackendsLeakWarning: importing test_imports.py changed process defaults: cudnn.benchmark: False -> True.*",
    ])


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["-W", "error"], id="W-error"),
        pytest.param(["--backends-leaks=fail"], marks=pytest.mark.slow, id="fail"),
    ],
)
def test_a_leak_found_after_ctrl_c_stopped_the_run_is_a_warning_with_no_traceback(
    pytester: pytest.Pytester, args: list[str]
) -> None:
    """Ctrl-C: what is left set up is torn down at the session's end, where no test can fail."""
    _ini(pytester)
    pytester.makepyfile(
        test_interrupted=_source(
            """
            import pytest

            import backends


            @pytest.fixture(scope="session")
            def leaky_session():
                backends.set_defaults({"cudnn.enabled": False})


            def test_interrupted(leaky_session):
                raise KeyboardInterrupt


            def test_never_runs(leaky_session):
                pass
            """
        )
    )
    result = _run(pytester, *args)
    assert result.ret == pytest.ExitCode.INTERRUPTED, _lines(result)
    output = "\n".join(_lines(result))
    assert "Traceback" not in output and "pytest_plugin.py" not in output, output
    result.stdout.fnmatch_lines([
        "*BackendsLeakWarning: fixture 'leaky_session' (session-scoped, at its teardown) changed process defaults "
        "and did not restore them: cudnn.enabled: True -> False*",
    ])


def test_strict_mode_failures_show_no_plugin_frame(pytester: pytest.Pytester) -> None:
    """A bare assignment under --backends-strict, in a test or in a fixture of a conftest.py (where
    pytest shows every frame between the hook and the fixture): the user's frames only, none of the
    plugin's or the engine's, so each traceback ends at the user's line."""
    _ini(pytester)
    pytester.makeconftest(
        _source(
            """
            import pytest

            import backends


            @pytest.fixture
            def assigns():
                backends.cudnn.deterministic = True


            @pytest.fixture(scope="module")
            def module_assigns():
                backends.cudnn.benchmark_limit = 2
                yield
            """
        )
    )
    pytester.makepyfile(
        test_strict_failures=_source(
            """
            import backends


            def test_in_the_test():
                backends.cudnn.benchmark = True


            def test_in_a_fixture(assigns):
                pass


            def test_in_a_module_fixture(module_assigns):
                pass


            def test_a_view():
                backends.cuda.matmul.fp32_precision = "tf32"


            def test_torch_spellings():
                backends.use_deterministic_algorithms(True)


            def test_a_bad_value_in_a_scope():
                with backends.cudnn.flags():
                    backends.cudnn.benchmark_limit = "x"
            """
        )
    )
    result = _run(pytester, "--backends-strict")
    result.assert_outcomes(failed=4, errors=2)
    output = result.stdout.str()
    assert "pytest_plugin.py" not in output, output
    assert f"{os.sep}backends{os.sep}" not in output, output  # no frame of the package at all
    result.stdout.fnmatch_lines([
        ">       backends.cudnn.benchmark = True", "*", "E * RuntimeError: global flags are disabled (backends."
        "disable_global_flags(), or pytest's --backends-strict), so backends.cudnn.benchmark cannot be*",
        "", "test_strict_failures.py:5: RuntimeError",
    ])
    result.stdout.fnmatch_lines(['>       backends.cuda.matmul.fp32_precision = "tf32"', "*", "E * RuntimeError:*"])
    result.stdout.fnmatch_lines([">       backends.use_deterministic_algorithms(True)", "E * RuntimeError:*"])
    result.stdout.fnmatch_lines(['>           backends.cudnn.benchmark_limit = "x"', "*", "E * TypeError: cudnn."
                                 "benchmark_limit must be an int >= 0, got 'x' (str)"])
    result.stdout.fnmatch_lines(["*ERROR at setup of test_in_a_fixture*", "*def assigns():", "conftest.py:*"])
    for flag in ("cudnn.benchmark", "cudnn.deterministic", "cudnn.benchmark_limit"):
        result.stdout.fnmatch_lines([f"E * RuntimeError: global flags are disabled *backends.{flag} cannot be*"])


# --------------------------------------------------------------------------------------------
# 12. The fixture's type
# --------------------------------------------------------------------------------------------


def test_the_fixtures_type_declares_exactly_the_namespaces_flags_and_views_it_has() -> None:
    """backends/_types.pyi's BackendsFlags* classes (the base of BackendsFlags for the checkers,
    generated from the table) against what the fixture's objects have at run time."""
    import ast

    import backends
    from backends.integrations.pytest_plugin import BackendsFlags
    from tests._helpers import PACKAGE

    stub = ast.parse((PACKAGE / "_types.pyi").read_text(encoding="utf-8"))
    classes = {node.name: node for node in stub.body if isinstance(node, ast.ClassDef)}

    def declared(name: str) -> dict[str, str | None]:
        """attribute -> the class a namespace property returns, None for a flag or a view."""
        members: dict[str, str | None] = {}
        for node in classes[name].body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                members[node.target.id] = None
            elif isinstance(node, ast.FunctionDef) and isinstance(node.returns, ast.Name):  # (not a setter)
                members[node.name] = node.returns.id if node.returns.id.startswith("BackendsFlags") else None
        return members

    checked = []
    with backends.flags({}):  # what the fixture's own scope is
        pending: list[tuple[object, str]] = [(BackendsFlags(), "BackendsFlagsNamespaces")]
        while pending:
            namespace, name = pending.pop()
            members = declared(name)
            assert sorted(members) == dir(namespace), name
            for attribute, child in members.items():
                if child is not None:
                    pending.append((getattr(namespace, attribute), child))
                else:  # a flag or a view: read as its value, of the declared type's kind
                    assert isinstance(getattr(namespace, attribute), (bool, int, str)), (name, attribute)
            checked.append(name)
    assert sorted(checked) == sorted(n for n in classes if n.startswith("BackendsFlags"))
    assert set(checked) >= {"BackendsFlagsCudnn", "BackendsFlagsCudnnConv", "BackendsFlagsMatmul",
                            "BackendsFlagsPlanCache", "BackendsFlagsCuda", "BackendsFlagsAlgorithms"}
