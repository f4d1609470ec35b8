"""Every ```python block in the docs and the README runs, in order, one namespace per page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import backends

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


TEST_FILE = re.compile(r"\A# file: (test_\w+\.py)\n")


def _blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_blocks_on_the_page_run(page: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for index, block in enumerate(_blocks(page)):
        if TEST_FILE.match(block):
            continue  # a pytest file: run by the test below
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


TEST_FILES = [(page, block) for page in PAGES for block in _blocks(page) if TEST_FILE.match(block)]


@pytest.mark.parametrize(
    ("page", "block"), TEST_FILES, ids=[TEST_FILE.match(b)[1] for _, b in TEST_FILES]  # type: ignore[index]
)
def test_pytest_files_in_the_docs_pass_under_pytest(page: Path, block: str, pytester: pytest.Pytester) -> None:
    name = TEST_FILE.match(block)[1]  # type: ignore[index]
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.path.joinpath(name).write_text(block, encoding="utf-8")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error", name)
    outcomes = result.parseoutcomes()
    assert result.ret == 0, result.stdout.str()
    assert outcomes.get("passed", 0) >= 1
