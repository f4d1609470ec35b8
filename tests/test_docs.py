"""Every ```python block in the docs and the README runs, in order, one namespace per page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import backends

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_blocks_on_the_page_run(page: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for index, block in enumerate(BLOCK.findall(page.read_text(encoding="utf-8"))):
        code = compile(block, f"{page.name} block {index + 1}", "exec")
        try:
            exec(code, namespace)
        finally:
            backends.reset_defaults()


def test_the_flag_reference_page_is_generated_from_the_table() -> None:
    text = (ROOT / "docs" / "flags.md").read_text(encoding="utf-8")
    for flag in backends.FLAGS:
        assert f"`backends.{flag.name}" in text
        assert flag.env_var in text
