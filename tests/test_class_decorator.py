"""A scope decorates a test class (contract section 3): a ``unittest.TestCase`` runs each test,
from ``setUp`` to its last cleanup, under the scope; a pytest-style class has each ``test*``
method decorated. Real unittest suites (``unittest.TestLoader`` and a runner) and real pytest
runs (``pytester``) record what each step sees, and what is left after."""

from __future__ import annotations

import asyncio
import io
import sys
import textwrap
import unittest
from collections.abc import Callable
from typing import Any

import pytest

import backends
from tests._helpers import NO_PLUGIN_AUTOLOAD, OUR_PLUGIN

DEFAULTS = {flag.name: flag.default for flag in backends.FLAGS}
SCOPES: dict[str, Callable[[], backends.Scope]] = {
    "cudnn.flags": lambda: backends.cudnn.flags(deterministic=True, benchmark_limit=3),
    "backends.flags": lambda: backends.flags({"cudnn.deterministic": True, "cudnn.benchmark_limit": 3}),
    "Scope": lambda: backends.Scope({"cudnn.deterministic": True, "cudnn.benchmark_limit": 3}),
    "snapshot": lambda: backends.Snapshot({**DEFAULTS, "cudnn.deterministic": True, "cudnn.benchmark_limit": 3}),
}


def flags() -> tuple[bool, int, bool]:
    return (backends.cudnn.deterministic, backends.cudnn.benchmark_limit, backends.cudnn.benchmark)


def run_suite(*classes: type[unittest.TestCase]) -> unittest.TestResult:
    """Load every test of ``classes`` and run them as ``python -m unittest`` does."""
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(cls) for cls in classes)
    return unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)


def assert_untouched() -> None:
    assert backends.snapshot().to_dict() == DEFAULTS
    assert {row.source for row in backends.describe()} == {"default"}


# -- unittest.TestCase --------------------------------------------------------------------------
@pytest.mark.parametrize("make", list(SCOPES.values()), ids=list(SCOPES))
def test_a_test_case_runs_set_up_each_test_tear_down_and_cleanups_under_the_scope(
    make: Callable[[], backends.Scope],
) -> None:
    seen: list[tuple[str, tuple[bool, int, bool]]] = []

    class Case(unittest.TestCase):
        @classmethod
        def setUpClass(cls) -> None:
            seen.append(("setUpClass", flags()))

        def setUp(self) -> None:
            seen.append(("setUp", flags()))
            self.addCleanup(lambda: seen.append(("cleanup", flags())))

        def test_one(self) -> None:
            seen.append(("test_one", flags()))

        def test_two(self) -> None:
            seen.append(("test_two", flags()))

        def tearDown(self) -> None:
            seen.append(("tearDown", flags()))

    decorated = make()(Case)
    assert decorated is Case
    result = run_suite(Case)
    assert result.wasSuccessful() and result.testsRun == 2, result.errors + result.failures
    inside = (True, 3, False)
    assert seen == [
        ("setUpClass", (False, 10, False)),  # once for the class, outside every test
        *[(step, inside) for test in ("test_one", "test_two") for step in ("setUp", test, "tearDown", "cleanup")],
    ]
    assert_untouched()


def test_an_isolated_asyncio_test_case_sees_the_scope_in_every_sync_and_async_step() -> None:
    seen: list[tuple[str, tuple[bool, int, bool]]] = []

    @backends.cudnn.flags(deterministic=True, benchmark_limit=3)
    class Case(unittest.IsolatedAsyncioTestCase):
        def setUp(self) -> None:
            seen.append(("setUp", flags()))

        async def asyncSetUp(self) -> None:
            await asyncio.sleep(0)
            seen.append(("asyncSetUp", flags()))
            self.addAsyncCleanup(self.async_cleanup)

        async def async_cleanup(self) -> None:
            await asyncio.sleep(0)
            seen.append(("async cleanup", flags()))

        async def test_async(self) -> None:
            await asyncio.sleep(0)
            seen.append(("test_async", flags()))
            seen.append(("a task it creates", await asyncio.create_task(self.read())))

        async def read(self) -> tuple[bool, int, bool]:
            return flags()

        def test_sync(self) -> None:
            seen.append(("test_sync", flags()))

        async def asyncTearDown(self) -> None:
            seen.append(("asyncTearDown", flags()))

        def tearDown(self) -> None:
            seen.append(("tearDown", flags()))

    result = run_suite(Case)
    assert result.wasSuccessful() and result.testsRun == 2, result.errors + result.failures
    inside = (True, 3, False)
    steps = [name for name, _ in seen]
    assert steps == [
        "setUp", "asyncSetUp", "test_async", "a task it creates", "asyncTearDown", "tearDown", "async cleanup",
        "setUp", "asyncSetUp", "test_sync", "asyncTearDown", "tearDown", "async cleanup",
    ]
    assert {values for _, values in seen} == {inside}
    assert_untouched()


def test_debug_runs_the_test_under_the_scope_too() -> None:
    seen: list[tuple[bool, int, bool]] = []

    @backends.cudnn.flags(deterministic=True, benchmark_limit=3)
    class Case(unittest.TestCase):
        def test_it(self) -> None:
            seen.append(flags())

    Case("test_it").debug()
    assert seen == [(True, 3, False)]
    assert_untouched()


def test_what_set_up_enters_or_assigns_lasts_for_the_test_and_ends_with_it() -> None:
    """One entry per test, around setUp to the last cleanup: a scope setUp enters and a cleanup
    exits nests inside it, and an assignment in setUp is the scope's, for this test only."""
    seen: list[tuple[str, tuple[bool, int, bool]]] = []

    @backends.cudnn.flags(deterministic=True)
    class Case(unittest.TestCase):
        def setUp(self) -> None:
            scope = backends.cudnn.flags(benchmark=True)
            scope.__enter__()
            self.addCleanup(scope.__exit__, None, None, None)
            backends.cudnn.benchmark_limit = 5  # inside the decoration's scope: not a process default

        def test_sees_both(self) -> None:
            seen.append(("test", flags()))
            self.addCleanup(lambda: seen.append(("last cleanup", flags())))

    result = run_suite(Case)
    assert result.wasSuccessful(), result.errors + result.failures
    assert seen == [("test", (True, 5, True)), ("last cleanup", (True, 5, True))]
    assert_untouched()


def test_failures_and_errors_inside_are_reported_as_usual_and_leave_nothing_set() -> None:
    @backends.cudnn.flags(deterministic=True)
    class Case(unittest.TestCase):
        def test_fails(self) -> None:
            assert backends.cudnn.deterministic is True
            self.fail("failed on purpose")

        def test_errors(self) -> None:
            raise KeyError("on purpose")

    @backends.cudnn.flags(deterministic=True)
    class BrokenSetUp(unittest.TestCase):
        def setUp(self) -> None:
            raise ValueError("setUp broke")

        def test_never_runs(self) -> None:
            raise AssertionError("unreachable")

    @backends.cudnn.flags(deterministic=True)
    class AsyncCase(unittest.IsolatedAsyncioTestCase):
        async def test_fails(self) -> None:
            assert backends.cudnn.deterministic is True
            raise RuntimeError("async, on purpose")

    result = run_suite(Case, BrokenSetUp, AsyncCase)
    assert result.testsRun == 4
    assert [str(case).split()[0] for case, _ in result.failures] == ["test_fails"]
    errors = sorted(trace.strip().splitlines()[-1] for _, trace in result.errors)
    assert errors == ["KeyError: 'on purpose'", "RuntimeError: async, on purpose", "ValueError: setUp broke"]
    assert_untouched()


def test_a_skipped_test_and_an_expected_failure_are_reported_as_without_it() -> None:
    @backends.cudnn.flags(deterministic=True)
    class Case(unittest.TestCase):
        @unittest.skip("on purpose")
        def test_skipped(self) -> None:
            raise AssertionError("unreachable")

        @unittest.expectedFailure
        def test_expected(self) -> None:
            assert backends.cudnn.deterministic is False

    result = run_suite(Case)
    assert len(result.skipped) == 1 and len(result.expectedFailures) == 1 and result.wasSuccessful()
    assert_untouched()


# -- classes that derive from a decorated class, or are decorated twice --------------------------------
def test_inherited_tests_get_it_and_a_subclass_keeps_it_for_its_own_tests_and_set_up() -> None:
    seen: dict[str, tuple[bool, int, bool]] = {}

    class Mixin:  # test methods from a base that is not decorated
        def test_from_the_mixin(self) -> None:
            seen[f"{type(self).__name__}.test_from_the_mixin"] = flags()

    @backends.cudnn.flags(deterministic=True)
    class Base(Mixin, unittest.TestCase):
        def test_base(self) -> None:
            seen[f"{type(self).__name__}.test_base"] = flags()

    class Sub(Base):
        def setUp(self) -> None:
            seen["Sub.setUp"] = flags()

        def test_own(self) -> None:
            seen["Sub.test_own"] = flags()

    result = run_suite(Base, Sub)
    assert result.wasSuccessful() and result.testsRun == 5, result.errors + result.failures
    assert seen == dict.fromkeys(
        ["Base.test_from_the_mixin", "Base.test_base", "Sub.setUp", "Sub.test_own", "Sub.test_from_the_mixin",
         "Sub.test_base"],
        (True, 10, False),
    )
    assert_untouched()


def test_nearer_decorations_win_flag_by_flag_as_nested_scopes() -> None:
    seen: dict[str, tuple[bool, int, bool]] = {}

    @backends.cudnn.flags(deterministic=False, benchmark_limit=1)  # outer
    @backends.cudnn.flags(deterministic=True)  # nearest the class: wins where both set a flag
    class Twice(unittest.TestCase):
        def test_it(self) -> None:
            seen["Twice"] = flags()

    @backends.cudnn.flags(benchmark=True, benchmark_limit=7)  # a subclass's own: nearer than its base's
    class Sub(Twice):
        def test_it(self) -> None:
            seen["Sub"] = flags()

        @backends.cudnn.flags(benchmark_limit=2)  # a method's own: nearer still
        def test_method_decorated(self) -> None:
            seen["Sub.method"] = flags()

    result = run_suite(Twice, Sub)
    assert result.wasSuccessful(), result.errors + result.failures
    assert seen == {"Twice": (True, 1, False), "Sub": (True, 7, True), "Sub.method": (True, 2, True)}
    assert_untouched()


def test_a_class_with_its_own_init_subclass_still_runs_it_for_its_subclasses() -> None:
    made: list[str] = []

    @backends.cudnn.flags(deterministic=True)
    class Base(unittest.TestCase):
        def __init_subclass__(cls, label: str = "", **kwargs: Any) -> None:
            super().__init_subclass__(**kwargs)
            made.append(f"{cls.__name__}:{label}")

    class Sub(Base, label="sub"):
        def test_it(self) -> None:
            assert backends.cudnn.deterministic is True

    assert made == ["Sub:sub"]
    result = run_suite(Sub)
    assert result.wasSuccessful() and result.testsRun == 1, result.errors + result.failures


# -- pytest-style classes -----------------------------------------------------------------------
def test_a_pytest_style_class_has_each_test_method_decorated_and_nothing_else() -> None:
    @backends.deterministic()
    class TestModel:
        """A plain class, as pytest collects it."""

        def setup_method(self) -> None:
            self.at_setup = backends.cudnn.deterministic

        def helper(self) -> bool:
            return backends.cudnn.deterministic

        def test_method(self, x: int = 1) -> tuple[bool, bool]:
            """Its docstring."""
            return backends.cudnn.deterministic, self.helper()

        async def test_coroutine(self) -> bool:
            await asyncio.sleep(0)
            return backends.cudnn.deterministic

        @staticmethod
        def test_static() -> bool:
            return backends.cudnn.deterministic

        @classmethod
        def test_class(cls) -> bool:
            return backends.cudnn.deterministic

    model = TestModel()
    model.setup_method()
    assert model.at_setup is False and model.helper() is False  # not test methods: untouched
    assert model.test_method() == (True, True)
    assert asyncio.run(model.test_coroutine()) is True
    assert TestModel.test_static() is True and model.test_static() is True
    assert TestModel.test_class() is True
    assert TestModel.test_method.__name__ == "test_method" and TestModel.test_method.__doc__ == "Its docstring."
    import inspect

    assert str(inspect.signature(TestModel.test_method)) == "(self, x: 'int' = 1) -> 'tuple[bool, bool]'"
    assert inspect.iscoroutinefunction(TestModel.test_coroutine)
    assert_untouched()


def test_a_pytest_style_subclass_keeps_it_and_the_nearer_decoration_wins() -> None:
    class Helpers:
        def test_inherited(self) -> tuple[bool, int, bool]:
            return flags()

    @backends.cudnn.flags(deterministic=True, benchmark_limit=4)
    class TestBase(Helpers):
        def test_base(self) -> tuple[bool, int, bool]:
            return flags()

    class TestSub(TestBase):
        def test_own(self) -> tuple[bool, int, bool]:
            return flags()

    @backends.cudnn.flags(benchmark_limit=8)
    class TestDecoratedSub(TestBase):
        pass

    assert TestBase().test_inherited() == TestBase().test_base() == (True, 4, False)
    assert TestSub().test_own() == TestSub().test_inherited() == TestSub().test_base() == (True, 4, False)
    assert TestDecoratedSub().test_base() == TestDecoratedSub().test_inherited() == (True, 8, False)
    assert Helpers().test_inherited() == (False, 10, False)  # the undecorated base is left as it was
    assert_untouched()


@pytest.mark.parametrize(
    "cls", [type("Model", (), {}), type("Config", (), {"testing": True, "load": lambda self: None}), int],
    ids=["empty", "no-test-methods", "builtin"],
)
def test_a_class_that_is_no_test_class_is_refused_with_advice_and_nothing_changes(cls: type) -> None:
    before = dict(vars(cls))
    with pytest.raises(TypeError) as raised:
        backends.cudnn.flags(deterministic=True)(cls)
    assert str(raised.value) == (
        f"backends.cudnn.flags(deterministic=True) decorates functions and test classes (a unittest.TestCase, "
        f"or a class with test* methods), not the class {cls.__qualname__}: decorate its methods"
    )
    assert dict(vars(cls)) == before
    assert_untouched()


# -- under pytest -----------------------------------------------------------------------------------
SUITE = """
import asyncio
import unittest

import pytest

import backends

seen = []


def flags():
    return backends.cudnn.deterministic, backends.cudnn.benchmark_limit


@backends.cudnn.flags(deterministic=True, benchmark_limit=3)
class TestSyncCase(unittest.TestCase):
    def setUp(self):
        seen.append(("sync setUp", flags()))

    def test_it(self):
        seen.append(("sync test", flags()))

    def tearDown(self):
        seen.append(("sync tearDown", flags()))


@backends.cudnn.flags(deterministic=True, benchmark_limit=3)
class TestAsyncCase(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        seen.append(("asyncSetUp", flags()))

    async def test_it(self):
        await asyncio.sleep(0)
        seen.append(("async test", flags()))

    async def asyncTearDown(self):
        seen.append(("asyncTearDown", flags()))


@backends.cudnn.flags(deterministic=True, benchmark_limit=3)
class TestPlain:
    @pytest.mark.parametrize("n", [1, 2])
    def test_parametrized(self, n, tmp_path):
        seen.append((f"plain test {n}", flags()))

    @pytest.mark.backends({"cudnn.benchmark_limit": 9})
    def test_under_the_marker_too(self):
        seen.append(("plain test under a marker", flags()))


def test_z_everything_seen_and_nothing_left():
    inside = (True, 3)
    assert seen == [
        ("sync setUp", inside), ("sync test", inside), ("sync tearDown", inside),
        ("asyncSetUp", inside), ("async test", inside), ("asyncTearDown", inside),
        ("plain test 1", inside), ("plain test 2", inside), ("plain test under a marker", (True, 3)),
    ]
    assert (backends.cudnn.deterministic, backends.cudnn.benchmark_limit) == (False, 10)
"""


def test_pytest_collects_decorated_test_cases_and_classes_and_nothing_leaks(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The class's decoration is nearer the test than a marker is: it wins where both set a flag."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_decorated=textwrap.dedent(SUITE))
    for variable, value in NO_PLUGIN_AUTOLOAD.items():
        monkeypatch.setenv(variable, value)
    result = pytester.runpytest_subprocess(*OUR_PLUGIN, "--backends-leaks=fail", "-W", "error")
    result.assert_outcomes(passed=6)


# -- a test that leaves a scope entered -------------------------------------------------------------


def test_a_test_that_leaves_a_scope_entered_is_that_tests_error_and_the_run_goes_on() -> None:
    seen: list[tuple[str, tuple[bool, int, bool]]] = []

    @backends.cudnn.flags(deterministic=True)
    class Case(unittest.TestCase):
        def test_a_leaves_one(self) -> None:
            backends.cudnn.flags(benchmark_limit=99).__enter__()

        def test_b_leaves_two_from_set_up(self) -> None:
            backends.cudnn.flags(benchmark=True).__enter__()

        def setUp(self) -> None:
            if self._testMethodName == "test_b_leaves_two_from_set_up":
                backends.flags({"cudnn.benchmark_limit": 5}).__enter__()

        def test_c_next(self) -> None:
            seen.append(("next", flags()))

        def test_d_assigns_inside_the_class_scope(self) -> None:
            backends.cudnn.benchmark = True  # the class scope's own entry: undone at its exit, no leak
            seen.append(("assigned", flags()))

        @unittest.skip("on purpose")
        def test_e_skipped(self) -> None:
            raise AssertionError("unreachable")

    result = run_suite(Case)
    assert len(result.skipped) == 1 and not result.failures  # (3.12+ leaves a skipped test out of testsRun)
    errors = {case._testMethodName: trace.strip().splitlines()[-1] for case, trace in result.errors}
    name = f"{Case.__module__}.{Case.__qualname__}"
    advice = "exit every scope a test enters (`with`, or self.enterContext(scope) in setUp)"
    assert errors == {
        "test_a_leaves_one": (
            f"RuntimeError: {name}.test_a_leaves_one left a scope entered: backends.cudnn.flags(benchmark_limit=99); "
            f"exited after the test, so the tests after it start without it: {advice}"
        ),
        "test_b_leaves_two_from_set_up": (
            f"RuntimeError: {name}.test_b_leaves_two_from_set_up left 2 scopes entered: "
            f"backends.flags({{'cudnn.benchmark_limit': 5}}), backends.cudnn.flags(benchmark=True); "
            f"exited after the test, so the tests after it start without it: {advice}"
        ),
    }
    assert seen == [("next", (True, 10, False)), ("assigned", (True, 10, True))]
    assert all(not case._cleanups for case in (Case("test_a_leaves_one"), Case("test_e_skipped")))
    assert_untouched()


def test_debug_of_a_test_that_leaves_a_scope_entered_raises_that_and_leaves_nothing_set() -> None:
    @backends.cudnn.flags(deterministic=True)
    class Case(unittest.TestCase):
        def test_leaves(self) -> None:
            backends.cudnn.flags(benchmark_limit=99).__enter__()

    with pytest.raises(RuntimeError, match=r"test_leaves left a scope entered: backends\.cudnn\.flags"):
        Case("test_leaves").debug()
    assert_untouched()


LEAKY = """
import unittest
import backends

@backends.cudnn.flags(deterministic=True)
class TestLeaky(unittest.TestCase):
    def test_a_leaves(self):
        backends.cudnn.flags(benchmark_limit=99).__enter__()

    def test_b_next(self):
        assert (backends.cudnn.deterministic, backends.cudnn.benchmark_limit) == (True, 10)

class TestUndecorated(unittest.TestCase):
    def test_c_after(self):
        assert (backends.cudnn.deterministic, backends.cudnn.benchmark_limit) == (False, 10)
"""


def test_python_m_unittest_reports_the_test_and_runs_the_rest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaky=LEAKY)
    result = pytester.run(sys.executable, "-m", "unittest", "-v", "test_leaky")
    assert result.ret == 1
    text = result.stderr.str()
    assert "test_a_leaves (test_leaky.TestLeaky.test_a_leaves) ... ERROR" in text
    assert "test_b_next (test_leaky.TestLeaky.test_b_next) ... ok" in text
    assert "test_c_after (test_leaky.TestUndecorated.test_c_after) ... ok" in text
    assert "Ran 3 tests" in text and "FAILED (errors=1)" in text
    assert "RuntimeError: test_leaky.TestLeaky.test_a_leaves left a scope entered" in text


def test_under_pytest_the_test_that_leaves_a_scope_entered_errors_and_nothing_leaks(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_leaky=LEAKY)
    for variable, value in NO_PLUGIN_AUTOLOAD.items():
        monkeypatch.setenv(variable, value)
    result = pytester.runpytest_subprocess(*OUR_PLUGIN, "--backends-leaks=fail", "-W", "error")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: test_leaky.TestLeaky.test_a_leaves left a scope entered*"])
