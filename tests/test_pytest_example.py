"""The pytest example (examples/pytest_example) passes when run as a user would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests._helpers import NO_PLUGIN_AUTOLOAD, OUR_PLUGIN

ROOT = Path(__file__).resolve().parent.parent


def test_pytest_example_passes() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKENDS_", "PYTEST_"))}
    env.update(NO_PLUGIN_AUTOLOAD)  # our plugin, and pytest-asyncio's (this repository's config sets it)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "examples/pytest_example", *OUR_PLUGIN, "-p", "asyncio", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout, done.stdout
