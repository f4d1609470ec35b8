"""How this suite runs: a plain ``pytest`` (the README's command) on every core, a run given paths
or ``-n 0`` in one process (``tests/conftest.py``'s ``pytest_cmdline_main``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("xdist", reason="pytest-xdist is not installed (it is in the test extra)")


def run_none(*args: str) -> str:
    """pytest in this repository with ``args``, selecting no test (so it collects, and exits 5)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BACKENDS_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-k", "no_test_is_named_this", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow  # collects the whole suite in each of two workers, then in one process
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: a plain pytest runs in one process")
def test_a_plain_pytest_runs_on_every_core_and_a_run_given_paths_or_n_0_in_one_process() -> None:
    assert f"created: {os.cpu_count()}/{os.cpu_count()} workers" in run_none()
    for args in (["tests/test_flags.py"], ["-n", "0"]):
        assert "workers" not in run_none(*args), args
