"""What ``scripts/gpu_check.sh`` tells the GPU tests, and how they report their figures.

The script sets these variables (a hand run of ``pytest tests/gpu`` may set them too):

- ``GPU_CHECK_DRY_RUN=1`` (``--dry-run``): every test is skipped before its first CUDA call,
  saying so; the collection, the options and the report are what is checked.
- ``GPU_CHECK_FRONTEND=<version>``: the cuDNN frontend release the script installed from its
  wheel folder; the frontend test then fails, never skips, when it cannot use that release.
- ``GPU_CHECK_CUTENSOR=<where>``: cuTENSOR was installed or found; the cuTENSOR test then fails,
  never skips, when CuPy cannot load it. Unset, that test skips with ``GPU_CHECK_CUTENSOR_MISSING``
  (the script's reason) or a reason of its own.
- ``GPU_CHECK_FIGURES=<file>`` and ``GPU_CHECK_RUN=<name>``: where ``say`` records the figures,
  and which of the script's runs this is (main, frontend-1.23.0, pure).

``say(text, **figures)`` prints ``[gpu] text`` (the script passes ``-s``, so it shows in the log)
and appends one JSON line to ``GPU_CHECK_FIGURES``: the run, the test (pytest's
``PYTEST_CURRENT_TEST``), the text and the figures (numbers, booleans, short strings), which the
script gathers into its JSON. A test file added to ``tests/gpu/`` (a torch check, say) reports
through this too; the script runs every ``test_*.py`` there.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

DRY_RUN = os.environ.get("GPU_CHECK_DRY_RUN", "") == "1"
DRY_RUN_REASON = (
    "dry run (scripts/gpu_check.sh --dry-run): stopped before the first CUDA call; "
    "run the script without --dry-run on a GPU machine"
)
FRONTEND_EXPECTED = os.environ.get("GPU_CHECK_FRONTEND", "")
CUTENSOR_EXPECTED = os.environ.get("GPU_CHECK_CUTENSOR", "")
CUTENSOR_MISSING = os.environ.get("GPU_CHECK_CUTENSOR_MISSING", "")


def _plain(value: Any) -> Any:
    """``value`` as JSON can hold it: NumPy/CuPy scalars become Python numbers, a NaN or an
    infinity its text (JSON has neither), anything else unknown its ``str``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if not isinstance(value, (int, float)):
        try:  # a NumPy/CuPy scalar or 0-d array
            value = value.item()
        except (AttributeError, ValueError, TypeError):
            return str(value)
        if not isinstance(value, (bool, int, float)):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def say(text: str, **figures: Any) -> None:
    """Print ``[gpu] text`` and record ``figures`` (see the module's docstring)."""
    print(f"[gpu] {text}", flush=True)
    path = os.environ.get("GPU_CHECK_FIGURES")
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    line = {"run": os.environ.get("GPU_CHECK_RUN", ""), "test": test, "text": text, "figures": _plain(figures)}
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(line, sort_keys=True) + "\n")
