"""Names that are not flags cannot be overwritten by accident: assigning or deleting a public name
of the package or of a namespace that is not a flag (a namespace, a function, a read-only
attribute) raises AttributeError saying what it is and what to do, and changes nothing. Private
names stay assignable, the import system still binds submodules, and a test replaces a function
through the namespace's ``__dict__`` (``monkeypatch.setitem(vars(backends.cuda), ...)``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest

import backends
import backends.availability  # a submodule, bound on the package by its import

from ._helpers import state

cudnn, cuda = backends.cudnn, backends.cuda

#: (owner, name, value assigned, fragments of the message)
ASSIGNED = [
    (backends, "cudnn", True, ("backends.cudnn is a namespace, not a flag",
                               "assign its flags, e.g. backends.cudnn.benchmark = True")),
    (cuda, "matmul", False, ("backends.cuda.matmul is a namespace, not a flag",
                             "e.g. backends.cuda.matmul.allow_tf32 = True")),
    (cudnn, "conv", None, ("backends.cudnn.conv is a namespace", "backends.cudnn.conv.fp32_precision = 'tf32'")),
    (backends, "mps", None, ("backends.mps is a namespace, not a flag: it has no flags",)),
    (backends, "deterministic", True, ("backends.deterministic is a function, not a flag", "call it")),
    (cudnn, "flags", None, ("backends.cudnn.flags is a function, not a flag", "call it")),
    (cuda, "is_available", lambda: True, ("backends.cuda.is_available is a function, not a flag",
                                          "monkeypatch.setitem(vars(backends.cuda), 'is_available', ...)")),
    (cuda.matmul, "tf32", None, ("backends.cuda.matmul.tf32 is a function, not a flag",)),
    (backends, "set_defaults", dict, ("backends.set_defaults is a function, not a flag",
                                      "monkeypatch.setitem(vars(backends), 'set_defaults', ...)")),
    (backends, "Scope", object, ("backends.Scope is a class, not a flag",)),
    (backends, "FLAGS", (), ("backends.FLAGS is read-only, not a flag", "backends.cudnn.benchmark = True")),
    (cuda.cufft_plan_cache, "size", 0, ("backends.cuda.cufft_plan_cache.size is read-only, not a flag",
                                        "e.g. backends.cuda.cufft_plan_cache.max_size = 16")),
    (cudnn, "prefix", "cuda", ("backends.cudnn.prefix is read-only",)),
    (backends, "Thread", None, ("backends.Thread is backends.integrations.executors.Thread, not a flag",)),
    (backends, "asyncio", None, ("backends.asyncio is the module backends.integrations.asyncio, not a flag",)),
    (backends, "availability", None, ("backends.availability is the module backends.availability, not a flag",)),
]

#: (owner, name, fragments of the message)
DELETED = [
    (cudnn, "benchmark", ("backends.cudnn.benchmark is a flag and cannot be deleted", "assign it instead")),
    (cudnn.conv, "fp32_precision", ("backends.cudnn.conv.fp32_precision is a view of backends.cudnn.allow_tf32 "
                                    "and cannot be deleted",)),
    (cuda, "preferred_linalg_library", ("backends.cuda.preferred_linalg_library is a flag and cannot be deleted",)),
    (backends, "cudnn", ("backends.cudnn is a namespace and cannot be deleted",)),
    (cuda, "matmul", ("backends.cuda.matmul is a namespace and cannot be deleted",)),
    (cuda, "is_available", ("backends.cuda.is_available is a function and cannot be deleted",)),
    (backends, "describe", ("backends.describe is a function and cannot be deleted",)),
    (cuda.cufft_plan_cache, "size", ("backends.cuda.cufft_plan_cache.size is read-only and cannot be deleted",)),
]


def _label(case: tuple[object, ...]) -> str:
    return f"{getattr(case[0], '__name__', '?')}.{case[1]}"


def refused(action: Callable[[], object], owner: object, fragments: tuple[str, ...]) -> AttributeError:
    """``action`` raises AttributeError holding every fragment, and neither the flags nor the
    owner's attributes change."""
    before, before_vars = state(), dict(vars(owner))
    with pytest.raises(AttributeError) as raised:
        action()
    for fragment in fragments:
        assert fragment in str(raised.value)
    assert state() == before
    assert dict(vars(owner)) == before_vars
    return raised.value


@pytest.mark.parametrize("where", ["outside", "in scope"])
@pytest.mark.parametrize(("owner", "name", "value", "fragments"), ASSIGNED, ids=[_label(c) for c in ASSIGNED])
def test_assigning_a_name_that_is_not_a_flag_raises_and_changes_nothing(
    owner: object, name: str, value: object, fragments: tuple[str, ...], where: str
) -> None:
    original = vars(type(owner)).get(name, vars(owner).get(name))
    with backends.flags({"cudnn.benchmark": True} if where == "in scope" else {}):
        error = refused(lambda: setattr(owner, name, value), owner, fragments)
    assert error.obj is owner
    assert vars(type(owner)).get(name, vars(owner).get(name)) is original


@pytest.mark.parametrize(("owner", "name", "fragments"), DELETED, ids=[_label(c) for c in DELETED])
def test_deleting_a_public_name_raises_and_changes_nothing(
    owner: object, name: str, fragments: tuple[str, ...]
) -> None:
    backends.set_defaults({"cudnn.benchmark": True, "cuda.preferred_linalg_library": "magma"})
    refused(lambda: delattr(owner, name), owner, fragments)
    assert cudnn.benchmark is True and cuda.preferred_linalg_library() == "magma"


def test_the_namespaces_and_functions_are_still_themselves_after_a_refusal() -> None:
    namespace, function = backends.cudnn, backends.cuda.is_available
    for statement in ("backends.cudnn = True", "backends.cuda.is_available = lambda: True", "del backends.cudnn"):
        with pytest.raises(AttributeError):
            exec(statement, {"backends": backends})
    assert backends.cudnn is namespace and backends.cuda.is_available is function
    assert sys.modules["backends.cudnn"] is namespace


def test_an_unknown_name_still_gets_the_closest_one() -> None:
    refused(lambda: setattr(cudnn, "benchmak", True), cudnn, ("did you mean backends.cudnn.benchmark?",))
    refused(lambda: delattr(cudnn, "benchmak"), cudnn, ("has no flag or attribute 'benchmak'",))
    refused(lambda: delattr(backends, "cudnm"), backends, ("did you mean 'cudnn'?",))


def test_flags_and_views_are_still_assigned_through_their_namespace() -> None:
    with backends.cudnn.flags(benchmark=False):
        backends.cudnn.benchmark = True
        backends.cudnn.conv.fp32_precision = "ieee"
        backends.cuda.preferred_linalg_library = "cusolver"
        assert (backends.cudnn.benchmark, backends.cudnn.allow_tf32) == (True, False)
        assert backends.cuda.preferred_linalg_library() == "cusolver"


@pytest.mark.parametrize("owner", [backends, cudnn, cuda.matmul], ids=lambda o: o.__name__)
def test_private_names_stay_assignable_and_deletable(owner: object) -> None:
    owner._scratch = 1  # type: ignore[union-attr]
    assert owner._scratch == 1  # type: ignore[union-attr]
    del owner._scratch  # type: ignore[union-attr]
    assert not hasattr(owner, "_scratch")


def test_monkeypatch_setattr_of_a_namespace_function_is_refused_with_the_way_that_works() -> None:
    with pytest.MonkeyPatch.context() as patch, pytest.raises(AttributeError, match=r"monkeypatch\.setitem\(vars"):
        patch.setattr(backends.cuda, "is_available", lambda: True)
    assert backends.cuda.is_available is vars(type(backends.cuda))["is_available"].__func__


def test_monkeypatch_setitem_on_vars_replaces_a_function_and_undoes_it() -> None:
    real_cuda, real_describe = backends.cuda.is_available(), backends.describe
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(vars(backends.cuda), "is_available", lambda: not real_cuda)
        patch.setitem(vars(backends), "describe", lambda: [])
        assert backends.cuda.is_available() is (not real_cuda)
        assert backends.describe() == []
    assert backends.cuda.is_available() is real_cuda
    assert backends.describe is real_describe and "is_available" not in vars(backends.cuda)


def test_importing_submodules_still_binds_them_on_the_package() -> None:
    # A fresh interpreter: the import system sets each submodule it imports on its parent.
    code = (
        "import sys, backends\n"
        "import backends.availability.cpu, backends.integrations.executors\n"
        "assert backends.availability is sys.modules['backends.availability']\n"
        "assert backends.integrations.executors is sys.modules['backends.integrations.executors']\n"
        "del sys.modules['backends.availability']\n"
        "import backends.availability as again\n"  # imported anew: bound anew
        "assert backends.availability is again is sys.modules['backends.availability']\n"
        "from backends.cuda import matmul\n"
        "import backends.cudnn as cudnn\n"
        "assert matmul is backends.cuda.matmul and cudnn is backends.cudnn\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_a_module_that_is_not_the_imported_submodule_is_refused() -> None:
    import types

    refused(lambda: setattr(backends, "sync", types.ModuleType("backends.sync")), backends,
            ("backends.sync is a function, not a flag",))
    refused(lambda: setattr(backends, "cudnn", types.ModuleType("backends.cudnn")), backends,
            ("backends.cudnn is a namespace, not a flag",))


def test_a_name_imported_on_first_use_is_refused_alike_before_and_after_that_use() -> None:
    code = (
        "import backends\n"
        "def refusal():\n"
        "    try:\n"
        "        backends.ThreadPoolExecutor = None\n"
        "    except AttributeError as error:\n"
        "        return str(error)\n"
        "before = refusal()\n"
        "backends.ThreadPoolExecutor  # imports it\n"
        "print(before == refusal(), before)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == (
        "True backends.ThreadPoolExecutor is backends.integrations.executors.ThreadPoolExecutor, not a flag"
    ), done.stderr


# -- a namespace's sys.modules entry dropped, and imported again ----------------------------------

NAMESPACE_NAMES = [
    "backends.cudnn", "backends.cudnn.conv", "backends.cuda", "backends.cuda.matmul", "backends.cuda.cufft_plan_cache",
    "backends.algorithms", "backends.mps", "backends.mkl", "backends.mkldnn", "backends.openmp",
]


@pytest.mark.parametrize("dropped", [*NAMESPACE_NAMES, "every backends.* but backends"])
def test_importing_a_namespace_whose_sys_modules_entry_was_dropped_gives_the_namespace_back(dropped: str) -> None:
    """Test isolation helpers and reloaders drop sys.modules entries: the import then runs the
    namespace folder's __init__.py (beside the stub for type checkers), which puts the namespace
    back, so every namespace is still itself and an assignment still sets the flag."""
    code = f"""
import importlib, sys, warnings
warnings.simplefilter("error")  # an ImportWarning (a child module the parent refused) too
import backends
names = {NAMESPACE_NAMES!r}
real = {{name: sys.modules[name] for name in names}}
dropped = {dropped!r}
for name in [n for n in sys.modules if n.startswith("backends.")] if dropped.startswith("every") else [dropped]:
    del sys.modules[name]
for name in names:
    exec(f"import {{name}}")
    assert importlib.import_module(name) is real[name] is sys.modules[name], name
    assert eval(name, {{"backends": backends}}) is real[name], name
from backends.cuda import matmul
from backends.cudnn import conv
assert (matmul, conv) == (real["backends.cuda.matmul"], real["backends.cudnn.conv"])
backends.cudnn.enabled = False
backends.cuda.matmul.allow_tf32 = True
backends.algorithms.deterministic = True
snap = backends.snapshot()
print(snap["cudnn.enabled"], snap["cuda.matmul.allow_tf32"], snap["algorithms.deterministic"])
try:
    backends.mps.enabled = True
except AttributeError as error:
    print(type(error).__name__)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True", "UnknownFlagError"]


def test_reloading_a_namespace_keeps_it_and_adds_no_public_name() -> None:
    code = (  # (a child: a reload under pytest runs its assertion-rewritten code, which adds names)
        "import importlib, sys, backends\n"
        "cudnn = backends.cudnn\n"
        "before = {n for n in vars(cudnn) if not n.startswith('_')}\n"
        "assert importlib.reload(cudnn) is cudnn is sys.modules['backends.cudnn'] is backends.cudnn\n"
        "assert {n for n in vars(cudnn) if not n.startswith('_')} == before\n"
        "cudnn.benchmark = True\n"
        "print(backends.snapshot()['cudnn.benchmark'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout == "True\n", done.stderr


def test_a_namespace_name_is_bound_only_to_the_namespace_itself() -> None:
    """Even a module that sys.modules has under the namespace's name (where the import system's
    binding of a submodule would be admitted) does not replace the namespace."""
    import types

    namespace, impostor = sys.modules["backends.cudnn"], types.ModuleType("backends.cudnn")
    sys.modules["backends.cudnn"] = impostor
    try:
        refused(lambda: setattr(backends, "cudnn", impostor), backends, ("backends.cudnn is a namespace, not a flag",))
        refused(lambda: setattr(cuda, "matmul", impostor), cuda, ("backends.cuda.matmul is a namespace, not a flag",))
    finally:
        sys.modules["backends.cudnn"] = namespace
    backends.cudnn = namespace  # the import system's binding of the namespace itself: a no-op
    cuda.matmul = cuda.matmul
    assert backends.cudnn is namespace and "matmul" not in vars(cuda)


# -- unittest.mock ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patcher", "fragments"),
    [
        (lambda: mock.patch.object(cudnn, "benchmark", True), (
            "unittest.mock cannot patch backends.cudnn.benchmark: it is a flag, which mock would set process-wide "
            "and could not put back", "`with backends.cudnn.flags(benchmark=True):`",
            "@backends.cudnn.flags(benchmark=True) on the test or its TestCase class",
            "the backends_flags fixture or @pytest.mark.backends({'cudnn.benchmark': True})")),
        (lambda: mock.patch("backends.cuda.matmul.allow_tf32", False), (
            "cannot patch backends.cuda.matmul.allow_tf32: it is a flag",
            "`with backends.cuda.matmul.flags(allow_tf32=False):`")),
        (lambda: mock.patch.object(cudnn.conv, "fp32_precision", "tf32"), (
            "cannot patch backends.cudnn.conv.fp32_precision: it is a flag view",
            "`with backends.cudnn.flags(allow_tf32=True):`")),
        (lambda: mock.patch.object(cudnn, "benchmark"), (  # a MagicMock: no value to show
            "`with backends.cudnn.flags(benchmark=...):`",)),
        (lambda: mock.patch.multiple(cudnn, benchmark=True, deterministic=True), ("cannot patch backends.cudnn.",)),
        (lambda: mock.patch.object(cuda, "is_available", lambda: True), (
            "unittest.mock cannot patch backends.cuda.is_available: backends.cuda.is_available is a function",
            "(with unittest.mock: mock.patch.dict(vars(backends.cuda), {'is_available': ...}))")),
        (lambda: mock.patch.object(backends, "describe", lambda: []), (
            "unittest.mock cannot patch backends.describe: backends.describe is a function",
            "mock.patch.dict(vars(backends), {'describe': ...})")),
        (lambda: mock.patch.object(backends, "cudnn", None), (
            "unittest.mock cannot patch backends.cudnn: backends.cudnn is a namespace, not a flag",)),
    ],
    ids=["flag", "flag-by-name", "view", "magicmock", "multiple", "namespace-function", "package-function",
         "namespace"],
)
def test_mock_patch_of_a_public_name_is_refused_when_it_patches_and_changes_nothing(
    patcher: Callable[[], Any], fragments: tuple[str, ...]
) -> None:
    before = backends.snapshot()
    functions = (backends.cuda.is_available, backends.describe, backends.cudnn)
    with pytest.raises(AttributeError) as raised, patcher():
        pytest.fail("patched")
    for fragment in fragments:
        assert fragment in str(raised.value)
    assert raised.value.__context__ is None  # not masked by mock's undo at its exit
    assert backends.snapshot() == before and {r.source for r in backends.describe()} == {"default"}
    assert (backends.cuda.is_available, backends.describe, backends.cudnn) == functions

    @patcher()
    def decorated() -> None:
        pytest.fail("patched")

    with pytest.raises(AttributeError):
        decorated()
    assert backends.snapshot() == before


def test_mock_patch_dict_on_a_namespace_replaces_a_function_and_undoes_it() -> None:
    real = backends.cuda.is_available
    with mock.patch.dict(vars(backends.cuda), {"is_available": lambda: "patched"}):
        assert backends.cuda.is_available() == "patched"
    assert backends.cuda.is_available is real and "is_available" not in vars(backends.cuda)


def test_private_names_are_still_patched_by_mock() -> None:
    with mock.patch.object(cudnn, "_scratch", 1, create=True):
        assert cudnn._scratch == 1  # type: ignore[attr-defined]
    assert not hasattr(cudnn, "_scratch")
