"""Tests using backends' pytest plugin: the marker and the ``backends_flags`` fixture, typed.

    pytest examples/pytest_example
"""

from __future__ import annotations

import pytest

import backends
from backends.integrations.pytest_plugin import BackendsFlags


@pytest.mark.backends({"cudnn.deterministic": True, "cuda.matmul.allow_tf32": False})
def test_marker_scopes_flags_to_this_test() -> None:
    assert backends.cudnn.deterministic is True
    assert backends.cuda.matmul.allow_tf32 is False


@pytest.fixture
def tf32_math(backends_flags: BackendsFlags) -> None:
    backends_flags.cuda.matmul.allow_tf32 = True  # checked by mypy and pyright like backends.cuda.matmul


def test_fixture_sets_flags_for_the_rest_of_the_test(tf32_math: None, backends_flags: BackendsFlags) -> None:
    assert backends.cuda.matmul.allow_tf32 is True
    backends_flags.set({"cudnn.benchmark": True})
    assert backends.cudnn.benchmark is True


def test_the_next_test_starts_clean() -> None:
    assert backends.cudnn.deterministic is False
    assert backends.cudnn.benchmark is False
    assert backends.cuda.matmul.allow_tf32 is False
