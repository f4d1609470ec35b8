"""``help()`` of a namespace shows each flag and view with its documentation, what it takes and
its default, ``flags()`` with its keywords, and the namespace's functions and child namespaces;
not only the current values. pydoc lists only a module's data and submodules, so this is the
namespace's docstring, written from the flag table."""

from __future__ import annotations

import inspect
import pydoc

import pytest

import backends
from backends._engine.namespace import Namespace
from backends._engine.table import FLAGS, VIEWS

NAMESPACES = [
    "cudnn", "cudnn.conv", "cuda", "cuda.matmul", "cuda.cufft_plan_cache", "algorithms", "mps", "mkl", "mkldnn",
    "openmp",
]


def resolve(prefix: str) -> Namespace:
    found: object = backends
    for part in prefix.split("."):
        found = getattr(found, part)
    assert isinstance(found, Namespace)
    return found


def rendered(prefix: str) -> str:
    return pydoc.render_doc(resolve(prefix), renderer=pydoc.plaintext)


def entry(text: str, head: str) -> str:
    """The lines under ``head`` in the help text, up to the next entry."""
    lines = text.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.strip() == head]
    body = []
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= len(lines[start]) - len(lines[start].lstrip()):
            break
        body.append(line.strip())
    return " ".join(body)


def test_every_namespace_is_covered() -> None:
    found = {ns.prefix for ns in vars(backends._public_namespaces).values() if isinstance(ns, type)
             and issubclass(ns, Namespace) and ns is not Namespace}
    assert found == set(NAMESPACES)


@pytest.mark.parametrize("prefix", NAMESPACES)
def test_help_shows_each_flag_with_its_doc_what_it_takes_and_its_default(prefix: str) -> None:
    text = rendered(prefix)
    for flag in (f for f in FLAGS if f.namespace == prefix):
        shown = entry(text, flag.attribute)
        assert flag.doc in shown and flag.allowed in shown and f"default {flag.default!r}" in shown, shown
    for view in (v for v in VIEWS if v.namespace == prefix):
        shown = entry(text, view.attribute)
        assert view.doc in shown and view.flag in shown, shown


@pytest.mark.parametrize("prefix", NAMESPACES)
def test_help_shows_flags_with_every_keyword(prefix: str) -> None:
    text = rendered(prefix)
    keywords = [f.attribute for f in FLAGS if f.namespace == prefix]
    if keywords:
        assert f"flags(*, {', '.join(f'{k}=None' for k in keywords)}) -> Scope" in text
        assert "``None`` means not given" in text
    else:
        assert "flags(" not in text


@pytest.mark.parametrize("prefix", NAMESPACES)
def test_help_shows_each_function_with_its_docstring(prefix: str) -> None:
    namespace = resolve(prefix)
    text = " ".join(rendered(prefix).split())
    flags = {f.attribute for f in (*FLAGS, *VIEWS) if f.namespace == prefix}
    functions = {
        name: getattr(value, "__func__", value)
        for name, value in vars(type(namespace)).items()
        if not name.startswith("_") and name not in flags | {"flags", "prefix", "members"}
        and (inspect.isfunction(getattr(value, "__func__", value)) or isinstance(value, property))
    }
    if prefix == "cuda.cufft_plan_cache":
        assert set(functions) == {"size", "clear"}
        assert "[device] One device's view." in text
    for name, function in functions.items():
        first = " ".join(inspect.getdoc(function).splitlines()[0].split())  # type: ignore[union-attr]
        head = f"{name} (read-only)" if isinstance(function, property) else f"{name}("
        assert head in text and first in text, (name, first)
    for name, child in vars(type(namespace)).items():
        if isinstance(child, Namespace):
            assert f"{name}: a namespace, see help({child.__name__})" in text


def test_help_of_a_namespace_shows_its_own_docstring_first() -> None:
    text = rendered("cudnn")
    assert "backends.cudnn - ``backends.cudnn``: cuDNN flags, as ``torch.backends.cudnn``." in text
    assert backends.cudnn.__doc__ == inspect.getdoc(backends.cudnn)  # what help() shows


def test_help_still_shows_the_current_values() -> None:
    with backends.cudnn.flags(benchmark_limit=3):
        assert "benchmark_limit = 3" in rendered("cudnn")


def test_help_of_the_plan_cache_works_without_cuda() -> None:
    if backends.cuda.is_available():
        pytest.skip("CUDA is available here: the plan cache's size is readable")
    text = rendered("cuda.cufft_plan_cache")  # reading `size` would raise RuntimeError
    assert "size (read-only)" in text
    assert "size" not in dir(backends.cuda.cufft_plan_cache)
    assert dict(inspect.getmembers(backends.cuda.cufft_plan_cache))["max_size"] == 16
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        backends.cuda.cufft_plan_cache.size  # noqa: B018


def test_help_of_the_package_names_every_namespace() -> None:
    text = pydoc.render_doc(backends, renderer=pydoc.plaintext)
    for name in ("algorithms", "cuda", "cudnn", "mkl", "mkldnn", "mps", "openmp"):
        assert f"    {name} (package)\n" in text  # a package, as torch's are (its folder: the stub, the restorer)


# -- public paths and signatures --------------------------------------------------------------------


def _public_objects() -> list[tuple[str, object]]:
    """Every public class and function of ``backends`` and of its namespaces, by public path."""
    found: list[tuple[str, object]] = []
    for name in dir(backends):
        value = getattr(backends, name)
        if isinstance(value, type) or inspect.isfunction(value):
            found.append((f"backends.{name}", value))
    for prefix in NAMESPACES:
        namespace = resolve(prefix)
        for name in dir(namespace):
            value = inspect.getattr_static(namespace, name)
            value = getattr(value, "__func__", value)
            if callable(value) and not isinstance(value, (type, Namespace)) and not name.startswith("_"):
                found.append((f"backends.{prefix}.{name}", value))
    return found


def test_every_public_class_and_function_is_named_by_its_public_path() -> None:
    """Reprs, tracebacks, help() and pickles by reference name ``backends.UnknownFlagError``, not the
    module it is defined in (``backends._engine.errors``); the executors' names are public where
    they are defined (``backends.integrations.executors``)."""
    import importlib
    import pickle

    seen = set()
    for path, value in _public_objects():
        named = f"{value.__module__}.{value.__qualname__}"  # type: ignore[attr-defined]
        module = importlib.import_module(value.__module__)  # type: ignore[attr-defined]
        assert not any(part.startswith("_") for part in named.split(".")), (path, named)
        resolved = module
        for part in value.__qualname__.split("."):  # type: ignore[attr-defined]
            resolved = getattr(resolved, part)
        assert getattr(resolved, "__func__", resolved) is value, path
        if inspect.ismethod(resolved):  # a namespace's method: pickled bound, by the namespace
            assert pickle.loads(pickle.dumps(resolved)) == resolved, path
        else:
            assert pickle.loads(pickle.dumps(value)) is value, path
        seen.add(path)
    for path in ("backends.UnknownFlagError", "backends.Scope", "backends.Snapshot", "backends.flags",
                 "backends.set_defaults", "backends.FlagValues", "backends.cudnn.flags", "backends.cuda.matmul.tf32",
                 "backends.cudnn.is_available"):
        assert path in seen
        value = eval(path, {"backends": backends})
        assert f"{value.__module__}.{value.__qualname__}" == path


def test_a_traceback_and_a_repr_name_the_public_path() -> None:
    import traceback

    with pytest.raises(backends.UnknownFlagError) as raised:
        backends.cudnn.benchmak  # noqa: B018
    line = traceback.format_exception_only(raised.type, raised.value)[-1]
    assert line.startswith("backends.UnknownFlagError: backends.cudnn has no flag or attribute 'benchmak'")
    assert repr(backends.Scope) == "<class 'backends.Scope'>"
    assert repr(backends.cuda.matmul.tf32) == "<bound method tf32 of <namespace backends.cuda.matmul>>"
    assert repr(backends.cudnn.flags).startswith("<function flags at 0x")


def test_every_public_callable_shows_its_real_signature() -> None:
    """help() and inspect.signature(): no ``(*args)`` where the callable takes none of its own
    (``backends.deterministic()`` takes nothing; ``backends.Thread`` takes threading.Thread's)."""
    # An exception takes any arguments, as KeyError; run_in_executor passes *args on, as asyncio's
    variadic = {"backends.UnknownFlagError", "backends.run_in_executor"}
    for path, value in _public_objects():
        try:
            signature = inspect.signature(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):  # a TypedDict, a warning class: types with no signature of their own
            assert isinstance(value, type), path
            continue
        kinds = {parameter.kind for parameter in signature.parameters.values()}
        if path not in variadic:
            assert inspect.Parameter.VAR_POSITIONAL not in kinds, (path, signature)
    assert str(inspect.signature(backends.deterministic)) in ("() -> 'Scope'", "() -> Scope")  # (3.14: unquoted)
    assert pydoc.render_doc(backends.deterministic, renderer=pydoc.plaintext).splitlines()[2].startswith(
        "deterministic() -> "
    )
    assert "group=None, target=None, name=None" in str(inspect.signature(backends.Thread))
    assert str(inspect.signature(backends.cudnn.flags)).startswith("(*, enabled=None, benchmark=None")
