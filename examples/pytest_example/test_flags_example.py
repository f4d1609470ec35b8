"""Tests using backends' pytest plugin: the marker and the ``backends_flags`` fixture.

    pytest examples/pytest_example
"""

from __future__ import annotations

import pytest

import backends


@pytest.mark.backends({"cudnn.deterministic": True, "cuda.matmul.allow_tf32": False})
def test_marker_scopes_flags_to_this_test() -> None:
    assert backends.cudnn.deterministic is True
    assert backends.cuda.matmul.allow_tf32 is False


@pytest.fixture
def tf32_math(backends_flags: object) -> None:
    backends_flags.set("cuda.matmul.allow_tf32", True)  # type: ignore[attr-defined]


def test_fixture_sets_flags_for_the_rest_of_the_test(tf32_math: None, backends_flags: object) -> None:
    assert backends.cuda.matmul.allow_tf32 is True
    backends_flags.set({"cudnn.benchmark": True})  # type: ignore[attr-defined]
    assert backends.cudnn.benchmark is True


def test_the_next_test_starts_clean() -> None:
    assert backends.cudnn.deterministic is False
    assert backends.cudnn.benchmark is False
    assert backends.cuda.matmul.allow_tf32 is False
