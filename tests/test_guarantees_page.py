"""docs/guarantees.md names, for each promise, the tests that prove it: every one of them exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guarantees.md"


def named_tests() -> list[tuple[str, str]]:
    """(test file, test name) for every ``tests/x.py::name`` on the page, and for every
    ``::name`` that follows one in the same cell (it names a test of the same file)."""
    found = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        for cell in line.split("|"):
            current = None
            for path, name in re.findall(r"`(tests/[\w/]+\.py)?::(\w+)", cell):
                current = path or current
                if current is not None:
                    found.append((current, name))
    return found


def test_every_test_the_guarantees_page_names_exists() -> None:
    named = named_tests()
    assert len(named) > 20
    missing = [
        f"{path}::{name}"
        for path, name in named
        if not (ROOT / path).is_file()
        or not re.search(rf"^(async )?def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M)
    ]
    assert missing == []
