"""A pytest plugin of the suite's own: where CI installs the dependency groups and the extras
(``SCOPED_BACKENDS_DEV_TOOLS=required``), a test skipped because one of their tools is missing
fails instead. Such skips name the group or the extra in their reason, in one of two literal
forms: ``(pip install --group typing)`` or ``(pip install 'scoped-backends[ray]')``.

The one exception: Ray on a Python that Ray has no wheel for (``RAY_WHEEL_PYTHONS``), where
``import_ray()`` skips with a reason that names no extra."""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from types import ModuleType

import pytest

VARIABLE = "SCOPED_BACKENDS_DEV_TOOLS"
MARK = "(pip install --group "
EXTRA_MARK = "(pip install 'scoped-backends["
#: CPython versions that ray 2.60's wheels are built for (Linux, macOS and Windows alike).
RAY_WHEEL_PYTHONS = ((3, 11), (3, 12), (3, 13), (3, 14))


def ray_has_a_wheel_here() -> bool:
    """Whether the package index has a Ray wheel for this interpreter."""
    free_threaded = not getattr(sys, "_is_gil_enabled", lambda: True)()
    return sys.implementation.name == "cpython" and sys.version_info[:2] in RAY_WHEEL_PYTHONS and not free_threaded


def import_ray() -> ModuleType:
    """``ray``, or a skip: one that fails in CI (it names the extra) where Ray has a wheel, one
    that does not where it has none."""
    try:
        import ray
    except ImportError:
        if not ray_has_a_wheel_here():
            version = ".".join(map(str, sys.version_info[:2]))
            pytest.skip(f"Ray has no wheel for {sys.implementation.name} {version}", allow_module_level=True)
        pytest.skip("ray is not installed (pip install 'scoped-backends[ray]')", allow_module_level=True)
    return ray


def import_extra(module: str, extra: str) -> ModuleType:
    """``module``, or a skip naming the extra that installs it (a failure in CI)."""
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install 'scoped-backends[{extra}]')")


def _required(report: object) -> object:
    """``report``, failed instead of skipped where its skip names a dependency group and CI requires them."""
    if os.environ.get(VARIABLE, "") != "required" or not isinstance(report, pytest.TestReport | pytest.CollectReport):
        return report
    if report.skipped:
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if MARK in reason or EXTRA_MARK in reason:
            report.outcome = "failed"
            report.longrepr = f"{VARIABLE}=required, but this test was skipped: {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    return _required((yield))


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, object, object]:
    return _required((yield))  # a module-level skip
