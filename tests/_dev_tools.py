"""A pytest plugin of the suite's own: where CI installs the dependency groups
(``SCOPED_BACKENDS_DEV_TOOLS=required``), a test skipped because one of their tools is missing
fails instead. Such skips name the group in their reason: ``(pip install --group typing)``."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

VARIABLE = "SCOPED_BACKENDS_DEV_TOOLS"
MARK = "(pip install --group "


def _required(report: object) -> object:
    """``report``, failed instead of skipped where its skip names a dependency group and CI requires them."""
    if os.environ.get(VARIABLE, "") != "required" or not isinstance(report, pytest.TestReport | pytest.CollectReport):
        return report
    if report.skipped:
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if MARK in reason:
            report.outcome = "failed"
            report.longrepr = f"{VARIABLE}=required, but this test was skipped: {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    return _required((yield))


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, object, object]:
    return _required((yield))  # a module-level skip
