"""The two paths of the engine (contract: one behaviour): the compiled accelerator where it is
built, and the pure-Python reference, selected by ``BACKENDS_PURE_PYTHON=1``. CI runs the whole
suite once on each; these tests check the selection itself and what the accelerator touches."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import backends
from backends._engine import accelerator, environment

ROOT = Path(__file__).resolve().parent.parent


def engine_line(**environ: str) -> str:
    env = {key: value for key, value in os.environ.items() if key != "BACKENDS_PURE_PYTHON"}
    done = subprocess.run(
        [sys.executable, "-c", "from backends._engine import accelerator as a; print(a.ACCELERATED, a.describe())"],
        env={**env, **environ}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip() + done.stderr.strip()


def test_backends_pure_python_selects_the_reference_path_and_is_no_ignored_variable() -> None:
    assert engine_line(BACKENDS_PURE_PYTHON="1") == "False pure Python (BACKENDS_PURE_PYTHON is set)"
    assert engine_line(BACKENDS_PURE_PYTHON="TRUE").startswith("False ")
    assert environment.ignored({"BACKENDS_PURE_PYTHON": "1"}) == []


def test_a_value_it_does_not_take_warns_and_counts_as_unset() -> None:
    line = engine_line(BACKENDS_PURE_PYTHON="maybe")
    assert "BACKENDS_PURE_PYTHON='maybe' is ignored: it takes 1/0/true/false/yes/no/on/off" in line
    assert line.split()[0] == engine_line().split()[0]  # the path taken when it is unset


def test_python_m_backends_says_which_path_is_in_use() -> None:
    done = subprocess.run([sys.executable, "-m", "backends"], capture_output=True, text=True)
    assert done.stdout.splitlines()[0] == f"backends {backends.__version__}, engine: {accelerator.describe()}"


needs_accelerator = pytest.mark.skipif(not accelerator.ACCELERATED, reason=f"pure Python here: {accelerator.reason}")


@needs_accelerator
def test_the_accelerated_attribute_is_the_reference_property_for_everything_but_reads() -> None:
    descriptor = vars(type(backends.cudnn))["deterministic"]
    reference = type(backends.cudnn).deterministic  # class access: the property itself
    assert isinstance(reference, property)
    assert descriptor.property is reference and descriptor.__doc__ == reference.__doc__
    with pytest.raises(AttributeError):
        del backends.cudnn.deterministic
    with pytest.raises(TypeError, match=r"cudnn\.deterministic must be a bool"):
        backends.cudnn.deterministic = 1
    assert backends.cudnn.deterministic is False


@needs_accelerator
def test_the_compiled_exit_hands_every_other_case_to_the_reference() -> None:
    outer, inner = backends.cudnn.flags(benchmark=True), backends.cudnn.flags(deterministic=True)
    with pytest.raises(RuntimeError, match="innermost scope active in this context is"), outer:
        inner.__enter__()
    inner.__exit__(None, None, None)
    with pytest.raises(TypeError):
        outer.__exit__(None, None, None, None)  # as the pure path's signature refuses
    outer.__exit__(exc_type=None)  # keywords: the pure path's
    assert backends.cudnn.benchmark is False and backends.cudnn.deterministic is False


# -- the interface each compiled module was built for -----------------------------------------------


def test_each_compiled_module_in_use_was_built_for_this_codes_interface() -> None:
    if not accelerator.ACCELERATED:
        pytest.skip(f"pure Python here ({accelerator.reason})")
    layer = sys.modules["backends.sync"]
    modules = {"backends._engine._speedups": accelerator.speedups, "backends.sync._speedups": layer.compiled()}
    assert {name: module.INTERFACE for name, module in modules.items()} == accelerator.INTERFACES
    assert layer.reason == ""


def test_load_leaves_a_module_built_for_another_interface_unused_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    if not accelerator.ACCELERATED:
        pytest.skip(f"pure Python here ({accelerator.reason})")
    monkeypatch.setitem(accelerator.INTERFACES, "backends._engine._speedups", 1000)
    module, reason = accelerator.load("backends._engine._speedups")
    assert module is None
    built = accelerator.speedups.INTERFACE
    assert reason == (
        f"the compiled accelerator {accelerator.speedups.__file__} was built for interface {built}, and this code "
        f"needs interface 1000 (it is stale: rebuild it with `pip install -e .`, or "
        f"`python setup.py build_ext --inplace`)"
    )
    with pytest.raises(ModuleNotFoundError):
        accelerator.load("backends._engine._no_such_module")


SOURCE_TREE = ROOT / "src" / "backends"
SOURCES = {"_engine": SOURCE_TREE / "_engine" / "_speedups.c", "sync": SOURCE_TREE / "sync" / "_speedups.c"}


def _build(source: Path, out: Path, interface: str | None) -> None:
    """Compile ``source`` into the extension module ``out``, stamped ``interface`` (the C text of the
    macro's value) or, with ``None``, without any stamp (a module from before stamps)."""
    text = source.read_text(encoding="utf-8")
    if interface is None:
        text = re.sub(r'    if \(PyModule_AddIntConstant\(module, "INTERFACE".*?\n    }\n', "", text, flags=re.S)
    else:
        text = text.replace("#define BACKENDS_INTERFACE ", f"#define BACKENDS_INTERFACE {interface} //", 1)
    changed = out.with_suffix(".c")
    changed.write_text(text, encoding="utf-8")
    include = sysconfig.get_paths()["include"]
    done = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-I", include, str(changed), "-o", str(out)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    changed.unlink()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each C module built here: for this code's interface, for interface 999, and unstamped."""
    if shutil.which("cc") is None or not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        pytest.skip("needs a C compiler and Python.h")
    if not all(source.is_file() for source in SOURCES.values()):
        pytest.skip(f"needs the C sources in {SOURCE_TREE} (a copy of the tests beside a wheel has none)")
    folder = tmp_path_factory.mktemp("built")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for package, source in SOURCES.items():
        current = str(accelerator.INTERFACES[f"backends.{package}._speedups"])
        for kind, interface in (("current", current), ("stale", "999"), ("unstamped", None)):
            _build(source, folder / f"{package}-{kind}{suffix}", interface)
    return folder


def _checkout(built: Path, tmp_path: Path, engine: str, sync: str) -> Path:
    """A copy of the package with the engine's and the sync layer's module of the kinds given."""
    copy = tmp_path / "checkout"
    shutil.copytree(SOURCE_TREE, copy / "backends", ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for package, kind in (("_engine", engine), ("sync", sync)):
        shutil.copy(built / f"{package}-{kind}{suffix}", copy / "backends" / package / f"_speedups{suffix}")
    return copy


def _run(copy: Path, code: str, **environ: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "BACKENDS_PURE_PYTHON"}
    env.update(PYTHONPATH=str(copy), **environ)
    return subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env,
                          cwd=copy, timeout=120)  # fmt: skip


REPORT = """
import sys, warnings
from backends._engine import accelerator
import backends
with backends.cudnn.flags(deterministic=True):
    assert backends.cudnn.deterministic
layer = sys.modules["backends.sync"]
print(accelerator.ACCELERATED, layer.compiled() is not None)
print(accelerator.reason or layer.reason)
print("backends._engine._speedups" in sys.modules)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "made"), [("stale", "for interface 999"), ("unstamped", "before interfaces were numbered")]
)
def test_a_stale_engine_module_is_left_unused_with_the_reason_and_a_warning_only_when_asked_for(
    built: Path, tmp_path: Path, kind: str, made: str
) -> None:
    copy = _checkout(built, tmp_path, engine=kind, sync="current")
    module = copy / "backends" / "_engine" / f"_speedups{sysconfig.get_config_var('EXT_SUFFIX')}"
    why = (f"the compiled accelerator {module} was built {made}, and this code needs interface 1 (it is stale: "
           f"rebuild it with `pip install -e .`, or `python setup.py build_ext --inplace`)")  # fmt: skip
    done = _run(copy, REPORT)  # not asked for: no warning (-W error would make it one)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False False", why, "True"]
    done = _run(copy, REPORT, BACKENDS_PURE_PYTHON="1")  # the pure engine asked for: never imported
    assert done.stdout.splitlines() == ["False False", "BACKENDS_PURE_PYTHON is set", "False"], done.stderr
    done = _run(copy, REPORT, BACKENDS_PURE_PYTHON="0")  # the accelerator asked for: the import warns
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"UserWarning: BACKENDS_PURE_PYTHON='0' asks for the compiled accelerator, but {why}: the pure-Python "
        f"engine runs instead (python -m backends says which engine runs, and why)"
    )
    env = {key: value for key, value in os.environ.items() if key != "BACKENDS_PURE_PYTHON"}
    version = subprocess.run([sys.executable, "-m", "backends", "--version"], capture_output=True, text=True,
                             env={**env, "PYTHONPATH": str(copy)}, cwd=copy, timeout=120)  # fmt: skip
    assert version.stdout.rstrip().endswith(f"engine: pure Python ({why})"), version.stderr


@pytest.mark.slow
def test_a_stale_sync_module_leaves_the_sync_layer_in_pure_python_with_the_reason(built: Path, tmp_path: Path) -> None:
    copy = _checkout(built, tmp_path, engine="current", sync="stale")
    module = copy / "backends" / "sync" / f"_speedups{sysconfig.get_config_var('EXT_SUFFIX')}"
    why = (f"the compiled accelerator {module} was built for interface 999, and this code needs interface 1 (it "
           f"is stale: rebuild it with `pip install -e .`, or `python setup.py build_ext --inplace`)")  # fmt: skip
    done = _run(copy, REPORT + "backends.sync()\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True False", why, "True"]
    done = _run(copy, REPORT, BACKENDS_PURE_PYTHON="0")
    assert f"UserWarning: BACKENDS_PURE_PYTHON='0' asks for the compiled accelerator, but {why}" in done.stderr
    env = {key: value for key, value in os.environ.items() if key != "BACKENDS_PURE_PYTHON"}
    version = subprocess.run([sys.executable, "-m", "backends", "--version"], capture_output=True, text=True,
                             env={**env, "PYTHONPATH": str(copy)}, cwd=copy, timeout=120)  # fmt: skip
    assert version.stdout.rstrip().endswith(
        f"engine: compiled accelerator (C, backends._engine._speedups); the sync layer runs in pure Python ({why})"
    ), version.stderr
