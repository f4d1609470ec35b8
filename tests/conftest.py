from __future__ import annotations

import collections
import contextvars
import functools
import os
import re
from collections.abc import Generator, Iterator
from typing import Any

import pytest

import backends

pytest_plugins = ["pytester", "tests._dev_tools"]

from tests.standin_fixture import standin_cupy  # noqa: E402, F401  (the stand-in CuPy fixture)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own reads -n
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A plain ``pytest`` (no paths: the README's command) runs on every core, as
    ``pytest -n auto --dist worksteal`` (pytest-xdist, in the test extra; work stealing evens out
    the long tests). Given paths, ``-n`` (``-n 0``: one process), ``--pdb``, on one core or without
    pytest-xdist, it runs in this process, as pytest does."""
    if (
        config.args_source is pytest.Config.ArgsSource.TESTPATHS
        and config.pluginmanager.has_plugin("xdist")
        and config.getoption("numprocesses", None) is None
        and not config.getoption("usepdb")
        and not hasattr(config, "workerinput")  # an xdist worker
        and (os.cpu_count() or 1) > 1
    ):
        config.option.numprocesses = "auto"
        config.option.dist = "worksteal"


#: Skip reasons with one cause, by what they say: (pattern, the cause in the summary).
_SKIP_CAUSES = [
    (re.compile(r"\(pip install '(scoped-backends\[\w+\])'\)"), "the extra is not installed: pip install '{0}'"),
    (re.compile(r"\(pip install --group (\w+)\)"), "the development tools are not installed: pip install --group {0}"),
    (re.compile(r"No module named 'cupy'|CuPy is not installed"),
     "CuPy is not installed: the GPU tests (tests/gpu/, scripts/gpu_check.sh) and the real-wheel tests (.ci/run)"),
]


def _skip_cause(reason: str) -> str:
    for pattern, cause in _SKIP_CAUSES:
        found = pattern.search(reason)
        if found is not None:
            return cause.format(*found.groups())
    return reason


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The skipped tests, one line per cause with how many (a missing extra or tool, CuPy, ...),
    instead of one per test and line: pyproject.toml's -r leaves skips out; -rs lists each."""
    if any(char in config.option.reportchars for char in "saA"):
        return
    causes: collections.Counter[str] = collections.Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        causes[_skip_cause(reason.removeprefix("Skipped: "))] += 1
    if causes:
        terminalreporter.write_sep("=", f"{sum(causes.values())} skipped, by cause (pytest -rs lists each test)")
        for cause, count in sorted(causes.items(), key=lambda item: (-item[1], item[0])):
            terminalreporter.write_line(f"{count:5d}  {cause}")


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



@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """One local Ray cluster (two CPUs, no dashboard) for every Ray test of this session (of this
    pytest-xdist worker), shut down at its end; ``ray``, or a skip (tests/_dev_tools.py)."""
    from tests._dev_tools import import_ray

    ray = import_ray()
    # The workers inherit this process's environment: BACKENDS_PURE_PYTHON picks their engine too.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    """A real one-worker ``distributed.LocalCluster`` (a worker process, one thread, reused
    for every task), started and stopped for each module that uses it"""
    distributed = pytest.importorskip(
        "distributed", reason="dask.distributed is not installed (pip install 'scoped-backends[dask]')"
    )
    # The scheduler's HTTP server on a free port: its default, 8787, falls back to another port with
    # a warning (and an unclosed socket) when another cluster on this machine holds it.
    with (
        distributed.LocalCluster(
            n_workers=1, processes=True, threads_per_worker=1, dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
