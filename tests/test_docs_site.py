"""The documentation site builds with ``mkdocs build --strict`` and has the API reference."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="mkdocs / mkdocstrings[python] not installed (pip install -e '.[docs]')",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return site_dir


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    assert (site / "index.html").is_file()
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.stem != "index":
            assert (site / page.stem / "index.html").is_file(), page.name


@pytest.mark.parametrize(
    "name",
    [
        "backends.flags",
        "backends.FlagValues",
        "backends.Scope",
        "backends.Snapshot",
        "backends.snapshot",
        "backends.bind",
        "backends.describe",
        "backends.set_defaults",
        "backends.reset_defaults",
        "backends.deterministic",
        "backends.disable_global_flags",
        "backends.enable_global_flags",
        "backends.flags_frozen",
        "backends.sync.sync",
        "backends.integrations.executors.ThreadPoolExecutor",
        "backends.integrations.executors.Thread",
        "backends.integrations.executors.run_in_executor",
        "backends.integrations.asyncio.install",
        "backends.integrations.asyncio.uninstall",
        "backends.integrations.asyncio.synced",
        "backends.integrations.pytest_plugin.BackendsFlags",
    ],
)
def test_the_api_reference_documents(site: Path, name: str) -> None:
    html = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert f'id="{name}"' in html, f"{name} missing from the API reference"


def test_the_api_reference_documents_the_namespaces_as_users_see_them(site: Path) -> None:
    import html as html_module
    import re

    import backends

    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    text = re.sub(r"\s+", " ", html_module.unescape(re.sub(r"<[^>]+>", " ", page)))
    for heading in ("backends.cudnn", "backends.cudnn.conv", "backends.cuda", "backends.cuda.matmul",
                    "backends.cuda.cufft_plan_cache"):
        assert f" {heading} ¶" in text, f"no section for {heading}"
    for flag in backends.FLAGS:
        attribute = flag.name.rpartition(".")[2]
        if flag.name != "cuda.preferred_linalg_library":  # torch spells that one as a function
            assert f" {attribute} : {flag.type.__name__} " in text, f"{flag.name} is not documented with its type"
    assert " fp32_precision : " in text  # the views of cudnn.conv and cuda.matmul
    assert "enabled : bool | None = None" in text  # cudnn.flags(...) with its keywords
    assert "backends._namespaces" not in text and "backends._types" not in text  # no private paths shown


def test_search_finds_every_flag_by_its_name_and_its_dotted_name(site: Path) -> None:
    import json
    import re

    import backends

    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    separator = re.compile(index["config"]["separator"])
    tokens: set[str] = set()
    for doc in index["docs"]:
        text = re.sub(r"<[^>]+>", " ", f"{doc['title']} {doc['text']}").lower()
        tokens.update(filter(None, separator.split(text)))
    for flag in backends.FLAGS:
        # What a reader types: the attribute name, or the dotted name; the search splits the
        # query with the same separator, so every piece must be an indexed token.
        for query in (flag.name.rpartition(".")[2], flag.name, f"backends.{flag.name}"):
            pieces = [piece for piece in separator.split(query.lower()) if piece]
            assert pieces and set(pieces) <= tokens, (query, set(pieces) - tokens)
    assert separator.split("cudnn.benchmark_limit") == ["cudnn", "benchmark", "limit"]


def test_the_flag_reference_has_one_anchor_per_flag_and_breaks_identifiers_only_at_dots_and_underscores(
    site: Path,
) -> None:
    import re

    import backends

    page = (site / "flags" / "index.html").read_text(encoding="utf-8")
    for flag in backends.FLAGS:
        anchor = flag.name.replace(".", "-").replace("_", "-")
        assert page.count(f'id="{anchor}"') == 1, flag.name
    for code in re.findall(r"<code>([^<]*(?:<wbr>[^<]*)+)</code>", page):  # every wrappable identifier
        assert all(piece.endswith((".", "_")) for piece in code.split("<wbr>")[:-1]), code
