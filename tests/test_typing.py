"""Static types: mypy --strict and pyright (strict) report every mistake in tests/typing/bad.py with
the error each line expects and nothing else, and nothing at all in tests/typing/good.py; the
generated stubs are current and declare exactly the names the runtime has, and mypy's stubtest
finds them true to the runtime on both engines, but for the allowlisted differences, each with its
reason and each still needed; jedi completes the flags.

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
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import backends
from backends import _public_namespaces
from backends._engine.namespace import Namespace
from backends._engine.table import NAMES, VIEWS
from tests._dev_tools import import_extra, import_ray
from tests._helpers import PACKAGE  # the imported package: the wheel's where one is installed

ROOT = Path(__file__).resolve().parent.parent
TYPING = ROOT / "tests" / "typing"
FILES = [TYPING / "bad.py", TYPING / "good.py"]
NAMESPACES = [ns for ns in vars(_public_namespaces).values() if isinstance(ns, type) and issubclass(ns, Namespace)]
NAMESPACES.remove(Namespace)

#: bad.py's mistakes that pyright cannot report: assignments through a name bound to a module
#: (`import backends.cudnn as cudnn`); pyright never checks assignments to a module's attributes.
PYRIGHT_BLIND = {
    "import backends.cudnn as cudnn: a wrong type",
    "import backends.cudnn.conv as conv: a wrong choice",
    "a namespace is not a flag",  # backends.cudnn = True: `backends` is a module
}


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
@pytest.mark.slow
def test_mypy_strict_reports_exactly_the_expected_errors(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy not installed (pip install --group typing)")
    result = _run(
        sys.executable, "-m", "mypy", "--strict", "--enable-error-code", "ignore-without-code",
        "--python-version", "3.11", "--show-error-codes", "--no-color-output",
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
        pytest.skip("pyright not installed (pip install --group typing installs it, with Node.js, from PyPI)")
    version = _pyright("--version")
    if version.returncode != 0:  # no Node.js, and none could be fetched
        pytest.skip(f"pyright cannot run here: {(version.stdout + version.stderr).strip()[-500:]}")


@pytest.mark.slow
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
        if cls.prefix == "cuda.cufft_plan_cache" and not backends.cuda.is_available():
            public.add("size")  # dir() leaves it out without CUDA, where reading it raises
        item = {"__getitem__"} if "__getitem__" in vars(cls) else set()
        assert _declared(classes[cls.__name__].body) == public | item, cls.__name__
        mirror = PACKAGE.joinpath(*cls.prefix.split("."), "__init__.pyi")
        assert _declared(_stub(mirror).body) == public, mirror
        assert sorted(p.name for p in mirror.parent.iterdir() if p.name != "__pycache__") == sorted(
            ["__init__.py", "__init__.pyi", *(child for child in vars(cls) if isinstance(vars(cls)[child], Namespace))]
        ), f"{mirror.parent}: the stub, the restorer (__init__.py) and the directories of the child namespaces"


# -- stubtest ----------------------------------------------------------------------------------
ALLOWLIST = ROOT / "stubtest-allowlist.txt"

#: The allowlist's entries that apply only in some configurations (written ``(...)?``, stubtest's
#: form for an entry it must not report unused elsewhere), and where each applies, given whether
#: the compiled engine is in use and whether CUDA is available. None at present.
CONDITIONAL: dict[str, Callable[[bool, bool], bool]] = {}


def _allowlist() -> list[tuple[str, str]]:
    """(entry, reason) for each entry of stubtest-allowlist.txt: its reason is the comment at the end
    of its line or the comment lines right above it."""
    entries = []
    comment: list[str] = []
    for line in ALLOWLIST.read_text(encoding="utf-8").splitlines():
        text, _, trailing = line.partition("#")
        if text.strip():
            entries.append((text.strip(), " ".join([*comment, trailing.strip()]).strip()))
            comment = []
        elif trailing.strip():
            comment.append(trailing.strip())
        else:
            comment = []
    return entries


def test_every_stubtest_allowlist_entry_has_a_reason_and_only_the_known_ones_are_conditional() -> None:
    entries = _allowlist()
    assert entries, "stubtest-allowlist.txt has no entry"
    conditional = set()
    for entry, reason in entries:
        assert len(reason.split()) >= 5, f"stubtest-allowlist.txt: {entry} has no reason (a # comment) with it"
        pattern = re.compile(entry)  # stubtest takes each entry as a regular expression
        if pattern.fullmatch(""):
            assert entry.startswith("(") and entry.endswith(")?"), entry
            conditional.add(entry[1:-2])
    assert conditional == set(CONDITIONAL), "a conditional entry needs its condition in CONDITIONAL, to be checked"


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["compiled", "pure"])
def test_stubtest_finds_the_stubs_true_to_the_runtime_but_for_the_allowlist(engine: str, tmp_path: Path) -> None:
    """``python -m mypy.stubtest`` as CI runs it, with the allowlist, on one engine: no error, and no
    entry unused (stubtest's default). A conditional entry goes in a second allowlist, first and
    in its plain form, where it applies: there stubtest reports it unused when it no longer is."""
    pytest.importorskip("mypy.stubtest", reason="mypy not installed (pip install --group typing)")
    import_ray()  # stubtest imports every module, backends.integrations.ray and .dask too
    import_extra("distributed", "dask")
    env = {key: value for key, value in os.environ.items() if key != "BACKENDS_PURE_PYTHON"}
    if engine == "pure":
        env["BACKENDS_PURE_PYTHON"] = "1"
    code = "import backends, backends._engine as e; print(e.ACCELERATED, backends.cuda.is_available())"
    probe = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True,
    )
    accelerated, cuda = (word == "True" for word in probe.stdout.split())
    if engine == "compiled" and not accelerated:
        pytest.skip("the compiled accelerator is not built for this interpreter")
    here = tmp_path / "applies-here.txt"
    here.write_text("".join(f"{entry}\n" for entry, applies in CONDITIONAL.items() if applies(accelerated, cuda)))
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "--mypy-config-file", str(TYPING / "stubtest.ini"),
         "--allowlist", str(here), "--allowlist", str(ALLOWLIST), "backends"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert result.returncode == 0, (
        f"mypy.stubtest on the {engine} engine (fix the stubs through scripts/typing_stubs.py; an entry"
        f" in {ALLOWLIST.name} only for a deliberate difference, with its reason):\n{result.stdout}{result.stderr}"
    )


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
    jedi = pytest.importorskip("jedi", reason="jedi not installed (pip install --group typing)")
    # the folder holding the imported package: the checkout, or site-packages for an installed wheel
    site = [str(PACKAGE.parent)]
    project = jedi.Project(str(ROOT), sys_path=site, smart_sys_path=False, load_unsafe_extensions=False)

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
    assert [p.name for p in signature.params] == list(_public_namespaces.Cudnn.members)
    (deterministic,) = [c for c in jedi.Script("import backends\nbackends.cudnn.", project=project).complete(2, 15)
                        if c.name == "deterministic"]
    assert "deterministic cuDNN engines" in deterministic.docstring()
