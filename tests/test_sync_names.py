"""Every name the sync layer reads from a CuPy module exists in the real CuPy 13.6 and 14.2 (or is
read as optional), and the stand-in CuPy defines no public name that the real modules lack.

The first GPU launch once raised ``AttributeError``: the cuBLAS target read
``runtime.deviceAttributeComputeCapabilityMajor``, which only the stand-in defined. The names
of the real modules are kept in ``tests/real_cupy_names.json`` (``dir()`` of each module and
wrapped class, per release: ``tests/nullcuda/real_names.py``; CI's real-wheel job checks it
against the installed wheels), so these tests run everywhere, without CuPy.

The reads are found by walking ``backends/sync/*.py`` (``ast``): a name bound to a CuPy module
(``install(module)``'s parameter, ``importlib.import_module("cupy...")``,
``sys.modules.get("cupy...")``, ``import cupy...``, a hook's parameter, and the few listed in
``BOUND_BY_HAND``), then ``module.NAME`` (a required read: it must exist in every release that
has the module), and ``replace`` / ``guard`` / ``hasattr`` / ``getattr`` with a default /
``inspect.getattr_static`` with a default (an optional read: it must exist in some release, or it
wraps nothing anywhere).
"""

from __future__ import annotations
import __future__

import ast
import importlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

import pytest

from tests.nullcuda.real_names import CLASSES, load
from tests.standin_fixture import use_standin

#: the sync layer that is imported (a release's tests run on its installed wheel, without the source tree)
SYNC = Path(importlib.import_module("backends.sync").__file__ or "").resolve().parent
#: targets that read no CuPy module: the cuDNN frontend is NVIDIA's (its own tests check it)
NOT_CUPY = {"cudnn_frontend.py"}
#: names bound to a CuPy module that the walk cannot see: (file, name) -> module
BOUND_BY_HAND = {
    ("__init__.py", "runtime"): "cupy_backends.cuda.api.runtime",  # device_has_tf32's parameter
}
#: functions whose (owner, "name") arguments read a name that may be missing
OPTIONAL_READERS = {"replace", "guard", "hasattr", "getattr_static", "getattr"}
RELEASES = ("13.6.0", "14.2.0")


@dataclass(frozen=True)
class Read:
    """``name`` read in ``file`` at ``line`` from one of ``owners`` (modules, or ``module:Class``:
    more than one where a name may hold either, as ``install(module)`` of a target of two
    modules, which branches on which it got)."""

    file: str
    line: int
    owners: tuple[str, ...]
    name: str
    required: bool
    probe: bool = False  #: read by hasattr/getattr/getattr_static with a default: it may be missing

    def __str__(self) -> str:
        kind = "reads" if self.required else "may read"
        return f"backends/sync/{self.file}:{self.line} {kind} {' or '.join(self.owners)}.{self.name}"


def _constant(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _modules_of(tree: ast.Module) -> set[str]:
    """The target's MODULE / MODULES / ALIAS constants: what its ``install(module)`` receives."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id in ("MODULE", "MODULES", "ALIAS") for target in node.targets
        ):
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            found.update(value for value in map(_constant, values) if value and value.startswith("cupy"))
    return found


Bindings = dict[str, set[str]]


def _bound_by(node: ast.AST, bound: Bindings) -> set[str]:
    """The CuPy modules the value ``node`` may be: a bound name, or an import of a literal."""
    if isinstance(node, ast.Name):
        return bound.get(node.id, set())
    if (
        isinstance(node, ast.Call)
        and node.args
        and (module := _constant(node.args[0]))
        and ast.unparse(node.func) in ("importlib.import_module", "sys.modules.get")
        and module.startswith("cupy")
    ):
        return {module}
    return set()


class _Walk(ast.NodeVisitor):
    """The reads of one target: module-level names and ``global`` ones are file-wide, a
    function's parameters and other assignments its own (and its nested functions')."""

    def __init__(self, file: str, tree: ast.Module) -> None:
        self.file = file
        self.own = _modules_of(tree)
        self.hooked: dict[str, str] = {}  # function -> the module whose import hook calls it
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "when_imported"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Name)
                and (module := _constant(node.args[0]))
            ):
                self.hooked[node.args[1].id] = module
        self.globals: Bindings = {}
        self.reads: list[Read] = []
        for _ in range(2):  # the second pass sees globals bound inside functions (``global _runtime``)
            self.reads = []
            self.scopes: list[Bindings] = [self.globals]
            self.declared: list[set[str]] = [set()]
            self.visit(tree)

    def bound(self) -> Bindings:
        merged: Bindings = {}
        for scope in self.scopes:
            merged.update(scope)
        return merged

    def bind(self, name: str, modules: set[str]) -> None:
        if modules:
            scope = self.globals if name in self.declared[-1] or len(self.scopes) == 1 else self.scopes[-1]
            scope.setdefault(name, set()).update(modules)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scopes.append({})
        self.declared.append(
            {name for child in ast.walk(node) if isinstance(child, ast.Global) for name in child.names}
        )
        params = [arg.arg for arg in node.args.args]
        if params:
            if node.name == "install" and params[0] == "module":
                self.bind("module", self.own)
            elif node.name in self.hooked:
                self.bind(params[0], {self.hooked[node.name]})
        for param in params:
            if (module := BOUND_BY_HAND.get((self.file, param))) is not None:
                self.bind(param, {module})
        self.generic_visit(node)
        self.scopes.pop()
        self.declared.pop()

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in ("cupy", "cupyx", "cupy_backends"):
                self.bind(
                    alias.asname or alias.name.split(".")[0], {alias.name if alias.asname else alias.name.split(".")[0]}
                )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.module.split(".")[0] in ("cupy", "cupyx", "cupy_backends"):
            self.reads.extend(Read(self.file, node.lineno, (node.module,), alias.name, True) for alias in node.names)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            self.bind(node.targets[0].id, _bound_by(node.value, self.bound()))

    def owners(self, node: ast.AST) -> tuple[str, ...]:
        bound = self.bound()
        if isinstance(node, ast.Name):
            return tuple(sorted(bound.get(node.id, ())))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return tuple(
                sorted(
                    f"{module}:{node.attr}"
                    for module in bound.get(node.value.id, ())
                    if f"{module}:{node.attr}" in CLASSES
                )
            )
        return ()

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        with_default = called not in ("getattr", "getattr_static") or len(node.args) == 3
        if (
            called in OPTIONAL_READERS
            and len(node.args) >= 2
            and with_default
            and (name := _constant(node.args[1]))
            and (owners := self.owners(node.args[0]))
        ):
            probe = called in ("hasattr", "getattr", "getattr_static")
            self.reads.append(Read(self.file, node.lineno, owners, name, required=False, probe=probe))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.generic_visit(node)
        if not node.attr.startswith("__") and (owners := self.owners(node.value)):
            self.reads.append(Read(self.file, node.lineno, owners, node.attr, required=True))


def reads_in(file: str, source: str) -> list[Read]:
    """The reads of CuPy names in one sync target's ``source``. A direct ``owner.name`` is
    required unless the file also probes the name (``hasattr``, ``getattr`` with a default):
    ``replace`` and ``guard`` wrap what is there and do not make a direct read conditional."""
    reads = _Walk(file, ast.parse(source)).reads
    probed = {(read.owners, read.name) for read in reads if read.probe}
    return [replace(read, required=False) if (read.owners, read.name) in probed else read for read in reads]


def all_reads() -> Iterator[Read]:
    for path in sorted(SYNC.glob("*.py")):
        if path.name not in NOT_CUPY:
            yield from reads_in(path.name, path.read_text())


def missing(read: Read, names: dict[str, dict[str, list[str]]]) -> list[str]:
    """The releases in which ``read`` fails: for a required read, each release that has one of
    its owners but none of them holding the name; for an optional one, all releases that have
    an owner if none holds it (it would wrap nothing anywhere)."""
    having = [release for release in RELEASES if any(owner in names[release] for owner in read.owners)]
    lacking = [
        release for release in having if not any(read.name in names[release].get(owner, ()) for owner in read.owners)
    ]
    if read.required:
        return lacking
    return lacking if lacking == having else []


def test_the_recorded_names_cover_both_releases_and_every_owner_read() -> None:
    names = load()
    assert set(names) >= set(RELEASES)
    owners = {owner for read in all_reads() for owner in read.owners}
    unknown = [owner for owner in owners if not any(owner in names[release] for release in RELEASES)]
    assert unknown == [], f"add them to tests/nullcuda/real_names.py and record the names again: {unknown}"


def test_every_cupy_name_the_sync_layer_reads_exists_in_cupy_13_6_and_14_2() -> None:
    names = load()
    failures = [
        f"{read}: not in CuPy {', '.join(missing(read, names))}" for read in all_reads() if missing(read, names)
    ]
    assert failures == [], "\n".join(failures)


def test_the_walk_finds_the_reads_that_matter() -> None:
    reads = {(owner, read.name, read.required) for read in all_reads() for owner in read.owners}
    runtime = "cupy_backends.cuda.api.runtime"
    assert {
        (runtime, "getDevice", True),
        (runtime, "deviceGetAttribute", True),
        (runtime, "is_hip", False),
        ("cupy_backends.cuda.libs.cublas", "setMathMode", True),
        ("cupy.cuda.stream", "get_current_stream", True),
        ("cupy.cuda.device", "get_device_id", True),
        ("cupy.fft._fft", "get_plan_cache", False),
        ("cupy._core.core:ndarray", "_scatter_op", False),
    } <= reads


def test_a_read_of_a_name_no_release_has_is_caught() -> None:
    """The defect this guards against, as it was written: caught for both releases."""
    source = (
        "import importlib\n"
        "_runtime = importlib.import_module('cupy_backends.cuda.api.runtime')\n"
        "def f(device):\n"
        "    return _runtime.deviceGetAttribute(_runtime.deviceAttributeComputeCapabilityMajor, device)\n"
        "def install(module):\n"
        "    replace(module, 'no_such_routine', make)\n"
        "    return getattr(_runtime, 'is_hip', False)\n"
        "MODULE = 'cupy_backends.cuda.libs.cublas'\n"
    )
    names = load()
    found = {(read.name, tuple(missing(read, names))) for read in reads_in("example.py", source)}
    assert found == {
        ("deviceGetAttribute", ()),
        ("deviceAttributeComputeCapabilityMajor", RELEASES),
        ("no_such_routine", RELEASES),
        ("is_hip", ()),
    }


# -- the stand-in ---------------------------------------------------------------------------------

#: public names the stand-in defines that no real release has: its test hooks (each commented)
STANDIN_ONLY = {
    # its record of scatters, and the record's type
    "cupy._core.core": {"SCATTERS", "Scatter", "CallRecorder"},
    # the cuDNN convolutions CuPy 13's cupyx.cudnn was asked for (cupy.cudnn is the same module)
    "cupy.cudnn": {"RECORDER", "ConvolutionCall"},
    "cupyx.cudnn": {"RECORDER", "ConvolutionCall"},
    # plan lookups and executions of the plan cache
    "cupy.fft._cache": {"RECORDER", "Recorder", "Execution", "PlanLookup"},
    # handle creations, launches and math-mode calls of cuBLAS; creations and calls of cuSOLVER
    "cupy_backends.cuda.libs.cublas": {"RECORDER", "Recorder", "Created", "Launch", "MathModeCall"},
    "cupy_backends.cuda.libs.cusolver": {"RECORDER", "Recorder", "Created", "SolverCall"},
    # cuSPARSE calls, and the made-up work sizes its size queries answer (read by the tests)
    "cupy_backends.cuda.libs.cusparse": {"RECORDER", "CallRecorder", "SparseCall", "BUFFER_SIZES"},
}


def _standin_names(standin: ModuleType, module: str) -> set[str] | None:
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # cupy.cudnn says it is deprecated, as CuPy 13's
            loaded = importlib.import_module(module)
    except ImportError:
        return None
    return {name for name in dir(loaded) if not name.startswith("_") and _defined_by_cupy(getattr(loaded, name))}


def _defined_by_cupy(value: object) -> bool:
    """Whether a module attribute models CuPy: not a module, not ``from __future__ import
    annotations``, not a name imported from the standard library or ``typing``."""
    if isinstance(value, (ModuleType, __future__._Feature)):
        return False
    home = getattr(value, "__module__", None)
    return not isinstance(home, str) or home.split(".")[0] in ("cupy", "cupyx", "cupy_backends")


def test_the_stand_in_defines_no_public_name_the_real_modules_lack() -> None:
    names = load()
    modules = sorted({owner for release in RELEASES for owner in names[release] if ":" not in owner})
    extra: dict[str, list[str]] = {}
    with use_standin() as standin:
        for module in modules:
            defined = _standin_names(standin, module)
            if defined is None:
                continue
            real = {name for release in RELEASES for name in names[release].get(module, ())}
            unknown = sorted(defined - real - STANDIN_ONLY.get(module, set()))
            if unknown:
                extra[module] = unknown
    assert extra == {}, f"the stand-in defines names no real CuPy has: {extra}"


@pytest.mark.parametrize("module", sorted(STANDIN_ONLY))
def test_the_stand_in_only_names_are_still_the_stand_ins(module: str) -> None:
    """The allowlist holds only names the stand-in defines (a hook it dropped leaves the list)."""
    with use_standin() as standin:
        defined = _standin_names(standin, module)
    assert defined is not None and STANDIN_ONLY[module] <= defined
