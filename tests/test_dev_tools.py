"""CI cannot skip the tests of the development tools by accident: with
SCOPED_BACKENDS_DEV_TOOLS=required, a skip that names a dependency group fails."""

from __future__ import annotations

import pytest

TESTS = """
import pytest

def test_needs_a_tool():
    pytest.importorskip("no_such_tool_xyz", reason="no_such_tool_xyz not installed (pip install --group typing)")

@pytest.fixture
def tool():
    pytest.skip("the tool is not installed (pip install --group docs)")

def test_needs_a_tool_through_a_fixture(tool):
    pass

def test_skips_for_another_reason():
    pytest.skip("CuPy is not installed")

def test_needs_an_extra():
    pytest.importorskip("no_such_engine_xyz", reason="no engine here (pip install 'scoped-backends[ray]')")

def test_ray_without_a_wheel_for_this_python():
    pytest.skip("Ray has no wheel for cpython 3.14")
"""


MODULE_SKIP = """
import pytest

pytest.skip("the builder is not installed (pip install --group release)", allow_module_level=True)

def test_never_runs():
    pass
"""


def test_a_module_level_skip_fails_where_ci_requires_the_tools(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_module_skip=MODULE_SKIP)
    monkeypatch.delenv("SCOPED_BACKENDS_DEV_TOOLS", raising=False)
    pytester.runpytest("-p", "tests._dev_tools", "-p", "no:asyncio").assert_outcomes(skipped=1)
    monkeypatch.setenv("SCOPED_BACKENDS_DEV_TOOLS", "required")
    result = pytester.runpytest("-p", "tests._dev_tools", "-p", "no:asyncio")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*SCOPED_BACKENDS_DEV_TOOLS=required, but this test was skipped*--group release*"])


def test_without_the_variable_the_tool_tests_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SCOPED_BACKENDS_DEV_TOOLS", raising=False)
    pytester.makepyfile(TESTS)
    pytester.runpytest("-p", "tests._dev_tools", "-p", "no:asyncio").assert_outcomes(skipped=5)


def test_where_ci_requires_the_tools_their_skips_fail(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCOPED_BACKENDS_DEV_TOOLS", "required")
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("-p", "tests._dev_tools", "-p", "no:asyncio")
    result.assert_outcomes(failed=2, errors=1, skipped=2)
    result.stdout.fnmatch_lines(["*SCOPED_BACKENDS_DEV_TOOLS=required, but this test was skipped*--group typing*"])
    result.stdout.fnmatch_lines(["*DEV_TOOLS=required, but this test was skipped*scoped-backends[[]ray[]]*"])
