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


def test_skips_are_summed_up_by_cause_at_the_end_and_listed_one_by_one_only_with_rs() -> None:
    """A plain run ends with one line per cause of its skips (a missing extra or tool, CuPy), not
    one per test; ``-rs`` lists each test as pytest does."""
    from tests.conftest import _skip_cause

    assert _skip_cause("ray is not installed (pip install 'scoped-backends[ray]')") == (
        "the extra is not installed: pip install 'scoped-backends[ray]'"
    )
    assert _skip_cause("Skipped: mypy is missing (pip install --group typing)").endswith("pip install --group typing")
    assert _skip_cause("could not import 'cupy': No module named 'cupy'").startswith("CuPy is not installed: ")
    assert _skip_cause("needs a debug CPython (python3.X-dbg)") == "needs a debug CPython (python3.X-dbg)"
    code = (
        "import pytest\n"
        "def test_a(): pytest.skip('needs a debug CPython (python3.X-dbg)')\n"
        "def test_b(): pytest.skip('ray is not installed (pip install \\'scoped-backends[ray]\\')')\n"
        "def test_c(): pytest.skip('ray is not installed (pip install \\'scoped-backends[ray]\\')')\n"
    )
    # SCOPED_BACKENDS_DEV_TOOLS=required (CI) would fail the skips of a missing extra
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BACKENDS_", "SCOPED_BACKENDS_"))}
    test = ROOT / "tests" / f"test_zz_skip_summary_probe_{os.getpid()}.py"  # under tests/: its conftest.py applies
    test.write_text(code, encoding="utf-8")
    try:
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", str(test)]
        runs = [
            subprocess.run([*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300).stdout
            for args in ([], ["-rs"])
        ]
    finally:
        test.unlink()
    plain, listed = (out.splitlines() for out in runs)
    assert "3 skipped, by cause (pytest -rs lists each test)" in "".join(plain)
    assert "    2  the extra is not installed: pip install 'scoped-backends[ray]'" in plain
    assert "    1  needs a debug CPython (python3.X-dbg)" in plain
    assert not any(line.startswith("SKIPPED") for line in plain)
    assert sum(line.startswith("SKIPPED") for line in listed) == 3 and "by cause" not in "".join(listed)
