"""The build (setup.py, MANIFEST.in): a platform wheel with both C modules where the C compiler
works; otherwise the pure-Python package, tagged ``py3-none-any``, whose ``python -m backends``
says why; the compiler and its flags are the platform's (``CC``, ``CFLAGS``); the sdist holds the
tests, docs and examples and no compiled module, and builds a working wheel itself; an editable
build puts the modules beside their sources.

Every build runs in a copy of the project, in a subprocess, with ``python -m build
--no-isolation``: this interpreter's setuptools, so nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
#: the C modules and the build note, as paths in a wheel (in the source tree: under src/)
MODULES = ("backends/_engine/_speedups", "backends/sync/_speedups")
NOTE = "backends/_engine/_build_note.txt"
#: a compiled module of another interpreter, as an editable install there leaves it
OTHER_SUFFIX = ".cpython-39-x86_64-linux-gnu.so"
COMPILED = "compiled accelerator (C, backends._engine._speedups)"
NOT_BUILT = "pure Python (the accelerator was not built at install: "

if importlib.util.find_spec("build") is None:
    pytest.skip("needs PyPA's build (pip install --group release)", allow_module_level=True)
try:
    from importlib.metadata import version

    if int(version("setuptools").split(".")[0]) < 77:
        found = version("setuptools")
        pytest.skip(f"needs setuptools 77+, this is {found} (pip install --group release)", allow_module_level=True)
except ImportError:  # PackageNotFoundError is an ImportError
    pytest.skip("needs setuptools 77 or newer (pip install --group release)", allow_module_level=True)

posix_compiler = pytest.mark.skipif(sys.platform == "win32", reason="CC and CFLAGS are the Unix compilers' variables")
pytestmark = pytest.mark.slow  # each test builds the project


#: what a copy of the project leaves out, besides caches (.pytest_cache, ...), compiled modules,
#: byte code and virtual environments
NOT_COPIED = {".git", "build", "dist", "site", "__pycache__", ".hypothesis"}


def _copy_ignored(folder: str, names: list[str]) -> set[str]:
    """What a copy of the project leaves out: what git ignores here, and virtual environments."""
    return {
        name
        for name in names
        if name in NOT_COPIED
        or (name.startswith(".") and name.endswith("_cache"))
        or name.endswith((".egg-info", ".so", ".pyd", ".pyc"))
        or name == "_build_note.txt"
        or (Path(folder, name) / "pyvenv.cfg").exists()
    }


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without any BACKENDS_* variable (the suite may run with
    BACKENDS_PURE_PYTHON=1), plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("BACKENDS_")}, **extra}


def run(command: list[str], cwd: Path, **extra: str) -> str:
    done = subprocess.run(command, cwd=cwd, env=environment(**extra), capture_output=True, text=True)
    assert done.returncode == 0, f"{shlex.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def build(source: Path, out: Path, kind: str, **extra: str) -> tuple[Path, str]:
    """Build one ``kind`` (``sdist`` or ``wheel``) of ``source`` into ``out``: its path and the build's output."""
    output = run([sys.executable, "-m", "build", "--no-isolation", f"--{kind}", "--outdir", str(out), str(source)],
                 source, **extra)  # fmt: skip
    [made] = out.iterdir()
    return made, output


def unpacked(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):  # 3.12 warns without a filter; older ones may lack it
            archive.extractall(into, filter="data")
        else:  # pragma: no cover - a Python without the extraction filters
            archive.extractall(into)
    [folder] = into.iterdir()
    return folder


def report(wheel: Path, into: Path) -> tuple[str, str]:
    """Install ``wheel`` into a folder of its own; there, where ``import backends`` finds it and the
    engine line of ``python -m backends``."""
    target = into / "site"
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(target),
         str(wheel)], into)  # fmt: skip
    found = run([sys.executable, "-c", "import backends; print(backends.__file__)"], into, PYTHONPATH=str(target))
    first = run([sys.executable, "-m", "backends"], into, PYTHONPATH=str(target)).splitlines()[0]
    return found.strip(), first


def tags(wheel: Path) -> str:
    """``python-abi-platform`` of a wheel's name."""
    return "-".join(wheel.stem.split("-")[-3:])


def members(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def compiled_modules(names: list[str]) -> list[str]:
    return [name for name in names if name.endswith((".so", ".pyd"))]


def note_of(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(NOTE).decode("utf-8").strip()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project, with what an editable install leaves in the source tree: a compiled
    module of this interpreter and of another beside each source, and a build note."""
    copy = tmp_path_factory.mktemp("project") / "backends-project"
    shutil.copytree(ROOT, copy, ignore=_copy_ignored)
    for module in MODULES:
        for suffix in (EXT_SUFFIX, OTHER_SUFFIX):
            (copy / "src" / (module + suffix)).write_bytes(b"left by an earlier in-place build")
    (copy / "src" / NOTE).write_text("a note left by an earlier in-place build\n", encoding="utf-8")
    return copy


@pytest.fixture(scope="module")
def sdist(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(project, tmp_path_factory.mktemp("sdist"), "sdist")[0]


def wheel_from(sdist: Path, tmp_path: Path, **extra: str) -> tuple[Path, str]:
    """A wheel built from the unpacked sdist (not from the repository), and the build's output."""
    return build(unpacked(sdist, tmp_path / "unpacked"), tmp_path / "wheel", "wheel", **extra)


def test_the_sdist_holds_the_tests_docs_and_examples_and_no_compiled_module(project: Path, sdist: Path) -> None:
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    expected = {
        path.relative_to(project).as_posix()
        for folder in ("src", "tests", "docs", "examples", "scripts", "benchmarks")
        for path in (project / folder).rglob("*")
        if path.is_file() and not path.name.endswith((".so", ".pyd")) and path.name != "_build_note.txt"
    }
    assert {"tests/standin/README.md", "tests/typing/good.py", "tests/gpu/test_gpu.py", "docs/contract.md"} <= expected
    assert sorted(expected - names) == []
    for name in ("README.md", "CHANGELOG.md", "LICENSE", "mkdocs.yml", "setup.py", "pyproject.toml", "MANIFEST.in"):
        assert name in names
    assert [n for n in names if n.endswith((".so", ".pyd", ".pyc")) or "__pycache__" in n or "_build_note" in n] == []


def test_a_wheel_built_from_the_sdist_has_both_c_modules_and_a_platform_tag_and_says_compiled(
    sdist: Path, tmp_path: Path
) -> None:
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")[0]
    if sys.platform != "win32" and shutil.which(compiler) is None:
        pytest.skip(f"no C compiler here: {compiler} (sysconfig's CC) is not on PATH")
    wheel, output = wheel_from(sdist, tmp_path)
    assert tags(wheel).startswith(f"cp{sys.version_info.major}{sys.version_info.minor}-")
    assert not tags(wheel).endswith("-none-any")
    assert sorted(compiled_modules(members(wheel))) == [module + EXT_SUFFIX for module in MODULES]
    assert NOTE not in members(wheel)
    assert "backends: " not in output  # nothing to say about the accelerator
    found, first = report(wheel, tmp_path)
    assert Path(found).is_relative_to(tmp_path / "site")
    assert first.endswith(f"engine: {COMPILED}")


@posix_compiler
def test_a_flag_the_compiler_refuses_gives_the_pure_package_which_says_why(sdist: Path, tmp_path: Path) -> None:
    wheel, output = wheel_from(sdist, tmp_path, CFLAGS="-fbogus-flag-xyz")
    assert tags(wheel) == "py3-none-any"
    assert compiled_modules(members(wheel)) == []
    why = note_of(wheel)
    assert why.startswith("the C compiler failed: ") and "-fbogus-flag-xyz" in why
    assert f"backends: the C accelerator was not built ({why}); building again without it" in output
    found, first = report(wheel, tmp_path)
    assert Path(found).is_relative_to(tmp_path / "site")
    assert first.endswith(f"engine: {NOT_BUILT}{why})")


@posix_compiler
def test_cc_is_the_compiler_and_one_that_does_not_run_gives_the_pure_package_naming_it(
    sdist: Path, tmp_path: Path
) -> None:
    wheel, _ = wheel_from(sdist, tmp_path, CC="/nonexistent/cc")
    assert tags(wheel) == "py3-none-any"
    assert compiled_modules(members(wheel)) == []
    why = note_of(wheel)
    assert why.startswith("the C compiler failed: ") and "/nonexistent/cc" in why
    assert report(wheel, tmp_path)[1].endswith(f"engine: {NOT_BUILT}{why})")


#: makes this interpreter's build see a free-threaded CPython (Py_GIL_DISABLED) when on PYTHONPATH
FREE_THREADED_BUILD = """\
import sysconfig
_get_config_var = sysconfig.get_config_var
sysconfig.get_config_var = lambda name: 1 if name == "Py_GIL_DISABLED" else _get_config_var(name)
"""
#: the extension modules of this project that ``import backends`` and its integrations loaded
LOADED_EXTENSIONS = (
    "import sys, importlib.machinery, backends, backends.integrations.asyncio, backends.integrations.executors; "
    "print([name for name, module in sys.modules.items() if name.startswith('backends') and "
    "(getattr(module, '__file__', None) or '').endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))])"
)


def test_a_free_threaded_cpython_gets_the_pure_package_which_loads_no_extension_module(
    sdist: Path, tmp_path: Path
) -> None:
    """What keeps the GIL off on 3.14t/3.15t (no free-threaded CPython here: setup.py is shown
    one): the build makes the pure package and says why, and importing it loads no extension
    module of this project, which is what would turn the GIL back on."""
    (tmp_path / "free-threaded").mkdir()
    (tmp_path / "free-threaded" / "sitecustomize.py").write_text(FREE_THREADED_BUILD, encoding="utf-8")
    wheel, output = wheel_from(sdist, tmp_path, PYTHONPATH=str(tmp_path / "free-threaded"))
    assert tags(wheel) == "py3-none-any"
    assert compiled_modules(members(wheel)) == []
    why = "a free-threaded CPython (the accelerator relies on the GIL)"
    assert note_of(wheel) == why
    assert f"backends: building the pure-Python package: {why}" in output
    found, first = report(wheel, tmp_path)
    assert Path(found).is_relative_to(tmp_path / "site")
    assert first.endswith(f"engine: {NOT_BUILT}{why})")
    loaded = run([sys.executable, "-c", LOADED_EXTENSIONS], tmp_path, PYTHONPATH=str(tmp_path / "site"))
    assert loaded.strip() == "[]"


@pytest.mark.parametrize("source", ["src/backends/_engine/_speedups.c", "src/backends/sync/_speedups.c"])
def test_the_c_sources_refuse_a_free_threaded_cpython(source: str) -> None:
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")[0]
    if sys.platform == "win32" or shutil.which(compiler) is None:
        pytest.skip(f"no Unix C compiler here ({compiler})")
    include = sysconfig.get_paths()["include"]
    done = subprocess.run([compiler, "-fsyntax-only", "-DPy_GIL_DISABLED=1", f"-I{include}", str(ROOT / source)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0
    assert "relies on the GIL: a free-threaded CPython uses the pure-Python" in done.stderr


#: a commit time (2026-12-01 00:00 UTC), as SOURCE_DATE_EPOCH
EPOCH = 1_796_083_200


def test_two_builds_of_one_tree_give_the_same_bytes_whatever_the_files_times_and_build_folders(
    project: Path, tmp_path: Path
) -> None:
    """With SOURCE_DATE_EPOCH set, the sdist (sorted, owned by no one, times clamped, no time or name
    in its gzip header) and a wheel built from it in another folder each time (the C modules' debug
    information names the folder ``.``) are byte-identical the second time, although every file of
    the tree was touched in between."""
    first = build(project, tmp_path / "sdist-1", "sdist", SOURCE_DATE_EPOCH=str(EPOCH))[0]
    for path in project.rglob("*"):
        os.utime(path, (EPOCH + 86_400, EPOCH + 86_400))  # a day after the commit: clamped to it
    second = build(project, tmp_path / "sdist-2", "sdist", SOURCE_DATE_EPOCH=str(EPOCH))[0]
    assert first.read_bytes() == second.read_bytes()
    header = first.read_bytes()[:10]
    assert int.from_bytes(header[4:8], "little") == EPOCH and header[3] & 0x08 == 0  # mtime, no FNAME
    with tarfile.open(first) as archive:
        entries = archive.getmembers()
    assert [e.name for e in entries] == sorted(e.name for e in entries)
    assert {(e.uid, e.gid, e.uname, e.gname) for e in entries} == {(0, 0, "", "")}
    assert {e.mtime for e in entries} == {EPOCH}
    assert {oct(e.mode) for e in entries} <= {"0o644", "0o755"}
    wheels = [
        build(unpacked(first, tmp_path / name / "unpacked"), tmp_path / name / "wheel", "wheel",
              SOURCE_DATE_EPOCH=str(EPOCH))[0]
        for name in ("in-one-folder", "in-another")
    ]  # fmt: skip
    assert wheels[0].read_bytes() == wheels[1].read_bytes(), "the wheels differ: only their build folders did"


def test_backends_build_pure_python_gives_the_pure_package_and_no_module_left_in_the_tree(
    project: Path, tmp_path: Path
) -> None:
    wheel, output = build(project, tmp_path / "wheel", "wheel", BACKENDS_BUILD_PURE_PYTHON="1")
    assert tags(wheel) == "py3-none-any"
    assert compiled_modules(members(wheel)) == []  # neither this interpreter's nor another's
    assert note_of(wheel) == "BACKENDS_BUILD_PURE_PYTHON was set"  # the wheel's own, not the tree's
    assert "backends: building the pure-Python package: BACKENDS_BUILD_PURE_PYTHON was set" in output
    first = report(wheel, tmp_path)[1]
    assert first.endswith(f"engine: {NOT_BUILT}BACKENDS_BUILD_PURE_PYTHON was set)")


PROBE = "import backends; from backends._engine import accelerator as a; print(backends.__file__); print(a.describe())"
EDITABLE = "import sys; from pyproject_hooks import BuildBackendHookCaller as H; H(sys.argv[1], 'setuptools.build_meta').build_editable(sys.argv[2])"  # noqa: E501


@posix_compiler
def test_an_editable_build_puts_both_modules_beside_their_sources_and_a_failed_one_removes_them(
    sdist: Path, tmp_path: Path
) -> None:
    tree = unpacked(sdist, tmp_path / "unpacked")
    other = [tree / "src" / (module + OTHER_SUFFIX) for module in MODULES]
    for path in other:
        path.write_bytes(b"another interpreter's")
    in_place = [tree / "src" / (module + EXT_SUFFIX) for module in MODULES]

    builds = itertools.count()

    def editable(**extra: str) -> tuple[Path, str]:
        """Build ``tree`` editable; the editable wheel, and the build's output and engine line there."""
        out = tmp_path / f"editable-{next(builds)}"
        output = run([sys.executable, "-c", EDITABLE, str(tree), str(out)], tree, **extra)
        [wheel] = out.iterdir()
        engine = run([sys.executable, "-c", PROBE], tree / "src")  # the tree's backends: src/ is sys.path[0]
        assert engine.startswith(f"{tree / 'src' / 'backends' / '__init__.py'}\n")
        return wheel, output + engine

    wheel, output = editable()
    assert "-none-any" not in tags(wheel)
    assert all(path.is_file() for path in in_place + other) and not (tree / "src" / NOTE).exists()
    assert output.endswith(f"{COMPILED}\n")

    wheel, output = editable(CFLAGS="-fbogus-flag-xyz")
    assert tags(wheel) == "py3-none-any"
    # this interpreter's modules, which it would import instead of the pure path, are gone
    assert [path for path in in_place if path.exists()] == [] and all(path.is_file() for path in other)
    why = (tree / "src" / NOTE).read_text(encoding="utf-8").strip()
    assert why.startswith("the C compiler failed: ") and "-fbogus-flag-xyz" in why
    assert output.endswith(f"{NOT_BUILT}{why})\n")

    editable()
    assert all(path.is_file() for path in in_place) and not (tree / "src" / NOTE).exists()
