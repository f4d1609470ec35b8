"""Release engineering: the CI workflows test what the project supports, cibuildwheel builds and tests
the wheels it should, scripts/test_wheel.py refuses what is not an installed wheel, and the changelog
is in Keep a Changelog's form with its newest release the package's version."""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

import pytest

import backends

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
REPO = "https://github.com/backends-dev/backends"


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


@pytest.fixture(scope="module")
def supported(project: dict[str, Any]) -> list[str]:
    """The Python versions the classifiers name, in order: ["3.11", ..., "3.15"]."""
    prefix = "Programming Language :: Python :: "
    versions = [
        c[len(prefix) :] for c in project["project"]["classifiers"] if re.fullmatch(r"3\.\d+", c[len(prefix) :])
    ]
    assert versions, "no Python version classifier"
    return versions


def source(path: Path) -> Path:
    """``path``; a test that reads it skips where it is left out of a copy of the tests (an sdist
    without the CI files), but never in a git checkout, where it must be."""
    if not path.exists() and not (ROOT / ".git").exists():
        pytest.skip(f"{path.relative_to(ROOT)} is not in this copy of the project (not a git checkout)")
    return path


def load_workflow(name: str) -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed (pip install --group release)")
    workflow = yaml.safe_load(source(WORKFLOWS / name).read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as the boolean True
    workflow["on"] = workflow.pop(True, workflow.get("on"))
    return workflow


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job.get("steps", []))


def commands(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in steps(job))


def uses(job: dict[str, Any]) -> list[str]:
    return [step["uses"] for step in steps(job) if "uses" in step]


def action(job: dict[str, Any], name: str) -> dict[str, Any]:
    """The one step of ``job`` that uses the action ``name`` (``actions/setup-python``)."""
    [step] = [step for step in steps(job) if step.get("uses", "").split("@")[0] == name]
    return step


WORKFLOW_FILES = ["tests.yml", "wheels.yml", "docs.yml"]
#: an action pinned to a commit, with the release it is in a comment: `owner/repo@<40 hex> # v1.2.3`
PINNED = re.compile(r"^\s*-?\s*uses:\s*([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # v\d+\.\d+\.\d+$")


def test_every_action_is_pinned_to_a_commit_with_its_release_named() -> None:
    for name in WORKFLOW_FILES:
        lines = [line for line in source(WORKFLOWS / name).read_text(encoding="utf-8").splitlines() if "uses:" in line]
        assert lines, name
        unpinned = [line.strip() for line in lines if not PINNED.match(line)]
        assert unpinned == [], name
        # one commit per action across the workflows, as Dependabot moves them together
    pins: dict[str, set[str]] = {}
    for name in WORKFLOW_FILES:
        for line in source(WORKFLOWS / name).read_text(encoding="utf-8").splitlines():
            if match := PINNED.match(line):
                pins.setdefault(match[1], set()).add(match[2])
    assert {action: commits for action, commits in pins.items() if len(commits) > 1} == {}


def test_dependabot_keeps_the_actions_and_the_python_requirements_current() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed (pip install --group release)")
    config = yaml.safe_load(source(ROOT / ".github" / "dependabot.yml").read_text(encoding="utf-8"))
    assert config["version"] == 2
    updates = {update["package-ecosystem"]: update for update in config["updates"]}
    assert set(updates) == {"github-actions", "pip"}
    for update in updates.values():
        assert update["directory"] == "/"
        assert update["groups"], update  # one pull request per ecosystem
        assert update["cooldown"]["default-days"] >= 7


# -- .github/workflows/tests.yml ------------------------------------------------------------------
def test_the_test_matrix_is_every_supported_python_on_every_os_on_both_engines(supported: list[str]) -> None:
    job = load_workflow("tests.yml")["jobs"]["tests"]
    matrix = job["strategy"]["matrix"]
    assert matrix["python"] == supported
    assert sorted(matrix["os"]) == ["macos-latest", "ubuntu-latest", "windows-latest"]
    assert matrix["engine"] == ["compiled", "pure"]
    # The engine is chosen by BACKENDS_PURE_PYTHON, set from the matrix, and checked before pytest runs.
    assert job["env"]["BACKENDS_PURE_PYTHON"] == "${{ matrix.engine == 'pure' && '1' || '0' }}"
    run = commands(job)
    assert "e.ACCELERATED == ('${{ matrix.engine }}' == 'compiled')" in run
    assert run.index("ACCELERATED") < run.index("python -m pytest")
    setup = action(job, "actions/setup-python")
    assert setup["with"]["python-version"] == "${{ matrix.python }}"
    # a version's release candidate until its first release is on the runners' list
    assert setup["with"]["allow-prereleases"] is True
    # Ray has no wheel for 3.15: the extras there leave it out, and its tests skip saying so
    install = next(step["run"] for step in steps(job) if "pip install -e" in step.get("run", ""))
    assert 'if [ "${{ matrix.python }}" = "3.15" ]; then extras=test,dask; fi' in install


def test_free_threaded_cpython_runs_the_suite_with_the_gil_off() -> None:
    job = load_workflow("tests.yml")["jobs"]["free-threaded"]
    assert action(job, "actions/setup-python")["with"]["python-version"] == "3.14t"
    run = commands(job)
    assert 'pip install -e ".[test]"' in run
    # backends (and its asyncio integration) imported, the accelerator is not loaded and the GIL is off
    assert "not e.ACCELERATED and not sys._is_gil_enabled()" in run
    suite = 'python -m pytest -n auto -p no:cacheprovider -m "slow or not slow"'
    assert run.index("_is_gil_enabled") < run.index(suite)


def test_the_lint_job_runs_every_check() -> None:
    run = commands(load_workflow("tests.yml")["jobs"]["lint"])
    for check in (
        "ruff check .",
        "mypy --strict src/backends",
        "python scripts/flag_reference.py --check",
        "python scripts/typing_stubs.py --check",
        # stubtest as .ci/run runs it: its own mypy config (the stubs read as this Python), the allowlist
        "python -m mypy.stubtest --mypy-config-file tests/typing/stubtest.ini",
        "--allowlist stubtest-allowlist.txt backends",
    ):
        assert check in run, check


def test_every_dependency_group_a_workflow_installs_exists(project: dict[str, Any]) -> None:
    groups = set(project["dependency-groups"])
    for name in WORKFLOW_FILES:
        text = source(WORKFLOWS / name).read_text(encoding="utf-8")
        wanted = set(re.findall(r"--group (\S+)", text))
        assert wanted, name
        assert wanted <= groups, (name, wanted - groups)


# -- .ci/run --------------------------------------------------------------------------------------
def ci_job(name: str) -> str:
    """One of .ci/run's jobs: from ``if [[ $jobs == *" NAME "* ]]`` to the next ``# --`` heading."""
    text = source(ROOT / ".ci" / "run").read_text(encoding="utf-8")
    start = text.index(f'if [[ $jobs == *" {name} "* ]]; then\n')
    return text[start : text.index("\n# -- ", start)]


def test_ci_runs_every_supported_python_and_3_14_and_3_15_in_the_sid_chroot_on_both_engines(
    supported: list[str],
) -> None:
    pythons = ci_job("pythons")
    loops = re.findall(r"^for version in ([\d. ]+); do$", pythons, re.MULTILINE)
    assert loops == ["3.12 3.13", "3.14 3.15"]
    # the main job's python3 is the lowest supported version (the floors job checks it is)
    assert ["3.11", *(v for loop in loops for v in loop.split())] == supported
    chroot = pythons[pythons.index("for version in 3.14 3.15"):]
    assert 'scripts/sid_chroot.sh run . "' in chroot
    assert "import sys, test.test_asyncio, backends._engine as e" in chroot  # CPython's asyncio tests are there
    assert "SCOPED_BACKENDS_DEV_TOOLS=required" in chroot
    suite = "/tmp/venv/bin/python -m pytest -q -n 2 -p no:cacheprovider -m 'slow or not slow'"
    assert f"\n{suite}\nBACKENDS_PURE_PYTHON=1 {suite}" in chroot
    debug = ci_job("debug")
    assert "for version in 3.14 3.15; do" in debug
    assert 'scripts/sid_chroot.sh run . "$(debug_stage "python$version-dbg" /tmp/venv-dbg)"' in debug


def test_ci_builds_twice_and_tests_the_declared_floors() -> None:
    release = ci_job("release")
    assert 'scripts/reproducible_build.sh "$release/dist"' in release
    assert 'BACKENDS_BUILD_PURE_PYTHON=1 scripts/reproducible_build.sh "$release/pure" --wheel' in release
    floors = ci_job("floors")
    assert "--resolution lowest-direct" in floors
    assert "-e '.[test,cpu,server,ray,dask]'" in floors
    # the development tools are not installed there: their tests skip, which CI must not turn into failures
    suite = '.venv-ci-floors/bin/python -m pytest -q -n 2 -p no:cacheprovider -m "slow or not slow"'
    assert f"env -u SCOPED_BACKENDS_DEV_TOOLS {suite}" in floors


# -- .github/workflows/wheels.yml and [tool.cibuildwheel] -------------------------------------------
def test_cibuildwheel_builds_every_supported_cpython(project: dict[str, Any], supported: list[str]) -> None:
    config = project["tool"]["cibuildwheel"]
    # `cp314-*` does not match the free-threaded `cp314t-*`: the pure wheel serves those
    assert config["build"] == [f"cp{v.replace('.', '')}-*" for v in supported]
    assert "enable" not in config
    # the commit's time reaches the Linux build containers, for reproducible wheels
    assert config["environment-pass"] == ["SOURCE_DATE_EPOCH"]


def test_the_wheel_job_runs_cibuildwheel_natively_for_every_configured_arch(project: dict[str, Any]) -> None:
    job = load_workflow("wheels.yml")["jobs"]["wheels"]
    assert [a for a in uses(job) if a.startswith("pypa/cibuildwheel@")], uses(job)
    # cibuildwheel runs with SOURCE_DATE_EPOCH set to the commit's time
    order = [step.get("run", step.get("uses", "").split("@")[0]) for step in steps(job)]
    epoch = 'echo "SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)" >> "$GITHUB_ENV"'
    assert order.index(epoch) < order.index("pypa/cibuildwheel")
    runners = job["strategy"]["matrix"]["include"]
    built = {(r["os"].split("-")[0], r["archs"]) for r in runners}
    config = project["tool"]["cibuildwheel"]
    wanted = {
        (platform_os, arch)
        for platform_os, platform in (("ubuntu", "linux"), ("macos", "macos"), ("windows", "windows"))
        for arch in config[platform]["archs"]
    }
    assert built == wanted
    cibuildwheel = next(step for step in steps(job) if step.get("uses", "").startswith("pypa/cibuildwheel@"))
    assert cibuildwheel["env"]["CIBW_ARCHS"] == "${{ matrix.archs }}"
    assert "twine check --strict wheelhouse/*.whl" in commands(job)


def test_each_wheel_is_tested_on_both_engines_from_a_copy_of_the_tests(project: dict[str, Any]) -> None:
    config = project["tool"]["cibuildwheel"]
    assert config["test-command"] == "python scripts/test_wheel.py"
    assert config["test-extras"] == ["test"]
    sources = config["test-sources"]
    assert "tests" in sources and "scripts" in sources
    # The package's own source would be imported instead of the wheel.
    assert not [s for s in sources if s == "backends" or s.startswith("backends/")]
    for path in sources:  # cibuildwheel copies them from the checkout
        assert source(ROOT / path).exists(), path


def test_the_sdist_and_the_pure_wheel_are_built_checked_and_tested() -> None:
    jobs = load_workflow("wheels.yml")["jobs"]
    build = jobs["sdist-and-pure-wheel"]
    run = commands(build)
    # each built twice and compared: byte-identical
    assert "scripts/reproducible_build.sh build-check" in run
    pure = next(step for step in steps(build) if step.get("env", {}).get("BACKENDS_BUILD_PURE_PYTHON") == "1")
    assert pure["run"] == "scripts/reproducible_build.sh pure --wheel"
    assert "twine check --strict dist/*" in run
    test = jobs["test-pure-wheel"]
    assert test["needs"] == "sdist-and-pure-wheel"
    assert "scripts/test_wheel.py" in commands(test)


def test_publishing_is_trusted_and_only_on_a_version_tag() -> None:
    workflow = load_workflow("wheels.yml")
    assert workflow["on"]["push"]["tags"] == ["v*"]
    publish = workflow["jobs"]["publish"]
    assert publish["if"] == "github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')"
    assert publish["permissions"] == {"id-token": "write"}
    assert set(publish["needs"]) == set(workflow["jobs"]) - {"publish"}
    assert [a for a in uses(publish) if a.startswith("pypa/gh-action-pypi-publish@")]
    # Nothing else may write: the workflow's own token is read-only.
    assert workflow["permissions"] == {"contents": "read"}
    assert not [step for step in steps(publish) if "password" in step.get("with", {})]


# -- .github/workflows/docs.yml ---------------------------------------------------------------------
def test_the_docs_site_is_built_strictly_and_published_from_main_to_the_documentation_url(
    project: dict[str, Any],
) -> None:
    workflow = load_workflow("docs.yml")
    assert workflow["permissions"] == {"contents": "read"}
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    assert "python -m pip install -e . --group docs" in commands(build)
    assert "mkdocs build --strict --site-dir site" in commands(build)
    assert action(build, "actions/upload-pages-artifact")["with"]["path"] == "site"
    assert deploy["needs"] == "build"
    assert deploy["if"] == "github.ref == 'refs/heads/main' && github.event_name != 'pull_request'"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert action(deploy, "actions/deploy-pages")["id"] == "deployment"
    # the site's address is the one the package's metadata gives
    site_url = re.search(r"^site_url: (\S+)$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.MULTILINE)
    assert site_url and project["project"]["urls"]["Documentation"] == site_url[1]


def test_the_pre_commit_hooks_run_the_generated_files_checks() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed (pip install --group release)")
    config = yaml.safe_load(source(ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert "ruff-check" in hooks
    assert hooks["typing-stubs"]["entry"] == "python scripts/typing_stubs.py --check"
    assert hooks["flag-reference"]["entry"] == "python scripts/flag_reference.py --check"


# -- scripts/test_wheel.py ----------------------------------------------------------------------
def _installed_from_a_wheel() -> bool:
    package = Path(backends.__file__).resolve()
    return any(package.is_relative_to(Path(sysconfig.get_paths()[k]).resolve()) for k in ("purelib", "platlib"))


def _test_wheel(tmp_path: Path, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "test_wheel.py"), *pytest_args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.skipif(_installed_from_a_wheel(), reason="backends is installed from a wheel here")
def test_the_wheel_test_refuses_a_source_tree(tmp_path: Path) -> None:
    done = _test_wheel(tmp_path, "--co", "-q")
    assert done.returncode == 1
    assert f"backends is imported from {Path(backends.__file__).resolve()}, not from site-packages" in done.stderr
    assert "collected" not in done.stdout  # pytest never ran


@pytest.mark.skipif(not _installed_from_a_wheel(), reason="backends is not installed from a wheel here")
def test_the_wheel_test_accepts_the_installed_wheel_on_both_engines(tmp_path: Path) -> None:
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n", encoding="utf-8")
    done = _test_wheel(tmp_path, "-q", "-p", "no:cacheprovider", "test_nothing.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("1 passed") == 2
    assert "test_wheel (BACKENDS_PURE_PYTHON=1): " in done.stdout
    assert "pure Python (BACKENDS_PURE_PYTHON is set)" in done.stdout


@pytest.fixture(scope="module")
def test_wheel() -> Any:
    spec = importlib.util.spec_from_file_location("test_wheel_script", ROOT / "scripts" / "test_wheel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLATFORM = "cp311-cp311-manylinux_2_28_x86_64"
MODULES = ["backends/_engine/_speedups.cpython-311-x86_64-linux-gnu.so", "backends/sync/_speedups.cpython-311.so"]


def found(**changes: Any) -> dict[str, Any]:
    """What the probe reports for a good platform wheel, as installed, with ``changes``."""
    good = {
        "file": "/venv/site-packages/backends/__init__.py",
        "site_packages": True,
        "of_the_distribution": True,
        "tags": [PLATFORM],
        "extensions": MODULES,
        "accelerated": True,
        "engine": "compiled accelerator (C, backends._engine._speedups)",
    }
    return {**good, **changes}


@pytest.mark.parametrize(
    ("probe", "pure_wanted", "expected"),
    [
        (found(), False, []),
        (found(accelerated=False, engine="pure Python (BACKENDS_PURE_PYTHON is set)"), True, []),
        (found(tags=["py3-none-any"], extensions=[], accelerated=False, engine="pure Python (...)"), False, []),
        (
            found(accelerated=False, engine="pure Python (it cannot be loaded)"),
            False,
            ["the wheel carries the accelerator, but the engine is pure Python (it cannot be loaded)"],
        ),
        (
            found(engine="compiled accelerator (C)"),
            True,
            ["the compiled engine is in use, expected pure Python: compiled accelerator (C)"],
        ),
        (
            found(extensions=MODULES[:1]),
            False,
            [f"a platform wheel ({PLATFORM}) should carry both C modules, it has {MODULES[:1]}"],
        ),
        (
            found(tags=["py3-none-any"], accelerated=False),
            False,
            [f"a py3-none-any wheel carries compiled modules: {MODULES}"],
        ),
        (
            found(tags=[], extensions=[], accelerated=False),
            False,
            ["the installed scoped-backends has no wheel tag (WHEEL): not installed from a wheel"],
        ),
    ],
    ids=[
        "compiled",
        "pure-wanted",
        "pure-wheel",
        "not-loaded",
        "pure-not-honoured",
        "half-built",
        "pure-with-modules",
        "not-a-wheel",
    ],
)
def test_the_wheel_test_checks_what_the_wheel_should_carry(
    test_wheel: Any, probe: dict[str, Any], pure_wanted: bool, expected: list[str]
) -> None:
    assert test_wheel.problems(probe, pure_wanted) == expected


# -- CHANGELOG.md -------------------------------------------------------------------------------
TYPES = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]
RELEASE = re.compile(r"\[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})")


@pytest.fixture(scope="module")
def changelog() -> str:
    return (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def sections(changelog: str) -> list[tuple[str, list[str]]]:
    """Each ``##`` heading with the ``###`` headings under it."""
    found: list[tuple[str, list[str]]] = []
    for line in changelog.splitlines():
        if line.startswith("## "):
            found.append((line[3:], []))
        elif line.startswith("### "):
            assert found, f"{line!r} before any release"
            found[-1][1].append(line[4:])
    return found


def test_the_changelog_has_unreleased_then_releases_newest_first(changelog: str) -> None:
    headings = [heading for heading, _ in sections(changelog)]
    assert headings[0] == "[Unreleased]"
    releases = [RELEASE.fullmatch(h) for h in headings[1:]]
    assert all(releases), [h for h, m in zip(headings[1:], releases, strict=True) if not m]
    versions = [tuple(int(part) for part in m.groups()[:3]) for m in releases if m]
    dates = [m[4] for m in releases if m]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    assert dates == sorted(dates, reverse=True)


def test_each_release_has_one_heading_per_type_in_order(changelog: str) -> None:
    for heading, types in sections(changelog):
        assert set(types) <= set(TYPES), (heading, types)
        assert types == sorted(types, key=TYPES.index) and len(set(types)) == len(types), (heading, types)
        if heading != "[Unreleased]":
            assert types, f"{heading} has no entries"


def test_each_heading_has_a_link_reference(changelog: str) -> None:
    headings = [heading.split(" - ")[0] for heading, _ in sections(changelog)]
    references = dict(re.findall(r"^(\[[^\]]+\]): (\S+)$", changelog, flags=re.MULTILINE))
    assert references.get("[Unreleased]") == f"{REPO}/compare/v{headings[1][1:-1]}...HEAD"
    for newer, older in itertools.pairwise(headings[1:]):
        assert references.get(newer) == f"{REPO}/compare/v{older[1:-1]}...v{newer[1:-1]}"
    assert references.get(headings[-1]) == f"{REPO}/releases/tag/v{headings[-1][1:-1]}"


def test_the_newest_release_is_the_package_version(changelog: str) -> None:
    newest = sections(changelog)[1][0]
    assert newest.startswith(f"[{backends.__version__}] - ")
