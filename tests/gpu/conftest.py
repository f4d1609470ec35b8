"""GPU tests: real CuPy on a real device. Skipped, with the reason, everywhere else."""

from __future__ import annotations

import pytest

import backends


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if backends.cuda.is_available():
        return
    reason = (
        "needs CuPy and a CUDA device (backends.cuda.is_available() is False); "
        "run scripts/gpu_check.sh on a GPU machine"
    )
    for item in items:
        if "tests/gpu/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.skip(reason=reason))
