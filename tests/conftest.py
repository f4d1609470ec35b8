from __future__ import annotations

import contextvars
import functools
from collections.abc import Generator, Iterator

import pytest

import backends

pytest_plugins = ["pytester", "tests._dev_tools"]

from tests.standin_fixture import standin_cupy  # noqa: E402, F401  (the stand-in CuPy fixture)


@pytest.fixture(autouse=True)
def _restore_global_flags() -> Iterator[None]:
    """Every test starts and ends with the built-in defaults and global flags enabled."""
    yield
    backends.reset_defaults()
    backends.enable_global_flags()


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    """Run each test body in a copy of the current context, so a scope that a failing
    test leaves entered cannot leak into the tests after it (process defaults are
    reset by the fixture above)."""
    test = pyfuncitem.obj
    context = contextvars.copy_context()
    # A real function (not a partial): pytest and Hypothesis read its code when reporting.
    pyfuncitem.obj = functools.wraps(test)(lambda *args, **kwargs: context.run(test, *args, **kwargs))
    try:
        return (yield)
    finally:
        pyfuncitem.obj = test

