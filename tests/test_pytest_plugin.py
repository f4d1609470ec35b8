"""The pytest plugin (``backends.integrations.pytest_plugin``, entry point ``pytest11: backends``).

Each test writes a small suite into ``pytester``'s temporary directory and runs it with
``runpytest_subprocess``: a fresh interpreter that loads the plugin through its entry point
(no conftest), exactly as a user's suite would.
"""

from __future__ import annotations

import importlib.util
import os
import re
import textwrap

import pytest

pytest_plugins = ["pytester"]

HAS_ASYNCIO_PLUGIN = importlib.util.find_spec("pytest_asyncio") is not None

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
    """The inner runs inherit the environment: no flag defaults from it, plugins autoloaded."""
    for name in list(os.environ):
        if name.startswith("BACKENDS_") or name == "CUPY_TF32":
            monkeypatch.delenv(name)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_PLUGINS", raising=False)


def _ini(pytester: pytest.Pytester, *lines: str) -> None:
    """A tox.ini for the inner run (so it never picks up this repository's config)."""
    body = ["[pytest]"]
    if HAS_ASYNCIO_PLUGIN:
        body.append("asyncio_default_fixture_loop_scope = function")
    body.extend(lines)
    pytester.makeini("\n".join(body) + "\n")


def _source(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def _suite(text: str) -> str:
    """A test module that starts with the ``at_defaults()`` helper."""
    return AT_DEFAULTS + textwrap.dedent(text)


def _run(pytester: pytest.Pytester, *args: str, timeout: float = 60) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)


def _lines(result: pytest.RunResult) -> list[str]:
    return result.outlines + result.errlines


# --------------------------------------------------------------------------------------------
# 1. The marker
# --------------------------------------------------------------------------------------------


def test_marker_on_function_class_and_module_nearer_wins_flag_by_flag(pytester: pytest.Pytester) -> None:
    _ini(pytester)
    pytester.makepyfile(
        test_markers=_source(
            """
            import threading

            import pytest

            import backends

            pytestmark = pytest.mark.backends({"cudnn.deterministic": True, "cudnn.benchmark_limit": 3})


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
                thread = threading.Thread(target=lambda: seen.append(backends.cudnn.deterministic))
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

            import threading

            import pytest


            def read_in_plain_thread(read):
                seen = []
                thread = threading.Thread(target=lambda: seen.append(read()))
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
        pytest.param([], ["backends_leaks = warn"], id="ini"),
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
        pytest.param([], ["backends_leaks = fail"], id="ini"),
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
        pytest.param([], ["backends_strict = true"], id="ini"),
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


@pytest.mark.parametrize(
    ("mode", "suite", "passed"),
    [
        pytest.param("strict", ASYNCIO_STRICT_SUITE, 5, id="strict"),
        pytest.param("auto", ASYNCIO_AUTO_SUITE, 4, id="auto"),
    ],
)
def test_pytest_asyncio(pytester: pytest.Pytester, mode: str, suite: str, passed: int) -> None:
    pytest.importorskip("pytest_asyncio", minversion="0.25")
    _ini(pytester)
    pytester.makepyfile(test_async=_source(suite))
    result = _run(pytester, "-p", "asyncio", f"--asyncio-mode={mode}", "--strict-markers", "--backends-leaks=fail")
    result.assert_outcomes(passed=passed)


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
