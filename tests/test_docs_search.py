"""The documentation site's search finds a flag's own section of the flag reference first for the
flag's name, and shows no private module path.

The ranking is the site's own: the site is built with ``mkdocs build``, and mkdocs-material's search
worker from the built site (``assets/javascripts/workers/search.*.min.js``, lunr.js inside it) runs
under Node.js, set up with the built ``search/search_index.json`` as the site's page sets it up, and
answers each query as it answers the search box: pages (with their sections) in the order shown,
each page's items best first.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import backends

ROOT = Path(__file__).resolve().parent.parent
#: A dotted path with a private part: ``backends._types.Cudnn``, ``backends._engine.scope``.
PRIVATE_PATH = re.compile(r"\bbackends(\.\w+)*\._\w+")
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.slow,  # a site build
    pytest.mark.skipif(
        any(importlib.util.find_spec(name) is None for name in ("mkdocs", "material", "mkdocstrings_handlers")),
        reason="mkdocs / mkdocs-material / mkdocstrings[python] not installed (pip install --group docs)",
    ),
    pytest.mark.skipif(NODE is None, reason="Node.js (node) is not on PATH: the ranking runs the site's search worker"),
]

#: Runs the built site's search worker: ``node search.js SITE QUERY...`` prints
#: ``{query: [[{location, title, text, score}, ...] per page, ...]}``. The worker is set up and
#: queried with the messages the site's page sends it (SETUP = 0 with the index and options,
#: QUERY = 2 with the search box's text); it answers each with one message.
WORKER_DRIVER = r"""
const fs = require("fs"), path = require("path"), vm = require("vm");
const [site, ...queries] = process.argv.slice(2);
const folder = path.join(site, "assets", "javascripts", "workers");
const bundles = fs.readdirSync(folder).filter(name => /^search\.\w+\.min\.js$/.test(name));
if (bundles.length !== 1) throw new Error(`one search worker expected in ${folder}, found ${bundles}`);
const index = JSON.parse(fs.readFileSync(path.join(site, "search", "search_index.json"), "utf8"));
let onMessage;
const answers = [];
const worker = { console, addEventListener: (type, fn) => { onMessage = fn }, postMessage: m => answers.shift()(m) };
worker.self = worker;
vm.createContext(worker);
vm.runInContext(fs.readFileSync(path.join(folder, bundles[0]), "utf8"), worker);
const send = data => new Promise(resolve => { answers.push(resolve); onMessage({ data }) });
(async () => {
  // search.suggest is not among mkdocs.yml's theme features: the page sends suggest: false
  await send({ type: 0, data: { config: index.config, docs: index.docs, options: { suggest: false } } });
  const results = {};
  for (const query of queries) {
    const answer = await send({ type: 2, data: query });
    results[query] = answer.data.items.map(page => page.map(
      ({ location, title, text, score }) => ({ location, title, text, score })));
  }
  process.stdout.write(JSON.stringify(results));
})();
"""


def _anchor(flag: backends.Flag) -> str:
    """The flag's section of the flag reference (scripts/flag_reference.py's anchor)."""
    return "flags/#" + flag.name.replace(".", "-").replace("_", "-")


#: The flag's name as a user types it: dotted, with ``backends.``, the attribute alone, and its
#: environment variable. An attribute that more than one flag has (``deterministic``) finds either.
NAMES: dict[str, set[str]] = {}
for _flag in backends.FLAGS:
    for _query in (_flag.name, f"backends.{_flag.name}", _flag.attribute, _flag.env_var):
        NAMES.setdefault(_query, set()).add(_anchor(_flag))
#: A bare word that is also a page's title: the site's search puts a page whose title matches
#: above every section, so the Benchmarks page comes first and the flag's section right after.
PAGE_TITLES = {"benchmark": "benchmarks/"}
#: Private names a user might meet in a traceback and search for.
PRIVATE_QUERIES = ["_types", "_engine", "_namespaces", "Cudnn", "_package", "ScopeCore"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--site-dir", str(site_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"mkdocs build failed:\n{result.stdout}\n{result.stderr}"
    return site_dir


@pytest.fixture(scope="module")
def results(site: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list[dict[str, object]]]]:
    """Every query of this file, answered by the site's search in one Node.js process."""
    driver = tmp_path_factory.mktemp("search") / "search.js"
    driver.write_text(WORKER_DRIVER, encoding="utf-8")
    queries = [*NAMES, *PRIVATE_QUERIES]
    done = subprocess.run(
        [str(NODE), str(driver), str(site), *queries], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and not done.stderr, f"the search worker failed:\n{done.stdout}\n{done.stderr}"
    answered: dict[str, list[list[dict[str, object]]]] = json.loads(done.stdout)
    assert set(answered) == set(queries)
    return answered


@pytest.mark.parametrize("query", sorted(set(NAMES) - set(PAGE_TITLES)))
def test_a_flags_name_finds_its_section_of_the_flag_reference_first(
    query: str, results: dict[str, list[list[dict[str, object]]]]
) -> None:
    pages = results[query]
    assert pages, f"no result for {query!r}"
    best = pages[0][0]  # the first page shown, and its best item
    assert best["location"] in NAMES[query], [[item["location"] for item in page[:3]] for page in pages[:4]]


@pytest.mark.parametrize("query", sorted(PAGE_TITLES))
def test_a_flags_attribute_that_is_a_page_title_finds_that_page_and_the_flags_section_first(
    query: str, results: dict[str, list[list[dict[str, object]]]]
) -> None:
    """``benchmark`` is both the Benchmarks page and ``cudnn.benchmark``: the first two pages shown
    are those two, in an order that the pages' words decide (docs/benchmarks.md is generated)."""
    pages = results[query]
    shown = [[item["location"] for item in page[:3]] for page in pages[:4]]
    first, second = (page[0]["location"] for page in pages[:2])
    page_first = first == PAGE_TITLES[query] and second in NAMES[query]
    section_first = first in NAMES[query] and second == PAGE_TITLES[query]
    assert page_first or section_first, shown


def test_no_result_shows_a_private_module_path(results: dict[str, list[list[dict[str, object]]]]) -> None:
    """Neither where a result leads nor its title is a private path, for any query here, and the
    API reference's results say none in their text either (prose elsewhere may name the
    package's own files, as the contributing guide does)."""
    private = []
    for query, pages in results.items():
        for item in (item for page in pages for item in page):
            location = str(item["location"])
            title, text = (re.sub(r"<[^>]+>", "", str(item[key])) for key in ("title", "text"))  # no <mark>s
            in_api_text = location.startswith("api/") and PRIVATE_PATH.search(text)
            if PRIVATE_PATH.search(f"{location} {title}") or in_api_text:
                private.append(f"{query!r}: {location} {title!r}")
    assert private == []
