"""Static types: mypy --strict and pyright (strict) report every mistake in tests/typing/bad.py with
the error each line expects and nothing else, and nothing at all in tests/typing/good.py; the
generated stubs are current and declare exactly the names the runtime has; jedi completes the flags.

The expectations are the checkers' own comments: ``# type: ignore[code]`` (mypy, with
``--warn-unused-ignores`` from ``--strict`` and ``--enable-error-code ignore-without-code``) and
``# pyright: ignore[rule]`` (pyright, with ``reportUnnecessaryTypeIgnoreComment`` and
``enableTypeIgnoreComments`` off: see tests/typing/pyrightconfig.json). So a mistake that is no
longer reported, an error that is not expected and an expectation with the wrong code all fail.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import backends
from backends import _namespaces
from backends._engine.namespace import Namespace
from backends._engine.table import NAMES, VIEWS

ROOT = Path(__file__).resolve().parent.parent
TYPING = ROOT / "tests" / "typing"
FILES = [TYPING / "bad.py", TYPING / "good.py"]
PACKAGE = ROOT / "backends"
NAMESPACES = [ns for ns in vars(_namespaces).values() if isinstance(ns, type) and issubclass(ns, Namespace)]
NAMESPACES.remove(Namespace)

#: bad.py's mistakes that pyright cannot report: assignments through a name bound to a module
#: (`import backends.cudnn as cudnn`); pyright never checks assignments to a module's attributes.
PYRIGHT_BLIND = {"import backends.cudnn as cudnn: a wrong type", "import backends.cudnn.conv as conv: a wrong choice"}


def _run(*command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def _mistakes() -> list[tuple[str, str]]:
    """(description, the line under it) for each numbered mistake in bad.py."""
    lines = (TYPING / "bad.py").read_text(encoding="utf-8").splitlines()
    found = []
    for number, line in enumerate(lines):
        match = re.fullmatch(r"\s*# (\d+)\. (.*)", line)
        if match:
            assert int(match[1]) == len(found) + 1, f"bad.py line {number + 1}: mistakes are numbered in order"
            found.append((match[2], lines[number + 1]))
    return found


# -- the files themselves ---------------------------------------------------------------------
def test_the_mistakes_file_expects_an_error_from_both_checkers_on_every_mistake() -> None:
    mistakes = _mistakes()
    assert len(mistakes) >= 16
    blind = set()
    for description, line in mistakes:
        assert re.search(r"  # type: ignore\[[\w, -]+\]", line), f"no mypy expectation for: {description}"
        if "# pyright: ignore[" not in line:
            assert "(not by pyright: see docs/typing.md)" in description, f"no pyright expectation for: {description}"
            blind.add(description.replace(" (not by pyright: see docs/typing.md)", ""))
    assert blind == PYRIGHT_BLIND
    docs = " ".join((ROOT / "docs" / "typing.md").read_text(encoding="utf-8").split())
    assert f"holds {len(mistakes)} typical mistakes" in docs, "docs/typing.md counts the mistakes"
    assert f"reports all {len(mistakes)}, pyright in strict mode {len(mistakes) - len(blind)}" in docs
    ignores = len(re.findall(r"\S  # type: ignore", (TYPING / "bad.py").read_text(encoding="utf-8")))
    assert ignores == len(mistakes), "every expectation in bad.py sits under a numbered mistake"
    good = (TYPING / "good.py").read_text(encoding="utf-8")
    assert "ignore" not in good.replace("enableTypeIgnoreComments", "")
    assert good.count("assert_type(") >= len(mistakes) - 10  # about as many checks of correct use


def test_the_correct_file_runs() -> None:
    """good.py is correct at run time too (without a GPU), in a process of its own."""
    result = _run(sys.executable, str(TYPING / "good.py"), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# -- mypy -------------------------------------------------------------------------------------
def test_mypy_strict_reports_exactly_the_expected_errors(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy not installed (pip install -e '.[test]')")
    result = _run(
        sys.executable, "-m", "mypy", "--strict", "--enable-error-code", "ignore-without-code",
        "--python-version", "3.10", "--show-error-codes", "--no-color-output",
        "--cache-dir", str(tmp_path / "mypy-cache"), *map(str, FILES),
    )
    assert result.returncode == 0 and result.stdout.startswith("Success: no issues found in 2 source files"), (
        f"mypy --strict on tests/typing/ (an 'unused type: ignore' is a mistake no longer reported):\n"
        f"{result.stdout}{result.stderr}"
    )


# -- pyright ----------------------------------------------------------------------------------
def _pyright(*args: str) -> subprocess.CompletedProcess[str]:
    return _run(sys.executable, "-m", "pyright", *args)


@pytest.fixture(scope="module")
def pyright() -> None:
    if importlib.util.find_spec("pyright") is None:
        pytest.skip("pyright not installed (pip install -e '.[test]' installs it, with Node.js, from PyPI)")
    version = _pyright("--version")
    if version.returncode != 0:  # no Node.js, and none could be fetched
        pytest.skip(f"pyright cannot run here: {(version.stdout + version.stderr).strip()[-500:]}")


def test_pyright_strict_reports_exactly_the_expected_errors(pyright: None) -> None:
    result = _pyright("--outputjson", "--pythonpath", sys.executable, "-p", str(TYPING))
    try:
        report = json.loads(result.stdout)
    except ValueError:
        pytest.fail(f"pyright gave no report:\n{result.stdout}{result.stderr}")
    shown = "\n".join(
        f"{Path(d['file']).name}:{d['range']['start']['line'] + 1}: {d['severity']}: {d['message']} ({d.get('rule')})"
        for d in report["generalDiagnostics"]
    )
    summary = report["summary"]
    assert summary["filesAnalyzed"] == len(FILES), summary
    assert (summary["errorCount"], summary["warningCount"], summary["informationCount"]) == (0, 0, 0), (
        f"pyright -p tests/typing (an 'Unnecessary # pyright: ignore' is a mistake no longer reported):\n{shown}"
    )


# -- the stubs --------------------------------------------------------------------------------
def test_the_stubs_are_generated_from_the_current_table() -> None:
    result = _run(sys.executable, str(ROOT / "scripts" / "typing_stubs.py"), "--check", timeout=60)
    assert result.returncode == 0, result.stderr


def _declared(body: list[ast.stmt]) -> set[str]:
    """The names a stub's module or class body declares (setters once, private names left out)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            names |= {alias.asname for alias in node.names if alias.asname}
    return {n for n in names if not n.startswith("_") or (n.startswith("__") and n not in ("__all__", "__name__"))}


def _stub(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def test_the_package_stub_declares_exactly_the_runtime_names() -> None:
    stub = _stub(PACKAGE / "__init__.pyi")
    assert _declared(stub.body) == set(dir(backends))
    (all_,) = [n for n in stub.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__"]
    assert ast.literal_eval(all_.value) == backends.__all__


def test_the_namespace_stubs_declare_exactly_the_runtime_members() -> None:
    classes = {node.name: node for node in _stub(PACKAGE / "_types.pyi").body if isinstance(node, ast.ClassDef)}
    for cls in NAMESPACES:
        instance = eval(f"backends.{cls.prefix}")  # the runtime object
        public = {n for n in dir(instance) if not n.startswith("_")}
        item = {"__getitem__"} if "__getitem__" in vars(cls) else set()
        assert _declared(classes[cls.__name__].body) == public | item, cls.__name__
        mirror = PACKAGE.joinpath(*cls.prefix.split("."), "__init__.pyi")
        assert _declared(_stub(mirror).body) == public, mirror
        assert sorted(p.name for p in mirror.parent.iterdir() if p.name != "__pycache__") == sorted(
            ["__init__.pyi", *(child for child in vars(cls) if isinstance(vars(cls)[child], Namespace))]
        ), f"{mirror.parent}: stub-only, holding __init__.pyi and the directories of the child namespaces"


def test_flag_values_is_a_typed_dict_of_every_flag_imported_on_first_use() -> None:
    code = (
        "import sys, backends; assert 'backends._flagvalues' not in sys.modules; "
        "from backends import FlagValues; print(sorted(FlagValues.__annotations__), FlagValues.__total__)"
    )
    result = _run(sys.executable, "-c", code, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{sorted(NAMES)} False"
    assert not set(NAMES) & {view.name for view in VIEWS}


# -- editors ----------------------------------------------------------------------------------
def test_jedi_completes_the_flags_statically() -> None:
    jedi = pytest.importorskip("jedi", reason="jedi not installed (pip install -e '.[test]')")
    project = jedi.Project(str(ROOT), sys_path=[str(ROOT)], smart_sys_path=False, load_unsafe_extensions=False)

    def complete(code: str) -> set[str]:
        lines = code.splitlines()
        script = jedi.Script(code, path=str(ROOT / "snippet.py"), project=project)
        return {c.name for c in script.complete(len(lines), len(lines[-1]))}

    for cls in NAMESPACES:
        expected = {*cls.members, *(v.attribute for v in VIEWS if v.namespace == cls.prefix)}
        parent, _, leaf = f"backends.{cls.prefix}".rpartition(".")
        for code in (f"import backends\nbackends.{cls.prefix}.", f"from {parent} import {leaf}\n{leaf}.",
                     f"import backends.{cls.prefix} as ns\nns."):
            names = complete(code)
            assert expected <= names, (code, names)
            assert ("flags" in names) == bool(cls.members), (code, names)
    script = jedi.Script("import backends\nbackends.cudnn.flags(", path=str(ROOT / "snippet.py"), project=project)
    (signature,) = script.get_signatures(2, 21)
    assert [p.name for p in signature.params] == list(_namespaces.Cudnn.members)
    (deterministic,) = [c for c in jedi.Script("import backends\nbackends.cudnn.", project=project).complete(2, 15)
                        if c.name == "deterministic"]
    assert "deterministic cuDNN engines" in deterministic.docstring()
