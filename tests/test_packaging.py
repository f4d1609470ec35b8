"""The distribution's metadata (pyproject.toml), its install lines, and a project that refers only
to itself: the contract is docs/contract.md, and no file points outside the repository."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests._helpers import PACKAGE

ROOT = Path(__file__).resolve().parents[1]
REPO = "https://github.com/backends-dev/backends"


@pytest.fixture(scope="module")
def project() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def test_the_distribution_is_scoped_backends_and_the_package_is_backends(project: dict) -> None:
    assert project["project"]["name"] == "scoped-backends"
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["backends", "backends.*"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "backends.__version__"}


def test_the_urls_point_at_the_repository(project: dict) -> None:
    assert project["project"]["urls"] == {
        "Documentation": "https://backends-dev.github.io/backends/",
        "Source": REPO,
        "Issues": f"{REPO}/issues",
        "Changelog": f"{REPO}/blob/main/CHANGELOG.md",
    }


def test_the_classifiers(project: dict) -> None:
    classifiers = project["project"]["classifiers"]
    for expected in (
        "Development Status :: 3 - Alpha",
        "Operating System :: OS Independent",
        "Programming Language :: Python :: 3 :: Only",
        "Typing :: Typed",
        *(f"Programming Language :: Python :: 3.{minor}" for minor in range(11, 16)),
    ):
        assert expected in classifiers
    assert project["project"]["requires-python"] == ">=3.11"
    # The license is an SPDX expression (PEP 639), which supersedes license classifiers.
    assert project["project"]["license"] == "MIT"
    assert not [c for c in classifiers if c.startswith("License ::")]


def test_the_build_backend_is_setuptools_with_setup_py_and_packs_no_compiled_module(project: dict) -> None:
    # setuptools 77 reads `license` as an SPDX expression (PEP 639); older ones refuse it
    assert project["build-system"] == {"requires": ["setuptools>=77"], "build-backend": "setuptools.build_meta"}
    assert (ROOT / "setup.py").is_file() and not (ROOT / "hatch_build.py").exists()
    assert "hatch" not in project["tool"]
    # an editable install's compiled modules and build note stay out of every wheel and sdist
    assert project["tool"]["setuptools"]["exclude-package-data"] == {"*": ["*.so", "*.pyd", "_build_note.txt"]}
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines()
    assert "global-exclude *.so *.pyd *.py[cod] _build_note.txt" in manifest


def tracked_text_files() -> list[Path]:
    """The files git tracks, or would track (untracked but not ignored), that read as UTF-8 text."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT, capture_output=True, check=True, text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    # a virtual environment made inside the checkout under a name .gitignore does not know
    # (`python -m venv .v`) is the user's, not the project's
    venvs = tuple(f"{config.parent.relative_to(ROOT).as_posix()}/" for config in ROOT.glob("*/pyvenv.cfg"))
    files = []
    for name in filter(None, listed.split("\0")):
        if name.startswith(venvs):
            continue
        path = ROOT / name
        try:
            files.append((path, path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return files


def install_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").rglob("*"))]


#: An install of the bare name (with or without -U, quotes or extras): the package index's
#: distribution of that name is another project.
WRONG_INSTALL = re.compile(r"""pip3?\s+install\s+(?:-\S+\s+)*["']?backends(?![\w-])""")
#: `backends[cuda12]` and the other extras, anywhere (`scoped-backends[cuda12]` is right).
WRONG_EXTRA = re.compile(r"(?<![\w.-])backends\[(cpu|cuda\d+|test|docs|server|bench)\]")


def test_no_install_line_names_the_other_projects_distribution() -> None:
    found = []
    for path in install_pages():
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if WRONG_INSTALL.search(line) or WRONG_EXTRA.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


def test_the_pages_install_scoped_backends_and_the_readme_keeps_its_set_up_commands() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert "pip install scoped-backends" in index
    assert "'scoped-backends[cuda12]'" in index
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "```bash\npip install . && python -m backends\npip install -e '.[test]' && pytest\n```" in readme
    assert "pip install scoped-backends" in readme


def test_the_readme_links_work_on_the_package_index_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert targets
    assert [t for t in targets if not t.startswith(("https://", "http://"))] == []


def test_the_package_finds_its_own_version() -> None:
    import backends

    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", backends.__version__)


def test_the_contract_page_is_in_the_project_and_in_the_nav() -> None:
    page = ROOT / "docs" / "contract.md"
    assert page.read_text(encoding="utf-8").startswith("# What you can rely on\n")
    assert "contract.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "docs/contract.md" in (PACKAGE / "__init__.py").read_text(encoding="utf-8")


def test_no_file_refers_to_a_contract_file_or_a_path_outside_the_project() -> None:
    outside = re.compile(r"CONTRACT\.md|\.\./shared|(?<![\w./-])shared/|/work/")
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path, text in tracked_text_files()
        if path.name != "test_packaging.py"
        for match in [outside.search(text)]
        if match
    ]
    assert found == []
