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
        assert f"    {name}\n" in text
