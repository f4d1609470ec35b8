"""Every ```python block in the docs and the README runs as pasted: each as a script of its own,
in a fresh interpreter (as ``__main__``, so a ``spawn`` pool's guard is exercised too). A block
that imports Ray or Dask skips without them, naming the extra (which fails in CI)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import backends
from tests._helpers import NO_PLUGIN_AUTOLOAD, OUR_PLUGIN

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


TEST_FILE = re.compile(r"\A# file: (test_\w+\.py)\n")
#: An optional engine a block imports -> the extra that installs it.
EXTRAS = {"ray": "ray", "dask": "dask", "distributed": "dask"}
IMPORTS = re.compile(r"^(?:import|from) (\w+)", re.M)


def _skip_without_its_extras(block: str) -> None:
    for module in sorted(set(IMPORTS.findall(block)) & set(EXTRAS)):
        if module == "ray":
            from tests._dev_tools import import_ray

            import_ray()  # a skip where Ray has no wheel names no extra
        elif importlib.util.find_spec(module) is None:
            pytest.skip(f"this block needs {module} (pip install 'scoped-backends[{EXTRAS[module]}]')")


def _blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


SCRIPTS = [
    (page, index + 1, block)
    for page in PAGES
    for index, block in enumerate(_blocks(page))
    if not TEST_FILE.match(block)  # a pytest file: run by the test below
]


@pytest.mark.parametrize(("page", "number", "block"), SCRIPTS, ids=[f"{p.name}-{n}" for p, n, _ in SCRIPTS])
def test_each_python_block_runs_as_a_script_of_its_own(page: Path, number: int, block: str, tmp_path: Path) -> None:
    _skip_without_its_extras(block)
    script = tmp_path / f"{page.stem}_block_{number}.py"
    script.write_text(block, encoding="utf-8")
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("BACKENDS_", "CUPY_"))}
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path,
        env={**environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, f"{page.name} block {number} fails as a script:\n{done.stderr}"


def test_the_flag_reference_page_is_generated_from_the_table() -> None:
    text = (ROOT / "docs" / "flags.md").read_text(encoding="utf-8").replace("<wbr>", "")
    for flag in backends.FLAGS:
        assert f"<code>backends.{flag.name}" in text
        assert f"- **Environment variable:** `{flag.env_var}`" in text  # plain: the site's search finds it


TEST_FILES = [(page, block) for page in PAGES for block in _blocks(page) if TEST_FILE.match(block)]


@pytest.mark.parametrize(
    ("page", "block"), TEST_FILES, ids=[TEST_FILE.match(b)[1] for _, b in TEST_FILES]  # type: ignore[index]
)
def test_pytest_files_in_the_docs_pass_under_pytest(
    page: Path, block: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = TEST_FILE.match(block)[1]  # type: ignore[index]
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.path.joinpath(name).write_text(block, encoding="utf-8")
    for variable, value in NO_PLUGIN_AUTOLOAD.items():  # our plugin and pytest-asyncio's only
        monkeypatch.setenv(variable, value)
    result = pytester.runpytest_subprocess(*OUR_PLUGIN, "-p", "asyncio", "-W", "error", name)
    outcomes = result.parseoutcomes()
    assert result.ret == 0, result.stdout.str()
    assert outcomes.get("passed", 0) >= 1
