"""GPU tests: real CuPy on a real device. Skipped, with the reason, everywhere else.

Run them with ``bash scripts/gpu_check.sh`` (it installs what the machine lacks from a folder of
wheels, passes ``-s`` so that the figures each test prints are shown, and gathers them into a
JSON file). A test asserts behaviour (error ratios, bitwise equality, math modes read back from
cuBLAS, values against a float64 reference), never a timing. ``scripts/gpu_check.sh --dry-run``
collects and skips every test here before its first CUDA call (tests/gpu/harness.py).

Warnings: the project's ``filterwarnings = error`` would turn any warning CuPy, cuBLAS's
or cuDNN's Python packages emit into a failure that says nothing about the sync layer, so
here warnings are shown in the summary instead (``default``).
"""

from __future__ import annotations

import pytest

import backends
from tests.gpu.harness import DRY_RUN, DRY_RUN_REASON


def _no_gpu_reason() -> str | None:
    if DRY_RUN:  # before backends.cuda.is_available(), which asks the CUDA runtime
        return DRY_RUN_REASON
    if not backends.cuda.is_available():  # CuPy does not import, or cupy.cuda.is_available() is False
        return (
            "needs CuPy and a CUDA device (backends.cuda.is_available() is False); "
            "run scripts/gpu_check.sh on a GPU machine"
        )
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "tests/gpu/" in item.nodeid.replace("\\", "/")]
    if not gpu_items:
        return
    reason = _no_gpu_reason()
    for item in gpu_items:
        item.add_marker(pytest.mark.filterwarnings("default"))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
