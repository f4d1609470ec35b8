"""Put the stand-in CuPy (``tests/standin``) in front of ``sys.path`` for one test.

``use_standin()`` is a context manager that yields the stand-in ``cupy`` module;
``standin_cupy`` is the same as a pytest fixture. On entry, any CuPy modules already
imported (``cupy``, ``cupy.*``, ``cupy_backends*``, ``cupyx*``) are set aside, so
``import cupy`` finds the stand-in; on exit every such module is removed from
``sys.modules``, the path entry is removed and the set-aside modules come back.
Each use therefore starts from freshly imported stand-in modules (new recorders,
new handles, compute types back to TBD), and import hooks run again.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

STANDIN = Path(__file__).resolve().parent / "standin"
_TOP_LEVEL = ("cupy", "cupy_backends", "cupyx")


def _is_cupy_module(name: str) -> bool:
    return any(name == top or name.startswith(top + ".") for top in _TOP_LEVEL)


def _take_cupy_modules() -> dict[str, ModuleType]:
    taken = {name: module for name, module in sys.modules.items() if _is_cupy_module(name)}
    for name in taken:
        del sys.modules[name]
    return taken


@contextlib.contextmanager
def use_standin() -> Iterator[ModuleType]:
    """Import the stand-in CuPy for the duration of the block; yields its ``cupy`` module."""
    set_aside = _take_cupy_modules()
    path = str(STANDIN)
    sys.path.insert(0, path)
    importlib.invalidate_caches()
    try:
        import cupy

        if not cupy.__version__.endswith("+standin"):  # pragma: no cover - a broken sys.path
            raise RuntimeError(f"expected the stand-in CuPy, imported {cupy.__file__}")
        yield cupy
    finally:
        _take_cupy_modules()
        with contextlib.suppress(ValueError):
            sys.path.remove(path)
        sys.modules.update(set_aside)
        importlib.invalidate_caches()


@pytest.fixture
def standin_cupy() -> Iterator[ModuleType]:
    """The stand-in ``cupy`` module, imported fresh for this test and removed after it."""
    with use_standin() as cupy:
        yield cupy
