"""The documentation site builds with ``mkdocs build --strict`` and has the API reference, which
documents every public name at its public path and shows no private one."""

from __future__ import annotations

import html as html_module
import importlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: A dotted path with a private part: ``backends._types.Cudnn``, ``backends._engine.scope.Scope``.
PRIVATE_PATH = re.compile(r"\bbackends(\.\w+)*\._\w+")

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="mkdocs / mkdocstrings[python] not installed (pip install --group docs)",
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


def _api_page(site: Path) -> str:
    return (site / "api" / "index.html").read_text(encoding="utf-8")


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", html_module.unescape(re.sub(r"<[^>]+>", " ", html))).strip()


def _anchors(page: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page))


def _namespaces() -> list[str]:
    """Every namespace's dotted name under ``backends``: cudnn, cudnn.conv, cuda, ..."""
    from backends import _public_namespaces
    from backends._engine.namespace import Namespace

    return [
        cls.prefix
        for cls in vars(_public_namespaces).values()
        if isinstance(cls, type) and issubclass(cls, Namespace) and cls is not Namespace
    ]


#: Public names of the package documented at their module's path, not at ``backends.<name>``:
#: the function ``backends.sync`` (its module ``backends.sync`` holds the sync layer) and the
#: integration modules ``backends.asyncio`` and ``backends.trio``.
AT_THEIR_MODULE = {
    "sync": "backends.sync.sync",
    "asyncio": "backends.integrations.asyncio",
    "trio": "backends.integrations.trio",
}


def test_the_api_reference_documents_every_public_name_of_the_package_at_its_public_path(site: Path) -> None:
    import backends

    anchors = _anchors(_api_page(site))
    public = {name for name in dir(backends) if not name.startswith("_")}
    assert set(backends.__all__) <= public
    missing = [name for name in sorted(public) if AT_THEIR_MODULE.get(name, f"backends.{name}") not in anchors]
    assert not missing, f"not in the API reference at their public path: {missing}"


def test_the_api_reference_documents_every_namespace_with_its_flags_and_functions(site: Path) -> None:
    import backends

    page = _api_page(site)
    anchors = _anchors(page)
    headings = {_text(h) for h in re.findall(r"<h[1-6][^>]*>(.*?)</h[1-6]>", page, re.S)}
    namespaces = _namespaces()
    assert {"cudnn", "cudnn.conv", "cuda", "cuda.matmul", "cuda.cufft_plan_cache", "algorithms", "mps", "mkl",
            "mkldnn", "openmp"} <= set(namespaces)
    for prefix in namespaces:
        path = f"backends.{prefix}"
        assert path in anchors, f"no section for {path}"
        assert any(h.startswith(f"{path} ") or h == path for h in headings), f"no heading reads {path}"
        namespace = importlib.import_module(path)  # the runtime object
        members = [name for name in dir(namespace) if not name.startswith("_")]
        assert members, path
        missing = [name for name in members if f"{path}.{name}" not in anchors]
        assert not missing, f"{path}: not in the API reference: {missing}"
    text = _text(page)
    for flag in backends.FLAGS:
        attribute = flag.name.rpartition(".")[2]
        if flag.name != "cuda.preferred_linalg_library":  # torch spells that one as a function
            assert f" {attribute} : {flag.type.__name__} " in text, f"{flag.name} is not documented with its type"
    assert " fp32_precision : " in text  # the views of cudnn.conv and cuda.matmul
    assert "enabled : bool | None = None" in text  # cudnn.flags(...) with its keywords
    assert " preferred_linalg_library ( backend : " in text


def test_the_api_reference_documents_every_public_name_of_the_integrations(site: Path) -> None:
    import backends

    anchors = _anchors(_api_page(site))
    for module_name in ("executors", "asyncio", "trio", "pytest_plugin"):
        module = importlib.import_module(f"backends.integrations.{module_name}")
        path = module.__name__
        assert path in anchors, path
        for name, value in vars(module).items():
            # Its own public names; not the pytest hooks (pytest calls them) nor a TypeVar
            if name.startswith(("_", "pytest_")) or getattr(value, "__module__", None) != path:
                continue
            if type(value).__name__ == "TypeVar":
                continue
            here = f"{path}.{name}" in anchors
            in_package = getattr(backends, name, None) is value and f"backends.{name}" in anchors
            assert here or in_package, f"{path}.{name} is not in the API reference"


@pytest.mark.parametrize(("module_name", "engine", "extra"), [("ray", "ray", "ray"), ("dask", "distributed", "dask")])
def test_the_api_reference_documents_every_public_name_of_the_ray_and_dask_integrations(
    site: Path, module_name: str, engine: str, extra: str
) -> None:
    from tests._dev_tools import import_extra, import_ray

    import_ray() if engine == "ray" else import_extra(engine, extra)
    module = importlib.import_module(f"backends.integrations.{module_name}")
    anchors = _anchors(_api_page(site))
    assert module.__name__ in anchors
    missing = [name for name in module.__all__ if f"{module.__name__}.{name}" not in anchors]
    assert not missing, f"not in the API reference: {missing}"


def test_the_api_reference_shows_no_private_path_in_headings_anchors_toc_or_search(site: Path) -> None:
    page = _api_page(site)
    shown = [
        *(a for a in _anchors(page) if a.startswith("backends")),
        *(_text(h) for h in re.findall(r"<h[1-6][^>]*>(.*?)</h[1-6]>", page, re.S)),
        *(_text(t) for t in re.findall(r'<a href="#[^"]*" class="md-nav__link">(.*?)</a>', page, re.S)),  # the toc
        *re.findall(r'<a href="#([^"]*)" class="md-nav__link">', page),
    ]
    assert len(shown) > 200, "the page's headings, anchors and toc were not found"
    private = sorted({item for item in shown if PRIVATE_PATH.search(item) or "._" in item})
    assert not private, f"private paths in the API reference: {private}"
    assert "backends._" not in _text(page), "a private path in the API reference's text"

    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    entries = [doc for doc in index["docs"] if doc["location"].startswith("api/")]
    assert len(entries) > 50
    private = [d["location"] for d in entries if PRIVATE_PATH.search(f"{d['location']} {d['title']} {d['text']}")]
    assert not private, f"private paths in the search index's API entries: {private}"


def test_search_finds_every_flag_by_its_name_and_its_dotted_name(site: Path) -> None:
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
    import backends

    page = (site / "flags" / "index.html").read_text(encoding="utf-8")
    for flag in backends.FLAGS:
        anchor = flag.name.replace(".", "-").replace("_", "-")
        assert page.count(f'id="{anchor}"') == 1, flag.name
    for code in re.findall(r"<code>([^<]*(?:<wbr>[^<]*)+)</code>", page):  # every wrappable identifier
        assert all(piece.endswith((".", "_")) for piece in code.split("<wbr>")[:-1]), code
